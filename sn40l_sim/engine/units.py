"""A graph's kernels as SimPy processes, and a chain of them run unit by unit, each unit simulated
once.

:func:`start_kernels` wires kernels the way :func:`~sn40l_sim.engine.run_graph.run_graph` runs
them: each waits for its predecessors, a loop iteration streams once the previous one has and
computes once it has ended (:func:`~sn40l_sim.engine.kernel_process.run_kernel`).

Most graphs are chains: every kernel depends on the one before it (a decoder's layers, one
kernel after the other). In a chain, kernel ``i`` asks for the socket's compute when kernel
``i-1`` has ended, collectives included; every earlier kernel has ended too, and no later one can
start before it. So from that cycle the kernel has the socket to itself: no stream on its
channels, no collective alive, the links free, its configuration loaded or not (the graph's
steady state, :func:`~sn40l_sim.mapper.residency.resident_calls`). Its run, relative to its
start, then depends on nothing but its costs, its collectives and whether its configuration is
still loaded (the fluid network's arithmetic reads only differences of cycles), and the layers of
a model call the same kernel dozens of times. A loop
(the kernels of :class:`~sn40l_sim.mapper.loops.Loop`, whose iterations overlap) is the same kind
of unit, started when the kernel before it has ended and done when its last iteration is.

:func:`run_units` therefore simulates each distinct kernel once in an environment of its own and
gives every call of it that run's record shifted to its start (and a loop once, in its own
environment): the integers the single event loop gives, with the events of the repeats left out.
What else the events would leave behind is no-op: superseded wake-ups of the fluid network
(:class:`~sn40l_sim.engine.fluid.FluidNetwork` ignores a wake-up of an older generation) that may
fall after the unit's end; they still set how far the clock runs, so each unit reports its last
event (its ``horizon``), and the graph's cycles are the latest of them, as the event loop's
clock would be. Set :data:`REUSE_UNITS` to ``False`` to run every graph through one event loop
(the tests compare the two).
"""
from __future__ import annotations

from dataclasses import dataclass

import simpy

from sn40l_sim.engine.collective_run import CollectiveRun
from sn40l_sim.engine.collectives import CollectiveModel
from sn40l_sim.engine.kernel_costs import KernelCosts
from sn40l_sim.engine.kernel_process import KernelRecord, run_kernel
from sn40l_sim.engine.resources import SocketResources
from sn40l_sim.hardware.spec import NodeSpec
from sn40l_sim.mapper.loops import Loop

#: run chains unit by unit, each distinct kernel simulated once (False: one event loop for all)
REUSE_UNITS = True


@dataclass(frozen=True)
class KernelEntry:
    """One kernel of a graph as the engine runs it: its record (filled as it runs), its costs and
    the names of the kernels it waits for (a loop iteration waits for the previous one instead)."""

    record: KernelRecord
    costs: KernelCosts
    preds: tuple[str, ...]


def start_kernels(env: simpy.Environment, res: SocketResources, entries: list[KernelEntry],
                  collectives: CollectiveModel, *, standalone: bool = False) -> None:
    """Start ``entries`` as processes in ``env`` on ``res``; with ``standalone`` the first one
    starts at once whatever it waits for (a unit run on its own)."""
    done: dict[str, simpy.Event] = {}
    streamed: dict[str, simpy.Event] = {}
    previous: str | None = None
    for i, entry in enumerate(entries):
        record, costs = entry.record, entry.costs
        name = record.name
        streamed[name] = env.event()
        if record.iteration and previous is not None:
            # a loop iteration streams once the previous one has, its compute gated on its end
            body = run_kernel(res, record, costs, collectives, call=False, gate=done[previous],
                              streamed=streamed[name], after=[streamed[previous]])
        else:
            after = [] if standalone and i == 0 else [done[p] for p in entry.preds]
            body = run_kernel(res, record, costs, collectives, streamed=streamed[name], after=after)
        done[name] = env.process(body)
        previous = name


