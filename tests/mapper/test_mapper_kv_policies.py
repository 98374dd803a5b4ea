"""The extra kernels of the KV policies on the socket: each one's simulated time against its FLOP
and byte counts (the resource that bounds it, within a few percent of that resource's lower bound),
with the calibration pinned (no call overhead) so the streaming shows. DeepSeek-R1, TP16 with
attention DP16 in decode."""
from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest
from conftest import node16

from sn40l_sim.hardware import figures
from sn40l_sim.ir import ParallelPlan, Shape
from sn40l_sim.kvcache import make_policy
from sn40l_sim.mapper.graph import map_graph
from sn40l_sim.mapper.memory import place_memory
from sn40l_sim.models.builder import build_graph
from sn40l_sim.models.loader import load_model, with_overrides

ROOT = Path(__file__).resolve().parents[2]
DECODE = ParallelPlan(16, 16)
GiB = 2**30


@cache
def r1():
    return load_model(ROOT / "graphs" / "deepseek_r1.yaml")


def bytes_per_cycle(tier):
    socket = node16().socket
    return figures.bytes_per_cycle(figures.memory_bytes_per_s(socket, tier), socket) * socket.memory[tier].efficiency


def flops_per_cycle():
    socket = node16().socket
    return figures.peak_flops(socket) / socket.clock_hz


def placed_kind(model, policy, shape, plan, kind, memory=None):
    placed = map_graph(node16(), build_graph(model, shape, plan, policy), memory)
    return [pk for pk in placed.kernels if pk.kernel.kind == kind][-1]


def _traffic(kernel):
    return sum(op.kv_read_bytes + op.kv_write_bytes + op.act_in_bytes + op.act_out_bytes for op in kernel.operators)


def test_h2o_decode_rescoring_costs_what_attention_scores_cost_and_is_bound_by_hbm():
    shape = Shape("decode", 64, 0, 32768, context_len=131200)
    h2o = make_policy("h2o", {"budget": 32768})
    evict = placed_kind(r1(), h2o, shape, DECODE, "h2o_evict")
    mla = placed_kind(r1(), h2o, shape, DECODE, "mla")
    qk = next(op for op in mla.kernel.operators if op.name == "absorbed_qk")
    scores = next(op for op in evict.kernel.operators if op.name == "h2o_scores")
    # the same product over the same cached keys as the attention's scores
    assert (scores.flops, scores.kv_read_bytes, scores.m, scores.n, scores.k) == \
        (qk.flops, qk.kv_read_bytes, qk.m, qk.n, qk.k)
    assert evict.kernel.flops == qk.flops
    assert evict.tier_bytes["hbm"] == _traffic(evict.kernel)
    assert evict.bounding_resource == "hbm"
    floor = evict.tier_bytes["hbm"] / bytes_per_cycle("hbm")
    assert floor <= evict.cycles <= 1.05 * floor
    assert evict.kernel.flops / flops_per_cycle() < floor


def test_arkvale_recall_streams_its_pages_over_ddr_and_is_bound_by_it():
    shape = Shape("decode", 64, 0, 32768, context_len=131200)
    ark = make_policy("arkvale", {"budget": 32768})
    store = place_memory(node16(), r1(), DECODE, 10 * GiB, 2**20, kv_offload={"ddr": 100 * GiB})
    recall = placed_kind(r1(), ark, shape, DECODE, "recall", store)
    offloaded = sum(op.kv_offload_read_bytes + op.kv_offload_write_bytes for op in recall.kernel.operators)
    # 4 sequences x 112 recalled pages (1/8 of the 896 in a 32K buffer with a 4K ring) x 32 tokens
    # x 576 BF16 elements, plus the new rows
    assert offloaded == 4 * 112 * 32 * 576 * 2 + 4 * 576 * 2
    assert recall.tier_bytes == {"hbm": _traffic(recall.kernel), "ddr": offloaded}
    assert recall.bounding_resource == "ddr"
    floor = offloaded / bytes_per_cycle("ddr")
    assert floor <= recall.cycles <= 1.05 * floor
    # with the store left in HBM (no placement) the same bytes stream at HBM's bandwidth
    in_hbm = placed_kind(r1(), ark, shape, DECODE, "recall")
    assert in_hbm.tier_bytes["ddr"] == 0 and in_hbm.cycles * 2 < recall.cycles


