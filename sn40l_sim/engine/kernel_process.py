"""A placed fused kernel as a SimPy process: tiles streamed through its stages, plus collectives.

The mapper gives each kernel a static pipeline of stages, ``sections`` configurations run one
after the other, each streaming ``n_tiles`` data tiles after a ``fill_cycles`` pipeline fill.
The engine runs the kernel as:

``[launch -> barrier] -> [configuration] -> per section: [its configuration] -> fill -> chunks of tiles``

and, beside it, the kernel's collectives. The kernel-call boundary (:mod:`.boundary`) is paid by a
call, not by the later iterations of a loop; the first section's configuration only when it is
not still loaded (:attr:`KernelRecord.config_resident`), and then on the tiles that lost it
(:attr:`KernelRecord.config_load_cycles`); the fill by every section but a loop
iteration's, whose pipeline stays full from the previous iteration (an iteration's first tile waits, instead, for the
previous iteration's collectives: the ``gate``). Tiles are grouped into at most ``chunks_per_section``
chunks so that a kernel costs a bounded number of events whatever its size (a 128K-token
attention has millions of tiles). Within a chunk the memory stage and the compute stages work on
different tiles at once (the PMUs double-buffer), exactly the steady state of the tile pipeline:
the chunk's bytes of each memory tier stream through the socket's shared channels (each stream capped at
the rate its memory stage can issue) while its compute takes ``tiles x compute cycles per tile``,
and the chunk ends when both have. The weight preload of the next expert in the fused MoE kernel
is this overlap: its bytes are the memory stage of the next tiles, loaded while the current ones
compute. The fill covers the pipeline's head (the first tile crossing all stages).

Collectives with ``overlapped=True`` run in their window of the stream (:mod:`.windows`: the
whole stream, or the part of the operator whose output they carry), starting once its first tile
is out of the pipeline; the others start when the compute is done. The kernel ends when its
compute and all its collectives have ended, an overlapped one no sooner than its last data tile's
share after its window's last tile, a share that takes the links like any transfer; a window that
closes before the stream's end holds the later tiles until its collective ends (their operators
read the reduced rows), while the memory streams run ahead into the PMUs (:func:`_stream_ahead`).
A collective writes what the socket receives to memory and (unless overlapped, when tiles go out
straight from the PMUs) reads what it sends from memory, at the pace of the links and sharing the
memory channel with the kernel's streams, so an overlapped collective and a memory-hungry kernel
slow each other down.
"""
from __future__ import annotations

import math
from collections.abc import Generator
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any

import simpy

from sn40l_sim.engine.collective_run import CollectiveRun, collective_process, start_collective
from sn40l_sim.engine.collectives import CollectiveModel
from sn40l_sim.engine.kernel_costs import KernelCosts, SectionCosts
from sn40l_sim.engine.lone_sections import book_lone_section, lone_section, memory_bound
from sn40l_sim.engine.resources import SocketResources
from sn40l_sim.engine.windows import Windows, open_gate
from sn40l_sim.mapper.placement import PlacedKernel


@dataclass
class KernelRecord:
    """What happened to one kernel on the simulated socket (cycles are absolute)."""

    name: str
    kind: str
    layer: int | None
    placed: PlacedKernel
    start: int = 0
    end: int = 0
    stream_start: int = 0
    stream_end: int = 0
    launch_cycles: int = 0
    barrier_cycles: int = 0
    #: whether the kernel's configuration is still loaded when it is called (the graph's steady
    #: state, :func:`~sn40l_sim.mapper.residency.resident_calls`), so its first section loads none
    config_resident: bool = False
    #: cycles of loading the first section's configuration when it is not resident: on the tiles
    #: another kernel took units of (:func:`~sn40l_sim.mapper.residency.load_bytes`); None: on
    #: every tile, the whole of it
    config_load_cycles: int | None = None
    #: configuration loads: the kernel's when it was not resident, and later sections'
    config_cycles: int = 0
    fill_cycles: int = 0
    #: a loop iteration's compute waiting for the previous iteration's collectives
    gate_cycles: int = 0
    #: index of the loop iteration (0 for a call)
    iteration: int = 0
    compute_busy_cycles: int = 0
    #: chunk time where memory finished last (memory-bound) / where compute did
    memory_bound_cycles: int = 0
    compute_bound_cycles: int = 0
    #: tier -> bytes the kernel's streams moved to and from it
    tier_bytes: dict[str, int] = field(default_factory=dict)
    collectives: list[CollectiveRun] = field(default_factory=list)

    @property
    def cycles(self) -> int:
        """Cycles from the kernel's call to its last collective's end."""
        return self.end - self.start