def chain_units(entries: list[KernelEntry], loops: tuple[Loop, ...]) -> list[range] | None:
    """The graph's units (a kernel, or a loop's kernels) as ranges of ``entries``, when the graph is
    a chain: every kernel that is not a loop's later iteration waits for the kernel before it, and
    for none after it; None otherwise (and when names repeat, which the event loop does not allow
    for)."""
    if not REUSE_UNITS:
        return None
    names = {entry.record.name: i for i, entry in enumerate(entries)}
    if len(names) != len(entries):
        return None
    for i, entry in enumerate(entries):
        if entry.record.iteration:
            continue
        if i and entries[i - 1].record.name not in entry.preds:
            return None
        if any(names.get(p, i) >= i for p in entry.preds):
            return None
    starts = {loop.first: loop.stop for loop in loops}
    units, i = [], 0
    while i < len(entries):
        stop = starts.get(i, i + 1)
        units.append(range(i, stop))
        i = stop
    return units


@dataclass(frozen=True)
class _UnitRun:
    """A unit simulated on its own from cycle 0."""

    #: each kernel's run (a kernel of the unit, or of a shorter copy of a loop) and how many
    #: cycles later it is this one's
    records: tuple[tuple[KernelRecord, int], ...]
    #: when the unit's last kernel ended, and the unit's last event (at or after it)
    end: int
    horizon: int
    #: channel (a tier's name, or ``None`` for the TLN) -> busy cycles and bytes moved
    channels: tuple[tuple[str | None, int, int], ...]


def run_units(node: NodeSpec, res: SocketResources, entries: list[KernelEntry], units: list[range],
              collectives: CollectiveModel) -> int:
    """Run the chain ``entries`` unit by unit (:func:`chain_units`), filling their records and
    booking the channels of ``res``; the cycles the graph's event loop would end at."""
    runs: dict[tuple, _UnitRun] = {}
    now = horizon = 0
    for unit in units:
        first = entries[unit.start]
        if len(unit) == 1:
            key = (id(first.costs), first.record.placed.kernel.collectives, first.record.config_resident,
                   first.record.config_load_cycles)
            run = runs.get(key)
            if run is None:
                run = runs[key] = _run_alone(node, res, [_scratch(first, res)], collectives)
        else:
            run = _run_loop(node, res, [entries[i] for i in unit], collectives)
        for i, (done, offset) in zip(unit, run.records, strict=True):
            _shift_into(entries[i].record, done, now + offset)
        for tier, busy, moved in run.channels:
            channel = res.tln if tier is None else res.memory[tier]
            channel.busy_cycles += busy
            channel.bytes_moved += moved
        horizon = max(horizon, now + run.horizon)
        now += run.end
    return horizon


def _run_alone(node: NodeSpec, res: SocketResources, entries: list[KernelEntry],
               collectives: CollectiveModel) -> _UnitRun:
    """Simulate ``entries`` from cycle 0 on an idle copy of the socket ``res``."""
    env = simpy.Environment()
    alone = SocketResources.build(env, node, res.socket, staging_tier=res.staging_tier)
    alone.lone_streams = res.lone_streams
    start_kernels(env, alone, entries, collectives, standalone=True)
    env.run()
    records = tuple((entry.record, 0) for entry in entries)
    channels = tuple((tier, ch.busy_cycles, ch.bytes_moved) for tier, ch in alone.memory.items())
    channels += ((None, alone.tln.busy_cycles, alone.tln.bytes_moved),)
    return _UnitRun(records, entries[-1].record.end, int(env.now), channels)


