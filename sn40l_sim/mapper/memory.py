"""Where a socket's tensors live: :func:`place_memory` fills the memory tiers in placement order.

The tiers are the socket's ``memory:`` entries; the placement order is theirs (fastest first)
unless the experiment gives another (``memory.order``). Per socket, after each tier's reserved
memory (``reserved_bytes``), the uses are placed in priority order:

1. **activations** (the working set handed between kernels): every kernel reads and writes them,
   and they are small next to weights and KV;
2. **weights**;
3. **KV cache**;

each into the first tier in the order with room, spilling what does not fit to the next tier.
A caller that lets some uses spill and must keep the others in the first tier gives another
``priority`` (the serving model, which keeps weights and KV in HBM, places them before the
activations when the activations of a long prompt would otherwise push them out).
A KV policy that keeps a *store* of the whole cache in a tier of its own (DDR offload with
recall) names that tier: the store (use ``kv_offload``) is placed there first, before the fill,
and the tier must hold it.
A use that spills puts the same fraction of every layer in the later tier (identical layers stay
identical, so they still map once); :meth:`MemoryPlacement.tiers` gives that split to the
mapper, which then streams those bytes at that tier's bandwidth. When the tiers together cannot
hold everything, :class:`TiersOverflow` (an :class:`~sn40l_sim.errors.InfeasibleError`) says what
does not fit and by how much.

Examples
--------
>>> from sn40l_sim.mapper._examples import example_node
>>> node = example_node()
>>> GiB = 2**30
>>> mp = _place(node.socket, weights=40 * GiB, kv=30 * GiB, activations=1 * GiB)
>>> usable = 64 * GiB - node.socket.memory["hbm"].reserved_bytes    # HBM after the runtime's reservation
>>> hbm, ddr = mp.by_tier["hbm"], mp.by_tier["ddr"]
>>> hbm["weights"] == 40 * GiB, hbm["kv"] == usable - 40 * GiB - 1 * GiB   # KV takes the rest
(True, True)
>>> ddr["kv"] == 30 * GiB - hbm["kv"]                # and spills what does not fit
True
>>> mp.tiers().weights, mp.tiers().kv[1] == ("ddr", ddr["kv"] / (30 * GiB))
((('hbm', 1.0),), True)
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sn40l_sim.errors import InfeasibleError
from sn40l_sim.hardware import figures
from sn40l_sim.hardware.spec import NodeSpec, SocketSpec
from sn40l_sim.mapper.placement import MemoryPlacement
from sn40l_sim.models.params import weight_bytes_per_socket
from sn40l_sim.quantities import gib_text

GIB = 2**30

#: the order uses are placed in, most-used first (activations, weights, KV)
PLACEMENT_PRIORITY = ("activations", "weights", "kv")


class TiersOverflow(InfeasibleError):
    """The tiers together cannot hold a socket's uses. ``placement`` is the fill that overflowed
    (its last tier over capacity), for a caller that refuses it by a rule of its own first: the
    serving model, keeping weights and KV in the first tier, names what is over that tier
    (:func:`sn40l_sim.serving.socket_memory.place_socket`), not what is over the last."""

    def __init__(self, message: str, placement: MemoryPlacement) -> None:
        super().__init__(message)
        self.placement = placement


def placement_order(socket: SocketSpec, order: Sequence[str] | None = None) -> tuple[str, ...]:
    """The tiers to fill, first to last: ``order`` if given (each a tier of ``socket``), else the
    socket's tiers in file order.

    Raises
    ------
    ValueError
        If ``order`` is empty, repeats a tier or names one the socket does not have.
    """
    if order is None:
        return tuple(socket.memory)
    order = tuple(order)
    unknown = [tier for tier in order if tier not in socket.memory]
    if unknown or not order or len(set(order)) != len(order):
        raise ValueError(f"memory order {list(order)} must list distinct tiers of socket {socket.name!r} "
                         f"(it has {list(socket.memory)})")
    return order


def _capacities(socket: SocketSpec) -> dict[str, int]:
    return {tier: int(figures.usable_memory_bytes(socket, tier)) for tier in socket.memory}


def _place(socket: SocketSpec, weights: int, kv: int, activations: int,
           order: Sequence[str] | None = None, kv_offload: Mapping[str, int] | None = None,
           priority: Sequence[str] = PLACEMENT_PRIORITY) -> MemoryPlacement:
    if sorted(priority) != sorted(PLACEMENT_PRIORITY):
        raise ValueError(f"priority {list(priority)} must order the uses {list(PLACEMENT_PRIORITY)}")
    tiers = placement_order(socket, order)
    capacity = _capacities(socket)
    need = {"activations": int(activations), "weights": int(weights), "kv": int(kv)}
    by_tier: dict[str, dict[str, int]] = {tier: dict.fromkeys(PLACEMENT_PRIORITY, 0) for tier in socket.memory}
    free = {tier: capacity[tier] for tier in tiers}
    store = _place_store(socket, capacity, by_tier, kv_offload or {})
    for tier, n in store.items():
        if tier in free:
            free[tier] -= n
    # what reaches the last tier, before its capacity is checked (named in the error)
    last_need: dict[str, int] = {}
    for use in priority:
        left = need[use]
        for tier in tiers[:-1]:
            here = min(left, max(free[tier], 0))
            by_tier[tier][use], left = here, left - here
            free[tier] -= here
        by_tier[tiers[-1]][use] = last_need[use] = left
    last = tiers[-1]
    spilled = sum(last_need.values())
    room = capacity[last] - store.get(last, 0)
    if spilled > room:
        short = spilled - room
        parts = ", ".join(f"{k} {gib_text(v)} GiB" for k, v in last_need.items() if v)
        held = "".join(f"{tier.upper()} holds {capacity[tier] / GIB:.2f} GiB after the reserved "
                       f"{figures.reserved_bytes(socket, tier) / GIB:.2f} GiB, and " for tier in tiers[:-1])
        rest = "the rest" if len(tiers) > 1 else "all of it"
        beside = f" beside the KV store's {store[last] / GIB:.2f} GiB" if store.get(last) else ""
        raise TiersOverflow(
            f"memory does not fit on a socket of {socket.name}: weights {weights / GIB:.2f} GiB + KV cache "
            f"{gib_text(kv)} GiB + activations {gib_text(activations)} GiB; {held}{rest} ({parts}) exceeds the "
            f"usable {last.upper()} of {capacity[last] / GIB:.2f} GiB{beside} by {short} bytes ({gib_text(short)} GiB)",
            MemoryPlacement(by_tier=by_tier, capacity=capacity, order=tiers))
    return MemoryPlacement(by_tier=by_tier, capacity=capacity, order=tiers)


def _place_store(socket: SocketSpec, capacity: dict[str, int], by_tier: dict[str, dict[str, int]],
                 kv_offload: Mapping[str, int]) -> dict[str, int]:
    """Put a KV policy's store in the tiers it names (use ``kv_offload``); tier -> bytes placed."""
    store = {tier: int(n) for tier, n in kv_offload.items() if n}
    if not store:
        return {}
    for tier, n in store.items():
        if tier not in socket.memory:
            raise ValueError(f"socket {socket.name!r} has no memory tier {tier!r} for the KV store "
                             f"(it has {list(socket.memory)})")
        if n < 0:
            raise InfeasibleError(f"kv_offload must be >= 0, got {n} in {tier}")
        if n > capacity[tier]:
            raise InfeasibleError(
                f"the KV store of {n / GIB:.2f} GiB does not fit in the usable {tier.upper()} of a socket of "
                f"{socket.name} ({capacity[tier] / GIB:.2f} GiB after the reserved "
                f"{figures.reserved_bytes(socket, tier) / GIB:.2f} GiB) by {n - capacity[tier]} bytes")
    for tier in by_tier:
        by_tier[tier]["kv_offload"] = store.get(tier, 0)
    return store


