"""Frozen dataclasses made and hashed cheaply: the IR's operators and kernels
(:mod:`sn40l_sim.ir`) and the mapper's work models, tilings and stages are built, copied and
hashed tens of thousands of times per mapping, where ``__init__``, ``dataclasses.replace`` and the
generated hash cost more than the work they describe.
"""
from __future__ import annotations

from typing import Any, TypeVar

_T = TypeVar("_T")
_C = TypeVar("_C", bound=type)

#: what an instance keeps in its ``__dict__`` beside its fields, worked out from them (the hash of
#: :func:`hashed_once`, :meth:`FusedKernel.signature`)
DERIVED = frozenset({"_hash", "_signature"})


def hashed_once(cls: _C) -> _C:
    """Class decorator: a frozen dataclass's hash worked out on first use and kept on the instance.

    The mapper's work models are the keys of its innermost memos (:mod:`sn40l_sim.mapper.division`),
    asked for tens of thousands of times per mapping, and a kernel's operators and its signature
    are hashed at every call of every graph (the mapper's memo, the calls of each kind, the
    residency replay); the hash a frozen dataclass generates hashes every field each time. The value
    is the generated hash's, so it is the same whether kept or not. It is kept in the instance's
    ``__dict__`` (equality, ``repr`` and ``dataclasses.replace`` read the fields only), dropped by
    :func:`copied` when it changes a field and left out of a pickle: a string field's hash differs
    between processes.

    >>> from dataclasses import dataclass
    >>> @hashed_once
    ... @dataclass(frozen=True)
    ... class Pair:
    ...     a: int
    ...     b: str
    >>> p = Pair(1, "x")
    >>> hash(p) == hash((1, "x")) == hash(p), "_hash" in p.__dict__
    (True, True)
    >>> p.__getstate__()                 # what a pickle keeps
    {'a': 1, 'b': 'x'}
    """
    computed = cls.__hash__

    def __hash__(self: Any) -> int:
        state = self.__dict__
        got = state.get("_hash")
        if got is None:
            got = state["_hash"] = computed(self)
        return got

    def __getstate__(self: Any) -> dict:
        state = self.__dict__
        return {k: v for k, v in state.items() if k not in DERIVED} if DERIVED.intersection(state) else state

    cls.__hash__ = __hash__
    cls.__getstate__ = __getstate__
    return cls


def copied(obj: _T, **changes: Any) -> _T:
    """A copy of the frozen dataclass ``obj`` with ``changes`` set, as ``dataclasses.replace`` gives,
    without running ``__init__`` again.

    The graph builder and the mapper's kernel cache make a copy for every kernel and operator of
    every graph, and ``replace`` re-runs ``__init__`` field by field, which cost more than the rest of
    those loops. This is only for classes that compute nothing in ``__init__`` or
    ``__post_init__``, as the IR's dataclasses (:mod:`sn40l_sim.ir`) and a placed kernel do.

    >>> from sn40l_sim.ir import Operator
    >>> op = Operator("qk", "gemm", m=2)
    >>> twin = copied(op, m=4)
    >>> (twin.m, op.m, twin == Operator("qk", "gemm", m=4))
    (4, 2, True)
    """
    out = object.__new__(type(obj))
    state = out.__dict__
    state.update(obj.__dict__, **changes)
    if changes:
        # what was worked out from the old fields (a hash, a signature) may not hold for the new
        for name in DERIVED:
            state.pop(name, None)
    return out


def built(cls: type[_T], **fields: Any) -> _T:
    """The frozen dataclass ``cls(**fields)``, every field named, without running ``__init__``.

    A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``; the mapper
    builds tens of thousands of its work models, tilings and stages per mapping, and that was most
    of what building them cost. As :func:`copied`, only for classes that compute nothing in
    ``__init__`` or ``__post_init__``, and every field must be named (there are no defaults). Name
    them, not another instance's ``__dict__``: that may hold what :func:`hashed_once` kept (a hash
    of the old fields), which :func:`copied` drops and this would not.

    >>> from sn40l_sim.ir import Operator
    >>> fields = {name: getattr(Operator("qk", "gemm"), name) for name in Operator.__dataclass_fields__}
    >>> built(Operator, **{**fields, "m": 4}) == Operator("qk", "gemm", m=4)
    True
    """
    out = object.__new__(cls)
    out.__dict__.update(fields)
    return out
