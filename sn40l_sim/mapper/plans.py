"""A kernel's chosen plan and the placement it reports.

:mod:`.kernel` searches tilings and tile choices; each candidate is a :class:`KernelPlan` of
:class:`SectionPlan` s (its sections staged, allocated, placed and routed), and the winner becomes a
:class:`~sn40l_sim.mapper.placement.PlacedKernel` here (:func:`placed_kernel`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from sn40l_sim.hardware import figures
from sn40l_sim.hardware.spec import SocketSpec
from sn40l_sim.ir import FusedKernel
from sn40l_sim.mapper.allocate import Allocation
from sn40l_sim.mapper.bounds import compute_bound_cycles, memory_bound_cycles
from sn40l_sim.mapper.layout import RoutedStream, StageCells, tiled_coords
from sn40l_sim.mapper.placement import PlacedKernel, StagePlacement
from sn40l_sim.mapper.read_ahead import looped_iteration_cycles
from sn40l_sim.mapper.stages import StageWork, paced_cycles


@dataclass(frozen=True)
class SectionPlan:
    """One section staged, allocated, placed and routed."""

    stages: list[StageWork]
    alloc: Allocation
    cells: list[StageCells]
    streams: list[RoutedStream]
    mesh_cycles_per_tile: int
    #: the slowest stage or stream per data tile: whole cycles for a compute stage or the mesh, a
    #: memory stream's unrounded share (:attr:`~sn40l_sim.mapper.stages.StageWork.paced_cycles`)
    cycles_per_tile: float
    fill_cycles: int
    bound: str
    #: the slowest compute stage (or the mesh) per data tile, memory stages left out
    compute_cycles_per_tile: int = 0
    #: the memory tiers' streams of the whole section, latency excluded (the slowest tier)
    stream_cycles: int = 0
    #: data tiles the section streams
    n_tiles: int = 1

    @property
    def chain_cycles(self) -> int:
        """Fill and compute of the section once its data is in the PMUs."""
        return self.fill_cycles + self.n_tiles * self.compute_cycles_per_tile

    def config_bytes(self, socket: SocketSpec) -> int:
        """Configuration bytes of this section's dataflow graph (units and switches it uses)."""
        return figures.config_bytes(socket, sum(self.alloc.pcus), sum(self.alloc.pmus), self.alloc.chip_tiles)

    def tier_bytes(self, tier: str) -> int:
        """Bytes this section moves to and from ``tier``."""
        return sum(s.tier_bytes for s in self.stages if s.resource == tier)


@dataclass(frozen=True)
class KernelPlan:
    """All sections of a kernel for one tiling and tile choice."""

    n_tiles: int
    chip_tiles: int
    sections: list[SectionPlan]
    fill_cycles: int
    #: the sections' mean slowest stage per data tile (a memory stream's unrounded)
    cycles_per_tile: float
    cycles: int
    #: what the choice minimises: ``(cycles, 0)`` (plus what overlapped collectives outlast of it),
    #: or for a looped kernel (time per iteration, compute chain) (see :mod:`.kernel`)
    objective: tuple[float, int] = (0.0, 0)
    #: a call's stream left once its overlapped collectives start (see
    #: :attr:`~sn40l_sim.mapper.placement.PlacedKernel.overlap_stream_cycles`)
    overlap_stream_cycles: int | None = None
    #: the cycles their last data tile's shares add past it, in ``objective`` (see
    #: :attr:`~sn40l_sim.mapper.placement.PlacedKernel.overlap_share_cycles`)
    overlap_share_cycles: int = 0
    #: chosen for its time per iteration as a looped call (its objective a mean over the loop)
    looped: bool = False


