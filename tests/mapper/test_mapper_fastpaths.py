"""The mapper's fast paths give what the plain computation gives: memoised operator tilings equal
fresh ones whatever the memo holds, and a mapping through every memo equals a cold one."""
from __future__ import annotations

import random
from dataclasses import replace

from conftest import deepseek_graph, distinct_kernels

import sn40l_sim.mapper.stages as stages_mod
from sn40l_sim.mapper import disk_cache, map_kernel, planning, stage_limits
from sn40l_sim.mapper.attention import with_combines
from sn40l_sim.mapper.budget import NO_LIMITS, UnitBudget
from sn40l_sim.mapper.graph import clear_memo
from sn40l_sim.mapper.keys import UNPLANNED_CALIBRATED, socket_key
from sn40l_sim.mapper.stages import section_stages
from sn40l_sim.mapper.tier_split import TierSplit

KERNELS = (distinct_kernels(deepseek_graph("decode", kv_len=32768, batch=8))
           + distinct_kernels(deepseek_graph("prefill")))
BUDGETS = (NO_LIMITS, UnitBudget(dataflows=("weight_stationary",)), UnitBudget(dataflows=("output_stationary",)),
           UnitBudget(gemm_cuts=("count", "n")))


def test_memoised_tilings_give_the_stages_fresh_ones_give(socket):
    key = socket_key(socket, UNPLANNED_CALIBRATED)
    tiers = TierSplit.all_in("hbm")
    stages_mod.clear_tiling_memo()
    for kernel in KERNELS:
        for n_tiles in (1, 16, 4096):
            for budget in BUDGETS:      # the memo already holds the other budgets' tilings
                for chip_tiles in (1, 4):
                    fresh = section_stages(socket, kernel.operators, n_tiles, tiers, chip_tiles, 0, 64, budget)
                    memo = section_stages(socket, kernel.operators, n_tiles, tiers, chip_tiles, 0, 64, budget, key)
                    assert memo == fresh
    assert stages_mod._tiling_memo
    assert stages_mod._memory_memo          # the memory stages memoised too, equal to fresh ones


def test_section_stages_memoised_under_the_dataflows_and_cuts_equal_those_of_the_whole_budget(socket):
    # a section's stages read of the budget only its GEMM dataflows and cuts, so budgets that
    # differ in units, tiles or stage limits share one memo entry; each equals the stages built
    # afresh under the whole budget
    key = socket_key(socket, UNPLANNED_CALIBRATED)
    tiers = TierSplit.all_in("hbm")
    units = (NO_LIMITS, UnitBudget(pcus_per_tile=37, pmus_per_tile=101), UnitBudget(chip_tiles=1, pcus_per_tile=200),
             UnitBudget(n_tiles=16, stage_pcus=(("scores", 2),), stage_pmus=(("scores", 3),)))
    planning.clear_section_memo()
    for kernel in KERNELS[:6]:
        for n_tiles, chip_tiles in ((1, 1), (16, 4)):
            ops = with_combines(socket, kernel.operators, chip_tiles)
            for reads in BUDGETS:
                shared = None
                for limits in units:
                    budget = replace(limits, dataflows=reads.dataflows, gemm_cuts=reads.gemm_cuts)
                    got = planning.section_work(socket, kernel.operators, n_tiles, tiers, chip_tiles, 0, 64, budget, key)
                    assert got == section_stages(socket, ops, n_tiles, tiers, chip_tiles, 0, 64, budget)
                    assert shared is None or got is shared
                    shared = got
    planning.clear_section_memo()


def test_a_kernel_mapped_through_the_tiling_memo_equals_one_mapped_without(node, monkeypatch):
    from sn40l_sim.mapper.tiling import tile_operator

    socket, tiers = node.socket, TierSplit.all_in("hbm")
    with disk_cache.cache_in(None):
        clear_memo()
        with monkeypatch.context() as patch:    # every operator tiled afresh
            patch.setattr(stages_mod, "_tiling",
                          lambda s, op, n, eff, budget, key: tile_operator(s, op, n, eff, budget))
            plain = [map_kernel(socket, k.signature(), tiers) for k in KERNELS]
        clear_memo()
        memoised = [map_kernel(socket, k.signature(), tiers) for k in KERNELS]
        # the tilings stay memoised; the section plans are planned again on top of them
        for memo in (planning._section_memo, planning._stages_memo, planning._floor_memo, planning._alloc_memo):
            memo.clear()
        assert stages_mod._tiling_memo
        warm = [map_kernel(socket, k.signature(), tiers) for k in KERNELS]
        clear_memo()
    assert memoised == plain
    assert warm == plain


