"""A placed fused kernel as a SimPy process: tiles streamed through its stages, plus collectives.

The mapper gives each kernel a static pipeline of stages, ``sections`` configurations run one
after the other, each streaming ``n_tiles`` data tiles after a ``fill_cycles`` pipeline fill.
The engine runs the kernel as:

``call overhead -> per section: [reconfiguration] -> fill -> chunks of tiles``

and, beside it, the kernel's collectives. Tiles are grouped into at most ``chunks_per_section``
chunks so that a kernel costs a bounded number of events whatever its size (a 128K-token
attention has millions of tiles). Within a chunk the memory stage and the compute stages work on
different tiles at once (the PMUs double-buffer), exactly the steady state of the tile pipeline:
the chunk's HBM and DDR bytes stream through the socket's shared channels (each stream capped at
the rate its memory stage can issue) while its compute takes ``tiles x compute cycles per tile``,
and the chunk ends when both have. The weight preload of the next expert in the fused MoE kernel
is this overlap: its bytes are the memory stage of the next tiles, loaded while the current ones
compute. The fill covers the pipeline's head (the first tile crossing all stages).

Collectives with ``overlapped=True`` start once the first tile is out of the pipeline and run
beside the compute; the others start when the compute is done. The kernel ends when its compute
and all its collectives have ended.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from sn40l_sim.engine.collectives import CollectiveModel, CollectiveResult
from sn40l_sim.engine.resources import SocketResources
from sn40l_sim.mapper.placement import PlacedKernel
from sn40l_sim.models.kernels import Collective

#: stage bounds whose time the engine models as transfers on shared channels, not fixed cycles
MEMORY_BOUNDS = frozenset({"hbm", "ddr", "p2p"})


def chunk_tiles(n_tiles: int, chunks: int) -> tuple[int, ...]:
    """Split ``n_tiles`` into at most ``chunks`` near-equal chunks (larger ones first).

    >>> chunk_tiles(10, 4), chunk_tiles(3, 8), chunk_tiles(0, 8)
    ((3, 3, 2, 2), (1, 1, 1), (1,))
    """
    n_tiles = max(1, n_tiles)
    count = max(1, min(chunks, n_tiles))
    base, extra = divmod(n_tiles, count)
    return tuple(base + 1 if i < extra else base for i in range(count))


@dataclass(frozen=True)
class KernelCosts:
    """What the engine needs from a :class:`PlacedKernel`, precomputed once per kernel shape.

    Examples
    --------
    >>> costs = KernelCosts(call_overhead_cycles=100, sections=1, reconfig_cycles=0, fill_cycles=50,
    ...                     chunks=(4, 4), compute_cycles_per_tile=10, hbm_bytes=8000, ddr_bytes=0,
    ...                     hbm_cap=math.inf, ddr_cap=math.inf)
    >>> costs.total_tiles, costs.bytes_between("hbm", 0, 4)
    (8, 4000)
    """

    call_overhead_cycles: int
    sections: int
    #: cycles of one reconfiguration, paid before every section but the first (whose
    #: configuration the kernel call loads)
    reconfig_cycles: int
    fill_cycles: int
    chunks: tuple[int, ...]
    compute_cycles_per_tile: int
    hbm_bytes: int
    ddr_bytes: int
    hbm_cap: float
    ddr_cap: float

    @property
    def total_tiles(self) -> int:
        """Tiles streamed over all sections."""
        return self.sections * sum(self.chunks)

    def bytes_between(self, tier: str, first_tile: int, end_tile: int) -> int:
        """Bytes of ``tier`` carried by tiles ``first_tile .. end_tile-1`` (over all sections);
        integer shares whose sum over all tiles is exactly the kernel's bytes."""
        total = self.hbm_bytes if tier == "hbm" else self.ddr_bytes
        n = self.total_tiles
        return total * end_tile // n - total * first_tile // n

    @classmethod
    def from_placed(cls, pk: PlacedKernel, call_overhead_cycles: int,
                    chunks_per_section: int) -> "KernelCosts":
        """Costs of ``pk``. Compute is the slowest non-memory stage; each memory tier's stream is
        capped at (its bytes per tile) / (its slowest stage's cycles per tile)."""
        tiles_total = max(1, pk.sections * max(1, pk.n_tiles))
        compute = [st.cycles_per_tile for st in pk.stages if st.bound not in MEMORY_BOUNDS]

        def cap(tier: str, n_bytes: int) -> float:
            cycles = [st.cycles_per_tile for st in pk.stages if st.bound == tier]
            worst = max(cycles, default=0)
            return n_bytes / tiles_total / worst if worst > 0 and n_bytes > 0 else math.inf

        return cls(call_overhead_cycles=call_overhead_cycles, sections=max(1, pk.sections),
                   reconfig_cycles=pk.reconfig_cycles, fill_cycles=pk.fill_cycles,
                   chunks=chunk_tiles(pk.n_tiles, chunks_per_section),
                   compute_cycles_per_tile=max(compute, default=0),
                   hbm_bytes=pk.hbm_bytes, ddr_bytes=pk.ddr_bytes,
                   hbm_cap=cap("hbm", pk.hbm_bytes), ddr_cap=cap("ddr", pk.ddr_bytes))


