"""Physical invariants every placed kernel must satisfy, and a windowed call's score against the
engine's (shared by the mapper tests)."""
from __future__ import annotations

from pathlib import Path

from sn40l_sim.engine.collectives import CollectiveModel
from sn40l_sim.engine.run_graph import EngineOptions, GraphRun, run_graph
from sn40l_sim.engine.staging import lone_collective_cycles, lone_staging_bytes
from sn40l_sim.hardware import figures
from sn40l_sim.hardware.loader import load_hardware
from sn40l_sim.ir import ParallelPlan, Shape
from sn40l_sim.kvcache import make_policy
from sn40l_sim.mapper.layout import pcu_cells, pmu_cells
from sn40l_sim.mapper.placement import PlacedGraph, PlacedKernel
from sn40l_sim.mapper.tier_split import TierSplit
from sn40l_sim.mapper.windows import overlap_windows
from sn40l_sim.models.loader import load_model
from sn40l_sim.study.assemble import step_timer

ROOT = Path(__file__).resolve().parents[2]

#: bounds that are not memory tiers (a kernel may also be bound by any tier of its socket)
RESOURCES = {"compute", "simd", "sram", "mesh", "p2p", "overhead"}
#: and what a call may spend most of its time on as the graph calls it (sn40l_sim/mapper/calls.py)
CALL_RESOURCES = RESOURCES | {"collective"}


def spill_split(weights: float = 0.0, kv: float = 0.0, first: str = "hbm", second: str = "ddr") -> TierSplit:
    """``weights`` and ``kv`` fractions held in ``second``, the rest in ``first``."""
    def shares(fraction: float):
        if fraction <= 0:
            return ((first, 1.0),)
        return ((second, 1.0),) if fraction >= 1 else ((first, 1.0 - fraction), (second, fraction))
    return TierSplit(shares(weights), shares(kv), first)