def run_kernel(res: SocketResources, record: KernelRecord, costs: KernelCosts, collectives: CollectiveModel, *,
               call: bool = True, gate: simpy.Event | None = None, streamed: simpy.Event | None = None,
               after: list[simpy.Event] | None = None) -> Generator[simpy.Event, Any, None]:
    """SimPy process running one kernel on socket ``res``; fills ``record`` as it goes.

    ``call`` pays the kernel-call boundary and the fill (False for a loop's later iterations);
    ``gate`` is the previous iteration's end, which the first tile's compute waits for;
    ``streamed`` is triggered when the tiles are done (the next iteration may then stream);
    ``after``: events the kernel waits for before asking for the tiles (its predecessors).
    """
    env = res.env
    if after:
        yield env.all_of(after)
    with res.compute.request() as tiles:
        yield tiles
        record.start = env.now
        if call:
            for cycles, attr in ((costs.launch_cycles, "launch_cycles"), (costs.barrier_cycles, "barrier_cycles")):
                if cycles:
                    yield env.timeout(cycles)
                    setattr(record, attr, getattr(record, attr) + cycles)
        colls = [CollectiveRun(c, collectives.run(c)) for c in record.placed.kernel.collectives]
        windows: Windows | None = None
        record.stream_start = env.now
        for index, sec in enumerate(costs.sections):
            load = costs.config_cycles[index] if index < len(costs.config_cycles) else 0
            if index == 0 and load and record.config_load_cycles is not None:
                load = record.config_load_cycles
            if load and (index or not record.config_resident):
                yield env.timeout(load)
                record.config_cycles += load
            if sec.fill_cycles and (call or index):
                yield env.timeout(sec.fill_cycles)
                record.fill_cycles += sec.fill_cycles
            if index == 0:
                record.stream_start = env.now
                windows = _windows(res, colls, costs, sec, collectives, ahead=gate is not None)
            if index == 0 and (gate is not None or windows.points):
                # a loop iteration, or a call whose stream waits mid-way for a collective its
                # later operators read: its memory streams run ahead of the waiting compute
                yield from _stream_ahead(res, record, sec, gate or open_gate(env), windows, refill=gate is not None)
                continue
            offset = index * max(1, record.placed.n_tiles)
            if index == 0:
                yield from windows.reach(0)
            lone = _lone_section(res, record, sec) if not windows.points else None
            if lone is None:
                tile = 0
                for n in sec.chunks:
                    for part in windows.split(offset + tile, n):
                        yield from _chunk(res, record, sec, tile, part)
                        tile += part
                        yield from windows.reach(offset + tile)
            elif lone:
                yield env.timeout(lone)
        if windows is None:
            windows = _windows(res, colls, costs, None, collectives)
            yield from windows.reach(0)
        yield from windows.reach(windows.total)
        record.gate_cycles += windows.stalled
        record.stream_end = env.now
    if streamed is not None:
        streamed.succeed()
    for run in colls:
        if not run.collective.overlapped:
            yield start_collective(res, run, 0, costs.stage_collectives)
    if windows.items:
        yield env.all_of(windows.ends())
    record.collectives = colls
    record.end = env.now


