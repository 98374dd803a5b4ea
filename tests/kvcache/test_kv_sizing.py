"""KV bytes per token and the tensor-parallel split of the cache work."""
from pathlib import Path

import pytest
from kv_test_models import deepseek_r1, llama

from sn40l_sim.ir import ParallelPlan, Shape
from sn40l_sim.kvcache import make_policy
from sn40l_sim.kvcache.sizing import (
    kv_bytes_per_socket,
    kv_bytes_per_token,
    kv_bytes_per_token_layer,
    kv_sharding,
    kv_width,
    prefill_key_activation_bytes_per_token,
)
from sn40l_sim.models.builder import build_graph
from sn40l_sim.models.loader import load_model
from sn40l_sim.models.spec import ModelSpec

ROOT = Path(__file__).resolve().parents[2]


def test_deepseek_mla_caches_576_elements_per_layer():
    r1 = deepseek_r1()
    assert kv_width(r1) == 512 + 64
    assert kv_bytes_per_token_layer(r1) == 1152
    assert kv_bytes_per_token(r1) == 70_272
    # a 128K sequence: 9.21 GB, 61 layers x 576 BF16 elements a token (MLA's latent and RoPE key)
    assert kv_bytes_per_token(r1) * 131072 == pytest.approx(9.21e9, rel=1e-3)


@pytest.mark.parametrize("size, per_token", [("8b", 128 * 1024), ("70b", 320 * 1024),
                                             ("405b", 504 * 1024)])
def test_llama_gqa_bytes_per_token(size, per_token):
    # layers x 2 (K, V) x 8 KV heads x 128 x 2 bytes
    assert kv_bytes_per_token(llama(size)) == per_token


def test_fp8_cache_halves_the_bytes():
    r1 = deepseek_r1().model_copy(update={"kv_dtype": "fp8"})
    assert kv_bytes_per_token(r1) == 70_272 // 2


def test_sharding_mla_shares_one_kv_head_over_all_sockets():
    s = kv_sharding(deepseek_r1(), 16)
    assert (s.query_heads, s.kv_heads_per_socket, s.row_shards) == (8, 1, 16)
    s = kv_sharding(llama("8b"), 16)      # 8 KV heads over 16 sockets: 2 sockets per KV head
    assert (s.query_heads, s.kv_heads_per_socket, s.row_shards) == (2, 1, 2)
    s = kv_sharding(llama("8b"), 4)
    assert (s.query_heads, s.kv_heads_per_socket, s.row_shards) == (8, 2, 1)


def test_per_layer_widths_agree_with_the_models_whole_model_count():
    # kv_bytes_per_token comes from models.params; the per-layer widths the kernels use are ours
    for model in (deepseek_r1(), llama("8b"), llama("70b"), llama("405b")):
        assert model.layers * kv_bytes_per_token_layer(model) == kv_bytes_per_token(model)


@pytest.mark.parametrize("path, python_spec", [("deepseek_r1.yaml", deepseek_r1),
                                               ("llama3_1_8b.yaml", lambda: llama("8b"))])
def test_python_specs_match_the_graph_files(path, python_spec):

    model = load_model(ROOT / "graphs" / path)
    assert model.attention == python_spec().attention and model.layers == python_spec().layers
    assert kv_bytes_per_token(model) == kv_bytes_per_token(python_spec())


def test_kv_per_socket_under_data_parallel_attention_holds_whole_sequences():
    r1 = deepseek_r1()
    plan = ParallelPlan(tp=16, attention_dp=16)
    assert kv_bytes_per_socket(r1, plan, 16, 32768) == 32768 * 70_272
    assert kv_bytes_per_socket(r1, plan, 17, 32768) == 2 * 32768 * 70_272   # the busiest socket
    assert kv_bytes_per_socket(r1, plan, 16, 32768, include_mtp=True) == 32768 * 62 * 1152


def test_kv_per_socket_under_tensor_parallelism_splits_heads_and_replicates_shared_ones():
    # Llama-8B at TP16: 8 KV heads, one per socket pair; each socket of a pair runs its own query
    # heads' attention over every row of the head, so each holds all of them
    assert kv_bytes_per_socket(llama("8b"), ParallelPlan(tp=16), 4, 1000) == 4 * 1000 * 131072 // 8
    assert kv_bytes_per_socket(llama("8b"), ParallelPlan(tp=4), 4, 1000) == 4 * 1000 * 131072 // 4
    # MLA's one latent under tensor-parallel attention: the whole cache on every socket
    assert kv_bytes_per_socket(deepseek_r1(), ParallelPlan(tp=16), 16, 1000) == 16 * 1000 * 70_272