def check_allocation(socket, pk: PlacedKernel) -> None:
    """Counts per tile, PMU capacity, and cells used once and of the right kind."""
    tile, cap = socket.tile, socket.pmu.capacity_bytes
    tiles = figures.tiles(socket)
    assert len(pk.pcus_per_tile) == len(pk.pmus_per_tile) == len(pk.sram_bytes_per_tile) == tiles
    for pcus, pmus, sram in zip(pk.pcus_per_tile, pk.pmus_per_tile, pk.sram_bytes_per_tile, strict=True):
        assert 0 <= pcus <= tile.pcus
        assert 0 <= pmus <= tile.pmus
        assert sram <= pmus * cap, "buffers held exceed the PMUs given"
    valid_pcu, valid_pmu = set(pcu_cells(socket)), set(pmu_cells(socket))
    for section in range(pk.sections):
        stages = [s for s in pk.stages if s.section == section and s.kind not in ("stream", "mesh")]
        per_tile_pcus = sum(s.pcus // max(1, len(s.tiles)) for s in stages)
        per_tile_pmus = sum(s.pmus // max(1, len(s.tiles)) for s in stages)
        assert per_tile_pcus <= tile.pcus and per_tile_pmus <= tile.pmus
        used_pcu, used_pmu = set(), set()
        for s in stages:
            n = max(1, len(s.tiles))
            assert s.pcus % n == 0 and s.pmus % n == 0, "a stage is spread evenly over its tiles"
            assert s.buffer_bytes_per_tile <= (s.pmus // n) * cap, f"{s.operator}: buffers over PMU capacity"
            assert len(s.coords) == s.pcus and len(s.pmu_coords) == s.pmus
            for t, r, c in s.coords:
                assert (r, c) in valid_pcu and 0 <= t < tiles
            for t, r, c in s.pmu_coords:
                assert (r, c) in valid_pmu and 0 <= t < tiles
            assert not used_pcu & set(s.coords) and not used_pmu & set(s.pmu_coords), "a unit given twice"
            used_pcu |= set(s.coords)
            used_pmu |= set(s.pmu_coords)
            assert s.bound in RESOURCES | set(socket.memory)


def check_peaks(socket, pk: PlacedKernel) -> None:
    """Achieved FLOP/s and bytes/s never above the peaks; cycles never below the lower bounds."""
    assert pk.cycles > 0
    seconds = pk.cycles / socket.clock_hz
    assert pk.kernel.flops / seconds <= figures.peak_flops(socket, "bf16")
    assert list(pk.tier_bytes) == list(socket.memory)
    for tier, n_bytes in pk.tier_bytes.items():
        assert n_bytes / seconds <= figures.memory_bytes_per_s(socket, tier)
    assert pk.cycles >= pk.compute_cycles
    assert pk.cycles >= pk.memory_cycles
    assert pk.bounding_resource in RESOURCES | set(socket.memory)


def check_formula(socket, pk: PlacedKernel) -> None:
    """cycles = every section's configuration load + sections (fill + n_tiles x cycles per tile),
    the configuration being what the units and switches each section uses hold."""
    s = pk.sections
    configs = [figures.config_cycles(socket, b) for b in pk.section_config_bytes]
    assert len(configs) == s and pk.overhead_cycles == configs[0]
    assert pk.cycles == sum(configs) + s * (pk.fill_cycles + pk.n_tiles * pk.cycles_per_tile)
    for index, n_bytes in enumerate(pk.section_config_bytes):
        stages = [st for st in pk.stages if st.section == index and st.kind not in ("stream", "mesh", "memory")]
        pcus = sum(st.pcus for st in stages) // max(1, pk.chip_tiles)
        pmus = sum(st.pmus for st in stages) // max(1, pk.chip_tiles)
        assert n_bytes == figures.config_bytes(socket, pcus, pmus, pk.chip_tiles)


def check_all(socket, pk: PlacedKernel) -> None:
    check_allocation(socket, pk)
    check_peaks(socket, pk)
    check_formula(socket, pk)


def unlooped_decode(model: str, sockets: int, batch: int, cache: int) -> tuple[PlacedGraph, GraphRun]:
    """``graphs/<model>.yaml``'s decode at ``batch`` sequences of ``cache`` tokens on the
    ``sockets``-socket node, TP over all, kernel looping off: the placed graph and its engine run."""
    node = load_hardware(ROOT / "hw_configs" / f"sn40l_node{sockets}.yaml")
    timer = step_timer(node, load_model(ROOT / "graphs" / f"{model}.yaml"), make_policy("full", {}),
                       ParallelPlan(tp=sockets), ParallelPlan(tp=sockets), engine=EngineOptions(kernel_looping=False))
    placed = timer.placed(Shape("decode", batch, 0, cache))
    return placed, run_graph(node, placed, timer.engine)


def check_windowed_calls_as_run(placed: PlacedGraph, run: GraphRun, calls: int) -> None:
    """The ``calls`` calls with windows (an overlapped collective after an operator) are scored as the
    engine runs them, from the call's boundary (launch, barrier) on, within 2 cycles."""
    assert not run.loops
    windowed = [(pk, rec) for pk, rec in zip(placed.kernels, run.records, strict=True)
                if any(c.overlapped and c.after for c in pk.kernel.collectives)]
    assert len(windowed) == calls
    for pk, rec in windowed:
        # its configuration load (if any) included
        engine = rec.end - rec.start - rec.launch_cycles - rec.barrier_cycles
        assert abs(pk.call_cycles - engine) <= 2, (pk.kernel.name, pk.call_cycles, engine)


def loop_windows_end(record) -> int:
    """The cycle a looped kernel's last iteration (its engine ``record``) has its windows'
    collectives done, their last data tiles' shares included: what the kernel after the loop waits
    for, and the mapper scores (``looped_window_cycles``). The record ends later by its collectives
    that do not overlap its stream, which take the links after those shares and which the mapper
    leaves out whatever the plan (the engine's ``run_kernel``: they start once the tiles are done,
    one after the other)."""
    return record.end - sum(run.end - run.start for run in record.collectives if not run.collective.overlapped)


def looped_decoder_windows(node, placed: PlacedGraph):
    """The looped decoder of ``placed`` as ``node`` runs it: ``(loop, kernel, windows)``, its engine loop,
    its kernel and the overlap windows of its collectives, each timed alone and staged as the engine
    stages them (what the mapper scores a looped call with)."""
    (loop,) = run_graph(node, placed).loops
    collectives = CollectiveModel.from_node(node)
    kernel = placed.kernels[loop.first].kernel
    windows = overlap_windows(node.socket, kernel, lone_collective_cycles(collectives, node, placed.memory, True),
                              lone_staging_bytes(collectives, True), placed.memory.tiers())
    return loop, kernel, windows