def _windows(res: SocketResources, colls: list[CollectiveRun], costs: KernelCosts, first: SectionCosts | None,
             collectives: CollectiveModel, ahead: bool = False) -> Windows:
    """The kernel's overlapped collectives, each starting once its window's first tile is out of
    the pipeline (:mod:`.windows`); ``first`` the first section (None: a kernel without tiles).
    ``ahead``: a loop iteration, whose stream ran ahead of its compute, so a tile leaves the
    pipeline at the compute's pace."""
    overlapped = [run for run in colls if run.collective.overlapped]
    if first is None:
        delay = 0
    else:
        delay = first.compute_cycles_per_tile if ahead else _first_tile_cycles(first, res)
    tiles = max((len(costs.sections) and sum(costs.sections[0].chunks)), 1)
    return Windows(res, overlapped, costs.windows or [(0.0, 1.0)] * len(overlapped), tiles,
                   len(costs.sections), collectives, delay,
                   lambda run, wait: res.env.process(collective_process(res, run, wait, costs.stage_collectives)))


def _first_tile_cycles(costs: SectionCosts, res: SocketResources) -> int:
    """Cycles until the first tile leaves the pipeline once the fill is done: its compute, or its
    bytes at the narrowest rate of their path (the tier's channel, the top-level network, the
    section's own cap), as the chunks' streams are timed (:func:`_alone_cycles`)."""
    per_tile = costs.compute_cycles_per_tile
    for tier, cap in costs.tier_caps.items():
        n_bytes = costs.bytes_between(tier, 0, 1)
        if n_bytes:
            per_tile = max(per_tile, math.ceil(n_bytes / min(cap, res.path_bytes_per_cycle(tier))))
    return per_tile


def _chunk(res: SocketResources, record: KernelRecord, costs: SectionCosts, first: int,
           n: int) -> Generator[simpy.Event, Any, None]:
    env = res.env
    start = env.now
    compute = n * costs.compute_cycles_per_tile
    waits = _transfers(res, record, costs, first, n)
    alone = _alone_cycles(res, costs, first, n)
    if compute:
        waits.append(env.timeout(compute))
    if waits:
        yield env.all_of(waits) if len(waits) > 1 else waits[0]
    _book_chunk(record, env.now - start, compute, alone)


def _book_chunk(record: KernelRecord, took: int, compute: int, alone: float) -> None:
    record.compute_busy_cycles += compute
    if memory_bound(took, compute, alone):
        record.memory_bound_cycles += took
    else:
        record.compute_bound_cycles += took


def _streams_alone(res: SocketResources) -> bool:
    """Whether a stream started now shares nothing until it ends: only where the socket's
    channels are the kernels' and their collectives' alone (``res.lone_streams``, set by the
    engine's graph runner) and no collective is alive. The kernel streaming holds the socket's
    compute, so no other kernel streams until it ends, and a collective that could start while it
    streams would be alive already (a kernel starts its overlapped collectives before its tiles
    stream, its others after)."""
    return res.lone_streams and not res.live_collectives


def _lone_section(res: SocketResources, record: KernelRecord, costs: SectionCosts) -> int | None:
    """A section's chunks accounted at once when every stream of theirs runs alone: the cycles
    they take together (each chunk what :func:`_chunk` would take: its compute or its one
    stream, :meth:`~sn40l_sim.engine.fluid.FluidNetwork.transfer_alone`, whichever ends later),
    booked as :func:`_chunk` books them, so that the section is one wait instead of five events a
    chunk; None when the chunks need the events (streams not alone, or a chunk streaming from two
    tiers, which share the TLN). The chunks are worked out once per section
    (:func:`~sn40l_sim.engine.lone_sections.lone_section`).

    What lets a stream run alone at the section's start holds for all its chunks: no collective
    can start before the kernel's tiles are done."""
    if not _streams_alone(res):
        return None
    plan = lone_section(res, costs)
    if plan is None:
        return None
    book_lone_section(res, plan, record.tier_bytes)
    record.compute_busy_cycles += plan.compute_busy_cycles
    record.memory_bound_cycles += plan.memory_bound_cycles
    record.compute_bound_cycles += plan.compute_bound_cycles
    return plan.cycles