def place_memory(node: NodeSpec, model: Any, plan: Any, kv_bytes_per_socket: int,
                 activation_bytes: int, order: Sequence[str] | None = None, *,
                 kv_offload: Mapping[str, int] | None = None,
                 priority: Sequence[str] | None = None) -> MemoryPlacement:
    """Place one socket's weights, KV cache and activations in its memory tiers.

    Parameters
    ----------
    node : NodeSpec
    model : ModelSpec
        Its weights per socket come from
        :func:`sn40l_sim.models.params.weight_bytes_per_socket` under ``plan``.
    plan : ParallelPlan
    kv_bytes_per_socket : int
        KV-cache bytes this socket holds (its sequences' caches, or its share of them).
    activation_bytes : int
        Working set of activations between kernels on this socket.
    order : sequence of str, optional
        Tiers to fill, first to last (default: the socket's tiers, fastest first).
    kv_offload : mapping, optional
        Tier -> bytes of a KV policy's store this socket holds there (placed before the fill; the
        tier need not be in ``order``).
    priority : sequence of str, optional
        The order the uses are placed in (default :data:`PLACEMENT_PRIORITY`: activations, weights,
        KV).

    Returns
    -------
    MemoryPlacement
        Bytes by use in each tier, the usable capacities (after reserved memory), and the spilled
        fractions (:meth:`MemoryPlacement.tiers`).

    Raises
    ------
    InfeasibleError
        When the tiers together cannot hold it all, naming the sizes and the shortfall in bytes and GiB.
    """
    for name, value in (("kv_bytes_per_socket", kv_bytes_per_socket), ("activation_bytes", activation_bytes)):
        if value < 0:
            raise InfeasibleError(f"{name} must be >= 0, got {value}")
    weights = weight_bytes_per_socket(model, plan)
    return _place(node.socket, weights, kv_bytes_per_socket, activation_bytes, order, kv_offload,
                  PLACEMENT_PRIORITY if priority is None else priority)


def all_in_first_tier(node: NodeSpec, order: Sequence[str] | None = None) -> MemoryPlacement:
    """A placement that puts every tensor in the first tier of the order without checking sizes
    (the default of :func:`~sn40l_sim.mapper.map_graph` when no placement is given; use
    :func:`place_memory` to check that it fits)."""
    socket = node.socket
    return MemoryPlacement(by_tier={tier: {} for tier in socket.memory}, capacity=_capacities(socket),
                           order=placement_order(socket, order))
