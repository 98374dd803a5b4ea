"""The SnapKV compression kernel on the socket: at SnapStream's observation window (the ring,
4096 queries for a 32K cache) it is attention-like work, compute-bound like the MHA kernel, so its
time relative to MHA follows the FLOPs. This is the hardware-independent check behind Table 4's
SnapKV share (docs/validation.md)."""
from __future__ import annotations

from pathlib import Path

from conftest import node16

from sn40l_sim.ir import ParallelPlan, Shape
from sn40l_sim.kvcache.factory import make_policy
from sn40l_sim.mapper.graph import map_graph
from sn40l_sim.models.builder import build_graph
from sn40l_sim.models.loader import load_model

ROOT = Path(__file__).resolve().parents[2]
L128K = 131072


def _one_layer(kind_of, placed):
    return next(pk for pk in placed.kernels if pk.kernel.kind == kind_of)


def _snapstream_prefill(window=None):
    params = {"budget": 32768} | ({"observation_window": window} if window else {})
    model = load_model(ROOT / "graphs" / "deepseek_r1.yaml")
    graph = build_graph(model, Shape("prefill", 1, L128K), ParallelPlan(16, 1),
                        make_policy("snapstream", params))
    return map_graph(node16(), graph)


def test_snapkv_at_the_ring_window_is_compute_bound_and_paced_like_mha():
    placed = _snapstream_prefill()
    snapkv, mha = _one_layer("snapkv", placed), _one_layer("mha", placed)
    assert snapkv.bounding_resource == mha.bounding_resource == "compute"
    per_flop = (snapkv.cycles / snapkv.kernel.flops) / (mha.cycles / mha.kernel.flops)
    assert 0.8 < per_flop < 1.25, per_flop
    # and it stays a few percent of MHA: the FLOP ratio is 0.036
    assert 0.025 < snapkv.cycles / mha.cycles < 0.05


def test_a_short_observation_window_is_not_compute_bound_and_much_cheaper():
    short = _one_layer("snapkv", _snapstream_prefill(window=32))
    ring = _one_layer("snapkv", _snapstream_prefill())
    assert short.bounding_resource != "compute"
    # 128x fewer queries: the key stream (the same bytes) bounds it instead
    assert short.cycles * 5 < ring.cycles
    assert short.tier_bytes["hbm"] < ring.tier_bytes["hbm"]