@dataclass
class CollectiveRun:
    """One collective as it ran: when, and what :class:`CollectiveModel` said it costs."""

    collective: Collective
    result: CollectiveResult
    ready: int = 0
    start: int = 0
    end: int = 0


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
    overhead_cycles: int = 0
    reconfig_cycles: int = 0
    fill_cycles: int = 0
    compute_busy: int = 0
    #: chunk time where memory finished last (memory-bound) / where compute did
    memory_bound_cycles: int = 0
    compute_bound_cycles: int = 0
    hbm_bytes: int = 0
    ddr_bytes: int = 0
    collectives: list[CollectiveRun] = field(default_factory=list)

    @property
    def cycles(self) -> int:
        """Cycles from the kernel's call to its last collective's end."""
        return self.end - self.start


def run_kernel(res: SocketResources, record: KernelRecord, costs: KernelCosts,
               collectives: CollectiveModel):
    """SimPy process running one kernel on socket ``res``; fills ``record`` as it goes."""
    env = res.env
    with res.compute.request() as tiles:
        yield tiles
        record.start = env.now
        if costs.call_overhead_cycles:
            yield env.timeout(costs.call_overhead_cycles)
            record.overhead_cycles += costs.call_overhead_cycles
        colls = [CollectiveRun(c, collectives.run(c)) for c in record.placed.kernel.collectives]
        side = []
        tile = 0
        for section in range(costs.sections):
            if section and costs.reconfig_cycles:
                yield env.timeout(costs.reconfig_cycles)
                record.reconfig_cycles += costs.reconfig_cycles
            if costs.fill_cycles:
                yield env.timeout(costs.fill_cycles)
                record.fill_cycles += costs.fill_cycles
            if section == 0:
                record.stream_start = env.now
                first = _first_tile_cycles(costs, res)
                side = [env.process(_collective(res, run, delay=first))
                        for run in colls if run.collective.overlapped]
            for n in costs.chunks:
                yield from _chunk(res, record, costs, tile, n)
                tile += n
        record.stream_end = env.now
    for run in colls:
        if not run.collective.overlapped:
            yield env.process(_collective(res, run, delay=0))
    if side:
        yield env.all_of(side)
    record.collectives = colls
    record.end = env.now


def _first_tile_cycles(costs: KernelCosts, res: SocketResources) -> int:
    """Cycles until the first tile leaves the pipeline once the fill is done."""
    per_tile = costs.compute_cycles_per_tile
    for tier, cap in (("hbm", costs.hbm_cap), ("ddr", costs.ddr_cap)):
        n_bytes = costs.bytes_between(tier, 0, 1)
        if n_bytes:
            channel = res.hbm if tier == "hbm" else res.ddr
            per_tile = max(per_tile, math.ceil(n_bytes / min(cap, channel.bytes_per_cycle)))
    return per_tile


def _chunk(res: SocketResources, record: KernelRecord, costs: KernelCosts, first: int, n: int):
    env = res.env
    start = env.now
    compute = n * costs.compute_cycles_per_tile
    waits = []
    for tier, cap in (("hbm", costs.hbm_cap), ("ddr", costs.ddr_cap)):
        n_bytes = costs.bytes_between(tier, first, first + n)
        if n_bytes:
            waits.append(res.net.transfer(res.memory_path(tier), n_bytes, cap))
            if tier == "hbm":
                record.hbm_bytes += n_bytes
            else:
                record.ddr_bytes += n_bytes
    if not waits:
        if compute:
            yield env.timeout(compute)
        record.compute_busy += compute
        record.compute_bound_cycles += compute
        return
    if compute:
        waits.append(env.timeout(compute))
    yield env.all_of(waits) if len(waits) > 1 else waits[0]
    took = env.now - start
    record.compute_busy += compute
    if took > compute:
        record.memory_bound_cycles += took
    else:
        record.compute_bound_cycles += took


def _collective(res: SocketResources, run: CollectiveRun, delay: int):
    env = res.env
    if delay:
        yield env.timeout(delay)
    run.ready = env.now
    with res.p2p.request() as links:
        yield links
        run.start = env.now
        if run.result.cycles:
            yield env.timeout(run.result.cycles)
        run.end = env.now
