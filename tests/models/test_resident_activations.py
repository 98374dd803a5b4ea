"""Resident activation memory of a prefill: what is in memory at once, not what is streamed.

Causal FlashAttention reads each K/V tile once per query tile, so its reads grow as the square of
the prompt; K and V are in memory once. The activation bytes that size memory
(:func:`sn40l_sim.serving.step_costs.activation_bytes`) must grow linearly with the prompt, be at
least a layer's Q, K, V and attention output, and the re-reads must still be traffic.
"""
from __future__ import annotations

import pytest

from sn40l_sim.ir import ACT_BYTES, ParallelPlan, Shape
from sn40l_sim.kvcache import make_policy
from sn40l_sim.models.builder import build_graph
from sn40l_sim.models.flash import causal_tile_pairs
from sn40l_sim.models.template import template_for
from sn40l_sim.serving.step_costs import activation_bytes

TP16 = ParallelPlan(tp=16)
K128, M1 = 131072, 1048576


def _prefill(model, length, policy=None, plan=TP16):
    return build_graph(model, Shape("prefill", 1, length), plan, policy)


def _kernel(graph, kind):
    return next(k for k in graph.kernels() if k.kind == kind)


@pytest.fixture(scope="module")
def r1_snapstream(r1):
    policy = make_policy("snapstream", {"budget": 32768})
    return {n: _prefill(r1, n, policy) for n in (K128, M1)}


def test_resident_bytes_grow_linearly_with_the_prompt(r1_snapstream):
    small, large = (activation_bytes(r1_snapstream[n]) for n in (K128, M1))
    assert large <= 8 * small * 1.001          # 8x the prompt, 8x the memory (not 64x)
    assert large >= 8 * small * 0.999
    assert large < 64 * 2**30                  # was 328 GiB per socket counting the re-reads


def test_mha_holds_its_q_k_v_and_output_once(r1, r1_snapstream):
    a = r1.attention
    heads = -(-a.heads // 16)
    qk = a.qk_nope_head_dim + a.qk_rope_head_dim
    for n, graph in r1_snapstream.items():
        q_k_v_o = n * heads * (qk + qk + a.v_head_dim + a.v_head_dim) * ACT_BYTES
        mha = _kernel(graph, "mha")
        assert mha.resident_activation_bytes == q_k_v_o
        assert activation_bytes(graph) >= q_k_v_o


def test_streamed_re_reads_are_still_traffic(r1, r1_snapstream):
    a = r1.attention
    heads = -(-a.heads // 16)
    width = a.qk_nope_head_dim + a.qk_rope_head_dim + a.v_head_dim        # one K and one V row
    flash = template_for(r1).flash
    for n, graph in r1_snapstream.items():
        mha = _kernel(graph, "mha")
        streamed = sum(cols * pairs for _, cols, pairs in causal_tile_pairs(n, flash.block_q, flash.block_kv))
        reread = sum(op.act_reread_bytes for op in mha.operators)
        assert reread == (streamed - n) * heads * width * ACT_BYTES > 0
        traffic = sum(op.act_in_bytes + op.act_out_bytes for op in mha.operators)
        assert traffic == mha.resident_activation_bytes + reread
    # the traffic is quadratic: 8x the prompt, about 64x the K/V reads (16 -> 128 query tiles)
    ratio = [sum(op.act_reread_bytes for op in _kernel(r1_snapstream[n], "mha").operators) for n in (K128, M1)]
    assert ratio[1] > 60 * ratio[0]


def test_h2o_prompt_scoring_keeps_its_keys_once(r1):
    policy = make_policy("h2o", {"budget": 8192})
    small, large = (_kernel(_prefill(r1, n, policy), "h2o_prefill") for n in (K128, M1))
    assert large.resident_activation_bytes <= 8 * small.resident_activation_bytes * 1.001
    assert sum(op.act_reread_bytes for op in large.operators) > 0


def test_gqa_prefill_reads_keys_from_the_cache_not_activations(llama8b):
    graph = _prefill(llama8b, K128, plan=ParallelPlan(tp=8))
    assert all(op.act_reread_bytes == 0 for k in graph.kernels() for op in k.operators)
    small, large = activation_bytes(graph), activation_bytes(_prefill(llama8b, M1, plan=ParallelPlan(tp=8)))
    assert large <= 8 * small * 1.001