def _transfers(res: SocketResources, record: KernelRecord, costs: SectionCosts, first: int, n: int,
               moved: dict[str, float] | None = None) -> list:
    """Start the memory streams of tiles ``first .. first+n-1`` (one per tier); their events, in
    the order of ``costs.loads``. ``moved``: tier -> bytes of these its stream already moved (the
    chunk before's, past its last byte: :meth:`~.fluid.FluidNetwork.transfer`)."""
    waits = []
    for tier, n_bytes, cap in costs.loads(first, n):
        ahead = moved.get(tier, 0.0) if moved else 0.0
        waits.append(res.net.transfer(res.memory_path(tier), n_bytes, cap, moved=ahead))
        record.tier_bytes[tier] = record.tier_bytes.get(tier, 0) + n_bytes
    return waits


def _alone_cycles(res: SocketResources, costs: SectionCosts, first: int, n: int) -> float:
    """The memory stage's time for tiles ``first .. first+n-1`` without contention."""
    out = 0.0
    for tier, n_bytes, cap in costs.loads(first, n):
        out = max(out, n_bytes / min(cap, res.path_bytes_per_cycle(tier)))
    return out


def _stream_ahead(res: SocketResources, record: KernelRecord, costs: SectionCosts,
                  gate: simpy.Event, windows: Windows | None = None,
                  refill: bool = True) -> Generator[simpy.Event, Any, None]:
    """A loop iteration, whose compute must wait for the previous iteration's end (``gate``, its
    output and collectives): its memory streams run ahead into the PMUs chunk by chunk, at most
    ``res.buffer_bytes`` ahead of the compute, which once the gate has opened fills the pipeline
    and follows the chunks as they arrive.

    When the iteration ends waiting on its last chunk and the stream never had to wait for buffer
    space, the stream alone set its length: the wait for the gate and the fill after it were hidden
    under it, and the whole iteration counts as memory-bound (``gate_cycles`` and ``fill_cycles``
    record only exposed waits, which is what the step breakdown reads). When the compute's chain
    (the gate, the fill, the tiles) ends on the same cycle as the stream, both bound the iteration.
    Which one it is counted for then depends on the order of the cycle's events. If the last chunk's
    arrival comes first, as in Llama-3.1-70B's looped decode on 16 sockets (docs/validation.md),
    it is counted for the chain: the gate as collectives and the rest as compute.

    The kernel's ``windows`` (:mod:`.windows`) open and close as the compute passes their tiles,
    where the chunks are cut so that a window's tile is passed only once its data has arrived; a
    wait there for a collective the later tiles read is the caller's to book (``windows.stalled``),
    and the streams run on ahead meanwhile (when the stream alone set the length, that wait was
    hidden under it like the gate's, and counts as memory-bound). A call whose compute waits so
    runs this way too, with its gate open and its pipeline already filled (``refill`` False)."""
    env = res.env
    start = env.now
    windows = windows if windows is not None else Windows(res, (), (), 1, 1, None, 0, None)
    stalled_before = windows.stalled
    # a window's point is a chunk boundary: its tiles' data must have arrived before the window
    # opens or closes there (a tile inside a chunk is known to be loaded only at the chunk's end)
    chunks: list[int] = []
    for first, n in zip(accumulate(costs.chunks, initial=0), costs.chunks, strict=False):
        chunks.extend(windows.split(first, n))
    started = [env.event() for _ in chunks]
    loaded = [env.event() for _ in chunks]
    consumed = [env.event() for _ in chunks]
    firsts = list(accumulate(chunks, initial=0))[:-1]
    sizes = [sum(costs.bytes_between(tier, f, f + n) for tier in costs.tier_caps)
             for f, n in zip(firsts, chunks, strict=True)]
    per_tile = costs.compute_cycles_per_tile
    fill = costs.fill_cycles if refill else 0
    waited_on_memory = [False]
    held_back = [False]   # the stream waited for the compute to free buffer space

    def memory():
        ahead, oldest = 0, 0
        # tier -> bytes of the next chunk its stream moved in the cycle the chunk before ended in,
        # past that chunk's last byte, and the cycle it arrived at
        carried: dict[str, float] = {}
        arrived = None
        for i, (first, n) in enumerate(zip(firsts, chunks, strict=True)):
            while oldest < i and ahead + sizes[i] > res.buffer_bytes:
                held_back[0] = held_back[0] or not consumed[oldest].triggered
                yield consumed[oldest]
                ahead -= sizes[oldest]
                oldest += 1
            if env.now != arrived:
                carried = {}   # the stream stopped for buffer space: nothing ran on into this chunk
            started[i].succeed()
            waits = _transfers(res, record, costs, first, n, carried)
            if waits:
                got = yield env.all_of(waits) if len(waits) > 1 else waits[0]
                # a chunk's end is no pause of the memory stage: the fraction of its last cycle
                # after its last byte streams the next chunk's (docs/validation.md, "A loop's last
                # windows"); a tier this chunk has no bytes of keeps what it carried
                past = [got[w] for w in waits] if len(waits) > 1 else [got]
                carried |= {tier: left for (tier, _, _), left in zip(costs.loads(first, n), past, strict=True)}
            arrived = env.now
            ahead += sizes[i]
            loaded[i].succeed()

    gated = [0]
    # cycles of the chunks whose data the compute waited for: the stream held those
    memory_held = [0]

    def compute():
        yield gate
        gated[0] = env.now - start
        # the first data tile needs the previous iteration's output: the pipeline fills again
        # (a call filled it before streaming: ``refill`` False)
        if fill:
            yield env.timeout(fill)
        yield from windows.reach(0)
        for i, n in enumerate(chunks):
            # a chunk's tiles are computed as they arrive: the chunk's compute, or its last tile's
            # after the chunk has arrived, whichever ends later
            began = env.now
            yield started[i]
            if n * per_tile:
                yield env.timeout(n * per_tile)
            waited_on_memory[0] = not loaded[i].triggered
            if waited_on_memory[0]:
                yield loaded[i]
                if per_tile:
                    yield env.timeout(per_tile)
                memory_held[0] += env.now - began
            record.compute_busy_cycles += n * per_tile
            consumed[i].succeed()
            yield from windows.reach(firsts[i] + n)

    streams, work = env.process(memory()), env.process(compute())
    yield env.all_of([streams, work])
    # the wait mid-way for a window's collective is booked with the gate by the caller
    took = env.now - start - windows.stalled
    # the stream alone set the iteration's length when the compute waited for its last chunk and
    # the stream never waited for the compute
    if sum(sizes) and waited_on_memory[0] and not held_back[0]:
        # a wait mid-way for a window's collective was hidden under the stream too (it ran on
        # meanwhile): it is streaming, not a wait the caller books (sn40l_sim/engine/breakdown.py)
        hidden = windows.stalled - stalled_before
        windows.stalled -= hidden
        record.memory_bound_cycles += took + hidden
    else:
        record.gate_cycles += gated[0]
        record.fill_cycles += fill
        rest = took - gated[0] - fill
        # each chunk to what held it: a window cut near the end leaves a last chunk that arrived
        # during the wait for its collective, which says nothing of the chunks before it
        held = min(rest, memory_held[0]) if sum(sizes) else 0
        record.memory_bound_cycles += held
        record.compute_bound_cycles += rest - held
