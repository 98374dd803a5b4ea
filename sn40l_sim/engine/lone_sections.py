"""A kernel section whose streams run alone, accounted without events and worked out once.

While no collective is alive on the socket, nothing shares a kernel's streams until its tiles are
done, so :func:`~sn40l_sim.engine.kernel_process.run_kernel` accounts such a section at once
instead of chunk by chunk (docs/architecture.md, "Fewer events"): each chunk takes its compute or
its one stream (:meth:`~sn40l_sim.engine.fluid.FluidNetwork.lone_flow`), whichever ends later.
What the chunks take and book depends on the section's costs and the socket's channels only, not
on when the section runs, and the layers of a model run the same section dozens of times; so the
chunks are worked out once per section and socket (:func:`lone_section`) and each run replays
their sums (:func:`book_lone_section`): the same integers the chunk-by-chunk accounting adds.

Examples
--------
One section of two chunks, each streaming 1001 bytes of HBM (about 20 cycles at the socket's
rate) against 10 cycles of compute: memory-bound.

>>> import simpy
>>> from sn40l_sim.hardware.loader import load_hardware
>>> from sn40l_sim.engine.kernel_costs import SectionCosts
>>> from sn40l_sim.engine.resources import SocketResources
>>> res = SocketResources.build(simpy.Environment(), load_hardware("hw_configs/sn40l.yaml"))
>>> sec = SectionCosts(chunks=(1, 1), compute_cycles_per_tile=10, tier_bytes={"hbm": 2002},
...                    tier_caps={"hbm": 50.0}, fill_cycles=0)
>>> plan = lone_section(res, sec)
>>> plan.cycles, plan.compute_busy_cycles, plan.memory_bound_cycles, plan.tier_bytes
(42, 20, 42, (('hbm', 2002),))
"""
from __future__ import annotations

from dataclasses import dataclass

from sn40l_sim.engine.fluid import Channel
from sn40l_sim.engine.kernel_costs import SectionCosts
from sn40l_sim.engine.resources import SocketResources


def memory_bound(took: int, compute: int, alone: float) -> bool:
    """Whether a chunk that took ``took`` cycles, ``compute`` of them computing and ``alone`` the
    memory stage's time without contention, counts as memory-bound (on a tie the memory stage is
    the bound, as the mapper counts it)."""
    return bool(alone) and (took > compute or alone >= compute)


@dataclass(frozen=True)
class LoneSection:
    """What a section's chunks take and book when each of their streams runs alone (sums over
    the chunks; cycles relative to the section's start)."""

    #: cycles from the section's start to its last chunk's end
    cycles: int
    compute_busy_cycles: int
    memory_bound_cycles: int
    compute_bound_cycles: int
    #: (tier, bytes) the streams move, in the order the tiers are first streamed
    tier_bytes: tuple[tuple[str, int], ...]
    #: streams, and the network's wake-ups they would have had in all
    transfers: int
    wakes: int
    #: when the last stream ended (the network's clock of its last update), None without streams
    last_end: int | None
    #: channel -> busy cycles and bytes moved
    channel_busy: dict[Channel, int]
    channel_bytes: dict[Channel, int]


def lone_section(res: SocketResources, costs: SectionCosts) -> LoneSection | None:
    """The section's chunks accounted alone on ``res``'s channels, or None when they need the
    events (a chunk streaming from two tiers, which share the TLN, or at no positive rate).
    Worked out once per section and socket (kept on ``res``)."""
    kept = res.lone_sections.get(id(costs))
    if kept is None:
        # the section is kept beside its plan, so that its id is not reused while res lives
        kept = res.lone_sections[id(costs)] = (costs, _work_out(res, costs))
    return kept[1]


def book_lone_section(res: SocketResources, plan: LoneSection, tier_bytes: dict[str, int]) -> None:
    """Book ``plan`` run from now on the network of ``res`` and into ``tier_bytes`` (a kernel
    record's); the record's cycle counters are the caller's."""
    for tier, n_bytes in plan.tier_bytes:
        tier_bytes[tier] = tier_bytes.get(tier, 0) + n_bytes
    if plan.transfers:
        res.net.book_alone(plan.transfers, plan.wakes, res.env.now + plan.last_end, plan.channel_busy,
                           plan.channel_bytes)


def _work_out(res: SocketResources, costs: SectionCosts) -> LoneSection | None:
    firsts = [sum(costs.chunks[:i]) for i in range(len(costs.chunks))]
    plans = [costs.loads(first, n) for first, n in zip(firsts, costs.chunks, strict=True)]
    if any(len(loads) > 1 or (loads and not loads[0][2] > 0) for loads in plans):
        return None
    total = compute_busy_cycles = memory_cycles = compute_cycles = transfers = wakes = 0
    last_end: int | None = None
    tiers: dict[str, int] = {}
    busy: dict[Channel, int] = {}
    moved: dict[Channel, int] = {}
    for n, loads in zip(costs.chunks, plans, strict=True):
        compute = n * costs.compute_cycles_per_tile
        took, alone = compute, 0.0
        if loads:
            tier, n_bytes, cap = loads[0]
            path = res.memory_path(tier)
            lone = res.net.lone_flow(path, n_bytes, cap)
            if lone is None:
                raise AssertionError("a stream alone on the network was refused")   # checked above
            cycles, flow_wakes = lone
            transfers, wakes, last_end = transfers + 1, wakes + flow_wakes, total + cycles
            tiers[tier] = tiers.get(tier, 0) + n_bytes
            for ch in dict.fromkeys(path):
                busy[ch] = busy.get(ch, 0) + cycles
            for ch in path:
                moved[ch] = moved.get(ch, 0) + n_bytes
            took = max(compute, cycles)
            alone = n_bytes / min(cap, res.path_bytes_per_cycle(tier))
        compute_busy_cycles += compute
        if memory_bound(took, compute, alone):
            memory_cycles += took
        else:
            compute_cycles += took
        total += took
    return LoneSection(total, compute_busy_cycles, memory_cycles, compute_cycles, tuple(tiers.items()), transfers,
                       wakes, last_end, busy, moved)