def test_stage_answers_reused_over_their_spans_allocate_as_computing_every_answer(node, monkeypatch):
    # a stage's units found at one target are given again for targets in the span they hold for,
    # and its fewest PMUs are looked for next to an estimate; computing every answer afresh, the
    # PMUs by plain bisection, gives the same allocation on every section of real decode (with
    # and without drafts) and prefill kernels, on one tile and on four
    import sn40l_sim.mapper.kernel as kernel_mod
    from sn40l_sim.mapper import allocate, map_graph

    calls = []
    real = allocate.allocate
    monkeypatch.setattr(planning, "allocate", lambda *a: calls.append(a) or real(*a))
    monkeypatch.setattr(kernel_mod, "PRUNE_TILINGS", False)      # every tiling allocated
    with disk_cache.cache_in(None):
        clear_memo()
        for graph in (deepseek_graph("decode", kv_len=32768, batch=8), deepseek_graph("decode", kv_len=131072),
                      deepseek_graph("decode", kv_len=4096, batch=2, drafts=2), deepseek_graph("prefill")):
            map_graph(node, graph)
        clear_memo()
    # on one tile and on four, and on two and three where a decode step's longest repeated kernel is
    # tried on fewer tiles than all (mapper/confined.py)
    assert len(calls) > 500 and {a[2] for a in calls} == {1, 2, 3, 4}
    computed = []
    real_at = allocate._stage_units_at
    stage_limits.clear_limits_memo()       # each pass from no answers kept (clear_memo forgets them too)
    with monkeypatch.context() as patch:
        patch.setattr(allocate, "_stage_units_at", lambda *a: computed.append(a[-1]) or real_at(*a))
        reused = [real(*a) for a in calls]
    stage_limits.clear_limits_memo()
    fresh_answers = []

    def fresh(rates, stage, limits, chip_tiles, target):
        fresh_answers.append(target)
        return real_at(rates, stage, limits, chip_tiles, target)[0]

    def bisect_pmus(rates, stage, chip_tiles, division, target, lo, hi):
        # the plain bisection, without the estimate fewest_pmus starts from
        while lo < hi:
            mid = (lo + hi) // 2
            if allocate.sram_cycles(rates, stage, mid, chip_tiles, division) <= target:
                hi = mid
            else:
                lo = mid + 1
        return lo

    monkeypatch.setattr(allocate, "_stage_units", fresh)
    monkeypatch.setattr(allocate, "fewest_pmus", bisect_pmus)
    assert [real(*a) for a in calls] == reused
    stage_limits.clear_limits_memo()
    # many answers were given again (the allocator asks for the bound first, then gallops and
    # bisects: about 7 answers computed in 10 asked, the answers kept across allocations)
    assert len(computed) < 0.75 * len(fresh_answers)


def test_tiled_coordinates_are_the_cells_on_every_tile(socket):
    from sn40l_sim.mapper.layout import pcu_cells, pmu_cells, tiled_coords

    rng = random.Random(5)
    for order in (pcu_cells(socket), pmu_cells(socket)):
        runs = [tuple(order[a:a + n]) for a, n in ((0, 1), (0, len(order)), (len(order) - 3, 3))]
        runs += [tuple(order[a:a + rng.randint(1, 40)]) for a in rng.sample(range(len(order)), 30)]
        runs.append(tuple(order[5:9:2]))           # not a run of the snake: listed one by one
        for cells in runs:
            for tiles in (1, 2, 4):
                assert tiled_coords(socket, cells, tiles) == tuple((i, r, c) for i in range(tiles) for r, c in cells)
    assert tiled_coords(socket, (), 4) == ()