def test_arkvale_digest_scoring_grows_with_the_context_not_the_buffer():
    ark = make_policy("arkvale", {"budget": 8192})
    short, long_ = (placed_kind(r1(), ark, Shape("decode", 64, 0, 8192, context_len=ctx), DECODE, "recall")
                    for ctx in (32768, 131072))
    bound = {op.name: op for op in long_.kernel.operators}["digest_bound"]
    assert bound.elements == 2 * 4 * 128 * (131072 // 32) * 576
    assert bound.kv_read_bytes == 4 * (131072 // 32) * 2 * 576 * 2
    assert long_.cycles > 3 * short.cycles


def test_h2o_prefill_recomputes_the_causal_scores_at_mha_pace():
    h2o = make_policy("h2o", {"budget": 32768})
    shape, plan = Shape("prefill", 1, 131072), ParallelPlan(16)
    prefill = placed_kind(r1(), h2o, shape, plan, "h2o_prefill")
    mha = placed_kind(r1(), h2o, shape, plan, "mha")
    mha_qk = sum(op.flops for op in mha.kernel.operators if op.name.startswith("mha_qk"))
    assert prefill.kernel.flops == mha_qk          # exactly MHA's QK^T over the causal tiles
    assert prefill.bounding_resource == mha.bounding_resource == "compute"
    per_flop = (prefill.cycles / prefill.kernel.flops) / (mha.cycles / mha.kernel.flops)
    assert 0.8 < per_flop < 1.25, per_flop


def test_arkvale_digest_build_reads_the_prompt_keys_once():
    ark = make_policy("arkvale", {"budget": 32768})
    build = placed_kind(r1(), ark, Shape("prefill", 1, 131072), ParallelPlan(16), "digest_build")
    reduce_ = next(op for op in build.kernel.operators if op.name == "digest_reduce")
    assert reduce_.kv_read_bytes == (131072 // 16) * 576 * 2           # this socket's 1/16 of the rows
    assert build.bounding_resource == "hbm"
    floor = build.tier_bytes["hbm"] / bytes_per_cycle("hbm")
    # the stream itself, beside the call's configuration load and barrier
    assert floor <= build.cycles - build.overhead_cycles <= 1.1 * floor


@pytest.mark.parametrize("fmt, bits", [({"kv_dtype": "fp8"}, 8), ({"kv_dtype": "int4", "kv_quant": {"group": 32}}, 5)])
def test_a_quantised_cache_reads_fewer_bytes_and_pays_its_dequantisation(fmt, bits):
    shape = Shape("decode", 64, 0, 131072)
    full = make_policy("full", {})
    base = placed_kind(r1(), full, shape, DECODE, "mla")
    quant = placed_kind(with_overrides(r1(), fmt), full, shape, DECODE, "mla")
    ops = {op.name: op for op in quant.kernel.operators}
    qk = ops["absorbed_qk"]
    assert qk.kv_read_bytes * 16 == {op.name: op for op in base.kernel.operators}["absorbed_qk"].kv_read_bytes * bits
    assert ops["absorbed_qk.kv_dequant"].elements == 4 * 131072 * 576       # every element read, widened
    assert ops["cache_write.kv_quantise"].elements == 4 * 576               # the new rows, narrowed
    assert quant.kernel.flops == base.kernel.flops                           # attention FLOPs unchanged
    assert quant.cycles < base.cycles                                        # the step is bound by the bytes
