"""The KV format as a model option (models/kv_format.py): bytes per token for FP8, INT8, INT4 with
group-wise scales, mixed precision and cross-layer sharing, composing with any policy's lengths;
the attention compute a format leaves unchanged; and bad formats as one error naming the field."""
from __future__ import annotations

import pytest
from kv_test_models import deepseek_r1, llama

from sn40l_sim.errors import InputError
from sn40l_sim.ir import ParallelPlan, Shape
from sn40l_sim.kvcache import make_policy
from sn40l_sim.kvcache.sizing import kv_bytes_per_socket
from sn40l_sim.models.builder import build_graph
from sn40l_sim.models.kv_format import kv_cache_layers
from sn40l_sim.models.loader import with_overrides
from sn40l_sim.models.params import kv_bytes_per_token

R1_TOKEN = 70_272          # 61 layers x 576 x 2 B
L70_TOKEN = 327_680        # 80 layers x 8 KV heads x 128 x 2 (K and V) x 2 B


@pytest.mark.parametrize("fmt, r1_bytes, llama_bytes", [
    ({}, R1_TOKEN, L70_TOKEN),
    ({"kv_dtype": "fp8"}, R1_TOKEN // 2, L70_TOKEN // 2),
    ({"kv_dtype": "int8", "kv_quant": {"group": 64}}, 61 * 576 * (8 + 32 / 64) // 8, 80 * 2048 * (8 + 32 / 64) // 8),
    # KIVI INT4, groups of 32: 4 bits + an FP16 scale and zero point per 32 elements = 5 bits
    ({"kv_dtype": "int4", "kv_quant": {"group": 32}}, 61 * 576 * 5 // 8, 80 * 2048 * 5 // 8),
    ({"kv_dtype": "int4", "kv_quant": {"group": 32, "zero_point": False}}, 61 * 576 * 4.5 / 8, 80 * 2048 * 4.5 / 8),
    # ZipCache-style: a tenth of the tokens in INT8 (with scales), the rest INT4
    ({"kv_dtype": "int4", "kv_quant": {"group": 32, "salient": {"fraction": 0.1, "dtype": "int8"}}},
     -(-61 * 576 * (0.1 * 9 + 0.9 * 5) // 8), -(-80 * 2048 * (0.1 * 9 + 0.9 * 5) // 8)),
    # CLA: pairs of layers share a cache (61 layers: 31 caches)
    ({"kv_shared_layers": 2}, 31 * 576 * 2, 40 * 2048 * 2),
    ({"kv_shared_layers": 2, "kv_dtype": "fp8"}, 31 * 576, 40 * 2048),
])
def test_bytes_per_token_of_each_format(fmt, r1_bytes, llama_bytes):
    assert kv_bytes_per_token(with_overrides(deepseek_r1(), fmt)) == int(r1_bytes)
    assert kv_bytes_per_token(with_overrides(llama("70b"), fmt)) == int(llama_bytes)


def test_the_mtp_layer_caches_its_own_row_whatever_layers_share():
    r1 = with_overrides(deepseek_r1(), {"kv_shared_layers": 4})
    assert kv_cache_layers(r1) == 16 and kv_cache_layers(r1, include_mtp=True) == 17
    assert kv_bytes_per_token(r1, include_mtp=True) - kv_bytes_per_token(r1) == 576 * 2


def test_snapstream_with_fp8_holds_half_the_bytes_in_the_same_slots():
    snap = make_policy("snapstream", {"budget": 32768})
    bf16, fp8 = deepseek_r1(), with_overrides(deepseek_r1(), {"kv_dtype": "fp8"})
    assert snap.static_cache_len(131072, 1024) == 32768       # the policy's lengths do not change
    assert snap.bytes_per_sequence(fp8, 131072, 1024) * 2 == snap.bytes_per_sequence(bf16, 131072, 1024)
    plan = ParallelPlan(16, 16)
    assert kv_bytes_per_socket(fp8, plan, 64, 32768) * 2 == kv_bytes_per_socket(bf16, plan, 64, 32768)


@pytest.mark.parametrize("fmt", [{"kv_shared_layers": 2}, {"kv_dtype": "int4", "kv_quant": {"group": 32}}])
def test_sharing_and_quantising_leave_the_attention_flops_alone(fmt):
    shape, plan = Shape("decode", 16, 0, 4096), ParallelPlan(8, 8)
    base, changed = (build_graph(m, shape, plan) for m in (llama("70b"), with_overrides(llama("70b"), fmt)))
    gemm_flops = [sum(op.flops for k in g.kernels() for op in k.operators if op.kind == "gemm") for g in (base, changed)]
    assert gemm_flops[0] == gemm_flops[1]
    reads = [sum(op.kv_read_bytes for k in g.kernels() for op in k.operators) for g in (base, changed)]
    # CLA: every layer still reads its group's cache; INT4: 5/16 of the bytes
    assert reads[1] == (reads[0] if "kv_shared_layers" in fmt else reads[0] * 5 // 16)


@pytest.mark.parametrize("fmt, field, expected", [
    ({"kv_dtype": "int4"}, "kv_quant", "kv_dtype int4 stores integers, which need scales"),
    ({"kv_dtype": "int4", "kv_quant": {"group": 48}}, "kv_quant.group",
     "group 48 must divide the head width 128 of the cached 'values'"),
    ({"kv_dtype": "bf16", "kv_quant": {"group": 32}}, "kv_quant", "kv_dtype bf16 is not quantised"),
    ({"kv_dtype": "int8", "kv_quant": {"group": 32, "salient": {"fraction": 0.1, "dtype": "int8"}}},
     "kv_quant.salient.dtype", "must be kept wider than kv_dtype int8"),
    ({"kv_dtype": "int3"}, "kv_dtype", "'bf16', 'fp8', 'int8' or 'int4'"),
    ({"kv_shared_layers": 81}, "kv_shared_layers", "must be <= layers (80)"),
    ({"kv_dtype": "int4", "kv_quant": {"group": 0}}, "kv_quant.group",
     "expected a positive integer from 1 to 2147483647 (2**31 - 1), got 0"),
])
def test_a_bad_format_is_one_error_naming_the_field(fmt, field, expected):
    with pytest.raises(InputError) as err:
        with_overrides(llama("70b"), fmt)
    assert err.value.field == field, str(err.value)
    assert expected in str(err.value)
    assert "\n" not in str(err.value)


def test_per_channel_keys_need_no_channel_grouping_but_per_token_values_do():
    # MLA: the latent (keys and values) is grouped per token, the RoPE key (64 wide) per channel
    assert with_overrides(deepseek_r1(), {"kv_dtype": "int4", "kv_quant": {"group": 128}}).kv_quant.group == 128
    with pytest.raises(InputError, match="group 96 must divide the head width 512 of the cached 'latent'"):
        with_overrides(deepseek_r1(), {"kv_dtype": "int4", "kv_quant": {"group": 96}})
    with pytest.raises(InputError, match="'rope_key'"):
        with_overrides(deepseek_r1(), {"kv_dtype": "int4", "kv_quant": {"group": 128, "key_scales": "per_token"}})


def _policy_kernels(graph, kind):
    return [k for k in graph.kernels() if k.kind == kind]


@pytest.mark.parametrize("shared, drafts", [(1, 0), (2, 0), (3, 0), (2, 1)])
def test_a_cla_group_selects_and_recalls_its_shared_cache_once(shared, drafts):
    # ArkVale's buffer and store hold one cache per group (kv_bytes_per_token), so the group's
    # pages are scored and recalled once, by the layer that writes the cache, not by each layer
    ark = make_policy("arkvale", {"budget": 8192})
    r1 = with_overrides(deepseek_r1(), {"kv_shared_layers": shared})
    shape = Shape("decode", 16, 0, 8192, drafts=drafts, context_len=32768 + 1024 + drafts)
    graph = build_graph(r1, shape, ParallelPlan(16, 16), policy=ark)
    recalls = _policy_kernels(graph, "recall")
    groups = -(-61 // shared)
    assert len(recalls) == groups + drafts          # the MTP layer shares with no other layer
    ddr_reads = sum(op.kv_offload_read_bytes for k in recalls for op in k.operators)
    # one sequence per socket: 28 of 224 pages of 32 rows of 576 BF16 elements, per cache layer
    assert ddr_reads == kv_bytes_per_token(r1, include_mtp=drafts) * 28 * 32
    assert ddr_reads == 28 * 32 * 576 * 2 * (groups + drafts)


def test_a_cla_group_compresses_its_shared_cache_once_in_prefill():
    snap, shape, plan = make_policy("snapstream", {"budget": 8192}), Shape("prefill", 1, 32768), ParallelPlan(16)
    kinds = {k.kind for k in snap.prefill_kernels(llama("70b"), 32768, 16)}
    counts = [sum(k.kind in kinds for k in build_graph(with_overrides(llama("70b"), {"kv_shared_layers": n}),
                                                       shape, plan, policy=snap).kernels()) for n in (1, 2)]
    assert counts == [80 * len(kinds), 40 * len(kinds)]
