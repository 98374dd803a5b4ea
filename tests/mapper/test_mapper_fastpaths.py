"""The mapper's fast paths give what the plain computation gives: memoised operator tilings equal
fresh ones whatever the memo holds, and a mapping through every memo equals a cold one."""
from __future__ import annotations

from conftest import deepseek_graph, distinct_kernels

import sn40l_sim.mapper.stages as stages_mod
from sn40l_sim.mapper import disk_cache, map_kernel
from sn40l_sim.mapper.budget import NO_LIMITS, UnitBudget
from sn40l_sim.mapper.graph import clear_memo
from sn40l_sim.mapper.kernel import UNPLANNED_CALIBRATED, socket_key
from sn40l_sim.mapper.stages import TierSplit, section_stages

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


def test_a_kernel_mapped_through_the_tiling_memo_equals_one_mapped_without(node, monkeypatch):
    import sn40l_sim.mapper.kernel as kernel_mod
    from sn40l_sim.mapper.tiling import tile_operator

    socket, tiers = node.socket, TierSplit.all_in("hbm")
    with disk_cache.cache_in(None):
        clear_memo()
        with monkeypatch.context() as patch:    # every operator tiled afresh
            patch.setattr(stages_mod, "_tiling", lambda s, op, n, eff, budget, key: tile_operator(s, op, n, eff, budget))
            plain = [map_kernel(socket, k.signature(), tiers) for k in KERNELS]
        clear_memo()
        memoised = [map_kernel(socket, k.signature(), tiers) for k in KERNELS]
        # the tilings stay memoised; the section plans are planned again on top of them
        kernel_mod._section_memo.clear()
        assert stages_mod._tiling_memo
        warm = [map_kernel(socket, k.signature(), tiers) for k in KERNELS]
        clear_memo()
    assert memoised == plain
    assert warm == plain