def test_prefill_splits_the_prompt_by_kv_heads_and_mla_by_tokens():
    assert kv_bytes_per_socket(llama("8b"), ParallelPlan(tp=8), 1, 4096, phase="prefill") == 4096 * 131072 // 8
    # MLA's prefill attention reads the keys it expanded, not the cache: the 16 sockets sharing the
    # latent write its rows split by tokens for the transfer, and hold only those
    assert kv_bytes_per_socket(deepseek_r1(), ParallelPlan(tp=16), 1, 4096, phase="prefill") == 4096 * 70_272 // 16
    # decode reads every row of the latent on every socket of the group: a replica each
    assert kv_bytes_per_socket(deepseek_r1(), ParallelPlan(tp=16), 1, 4096) == 4096 * 70_272


@pytest.mark.parametrize("model, tp, dp, batch", [
    ("deepseek", 16, 1, 1), ("8b", 8, 1, 1), ("8b", 16, 1, 1), ("70b", 16, 1, 1),
    # a prefill plan with data-parallel attention: a group of tp / dp sockets runs a sequence
    ("deepseek", 16, 2, 1), ("deepseek", 16, 16, 1), ("deepseek", 16, 2, 4), ("70b", 16, 16, 1), ("8b", 16, 2, 4),
    # ways not dividing the prompt: MLA's sockets write ceil(tokens / ways) whole rows, not 1/ways
    # of each (R1 at tp 12: 24,033,024 B written, 23,986,176 B counted)
    ("deepseek", 12, 1, 1), ("deepseek", 12, 4, 3), ("deepseek", 12, 2, 3)])
def test_a_prefill_socket_holds_the_cache_its_graph_writes(model, tp, dp, batch):
    """The prefill node's memory and back-pressure count, per socket, what its prefill graph
    writes to the cache (GQA with more sockets than KV heads writes a replica of a head's rows on
    each socket sharing it; MLA splits the latent's rows over the sockets of an attention group)."""

    spec = deepseek_r1() if model == "deepseek" else llama(model)
    plan = ParallelPlan(tp=tp, attention_dp=dp)
    graph = build_graph(spec, Shape("prefill", batch, 4096), plan, make_policy("full"))
    written = sum(op.kv_write_bytes for k in graph.kernels() for op in k.operators)
    assert written > 0
    assert kv_bytes_per_socket(spec, plan, batch, 4096, phase="prefill") == written


@pytest.mark.parametrize("model, dp", [("deepseek", 1), ("70b", 1), ("deepseek", 4), ("deepseek", 16)])
def test_the_prefill_keys_held_as_activations_are_those_the_attention_kernel_reads(model, dp):
    """Chunked prefill holds the earlier chunks' keys and values where prefill attention reads them
    from activations (MLA): per token, what the QKV kernel writes for the attention kernel. MLA's
    attention kernel reads Q (192 wide per head), K (192) and V (128) and writes O (128), so its
    resident bytes are twice its keys and values; GQA's reads them from the cache. With data-parallel
    attention a sequence's heads split ``tp / attention_dp`` ways (the attention layout, 32 heads a
    socket at tp 16 and attention_dp 4), not ``tp`` as the projections split them (8 counted)."""
    spec = deepseek_r1() if model == "deepseek" else llama(model)
    plan, tokens = ParallelPlan(tp=16, attention_dp=dp), 4096
    graph = build_graph(spec, Shape("prefill", 1, tokens), plan, make_policy("full"))
    (attention,) = {k.signature() for k in graph.kernels() if k.kind in ("mha", "attention")}
    per_token = prefill_key_activation_bytes_per_token(spec, plan)
    if model == "deepseek":
        assert attention.resident_activation_bytes == 2 * tokens * per_token > 0
        assert not any(op.kv_read_bytes for op in attention.operators)
    else:
        assert per_token == 0 and sum(op.kv_read_bytes for op in attention.operators) > 0


def test_the_busiest_socket_holds_its_share_of_the_kv_heads_rounded_up():
    # 3 KV heads of 1-element keys and values, 2 bytes each (12 B a token), over 2 sockets: the
    # busiest holds 2 heads (8 B); 7 heads over 2 sockets: 4 of them; 3 heads over 4 sockets: one
    def tiny(kv: int) -> ModelSpec:
        return ModelSpec.model_validate(dict(
            kind="model", name="tiny", layers=1, hidden=8, dense_ffn=8, vocab=8, weight_dtype="bf16",
            attention=dict(kind="gqa", heads=kv * 2, kv_heads=kv, head_dim=1)))
    assert kv_bytes_per_token(tiny(3)) == 12
    assert kv_bytes_per_socket(tiny(3), ParallelPlan(tp=2), 3, 5) == 3 * 5 * 8
    assert kv_bytes_per_socket(tiny(7), ParallelPlan(tp=2), 1, 1) == 16
    assert kv_bytes_per_socket(tiny(3), ParallelPlan(tp=4), 1, 1) == 4


