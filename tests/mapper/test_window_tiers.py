"""A window's place in its kernel's stream (sn40l_sim/mapper/windows.py) reads each operator's bytes
at the bandwidth of the tier they live in: it read them at the hardware file's first tier's, so
weights the placement had put in DDR (an experiment's ``memory.order`` listing DDR first, or
weights spilled there) were timed at HBM's bandwidth, and the mapper and the engine placed the
window by bytes that were not where the placement put them."""
from __future__ import annotations

from pathlib import Path

import pytest

from sn40l_sim.engine import kernel_costs
from sn40l_sim.engine.collectives import CollectiveModel
from sn40l_sim.engine.run_graph import EngineOptions, run_graph
from sn40l_sim.hardware import figures
from sn40l_sim.hardware.loader import load_hardware
from sn40l_sim.ir import Collective, FusedKernel, Operator, ParallelPlan, Shape
from sn40l_sim.kvcache import make_policy
from sn40l_sim.mapper import graph as mapper_graph
from sn40l_sim.mapper.graph import map_graph
from sn40l_sim.mapper.placement import MemoryPlacement
from sn40l_sim.mapper.tier_split import TierSplit
from sn40l_sim.mapper.windows import window_fractions
from sn40l_sim.models.builder import build_graph
from sn40l_sim.models.loader import load_model

ROOT = Path(__file__).resolve().parents[2]
NODE8 = load_hardware(ROOT / "hw_configs" / "sn40l_node8.yaml")
SOCKET = NODE8.socket
GIB = 2**30

# ``a`` streams 32 MiB of weights; ``b`` computes 10 GFLOP on 1 MiB of weights
A = Operator("a", "gemm", flops=2 * 4096 * 4096, m=1, k=4096, n=4096, weight_bytes=2 * 4096 * 4096)
B = Operator("b", "gemm", flops=10**10, m=1, k=4096, n=128, weight_bytes=2**20)
AFTER_A = Collective("all_reduce", 8192, 8, True, after="a")
KERNEL = FusedKernel("k", "k", "decode", (A, B), (AFTER_A,))


def _by_hand(bandwidth: dict[str, float], weights: dict[str, float]) -> float:
    """Where ``a``'s part ends, its weights and ``b``'s streamed from the tiers at these shares."""
    def seconds(op: Operator) -> float:
        memory = max(op.weight_bytes * share / bandwidth[tier] for tier, share in weights.items())
        return max(op.flops / figures.peak_flops(SOCKET), memory)
    return seconds(A) / (seconds(A) + seconds(B))


def test_an_operators_bytes_are_timed_at_the_tier_they_live_in():
    bandwidth = {tier: figures.memory_bytes_per_s(SOCKET, tier) for tier in ("hbm", "ddr")}
    in_hbm = window_fractions(SOCKET, KERNEL, AFTER_A, TierSplit.all_in("hbm"))
    in_ddr = window_fractions(SOCKET, KERNEL, AFTER_A, TierSplit.all_in("ddr"))
    assert in_hbm == pytest.approx((0.0, _by_hand(bandwidth, {"hbm": 1.0})), rel=1e-12)
    assert in_ddr == pytest.approx((0.0, _by_hand(bandwidth, {"ddr": 1.0})), rel=1e-12)
    # at HBM's bandwidth ``b``'s FLOPs are about half the kernel; from DDR, ``a``'s weights are most of it
    assert 0.5 < in_hbm[1] < 0.6 and in_ddr[1] > 0.95
    # without a placement, the socket's first tier (HBM here), as before
    assert window_fractions(SOCKET, KERNEL, AFTER_A) == in_hbm
    # spilled weights stream from both tiers side by side: the slower one's share sets the time
    split = TierSplit((("hbm", 0.75), ("ddr", 0.25)), (("hbm", 1.0),), "hbm")
    assert window_fractions(SOCKET, KERNEL, AFTER_A, split) == \
        pytest.approx((0.0, _by_hand(bandwidth, {"hbm": 0.75, "ddr": 0.25})), rel=1e-12)


def test_the_mapper_and_the_engine_place_a_window_by_the_placements_tiers(monkeypatch):
    # Llama-3.1-8B's decoder (its all-reduces after o_proj and dense_down) with its weights in
    # DDR: both the mapper's windows and the engine's are placed by DDR's bandwidth
    model = load_model(ROOT / "graphs" / "llama3_1_8b.yaml")
    graph = build_graph(model, Shape("decode", 1, 0, 2048), ParallelPlan(8, 1), make_policy("full", {}))
    memory = MemoryPlacement({"hbm": {"kv": GIB, "activations": GIB}, "ddr": {"weights": 2 * GIB}},
                             {"hbm": 56 * GIB, "ddr": 1024 * GIB}, ("hbm", "ddr"))
    mapper_windows, engine_fractions = mapper_graph.overlap_windows, kernel_costs.window_fractions
    mapper_seen, engine_seen = [], []

    def mapper_spy(socket, kernel, cycles, staging=None, tiers=None):
        windows = mapper_windows(socket, kernel, cycles, staging, tiers)
        mapper_seen.extend((kernel.signature(), tiers, (w.start, w.end)) for w in windows)
        return windows

    def engine_spy(socket, kernel, collective, tiers=None):
        fractions = engine_fractions(socket, kernel, collective, tiers)
        if collective.after:
            engine_seen.append((kernel.signature(), collective, tiers, fractions))
        return fractions

    monkeypatch.setattr(mapper_graph, "overlap_windows", mapper_spy)
    monkeypatch.setattr(kernel_costs, "window_fractions", engine_spy)
    collectives = CollectiveModel.from_node(NODE8)
    placed = map_graph(NODE8, graph, memory, collective_cycles=lambda c: collectives.run(c).cycles)
    run_graph(NODE8, placed, EngineOptions())
    tiers = memory.tiers()
    assert tiers.weights == (("ddr", 1.0),)
    assert mapper_seen and engine_seen
    assert {t for _, t, _ in mapper_seen} == {tiers} == {t for _, _, t, _ in engine_seen}
    # the same windows on both sides, and not where the first tier's bandwidth would put them
    assert {(k, t, f) for k, _, t, f in engine_seen} <= set(mapper_seen)
    moved = [(f, window_fractions(SOCKET, k, c)) for k, c, _, f in engine_seen
             if f != window_fractions(SOCKET, k, c)]
    assert moved, engine_seen