def _run_loop(node: NodeSpec, res: SocketResources, entries: list[KernelEntry],
              collectives: CollectiveModel) -> _UnitRun:
    """A loop's run: the same loop of two and of three iterations simulated, the rest repeated.

    Iteration ``k >= 1`` gets the socket's compute when iteration ``k-1``'s tiles are done
    (its ``stream_end``, ``T_k``), the cycle iteration ``k-1`` starts its collectives. When none
    of the kernel's collectives is overlapped, nothing else is alive then: iteration ``k-2`` has
    ended (``k-1`` computed after it), ``k-1``'s streams are done and its collectives not started,
    the network holds no flow and the links are free; what happens from ``T_k`` to ``T_{k+1}``
    (``k-1``'s collectives, ``k``'s stream and gated compute) is the same kernel's every time,
    translated. So the periods between the ``T_k`` are equal (``P``), and a loop of ``n``
    iterations is the first iteration, ``n - 2`` periods and the last iteration's tail: the loop
    of three iterations with its middle period repeated. Its records are iteration 0's, the
    middle iteration's shifted by whole periods and the last one's; its bookings those of two
    iterations plus ``n - 2`` periods (three less two). As a check of that reasoning, the last
    iteration of the loop of three must be that of the loop of two one period later, else the
    whole loop is simulated.
    """
    n = len(entries)
    kernel = entries[0].record.placed.kernel
    # up to five iterations, the loop itself costs no more than the loops of two and three
    if (n <= 5 or any(c.overlapped for c in kernel.collectives)
            or any(e.costs is not entries[0].costs or e.record.placed.kernel.collectives != kernel.collectives
                   for e in entries)):
        return _run_alone(node, res, entries, collectives)
    two, three = (_run_alone(node, res, [_scratch(e, res) for e in entries[:m]], collectives)
                  for m in (2, 3))
    (first, _), (middle, _), (last, _) = three.records
    period = last.start - middle.start
    if (_timeline(first, 0) != _timeline(two.records[0][0], 0)
            or _timeline(last, period) != _timeline(two.records[1][0], 0)
            or (three.end, three.horizon) != (two.end + period, two.horizon + period)):
        return _run_alone(node, res, entries, collectives)
    records = ((first, 0),) + tuple((middle, k * period) for k in range(n - 2)) + ((last, (n - 3) * period),)
    channels = tuple((tier, b2 + (n - 2) * (b3 - b2), m2 + (n - 2) * (m3 - m2))
                     for (tier, b2, m2), (_, b3, m3) in zip(two.channels, three.channels, strict=True))
    later = (n - 3) * period
    return _UnitRun(records, three.end + later, three.horizon + later, channels)


def _scratch(entry: KernelEntry, res: SocketResources) -> KernelEntry:
    """``entry`` with a fresh record (for a run whose records are not the graph's)."""
    r = entry.record
    return KernelEntry(KernelRecord(r.name, r.kind, r.layer, r.placed, tier_bytes=dict.fromkeys(res.memory, 0),
                                    iteration=r.iteration, config_resident=r.config_resident,
                                    config_load_cycles=r.config_load_cycles),
                       entry.costs, entry.preds)


def _timeline(record: KernelRecord, origin: int) -> tuple:
    """What ``record`` says, its cycles counted from ``origin``."""
    return (record.start - origin, record.end - origin, record.stream_start - origin, record.stream_end - origin,
            record.launch_cycles, record.barrier_cycles, record.config_cycles, record.fill_cycles,
            record.gate_cycles, record.compute_busy_cycles, record.memory_bound_cycles, record.compute_bound_cycles,
            tuple(record.tier_bytes.items()),
            tuple((run.collective, run.result, run.ready - origin, run.start - origin, run.end - origin,
                   run.staged_bytes) for run in record.collectives))


def _shift_into(record: KernelRecord, done: KernelRecord, now: int) -> None:
    """Give ``record`` what ``done`` (the same kernel run from cycle 0) did, ``now`` cycles later."""
    record.start, record.end = done.start + now, done.end + now
    record.stream_start, record.stream_end = done.stream_start + now, done.stream_end + now
    record.launch_cycles, record.barrier_cycles = done.launch_cycles, done.barrier_cycles
    record.config_cycles, record.fill_cycles, record.gate_cycles = done.config_cycles, done.fill_cycles, done.gate_cycles
    record.compute_busy_cycles = done.compute_busy_cycles
    record.memory_bound_cycles, record.compute_bound_cycles = done.memory_bound_cycles, done.compute_bound_cycles
    record.tier_bytes = dict(done.tier_bytes)
    record.collectives = [CollectiveRun(run.collective, run.result, run.ready + now, run.start + now, run.end + now,
                                        run.staged_bytes) for run in done.collectives]
