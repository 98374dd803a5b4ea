"""Memo keys of the mapper's searches that are quick to hash.

A section's memos (:mod:`.planning`, :mod:`.stages`) are keyed on its operators, and hashing a
tuple of operators hashes every field of every one (20 us for a 25-operator section) each time a
memo is asked, thousands of times per kernel. :func:`operators_key` gives a key hashed once, and
:class:`IdentityMemo` memoises what is computed from a shared object by that object's identity.
:func:`socket_key` is a socket as the mapper reads it, so that sockets differing only in what no
mapping reads share its memos.

Examples
--------
>>> from sn40l_sim.ir import Operator
>>> ops = (Operator("a", "elementwise", elements=64), Operator("b", "elementwise", elements=64))
>>> operators_key(ops) is operators_key(list(ops))           # the same operator objects
True
>>> operators_key(ops) is operators_key((Operator("a", "elementwise", elements=64), ops[1]))   # equal ones
True
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable, Hashable, Sequence

    from sn40l_sim.hardware.spec import SocketSpec
    from sn40l_sim.ir import Operator


_V = TypeVar("_V")


class IdentityMemo(Generic[_V]):
    """Values computed from an object, found by the object's identity and a few hashable extras:
    for objects that are shared when memoised (a memoised tiling's stage, a stage's floor) and
    costly to hash. Each entry keeps its object alive, so its ``id`` is not reused while the entry
    stands; the memo is cleared when full.

    >>> memo = IdentityMemo(size=2)
    >>> owner = [1, 2]
    >>> memo.get(owner, (3,), lambda: sum(owner) * 3), memo.get(owner, (3,), lambda: -1)
    (9, 9)
    """

    __slots__ = ("_entries", "_size")

    def __init__(self, size: int = 50_000) -> None:
        self._entries: dict[tuple, tuple[object, _V]] = {}
        self._size = size

    def get(self, owner: object, extra: tuple[Hashable, ...], compute: Callable[[], _V]) -> _V:
        """The value kept for ``owner`` and ``extra``, or ``compute()`` kept for them."""
        key = (id(owner), *extra)
        got = self._entries.get(key)
        if got is not None and got[0] is owner:
            return got[1]
        if len(self._entries) >= self._size:
            self._entries.clear()
        value = compute()
        self._entries[key] = (owner, value)
        return value

    def clear(self) -> None:
        """Forget every entry."""
        self._entries.clear()


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


#: the key of each operator sequence asked for, by the operators' identities, beside the operators
#: (kept alive, so their ids are not reused while the entry stands: an equal sequence's key holds
#: other objects), and each distinct key by its value; cleared when full
_OPERATORS_MEMO_SIZE = 50_000
_operators_memo: dict[tuple[int, ...], tuple[tuple[Operator, ...], OperatorsKey]] = {}
_interned: dict[OperatorsKey, OperatorsKey] = {}


def operators_key(ops: Sequence[Operator]) -> OperatorsKey:
    """``ops`` as a memo key (:class:`OperatorsKey`), the same object each time the same operator
    objects are asked for, and each time equal operators are: the graphs of a run's points are
    built apart, so their equal sections reach the memos as other objects, and a memo compares a
    key with its own by identity first, field by field only if they are distinct objects."""
    ids = tuple(map(id, ops))
    got = _operators_memo.get(ids)
    if got is None:
        if len(_operators_memo) >= _OPERATORS_MEMO_SIZE:
            _operators_memo.clear()
            _interned.clear()
        held = tuple(ops)
        fresh = OperatorsKey(held)
        got = _operators_memo[ids] = (held, _interned.setdefault(fresh, fresh))
    return got[1]


def clear_operators_keys() -> None:
    """Forget every operator sequence's key."""
    _operators_memo.clear()
    _interned.clear()


