"""The mapper's shortcuts on a cold mapping give the numbers of the long way: the compute stages'
floor read from the limits the allocation worked out (:func:`sn40l_sim.mapper.allocate._compute_floor`),
a stage's gain per idle PCU when the PCUs save no cycles (:func:`sn40l_sim.mapper.spending._gain`)
a section's part floor memoised (:func:`sn40l_sim.mapper.planning.section_part_floor`) and a stage's
limits found by the stage object (:func:`sn40l_sim.mapper.stage_limits.stage_limits`)."""
from __future__ import annotations

import pytest
from conftest import deepseek_graph

from sn40l_sim.hardware.units._cycles import ceil_div
from sn40l_sim.mapper import allocate, planning
from sn40l_sim.mapper.budget import NO_LIMITS, UnitBudget
from sn40l_sim.mapper.division import fewest_pcus, least_work
from sn40l_sim.mapper.keys import UNPLANNED_CALIBRATED, socket_key
from sn40l_sim.mapper.spending import _gain, division_on
from sn40l_sim.mapper.stage_limits import StageLimits
from sn40l_sim.mapper.tier_split import TierSplit


def _stages(socket, kernel_name: str, n_tiles: int, chip_tiles: int, budget: UnitBudget = NO_LIMITS):
    kernel = next(k for k in deepseek_graph("decode", kv_len=32768, batch=8).kernels() if k.name == kernel_name)
    stages, _ = planning.section_work(socket, kernel.operators, n_tiles, TierSplit.all_in("hbm"), chip_tiles, 0, 0,
                                      budget)
    return stages


@pytest.mark.parametrize(("kernel", "n_tiles", "chip_tiles"), [("L00.mla", 128, 4), ("L00.ffn", 16, 1),
                                                              ("lm_head", 128, 4)])
def test_the_compute_floor_from_the_allocations_limits_is_the_floor_worked_out_afresh(node, kernel, n_tiles,
                                                                                      chip_tiles):
    socket = node.socket
    stages = _stages(socket, kernel, n_tiles, chip_tiles)
    assert allocate.allocate(socket, stages, chip_tiles) is not None     # sets each stage's bounds
    kept = [None if s.is_memory else allocate._limits(socket, s, chip_tiles, NO_LIMITS) for s in stages]
    assert all(lim is None or lim.least >= 0 for lim in kept)
    fresh = [None if lim is None else StageLimits(lim.min_pmus, lim.max_pcus, lim.max_pmus) for lim in kept]
    floor = allocate._compute_floor(socket, stages, kept, chip_tiles, NO_LIMITS)
    assert floor == allocate._compute_floor(socket, stages, fresh, chip_tiles, NO_LIMITS) > 0
    assert floor >= max(least_work(s.model, s.pieces, lim.max_pcus * chip_tiles).cycles
                        for s, lim in zip(stages, kept, strict=True) if lim and lim.max_pcus)


def _gain_in_full(stage, unit, lim, chip_tiles: int, spare: int) -> float:
    # the gain as written before the shortcut: the PCUs the cycles on all it may take need, always
    q, _, division = unit
    top = min(lim.max_pcus, q + spare)
    if top <= q or division is None or stage.model is None:
        return 0.0
    faster = division_on(stage, top, chip_tiles, lim.max_pcus)
    got = fewest_pcus(stage.model, stage.pieces, faster.cycles, top * chip_tiles) or faster
    extra = max(1, min(top, ceil_div(got.pcus, chip_tiles)) - q)
    return max(0.0, division.cycles - faster.cycles) / extra


def test_a_stages_gain_per_idle_pcu_is_the_gain_worked_out_in_full(node):
    socket = node.socket
    stages = _stages(socket, "L00.mla", 128, 4)
    alloc = allocate.allocate(socket, stages, 4)
    asked = saved_none = 0
    for stage, q, r, division in zip(stages, alloc.pcus, alloc.pmus, alloc.divisions, strict=True):
        if division is None:
            continue
        lim = allocate._limits(socket, stage, 4, NO_LIMITS)
        # from the stage's fewest PCUs up: some spares bring it below its cycles, some do not
        for pcus in sorted({1, max(1, q // 2), q}):
            unit = (pcus, r, division_on(stage, pcus, 4, lim.max_pcus))
            for spare in (0, 1, 2, 7, 64, 260):
                got = _gain(stage, unit, lim, 4, spare)
                assert got == _gain_in_full(stage, unit, lim, 4, spare)
                asked += 1
                saved_none += got == 0.0 and min(lim.max_pcus, pcus + spare) > pcus
    assert asked > 20 and saved_none > 0


def test_a_sections_part_floor_asked_again_is_the_floor_worked_out_afresh(node):
    socket = node.socket
    kernel = next(k for k in deepseek_graph("decode", kv_len=32768, batch=8).kernels() if k.name == "L00.mla")
    planned = socket_key(socket, UNPLANNED_CALIBRATED)
    tiers = TierSplit.all_in("hbm")
    narrow = UnitBudget(pcus_per_tile=64)
    for budget in (NO_LIMITS, narrow):
        first = planning.section_part_floor(socket, kernel.operators, 128, tiers, 4, 0, 0, budget, planned)
        assert planning.section_part_floor(socket, kernel.operators, 128, tiers, 4, 0, 0, budget, planned) is first
        # unmemoised (no socket key): the same floor
        assert first == planning.section_part_floor(socket, kernel.operators, 128, tiers, 4, 0, 0, budget)
    # the whole section's floor, kept in the same memo, is another (higher) one
    whole = planning.section_floors(socket, kernel.operators, 128, tiers, 4, 0, 0, NO_LIMITS, planned)
    part = planning.section_part_floor(socket, kernel.operators, 128, tiers, 4, 0, 0, NO_LIMITS, planned)
    assert len(whole.stages) > len(part.stages)
    assert planning.section_part_floor(socket, kernel.operators, 128, tiers, 4, 0, 0, narrow, planned) != part


@pytest.mark.parametrize("budget", [NO_LIMITS, UnitBudget(pcus_per_tile=3), UnitBudget(pmus_per_tile=2),
                                    UnitBudget(stage_pcus=(("q_b", 1),), stage_pmus=(("q_b", 1),))])
def test_a_stages_limits_found_by_its_identity_are_those_worked_out_afresh(node, budget):
    # the limits memoised by the stage object (stage_limits) against the limits of its work and caps
    # worked out again: the same numbers whichever budget was asked for first
    from sn40l_sim.mapper.stage_limits import max_pcus, min_pmus, stage_limits

    socket = node.socket
    for chip_tiles in (1, 4):
        for stage in _stages(socket, "L00.mla", 64, chip_tiles):
            if stage.is_memory:
                continue
            for asked in (NO_LIMITS, budget):
                got = stage_limits(socket, stage, chip_tiles, asked)
                assert (got.min_pmus, got.max_pcus, got.max_pmus) == (
                    min_pmus(socket, stage, chip_tiles), max_pcus(socket, stage, chip_tiles, asked),
                    asked.pmus_for(stage.name, socket.tile.pmus))