@pytest.mark.parametrize("plan, batch, cache_len, phase, named", [
    (ParallelPlan(0), 1, 1024, "decode", "plan: attention_dp (1) must divide tp (0)"),
    (ParallelPlan(8, 3), 1, 1024, "decode", "plan: attention_dp (3) must divide tp (8)"),
    (8, 1, 1024, "decode", "plan: expected a ParallelPlan, such as ParallelPlan(tp=8), got 8"),
    (ParallelPlan(8), -1, 1024, "decode", "batch: expected an integer >= 0, got -1"),
    (ParallelPlan(8), 1, -1024, "decode", "cache_len: expected an integer >= 0, got -1024"),
    (ParallelPlan(8), 1.5, 1024, "decode", "batch: expected an integer >= 0, got 1.5"),
    (ParallelPlan(8), 1, 1024, "decod", "phase: expected 'prefill' or 'decode', got 'decod'"),
])
def test_kv_bytes_per_socket_names_a_bad_argument(plan, batch, cache_len, phase, named):
    """A Python caller's bad argument is an InputError naming it: tp=0 used to give the bytes of
    one socket and phase="decod" those of decode, silently; a negative batch a bare ValueError."""
    from sn40l_sim.errors import InputError
    with pytest.raises(InputError) as caught:
        kv_bytes_per_socket(llama("8b"), plan, batch, cache_len, phase=phase)
    assert str(caught.value).startswith(named)


@pytest.mark.parametrize("model, plan, include_mtp, named", [
    (None, ParallelPlan(16), False, "model: expected a ModelSpec"),
    ("r1", ParallelPlan("16"), False, "plan: attention_dp (1) must divide tp ('16'), both integers >= 1"),
    ("r1", ParallelPlan(None), False, "plan: attention_dp (1) must divide tp (None)"),
    ("r1", ParallelPlan(16), -1, "include_mtp: expected True, False or a number of drafts >= 0, got -1"),
    ("r1", ParallelPlan(16), 1.5, "include_mtp: expected True, False or a number of drafts >= 0, got 1.5"),
    ("r1", ParallelPlan(16), "x", "include_mtp: expected True, False or a number of drafts >= 0, got 'x'"),
])
def test_kv_bytes_per_socket_names_a_bad_model_plan_or_include_mtp(model, plan, include_mtp, named):
    """include_mtp=-1 gave one layer's bytes fewer than no MTP at all (a silently wrong number, the
    count of modules being min(drafts, modules)); a model of None an AttributeError, a tp of '16' a
    TypeError, include_mtp='x' a ValueError, each from deep inside."""
    from sn40l_sim.errors import InputError
    r1 = deepseek_r1() if model == "r1" else model
    with pytest.raises(InputError) as caught:
        kv_bytes_per_socket(r1, plan, 1, 1, include_mtp=include_mtp)
    assert str(caught.value).startswith(named)


def test_kv_bytes_per_socket_takes_numpy_integers():
    import numpy as np
    model = llama("8b")
    assert kv_bytes_per_socket(model, ParallelPlan(8), np.int64(4), np.int64(1024)) \
        == kv_bytes_per_socket(model, ParallelPlan(8), 4, 1024) == 4 * 1024 * 128 * 1024 // 8   # one of the 8 KV heads a socket


def test_a_share_of_a_token_not_whole_bytes_is_rounded_up():
    # int4 with an FP16 scale and zero point per 32 elements is 4 + 32/32 = 5 bits an element: 3 KV
    # heads of 1-element keys and values are 6 elements, 30 bits, 4 bytes a token (3.75 rounded
    # up). Over 3 sockets each holds one head's third of them, 4/3 bytes, rounded up to 2 a token
    model = ModelSpec.model_validate(dict(
        kind="model", name="tiny", layers=1, hidden=8, dense_ffn=8, vocab=8, weight_dtype="bf16",
        kv_dtype="int4", kv_quant=dict(group=32),
        attention=dict(kind="gqa", heads=6, kv_heads=3, head_dim=1)))
    assert kv_bytes_per_token(model) == 4
    assert kv_bytes_per_socket(model, ParallelPlan(tp=3), 1, 10) == 10 * 2


def test_the_busiest_socket_runs_the_rounded_up_share_of_the_query_heads():
    # 6 query heads over 4 sockets: two sockets run 2 of them, the busiest's share is 2, not 6 // 4
    model = ModelSpec.model_validate(dict(
        kind="model", name="tiny", layers=1, hidden=8, dense_ffn=8, vocab=8, weight_dtype="bf16",
        attention=dict(kind="gqa", heads=6, kv_heads=2, head_dim=1)))
    assert kv_sharding(model, 4).query_heads == 2
    assert kv_sharding(model, 6).query_heads == 1