#: calibrated values of a socket the mapper never reads (the engine's collectives and the serving
#: model's transfers do): sockets that differ only in them map every kernel alike
UNMAPPED_CALIBRATED = ("sync_latency_s", "p2p_efficiency", "transfer_setup_s")
#: and the one a section's plan does not read either: the configuration load rate only prices the
#: plans against each other (:func:`~sn40l_sim.mapper.kernel_cost.plan_kernel`), so a calibration pass that moves it re-prices
#: the memoised section plans instead of planning them again
UNPLANNED_CALIBRATED = (*UNMAPPED_CALIBRATED, "config_load_bytes_per_s")
#: parts of a socket no mapping reads: the P2P ports and the die-to-die interface (the engine's
#: links and collectives), the published totals (the loader checks them) and each memory tier's
#: capacity and reservation (the memory placer's, :mod:`.memory`; a kernel is mapped onto the tiers
#: it is given). A sweep over link speeds, socket counts or HBM sizes maps each kernel once.
UNMAPPED_PARTS = ("p2p", "die_to_die", "stated")
UNMAPPED_TIER_FIELDS = ("capacity_bytes_per_unit", "reserved_bytes")
#: the TLN's fields no mapping reads: its bandwidth is read (a stream's rate is the narrower of its
#: tier and the TLN, :mod:`.kernel_cost`, :mod:`.window_replay`), so a socket whose TLN binds maps
#: otherwise; keyed without it, a mapping cached on another TLN was reused and ``run``'s step
#: depended on what the disk cache held
UNMAPPED_TLN_FIELDS = ("latency_s",)


def socket_key(socket: SocketSpec, leave_out: tuple[str, ...] = UNMAPPED_CALIBRATED) -> str:
    """The socket's JSON as the mapper reads it: :data:`UNMAPPED_PARTS`, the tiers'
    :data:`UNMAPPED_TIER_FIELDS` and the TLN's :data:`UNMAPPED_TLN_FIELDS` left out, and the calibrated values ``leave_out`` names set to 0
    (values a computation does not read, so that sockets differing only in them share its results;
    ``tests/mapper/test_mapper_cache.py`` maps kernels on sockets that differ in each of them)."""
    unread = dict.fromkeys(leave_out, 0.0)
    tiers = {name: tier.model_copy(update=dict.fromkeys(UNMAPPED_TIER_FIELDS, 0))
             for name, tier in socket.memory.items()}
    update = {"calibrated": socket.calibrated.model_copy(update=unread), "memory": tiers,
              "tln": socket.tln.model_copy(update=dict.fromkeys(UNMAPPED_TLN_FIELDS, 0.0)),
              **dict.fromkeys(UNMAPPED_PARTS)}
    return socket.model_copy(update=update).model_dump_json()


#: parts of a socket an operator's tiling, its compute stage and that stage's floor never read (its
#: PCU, PMU and tile networks are read; :mod:`.tiling`, :func:`~.allocate.stage_floor`): the memory
#: tiers (a section's memory stages and streams read them, under the whole socket key) and the
#: calibrated values (a GEMM's tiling reads the systolic efficiency, given to it beside the socket)
UNTILED_PARTS = ("memory", "calibrated")


def tiling_key(socket: SocketSpec) -> str:
    """The socket as an operator's tiling reads it: :func:`socket_key` less :data:`UNTILED_PARTS`,
    so that a calibration pass that moves only a memory tier's efficiency (or a value no tiling
    reads) tiles its operators as the pass before it did, and shares their stages and floors.

    >>> from sn40l_sim.mapper._examples import example_socket
    >>> socket = example_socket()
    >>> hbm = socket.model_copy(update={"memory": {n: t.model_copy(update={"efficiency": t.efficiency / 2})
    ...                                             for n, t in socket.memory.items()}})
    >>> tiling_key(hbm) == tiling_key(socket), socket_key(hbm) == socket_key(socket)
    (True, False)
    >>> fewer = socket.model_copy(update={"tile": socket.tile.model_copy(update={"pcus": socket.tile.pcus - 1})})
    >>> tiling_key(fewer) == tiling_key(socket)
    False
    """
    tln = socket.tln.model_copy(update=dict.fromkeys(UNMAPPED_TLN_FIELDS, 0.0))
    update = {"tln": tln, **dict.fromkeys(UNMAPPED_PARTS), **dict.fromkeys(UNTILED_PARTS)}
    return socket.model_copy(update=update).model_dump_json()
