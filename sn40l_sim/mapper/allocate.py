"""Giving PCUs and PMUs to the stages of a section so that the pipeline is balanced.

The pipeline streams one data tile per ``cycles_per_tile``, set by its slowest stage. For a target
``C`` every compute stage takes the fewest PCUs that bring its work under ``C`` (work divided over
its PCUs, at most as many as it can use) and the fewest PMUs that hold its buffers double-buffered
(:func:`~sn40l_sim.hardware.units.pmu.pmus_for_buffer`) and serve its reads, writes and
addresses within ``C`` (:func:`~sn40l_sim.hardware.units.pmu.pmu_cycles`). Memory stages take no
units; their cycles are fixed by their tier. The smallest ``C`` whose allocation fits a tile's
PCUs and PMUs is found by bisection; stages keep that minimal allocation (spare units stay idle
and show as unused in the utilisation).

Every stage is spread evenly over the ``chip_tiles`` tiles in use: each tile holds the same number
of its PCUs and PMUs and processes its share of every data tile, so per-tile counts are what is
limited.

Examples
--------
>>> from sn40l_sim.mapper._examples import example_socket, example_decode_kernel
>>> from sn40l_sim.mapper.stages import TierSplit, section_stages
>>> socket = example_socket()
>>> stages, _ = section_stages(socket, example_decode_kernel().operators, 16, TierSplit.all_in("hbm"), 4)
>>> alloc = allocate(socket, stages, 4)
>>> alloc.bounds[0], alloc.cycles_per_tile == alloc.cycles[0]      # the decode kernel waits on HBM
('hbm', True)
>>> sum(alloc.pcus) <= socket.tile.pcus and sum(alloc.pmus) <= socket.tile.pmus
True
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from sn40l_sim.hardware.spec import SocketSpec
from sn40l_sim.hardware.units.pmu import pmu_cycles, pmus_for_buffer
from sn40l_sim.mapper.budget import NO_LIMITS, UnitBudget
from sn40l_sim.mapper.stages import StageWork

_EPS = 1e-9


@dataclass(frozen=True)
class Allocation:
    """PCUs and PMUs per stage (on each tile in use) and the resulting cycles per data tile."""

    chip_tiles: int
    pcus: tuple[int, ...]
    pmus: tuple[int, ...]
    cycles: tuple[int, ...]
    bounds: tuple[str, ...]

    @property
    def cycles_per_tile(self) -> int:
        """Cycles per data tile of the pipeline: its slowest stage."""
        return max(self.cycles, default=0)


def _compute_cycles(stage: StageWork, pcus: int, chip_tiles: int) -> int:
    return math.ceil(stage.work_cycles / (pcus * chip_tiles) - _EPS) if stage.work_cycles > 0 else 0


def _sram_cycles(socket: SocketSpec, stage: StageWork, pmus: int, chip_tiles: int) -> int:
    if pmus == 0:
        return 0
    share = pmus * chip_tiles
    return pmu_cycles(socket.pmu, math.ceil(stage.sram_read_bytes / share),
                      math.ceil(stage.sram_write_bytes / share), math.ceil(stage.sram_addresses / share))


def _min_pmus(socket: SocketSpec, stage: StageWork, chip_tiles: int) -> int:
    needs = stage.buffer_bytes or stage.sram_read_bytes or stage.sram_write_bytes
    held = pmus_for_buffer(socket.pmu, math.ceil(stage.buffer_bytes / chip_tiles), double_buffered=True)
    return max(held, 1 if needs else 0)


def _max_pcus(socket: SocketSpec, stage: StageWork, chip_tiles: int, budget: UnitBudget) -> int:
    return max(1, min(budget.pcus_for(stage.name, socket.tile.pcus), math.ceil(stage.parallelism / chip_tiles)))


@dataclass(frozen=True)
class _Limits:
    """What a stage needs whatever the target: fewest PMUs (buffers), most useful PCUs, and the
    SRAM cycles at those fewest PMUs."""

    min_pmus: int
    max_pcus: int
    sram_at_min: int
    max_pmus: int


def _limits(socket: SocketSpec, stage: StageWork, chip_tiles: int, budget: UnitBudget) -> _Limits:
    r = _min_pmus(socket, stage, chip_tiles)
    return _Limits(r, _max_pcus(socket, stage, chip_tiles, budget), _sram_cycles(socket, stage, r, chip_tiles),
                   budget.pmus_for(stage.name, socket.tile.pmus))


def _stage_units(socket: SocketSpec, stage: StageWork, limits: _Limits, chip_tiles: int,
                 target: int) -> tuple[int, int] | None:
    """Fewest (PCUs, PMUs) per tile bringing a compute stage under ``target`` cycles, or None."""
    if stage.work_cycles > 0:
        if target <= 0:
            return None
        q = max(1, math.ceil(stage.work_cycles / (chip_tiles * target) - _EPS))
        while _compute_cycles(stage, q, chip_tiles) > target:
            q += 1
        if q > limits.max_pcus:
            return None
    else:
        q = 1
    r = limits.min_pmus
    if r > limits.max_pmus:
        return None
    if limits.sram_at_min > target:
        lo, hi = max(r, 1), limits.max_pmus
        if _sram_cycles(socket, stage, hi, chip_tiles) > target:
            return None
        while lo < hi:
            mid = (lo + hi) // 2
            if _sram_cycles(socket, stage, mid, chip_tiles) <= target:
                hi = mid
            else:
                lo = mid + 1
        r = lo
    return q, r


def _fits(socket: SocketSpec, stages: list[StageWork], limits: list[_Limits | None], chip_tiles: int,
          target: int, budget: UnitBudget) -> list[tuple[int, int]] | None:
    units = []
    pcus = pmus = 0
    tile_pcus, tile_pmus = budget.tile_pcus(socket.tile.pcus), budget.tile_pmus(socket.tile.pmus)
    for stage, lim in zip(stages, limits, strict=True):
        if lim is None:
            if stage.fixed_cycles > target:
                return None
            units.append((0, 0))
            continue
        got = _stage_units(socket, stage, lim, chip_tiles, target)
        if got is None:
            return None
        pcus += got[0]
        pmus += got[1]
        if pcus > tile_pcus or pmus > tile_pmus:
            return None
        units.append(got)
    return units


def allocate(socket: SocketSpec, stages: list[StageWork], chip_tiles: int,
             budget: UnitBudget = NO_LIMITS) -> Allocation | None:
    """The balanced allocation of ``stages`` on ``chip_tiles`` tiles, or None if they do not fit.

    Parameters
    ----------
    socket : SocketSpec
    stages : list of StageWork
        Memory and compute stages of one section (see :func:`~sn40l_sim.mapper.stages.section_stages`).
    chip_tiles : int
        Tiles in use; every compute stage gets the same units on each.
    budget : UnitBudget
        Limits on the PCUs and PMUs per tile of the kernel and of named stages.

    Returns
    -------
    Allocation or None
        None when even one PCU per stage and the PMUs holding the buffers exceed a tile.
    """
    limits = [None if s.is_memory else _limits(socket, s, chip_tiles, budget) for s in stages]
    hi = 0
    for s, lim in zip(stages, limits, strict=True):
        if lim is None:
            hi = max(hi, s.fixed_cycles)
        else:
            hi = max(hi, _compute_cycles(s, 1, chip_tiles), lim.sram_at_min)
    if _fits(socket, stages, limits, chip_tiles, hi, budget) is None:
        return None
    lo = max([s.fixed_cycles for s in stages if s.is_memory]
             + [_compute_cycles(s, lim.max_pcus, chip_tiles) for s, lim in zip(stages, limits, strict=True) if lim] + [0])
    # every PCU of the tiles busy is a lower bound too
    work = sum(s.work_cycles for s in stages if not s.is_memory)
    lo = min(hi, max(lo, math.floor(work / (chip_tiles * budget.tile_pcus(socket.tile.pcus)))))
    # the answer is usually within a few % of the bounds: gallop up from them, then bisect
    step = max(1, lo // 64)
    while lo < hi and _fits(socket, stages, limits, chip_tiles, min(hi, lo + step), budget) is None:
        lo = min(hi, lo + step + 1)
        step *= 2
    hi = min(hi, lo + step)
    while lo < hi:
        mid = (lo + hi) // 2
        if _fits(socket, stages, limits, chip_tiles, mid, budget) is not None:
            hi = mid
        else:
            lo = mid + 1
    units = _fits(socket, stages, limits, chip_tiles, lo, budget)
    assert units is not None
    cycles, bounds = [], []
    for stage, (q, r) in zip(stages, units, strict=True):
        if stage.is_memory:
            cycles.append(stage.fixed_cycles)
            bounds.append(stage.resource)
            continue
        c = _compute_cycles(stage, q, chip_tiles)
        m = _sram_cycles(socket, stage, r, chip_tiles)
        cycles.append(max(c, m))
        bounds.append("sram" if m > c else stage.resource)
    return Allocation(chip_tiles=chip_tiles, pcus=tuple(u[0] for u in units),
                      pmus=tuple(u[1] for u in units), cycles=tuple(cycles), bounds=tuple(bounds))
