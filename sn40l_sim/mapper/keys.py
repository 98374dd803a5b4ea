"""Memo keys of the mapper's searches that are quick to hash.

A section's memos (:mod:`.planning`, :mod:`.stages`) are keyed on its operators, and hashing a
tuple of operators hashes every field of every one (20 us for a 25-operator section) each time a
memo is asked, thousands of times per kernel. :func:`operators_key` gives a key hashed once.

Examples
--------
>>> from sn40l_sim.ir import Operator
>>> ops = (Operator("a", "elementwise", elements=64), Operator("b", "elementwise", elements=64))
>>> operators_key(ops) is operators_key(list(ops))           # the same operator objects
True
>>> operators_key(ops) == operators_key((Operator("a", "elementwise", elements=64), ops[1]))
True
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sn40l_sim.ir import Operator


class OperatorsKey:
    """A sequence of operators as part of a memo key, hashed once (:func:`operators_key`): hashing
    a tuple of operators hashes every field of every one (20 us for 25 operators), and a kernel's
    search asks the section memos for its sections thousands of times. Equal when the operators
    are equal, so equal sections of different kernels share their memo entries."""

    __slots__ = ("ops", "_hash")

    def __init__(self, ops: tuple[Operator, ...]) -> None:
        self.ops = ops
        self._hash = hash(ops)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OperatorsKey) and self._hash == other._hash and self.ops == other.ops


#: the key of each operator sequence asked for, by the operators' identities (the key holds them,
#: so their ids are not reused while it stands); cleared when full
_OPERATORS_MEMO_SIZE = 50_000
_operators_memo: dict[tuple[int, ...], OperatorsKey] = {}


def operators_key(ops: Sequence[Operator]) -> OperatorsKey:
    """``ops`` as a memo key (:class:`OperatorsKey`), the same object each time the same operator
    objects are asked for."""
    ids = tuple(map(id, ops))
    got = _operators_memo.get(ids)
    if got is None:
        if len(_operators_memo) >= _OPERATORS_MEMO_SIZE:
            _operators_memo.clear()
        got = _operators_memo[ids] = OperatorsKey(tuple(ops))
    return got


def clear_operators_keys() -> None:
    """Forget every operator sequence's key."""
    _operators_memo.clear()
