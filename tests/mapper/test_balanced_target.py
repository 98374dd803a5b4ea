"""A looped iteration's first section balances its compute stages for their own pace
(:func:`sn40l_sim.mapper.allocate.allocate`'s ``chain_paced``): the fewest units under the lowest
target they reach together on the tile. A target reached is not always reached by every higher
one, so a bisection finds a target reached and a walk over the targets where the stages' answers
change the lowest below it (:mod:`sn40l_sim.mapper.lowest_target`; docs/architecture.md, "Speed:
what is computed once, and what is kept")."""
from __future__ import annotations

import pytest
from conftest import deepseek_graph

from sn40l_sim.mapper import allocate, planning
from sn40l_sim.mapper.budget import NO_LIMITS, UnitBudget
from sn40l_sim.mapper.lowest_target import lowest_reached
from sn40l_sim.mapper.pmus import pmu_rates
from sn40l_sim.mapper.stage_limits import Answers, StageLimits
from sn40l_sim.mapper.tier_split import TierSplit

WEIGHT_STATIONARY = UnitBudget(dataflows=("weight_stationary",))


def _stages(socket, kernel_name: str, n_tiles: int, chip_tiles: int, budget: UnitBudget):
    kernel = next(k for k in deepseek_graph("decode", kv_len=32768, batch=8).kernels() if k.name == kernel_name)
    stages, _ = planning.section_work(socket, kernel.operators, n_tiles, TierSplit.all_in("hbm"), chip_tiles, 0, 0,
                                      budget)
    return stages


def _fresh_limits(socket, stages, chip_tiles: int, budget: UnitBudget):
    # the allocator shares one StageLimits (with the answers it found) per stage work and limits:
    # copies of its limits alone, so that a scan never reads an answer the search computed
    shared = [None if s.is_memory else allocate._limits(socket, s, chip_tiles, budget) for s in stages]
    return [None if lim is None else StageLimits(lim.min_pmus, lim.max_pcus, lim.max_pmus) for lim in shared]


def _reached(socket, stages, chip_tiles: int, budget: UnitBudget, target: int):
    # every stage's answer computed afresh: no span, no answer inferred from other targets
    return allocate._fits(socket, pmu_rates(socket), stages, _fresh_limits(socket, stages, chip_tiles, budget),
                          chip_tiles, target, budget, compute_only=True)


def test_a_chain_paced_allocation_balances_at_the_lowest_target_its_compute_stages_reach(node):
    # DeepSeek-R1's decode MLA (batch 8, 32K cache) with every GEMM weight-stationary, 128 data
    # tiles on four tiles (its memory stage at 448 cycles a data tile): at 345 cycles the PV GEMM
    # takes 103 PCUs instead of 128 at 344, and its division on fewer PCUs 118 PMUs instead of 82,
    # which with the other stages' is 267 of the tile's 260. A bisection settles at 354; the
    # compute stages reach 342
    socket = node.socket
    stages = _stages(socket, "L00.mla", 128, 4, WEIGHT_STATIONARY)
    lowest = next(t for t in range(1, 1000) if _reached(socket, stages, 4, WEIGHT_STATIONARY, t) is not None)
    assert lowest == 342 and _reached(socket, stages, 4, WEIGHT_STATIONARY, 345) is None
    alloc = allocate.allocate(socket, stages, 4, WEIGHT_STATIONARY, None, True)
    slowest = max(c for c, s in zip(alloc.cycles, stages, strict=True) if not s.is_memory)
    assert slowest <= lowest


def test_the_walk_from_any_target_the_compute_stages_reach_finds_the_lowest(node):
    # the search may stop at any target reached (the bisection from 1 stopped at 354, the gallop
    # from the stages' floor stops at 342): from each, the walk down gives 342
    socket = node.socket
    stages = _stages(socket, "L00.mla", 128, 4, WEIGHT_STATIONARY)
    reached = [t for t in range(342, 448) if _reached(socket, stages, 4, WEIGHT_STATIONARY, t) is not None]
    assert 354 in reached and 345 not in reached
    for start in reached:
        limits = _fresh_limits(socket, stages, 4, WEIGHT_STATIONARY)
        walked = lowest_reached(lambda t, limits=limits: allocate._probe(socket, pmu_rates(socket), stages, limits,
                                                                         4, WEIGHT_STATIONARY, t), start + 1)
        assert walked == 342, start


@pytest.mark.parametrize(("kernel", "n_tiles", "chip_tiles", "budget"), [
    pytest.param("L00.mla", 128, 4, WEIGHT_STATIONARY, id="mla-128-4-ws"),   # a bisection from 1 gives 354
    pytest.param("L00.mla", 128, 4, NO_LIMITS, id="mla-128-4"),
    pytest.param("L00.mla", 1024, 4, WEIGHT_STATIONARY, id="mla-1024-4-ws"),  # none below the stream's reached
    pytest.param("L00.mla", 1024, 4, NO_LIMITS, id="mla-1024-4"),
    pytest.param("L00.mla", 128, 1, NO_LIMITS, id="mla-128-1"),
    pytest.param("L00.ffn", 16, 1, NO_LIMITS, id="ffn-16-1"),
    pytest.param("L00.ffn", 128, 4, WEIGHT_STATIONARY, id="ffn-128-4-ws"),
    pytest.param("lm_head", 128, 4, NO_LIMITS, id="lm_head-128-4"),
])
def test_the_chain_paced_search_gives_the_units_of_the_lowest_target_every_target_asked_gives(
        node, kernel, n_tiles, chip_tiles, budget):
    # the search (a gallop up from the compute stages' floor and a bisection, then the walk below
    # the target they find) against asking every target from 1
    # up to the stream-paced balance, each afresh
    socket = node.socket
    stages = _stages(socket, kernel, n_tiles, chip_tiles, budget)
    paced = allocate.allocate(socket, stages, chip_tiles, budget).cycles_per_tile
    scanned = next((got for t in range(1, paced)
                    if (got := _reached(socket, stages, chip_tiles, budget, t)) is not None), None)
    limits = _fresh_limits(socket, stages, chip_tiles, budget)
    floor = allocate._compute_floor(socket, stages, limits, chip_tiles, budget)
    searched = allocate._compute_balanced(socket, pmu_rates(socket), stages, limits, chip_tiles, budget,
                                          [Answers() for _ in stages], floor, paced)
    assert searched == scanned
    assert _reached(socket, stages, chip_tiles, budget, floor - 1) is None      # the search starts there
