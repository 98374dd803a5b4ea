"""Fixtures of the mapper tests: the real SN40L hardware files and DeepSeek-R1 graphs.

The mapper's tests check its mechanism (allocation, doubling with N, tracking bytes over bandwidth,
spills), so the node's ``calibrated:`` block is pinned here to fixed test values instead of whatever
``calibrate`` last wrote: a refit must not move these invariants. The fitted values themselves are
exercised by ``validate`` and the regression goldens.
"""
from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest

import sn40l_sim.mapper.kernel as kernel_mod
from sn40l_sim.hardware.loader import load_hardware
from sn40l_sim.mapper import division
from sn40l_sim.mapper.budget import NO_LIMITS
from sn40l_sim.mapper.planning import clear_section_memo
from sn40l_sim.mapper.tier_split import TierSplit

ROOT = Path(__file__).resolve().parents[2]


#: fixed calibration for mechanism tests: configuration loads cheap, so the streaming part is what shows
PINNED_CALIBRATION = {"socket.calibrated.config_load_bytes_per_s": 1.6e12, "socket.memory.hbm.efficiency": 0.85,
                      "socket.memory.ddr.efficiency": 0.8, "socket.calibrated.p2p_efficiency": 0.8,
                      "socket.calibrated.transfer_setup_s": 1e-6, "socket.calibrated.systolic_efficiency": 0.9}


@cache
def node16():
    from sn40l_sim.hardware.loader import with_overrides

    return with_overrides(load_hardware(ROOT / "hw_configs" / "sn40l_node16.yaml"), PINNED_CALIBRATION)


@cache
def deepseek_graph(phase: str, kv_len: int = 131072, batch: int = 16, drafts: int = 0):
    """DeepSeek-R1 graphs as the SnapStream deployment runs them (decode DP16 attention, TP16; every
    MoE call streams all experts), decode verifying ``drafts`` MTP drafts per step (the deployment
    runs 2; plain decode by default, whose kernels are memory-bound)."""
    from sn40l_sim.ir import ParallelPlan, Shape
    from sn40l_sim.models.builder import build_graph
    from sn40l_sim.models.loader import load_model

    model = load_model(ROOT / "graphs" / "deepseek_r1.yaml")
    if phase == "decode":
        return build_graph(model, Shape("decode", batch, 131072, kv_len, drafts), ParallelPlan(16, 16),
                           expert_loading="all")
    return build_graph(model, Shape("prefill", 1, 131072), ParallelPlan(16, 1), expert_loading="all")


def distinct_kernels(graph):
    """One kernel per distinct signature, in graph order."""
    seen, out = set(), []
    for k in graph.kernels():
        if k.signature() not in seen:
            seen.add(k.signature())
            out.append(k)
    return out


@pytest.fixture(scope="session")
def node():
    return node16()


@pytest.fixture(scope="session")
def socket():
    return node16().socket


def searched_plans(socket, kernel, loop, monkeypatch, prune: bool, tiers=None, budget=NO_LIMITS,
                   every_tile_choice: bool = False):
    """``best_plan`` of ``kernel`` searched cold (memos cleared), with (``prune``) or without the
    floors that skip tilings, and every tiling it planned as ``(arguments, plan)``; with
    ``every_tile_choice`` and no pruning the tile choices' floors are 0 too, so each is searched
    (tests/mapper/test_mapper_pruning.py and its random twin compare the two searches)."""
    planned = []
    real = kernel_mod.plan_kernel

    def record(*args):
        plan = real(*args)
        planned.append((args, plan))
        return plan

    clear_section_memo()
    division.clear_caches()
    with monkeypatch.context() as patch:
        patch.setattr(kernel_mod, "plan_kernel", record)
        patch.setattr(kernel_mod, "PRUNE_TILINGS", prune)
        if every_tile_choice and not prune:
            patch.setattr(kernel_mod, "plan_floor", lambda *args, **kwargs: 0.0)
        plan = kernel_mod.best_plan(socket, kernel, tiers if tiers is not None else TierSplit.all_in("hbm"), budget,
                                    loop=loop)
    return plan, planned