def placed_kernel(socket: SocketSpec, kernel: FusedKernel, plan: KernelPlan) -> PlacedKernel:
    """The placement :func:`~sn40l_sim.mapper.kernel.map_kernel` reports for ``plan``: every stage's
    units and coordinates on the tiles in use, the streams between stages, the per-tile unit and
    SRAM use, and the plan's cycles with its configuration loads (a lone call's, also as
    ``call_cycles``: :func:`~sn40l_sim.mapper.calls.as_called` sets the call in context)."""
    t, all_tiles = plan.chip_tiles, figures.tiles(socket)
    tiles = tuple(range(t))
    stages: list[StagePlacement] = []
    pcus = [0] * all_tiles
    pmus = [0] * all_tiles
    sram = [0] * all_tiles
    for index, sec in enumerate(plan.sections):
        buffers = 0
        divisions = sec.alloc.divisions or (None,) * len(sec.stages)
        for stage, cells, q, r, cyc, bound, division in zip(sec.stages, sec.cells, sec.alloc.pcus, sec.alloc.pmus,
                                                             sec.alloc.cycles, sec.alloc.bounds, divisions, strict=True):
            per_tile_buffer = 2 * math.ceil(stage.buffer_bytes / t)
            buffers += per_tile_buffer
            stages.append(StagePlacement(
                operator=stage.name, kind=stage.kind, pcus=q * t, pmus=r * t, tiles=tiles,
                coords=tiled_coords(socket, cells.pcus, t), cycles_per_tile=paced_cycles(stage, cyc),
                bound=bound, pmu_coords=tiled_coords(socket, cells.pmus, t),
                section=index, buffer_bytes_per_tile=per_tile_buffer,
                dataflow=stage.tiling.dataflow if stage.tiling else "",
                latency_cycles=division.latency_cycles if division else stage.latency_cycles,
                split=division.split if division else (1, 1)))
        for s in sec.streams:
            stages.append(StagePlacement(
                operator=f"{sec.stages[s.src].name}->{sec.stages[s.dst].name}", kind="stream", pcus=0,
                pmus=0, tiles=tiles, coords=(), cycles_per_tile=0, bound="mesh",
                section=index, stream_bytes=s.bytes, hops=s.hops))
        stages.append(StagePlacement(
            operator="mesh", kind="mesh", pcus=0, pmus=0, tiles=tiles, coords=(),
            cycles_per_tile=sec.mesh_cycles_per_tile, bound="mesh", section=index,
            stream_bytes=sum(s.bytes for s in sec.streams)))
        for i in tiles:
            pcus[i] = max(pcus[i], sum(sec.alloc.pcus))
            pmus[i] = max(pmus[i], sum(sec.alloc.pmus))
            sram[i] = max(sram[i], buffers)
    tier_bytes = {tier: sum(sec.tier_bytes(tier) for sec in plan.sections) for tier in socket.memory}
    mesh = sum(s.bytes for sec in plan.sections for s in sec.streams)
    n = len(plan.sections)
    streaming = n * (plan.fill_cycles + plan.n_tiles * plan.cycles_per_tile)
    section_config = tuple(sec.config_bytes(socket) for sec in plan.sections)
    configs = [figures.config_cycles(socket, b) for b in section_config]
    heaviest = max(plan.sections, key=lambda s: s.cycles_per_tile)
    bound = "overhead" if sum(configs) >= streaming else heaviest.bound
    return PlacedKernel(
        kernel=kernel, stages=tuple(stages), sections=n,
        reconfig_cycles=max(configs[1:], default=0), n_tiles=plan.n_tiles,
        cycles_per_tile=plan.cycles_per_tile, fill_cycles=plan.fill_cycles, tier_bytes=tier_bytes,
        mesh_bytes=mesh, compute_cycles=compute_bound_cycles(socket, kernel.flops),
        memory_cycles=memory_bound_cycles(socket, tier_bytes), bounding_resource=bound, cycles=plan.cycles,
        pcus_per_tile=tuple(pcus), pmus_per_tile=tuple(pmus), sram_bytes_per_tile=tuple(sram),
        overhead_cycles=configs[0], chip_tiles=t, section_config_bytes=section_config,
        iteration_cycles=looped_iteration_cycles(socket, plan.sections, plan.fill_cycles, 0, configs), tiles_bound=heaviest.bound,
        call_cycles=_call_cycles(plan), call_bound=bound,
        overlap_stream_cycles=plan.overlap_stream_cycles, overlap_share_cycles=plan.overlap_share_cycles)



def _call_cycles(plan: KernelPlan) -> int:
    """A call's whole cycles as the plan was chosen by: a looped call's mean iteration rounded down,
    so that the loop's calls add up to no more than the engine's loop, whose last iteration's
    windows the mean holds (:func:`~.window_replay.looped_window_cycles`); another call's time
    rounded up."""
    if not plan.objective[0]:
        return plan.cycles
    return math.floor(plan.objective[0]) if plan.looped else math.ceil(plan.objective[0])