def _halved_with_dicts(dims, minimum, b_bytes, target, cuts):
    """The GEMM piece search as it was: dicts of the piece priced by gemm_buffer."""
    import math

    from sn40l_sim.mapper.halving import GEMM_DIMS as _GEMM_DIMS
    from sn40l_sim.mapper.halving import gemm_buffer as _gemm_buffer

    piece = dict(dims)
    while math.prod(math.ceil(dims[d] / piece[d]) for d in _GEMM_DIMS) < target:
        best = None
        for d in _GEMM_DIMS:
            half = math.ceil(piece[d] / 2)
            if d not in cuts or half < minimum[d] or half == piece[d]:
                continue
            trial = {**piece, d: half}
            if best is None or _gemm_buffer(trial, b_bytes) < best[0]:
                best = (_gemm_buffer(trial, b_bytes), trial)
        if best is None:
            break
        piece = best[1]
    return piece


def test_gemm_pieces_halved_on_integers_equal_the_dict_search():
    from sn40l_sim.mapper.halving import halved as _halved

    rng = random.Random(11)
    for _ in range(2000):
        dims = {"count": rng.choice((1, 2, 8, 61, 256)), "m": rng.choice((1, 3, 16, 100, 4096, 131072)),
                "k": rng.choice((64, 128, 576, 7168, 18432)), "n": rng.choice((32, 96, 512, 2048, 129280))}
        minimum = {"count": 1, "m": min(dims["m"], 32), "k": min(dims["k"], 64), "n": min(dims["n"], 32)}
        b_bytes = rng.choice((2.0, 1.0, 0.5, 1.0625))
        cuts = rng.choice((("count", "n", "m", "k"), ("count", "n"), ("m", "k"), ()))
        target = rng.choice((1, 2, 7, 64, 4096, 2**20))
        assert _halved(dims, minimum, b_bytes, target, cuts) == _halved_with_dicts(dims, minimum, b_bytes, target, cuts)


def test_objects_built_without_init_hold_every_field_and_equal_constructed_ones(socket):
    # stages, tilings and work models are made by frozen.built, which skips __init__ and so would not
    # notice a field left out (a new field with a default, say): each must hold every field and
    # equal the object its dataclass constructs from those fields
    from dataclasses import fields

    seen = 0
    for kernel in KERNELS:
        stages, _ = section_stages(socket, kernel.operators, 16, TierSplit.all_in("hbm"), 4, 0, 64, NO_LIMITS)
        parts = list(stages) + [s.tiling for s in stages if s.tiling] + [s.model for s in stages if s.model]
        for obj in parts:
            names = {f.name for f in fields(obj)}
            assert names == set(obj.__dict__) - {"_hash"}, type(obj).__name__
            assert type(obj)(**{name: getattr(obj, name) for name in names}) == obj
            seen += 1
    assert seen > 100


def test_stage_answers_kept_across_allocations_allocate_as_a_cold_allocation(socket, monkeypatch):
    # a stage's answers are kept by its work and limits across allocations: the same stages
    # allocated again compute no answer, and an allocation starting from another's answers (the
    # chain-paced balance, a price) equals the one computed with none kept
    from sn40l_sim.mapper import allocate
    from sn40l_sim.mapper.spending import Calls, pricing

    tiers = TierSplit.all_in("hbm")
    computed = []
    real_at = allocate._stage_units_at
    monkeypatch.setattr(allocate, "_stage_units_at", lambda *a: computed.append(a[-1]) or real_at(*a))
    checked = 0
    for kernel in KERNELS[:10]:
        for chip_tiles in (1, 4):
            stages, _ = section_stages(socket, kernel.operators, 16, tiers, chip_tiles)
            stage_limits.clear_limits_memo()
            first = allocate.allocate(socket, stages, chip_tiles)
            if first is None:
                continue
            asked = len(computed)
            assert allocate.allocate(socket, stages, chip_tiles) == first
            assert len(computed) == asked
            for kwargs in ({"chain_paced": True}, {"price": pricing(socket, chip_tiles, 16, Calls(1))}):
                warm = allocate.allocate(socket, stages, chip_tiles, **kwargs)
                stage_limits.clear_limits_memo()
                assert allocate.allocate(socket, stages, chip_tiles, **kwargs) == warm
            checked += 1
    assert checked >= 10
    stage_limits.clear_limits_memo()
