"""Capacity of the policies (KVPolicy.footprint, kvcache/footprint.py): every policy stays within its
budget over a sequence's life, the bytes a node reserves add up over its sockets (nothing lost or
counted twice), H2O's scores and ArkVale's digests sit beside the cache, ArkVale's store holds the
whole context in its own tier, and the decode kernels appear exactly when a policy acts in decode."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kv_test_models import deepseek_r1, llama

from sn40l_sim.errors import InputError
from sn40l_sim.ir import ParallelPlan, Shape
from sn40l_sim.kvcache import KVFootprint, kv_bytes_by_use, make_policy
from sn40l_sim.models.builder import build_graph
from sn40l_sim.models.params import kv_bytes_per_token

BUDGETED = ["snapstream", "streamingllm", "snapkv", "h2o", "arkvale"]


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(BUDGETED), budget=st.sampled_from([256, 1024, 4096]),
       prompt_len=st.integers(1, 20000), max_new=st.integers(0, 3000))
def test_what_attention_reads_never_exceeds_the_budget(name, budget, prompt_len, max_new):
    policy = make_policy(name, {"budget": budget})
    static = policy.static_cache_len(prompt_len, max_new)
    fp = policy.footprint(deepseek_r1(), prompt_len, max_new)
    assert fp.slots == static
    if name == "snapkv":    # SnapKV compresses the prompt only: its cache grows by the generated tokens
        assert static == min(prompt_len, budget) + max_new
        return
    assert static <= budget
    for g in (0, max_new // 2, max_new):
        held = policy.cache_len(prompt_len, g)
        if name == "arkvale":   # every token kept, in the store; the buffer is what attention reads
            assert held == prompt_len + g <= fp.context_rows or fp.store_tier is None
        else:
            assert held <= static


@pytest.mark.parametrize("name", ["full", "snapstream", "h2o", "arkvale"])
@pytest.mark.parametrize("model, plan", [(deepseek_r1(), ParallelPlan(16, 16)), (llama("70b"), ParallelPlan(8)),
                                         (llama("70b"), ParallelPlan(16, 16))])
def test_bytes_add_up_over_the_sockets(name, model, plan):
    policy = make_policy(name, {"budget": 8192} if name != "full" else {})
    fp = policy.footprint(model, 32768, 256)
    per_token = kv_bytes_per_token(model)
    batch = 64
    uses = kv_bytes_by_use(model, plan, batch, fp)
    one = kv_bytes_by_use(model, ParallelPlan(), 1, fp)       # one whole sequence on one socket
    assert one["kv"] == fp.slots * per_token + fp.state_bytes * model.attention.cached_tensors()[0].heads * model.layers
    assert one["kv_offload"] == (fp.store_rows * per_token if fp.store_tier else 0)
    if plan.attention_dp > 1:
        # sequences split evenly over the sockets: the node holds the batch's bytes exactly once
        for use in ("kv", "kv_offload"):
            assert uses[use] * plan.attention_dp == batch * one[use]
    else:
        # 8 KV heads over 8 sockets: each holds one head's share of the cache and of the state
        assert uses["kv"] * plan.tp == batch * one["kv"]


def test_h2o_keeps_an_fp32_score_per_slot_and_kv_head():
    fp = make_policy("h2o", {"budget": 4096}).footprint(llama("70b"), 32768, 128)
    assert fp == KVFootprint(slots=4096, state_bytes=4096 * 4)


def test_h2o_keeps_no_scores_for_a_context_that_never_outgrows_its_budget():
    # a 1K prompt and 1K output under a 32K budget never evict (no h2o_evict kernel), yet each
    # slot reserved an FP32 score per KV head and layer: Llama-3.1-8B on 16 sockets at batch 2048
    # held 32.25 GiB of KV per socket where the full cache held 32.00
    h2o = make_policy("h2o", {"budget": 32768})
    assert h2o.footprint(llama("70b"), 1024, 1024) == KVFootprint(slots=2048)
    assert h2o.footprint(llama("70b"), 32767, 1) == KVFootprint(slots=32768)      # fills it exactly
    assert h2o.footprint(llama("70b"), 32767, 2) == KVFootprint(slots=32768, state_bytes=32768 * 4)
    plan = ParallelPlan(16, 16)
    same = [kv_bytes_by_use(llama("70b"), plan, 4096, make_policy(name, params).footprint(llama("70b"), 1024, 1024))
            for name, params in (("full", {}), ("h2o", {"budget": 32768}))]
    assert same[0] == same[1]


def test_arkvale_store_holds_the_whole_context_in_pages_and_hbm_holds_buffer_and_digests():
    ark = make_policy("arkvale", {"budget": 8192, "page_tokens": 64})
    fp = ark.footprint(deepseek_r1(), 131072, 100)
    assert fp.store_tier == "ddr" and fp.store_rows == 131200 == 64 * 2050
    assert fp.slots == 8192
    assert fp.state_bytes == 2050 * 2 * 576 * 2          # max and min per page, BF16
    short = ark.footprint(deepseek_r1(), 4000, 100)        # fits the buffer: nothing offloaded
    assert short == KVFootprint(slots=4100)
    assert ark.footprint(deepseek_r1(), 131072, 100).context_rows == 131200
    centroid = make_policy("arkvale", {"budget": 8192, "digest": "centroid"}).footprint(deepseek_r1(), 131072, 0)
    assert centroid.state_bytes == 4096 * 576 * 2


@pytest.mark.parametrize("name, kind", [("h2o", "h2o_evict"), ("arkvale", "recall")])
def test_decode_kernels_run_in_every_layer_only_when_the_policy_acts(name, kind):
    policy = make_policy(name, {"budget": 4096})
    r1, plan = deepseek_r1(), ParallelPlan(16, 16)
    acting = build_graph(r1, Shape("decode", 16, 0, 4096, context_len=32768), plan, policy)
    assert sum(k.kind == kind for k in acting.kernels()) == 61       # 61 layers (no drafts: no MTP block)
    idle = build_graph(r1, Shape("decode", 16, 0, 2048, context_len=2048), plan, policy)
    assert not any(k.kind == kind for k in idle.kernels())
    # a context that fills the budget exactly has a static cache of the budget, yet never evicts
    # (H2O charged every step an eviction: DeepSeek-R1 at a 4226-token context, 158 ms for 125)
    filled = build_graph(r1, Shape("decode", 16, 0, 4096, context_len=4096), plan, policy)
    assert not any(k.kind == kind for k in filled.kernels())
    one_more = build_graph(r1, Shape("decode", 16, 0, 4096, context_len=4097), plan, policy)
    assert sum(k.kind == kind for k in one_more.kernels()) == 61
    # prefill compresses only a prompt longer than the budget
    assert not policy.prefill_kernels(r1, 4096, 16) and policy.prefill_kernels(r1, 4097, 16)


def test_arkvale_needs_the_context_length_in_the_decode_shape():
    with pytest.raises(InputError) as err:
        make_policy("arkvale", {"budget": 4096}).decode_kernels(deepseek_r1(), Shape("decode", 16, 0, 4096),
                                                                ParallelPlan(16, 16))
    assert err.value.field == "context_len"


def test_h2o_decode_kernel_counts_by_hand():
    # Llama-3.1-70B, TP8 (one KV head and 8 query heads per socket), 2 sequences, a 1024-slot cache
    h2o = make_policy("h2o", {"budget": 1024})
    (k,) = h2o.decode_kernels(llama("70b"), Shape("decode", 2, 0, 1024), ParallelPlan(8))
    ops = {op.name: op for op in k.operators}
    assert ops["h2o_scores"].flops == 2 * 8 * 1024 * 128 * 2          # [8, 128] @ [128, 1024], twice
    assert ops["h2o_scores"].kv_read_bytes == 2 * 1024 * 128 * 2      # the keys only (BF16)
    assert ops["h2o_accumulate"].kv_read_bytes == ops["h2o_accumulate"].kv_write_bytes == 2 * 1024 * 4
    assert ops["h2o_argmin"].elements == 2 * 512
    assert ops["h2o_move_row"].kv_read_bytes == 2 * 256 * 2 + 2 * 4   # one K+V row and its score
    assert not k.collectives
    # 16 sockets: two share each KV head and all-reduce their partial sums
    (k16,) = h2o.decode_kernels(llama("70b"), Shape("decode", 2, 0, 1024), ParallelPlan(16))
    assert [(c.kind, c.bytes, c.group) for c in k16.collectives] == [("all_reduce", 2 * 1024 * 4, 2)]


def test_h2o_without_heavy_slots_is_a_plain_ring_it_scores_nothing_for():
    # heavy 0: no slot competes on an accumulated score, so none is kept, the prompt's last
    # `recent` rows are only copied, and a decode step runs no eviction (it scored a whole
    # prefill and every step for nothing: Llama-3.1-70B, 64K prompts, +19% prefill, 57 ms a step
    # against StreamingLLM's 36 ms for the same cache)
    model, plan = llama("70b"), ParallelPlan(16, 16)
    ring = make_policy("h2o", {"heavy": 0, "recent": 4096})
    assert ring.footprint(model, 65536, 1024) == KVFootprint(slots=4096)
    (prefill,) = ring.prefill_kernels(model, 65536, 16)
    assert sum(op.flops for op in prefill.operators) == 0 and not prefill.collectives
    # the same rows as the gathers of the prefill with heavy slots, and nothing else
    (scored,) = make_policy("h2o", {"heavy": 1, "recent": 4096}).prefill_kernels(model, 65536, 16)
    recent_ops = [op for op in scored.operators if "recent" in op.name]
    assert [(op.name, op.kv_read_bytes, op.kv_write_bytes) for op in prefill.operators] == \
        [(op.name, op.kv_read_bytes, op.kv_write_bytes) for op in recent_ops]
    graph = build_graph(model, Shape("decode", 16, 0, 4096, context_len=66560), plan, ring)
    assert not any(k.kind == "h2o_evict" for k in graph.kernels())


@pytest.mark.parametrize("name, kind, state_op", [("h2o", "h2o_prefill", "write_scores"),
                                                  ("arkvale", "digest_build", "write_digests")])
def test_a_prompt_within_the_budget_whose_context_outgrows_it_prepares_what_decode_reads(name, kind, state_op):
    # decode evicts by accumulated scores (H2O) or scores every page's digest (ArkVale) once the
    # context outgrows the budget; a prompt that fits it was compressed by nothing, and its scores or
    # digests were built by nothing either (Llama-3.1-70B, 32K prompts and a 32K budget, 1K
    # outputs: H2O's prefill 0.918 s against 1.052 s at a 32,000-token budget, which scores them)
    model, plan = llama("70b"), ParallelPlan(16)
    policy = make_policy(name, {"budget": 4096})
    assert not policy.context_prefill_kernels(model, 4096, 4096, 16)       # the context fits: nothing
    (prepared,) = policy.context_prefill_kernels(model, 4096, 4097, 16)
    (compressed,) = policy.context_prefill_kernels(model, 4097, 5000, 16)
    assert prepared.kind == compressed.kind == kind
    ops = {op.name: op for op in prepared.operators}
    # the prompt's state is written, and nothing is selected or gathered: its rows stay in place
    assert ops[state_op].kv_write_bytes > 0
    assert not [op for op in prepared.operators if op.kind in ("topk", "gather")]
    assert [op for op in compressed.operators if op.kind == "gather"]
    if name == "h2o":    # the causal Q K^T of the whole prompt, as a compressed prompt's
        assert ops["h2o_scores"].flops > 0 and ops["write_scores"].kv_write_bytes == 1 * 4096 * 4
    # the builder asks the context's hook when the prefill shape carries the context
    graph = build_graph(model, Shape("prefill", 1, 4096, context_len=4097), plan, policy)
    assert sum(k.kind == kind for k in graph.kernels()) == model.layers
    bare = build_graph(model, Shape("prefill", 1, 4096), plan, policy)
    assert not any(k.kind == kind for k in bare.kernels())
    # a policy that never evicts by prefill state keeps its prefill kernels whatever the context
    snap = make_policy("snapstream", {"budget": 4096})
    assert snap.context_prefill_kernels(model, 8192, 9000, 16) == snap.prefill_kernels(model, 8192, 16)
