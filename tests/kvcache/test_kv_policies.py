"""KV policies: cache lengths, reserved and decode bytes, the prefill kernels' exact costs, and
make_policy's errors."""
import dataclasses
import math
from itertools import pairwise

import pytest
from kv_test_models import deepseek_r1, llama

from sn40l_sim.errors import InputError
from sn40l_sim.kvcache import POLICIES, KVPolicy, SnapKV, SnapStream, StreamingLLM, make_policy

R1_TOKEN = 70_272          # KV bytes per token of DeepSeek-R1 (REFERENCE §2)
L128K = 131072


def test_registry_holds_the_four_policies():
    assert sorted(POLICIES) == ["full", "snapkv", "snapstream", "streamingllm"]
    for name in POLICIES:
        policy = make_policy(name, {})
        assert isinstance(policy, KVPolicy) and policy.name == name
        with pytest.raises(dataclasses.FrozenInstanceError):
            policy.name_of_nothing = 1   # frozen
        assert hash(policy) == hash(make_policy(name, {}))   # usable as memo keys


def test_full_grows_by_one_per_token_and_pads_its_static_length():
    full = make_policy("full", {"pad_to": 4096})
    assert [full.cache_len(1000, g) for g in (0, 1, 7)] == [1000, 1001, 1007]
    assert full.static_cache_len(1000, 10) == 4096
    assert full.static_cache_len(L128K, 0) == L128K
    assert full.static_cache_len(L128K, 1) == L128K + 4096
    assert make_policy("full", {}).static_cache_len(1000, 10) == 1010
    assert full.prefill_kernels(deepseek_r1(), L128K, 16) == []


def test_snapstream_lengths():
    s = SnapStream(sink=4, recent=4096, topk=28668)
    assert s == SnapStream.from_budget(32768) == make_policy("snapstream", {"budget": 32768})
    assert s.static_cache_len(L128K, 0) == s.static_cache_len(100, 5000) == 32768
    assert s.cache_len(L128K, 0) == 32767          # the ring's slot for the first decoded token
    assert [s.cache_len(L128K, g) for g in (1, 2, 10000)] == [32768] * 3
    assert s.valid_topk(L128K) == 28668 and s.valid_topk(10000) == 10000 - 4100
    assert s.cache_len(10000, 3) == 4 + 4096 + 5900          # the whole 5900-token middle is kept
    assert s.cache_len(100, 0) == 100 and s.cache_len(100, 50) == 150   # short prompt appends
    assert s.cache_len(4000, 200) == 4100                   # ...up to sink + recent


def test_streamingllm_and_snapkv_lengths():
    st = make_policy("streamingllm", {"budget": 2048, "sink": 8})
    assert (st.sink, st.recent) == (8, 2040)
    assert st.static_cache_len(L128K, 10) == 2048
    assert st.cache_len(L128K, 0) == 2047 and st.cache_len(L128K, 1) == 2048
    sk = make_policy("snapkv", {"budget": 4096, "pad_to": 1024})
    assert (sk.topk, sk.observation_window) == (4064, 32)
    assert sk.cache_len(L128K, 0) == 4096 and sk.cache_len(L128K, 10) == 4106   # grows in decode
    assert sk.static_cache_len(L128K, 10) == 5120
    assert sk.cache_len(1000, 5) == 1005                    # shorter than the budget: kept whole


def test_snapstream_32k_for_128k_is_a_quarter_of_full():
    r1 = deepseek_r1()
    full, snap = make_policy("full", {}), make_policy("snapstream", {"budget": 32768})
    assert full.bytes_per_sequence(r1, L128K, 0) == L128K * R1_TOKEN == 9_210_691_584
    assert snap.bytes_per_sequence(r1, L128K, 0) * 4 == full.bytes_per_sequence(r1, L128K, 0)
    # decode reads the whole static slot each step, whatever has been generated
    assert snap.decode_read_bytes(r1, L128K, 1, 1024) == snap.decode_read_bytes(r1, L128K, 900, 1024) \
        == 32768 * R1_TOKEN
    assert full.decode_read_bytes(r1, L128K, 1, 1024) == (L128K + 1024) * R1_TOKEN
    assert full.decode_read_tokens(L128K, 1, 1024) == L128K + 1024
    assert snap.decode_write_bytes(r1) == full.decode_write_bytes(r1) == R1_TOKEN


def _ops(kernel):
    return {op.name: op for op in kernel.operators}


def test_deepseek_snapstream_prefill_kernels_exact_costs_at_128k_tp16():
    r1 = deepseek_r1()
    kernels = make_policy("snapstream", {"budget": 32768}).prefill_kernels(r1, L128K, 16)
    assert [k.kind for k in kernels] == ["snapkv", "ring_buffer"]
    snapkv, ring = kernels
    assert all(k.phase == "prefill" and k.shards == 16 for k in kernels)
    ops, E = _ops(snapkv), L128K - 4 - 4096
    # 8 heads per socket; the 4096-query window (= the ring) against the per-head 192-wide keys
    W = 4096
    assert ops["scores"].flops == 2 * W * E * 192 * 8
    # window queries (BF16) and their row max and sum (FP32), then the evictable keys of 8 heads
    assert ops["scores"].act_in_bytes == W * 8 * (192 * 2 + 8) + 8 * E * 192 * 2
    assert ops["scores"].kv_read_bytes == 0
    assert ops["probs"].transcendentals == 8 * W * E
    assert ops["topk"].elements == E and ops["avg_pool"].elements == E * 7
    rows = math.ceil(28668 / 16)
    assert ops["gather_topk_latent"].kv_read_bytes == rows * 512 * 2
    assert ops["write_topk_rows"].kv_write_bytes == rows * 576 * 2
    (coll,) = snapkv.collectives
    assert (coll.kind, coll.group, coll.bytes) == ("all_reduce", 16, E * 4)
    assert snapkv.flops == ops["scores"].flops
    gathers = [op for op in ring.operators if op.name.startswith("gather_ring")]
    assert len(gathers) == 4
    assert sum(op.kv_read_bytes for op in gathers) == 2 * 256 * 576 * 2   # 4096 rows / 16
    assert sum(op.kv_write_bytes for op in ring.operators) == (256 + 1) * 576 * 2
    assert ring.flops == 0


def test_every_gemm_is_exactly_2mnk_and_positive():
    for model, tp in ((deepseek_r1(), 16), (llama("8b"), 1), (llama("70b"), 8), (llama("8b"), 16)):
        for name in ("snapstream", "snapkv"):
            for kernel in make_policy(name, {"budget": 8192}).prefill_kernels(model, 65536, tp):
                gemms = [op for op in kernel.operators if op.kind == "gemm"]
                assert kernel.kind != "snapkv" or gemms
                for op in gemms:
                    assert op.flops == 2 * op.m * op.n * op.k * op.count > 0


def test_gqa_scores_per_socket_and_score_reduction_between_sockets_sharing_a_kv_head():
    params = {"sink": 4, "recent": 1020, "topk": 3072, "observation_window": 32}
    k8 = make_policy("snapstream", params).prefill_kernels(llama("8b"), 65536, 16)[0]
    E = 65536 - 1024
    scores = _ops(k8)["scores"]
    assert scores.flops == 2 * 32 * E * 128 * 2      # 2 query heads per socket
    assert scores.kv_read_bytes == E * 128 * 2        # the keys of its one KV head
    (coll,) = k8.collectives
    assert coll.group == 2                            # 8 KV heads over 16 sockets
    k1 = make_policy("snapstream", params).prefill_kernels(llama("8b"), 65536, 1)[0]
    assert _ops(k1)["scores"].flops == 2 * 32 * E * 128 * 32 and k1.collectives == ()
    # without an explicit window the observation window is the ring
    default = make_policy("snapstream", {"sink": 4, "recent": 1020, "topk": 3072})
    assert default.observation_window == 1020
    assert _ops(default.prefill_kernels(llama("8b"), 65536, 1)[0])["scores"].m == 1020


def test_snapkv_kernel_cost_grows_with_prompt_length():
    r1, snap = deepseek_r1(), make_policy("snapstream", {"budget": 32768})
    costs = [snap.prefill_kernels(r1, L, 16)[0] for L in (40000, 65536, 98304, L128K)]
    for a, b in pairwise(costs):
        assert b.flops > a.flops > 0
        assert _ops(b)["scores"].act_in_bytes > _ops(a)["scores"].act_in_bytes
        assert _ops(b)["probs"].elements > _ops(a)["probs"].elements


def test_which_kernels_run_for_short_prompts():
    r1 = deepseek_r1()
    snap = SnapStream(sink=4, recent=4096, topk=1000)
    assert snap.prefill_kernels(r1, 4099, 16) == []                              # L < sink + recent
    assert [k.kind for k in snap.prefill_kernels(r1, 4100, 16)] == ["ring_buffer"]   # empty middle
    assert [k.kind for k in snap.prefill_kernels(r1, 4101, 16)] == ["snapkv", "ring_buffer"]
    assert [k.kind for k in StreamingLLM().prefill_kernels(r1, L128K, 16)] == ["ring_buffer"]
    sk = SnapKV(topk=1000)
    assert sk.prefill_kernels(r1, 1032, 16) == []
    (k,) = sk.prefill_kernels(r1, 1033, 16)
    assert k.kind == "snapkv" and "gather_window_latent" in _ops(k)   # SnapKV keeps its window


@pytest.mark.parametrize("name, params, field, expected", [
    ("h2o", {}, "policy", "expected one of full, snapkv, snapstream, streamingllm"),
    ("snapstream", {"sinks": 4}, "params.sinks", "expected one of sink, recent, topk"),
    ("snapstream", {"sink": -1}, "params.sink", "expected an integer >= 0, got -1"),
    ("snapstream", {"topk": 1.5}, "params.topk", "expected an integer >= 0, got 1.5"),
    ("snapstream", {"topk": "many"}, "params.topk", "expected an integer"),
    ("snapstream", {"recent": True}, "params.recent", "expected an integer >= 1"),
    ("snapstream", {"pool_kernel": 4}, "params.pool_kernel", "expected an odd integer"),
    ("snapstream", {"budget": 100, "recent": 200}, "params.budget", "expected budget >= sink + recent"),
    ("snapstream", {"budget": 100, "topk": 5}, "params.budget", "not both"),
    ("streamingllm", {"budget": 0}, "params.budget", "expected an integer >= 1"),
    ("snapkv", {"budget": 10}, "params.budget", "expected an integer >= 32"),
    ("full", {"pad_to": 0}, "params.pad_to", "expected an integer >= 1, got 0"),
])
def test_make_policy_errors_name_the_parameter(name, params, field, expected):
    with pytest.raises(InputError) as err:
        make_policy(name, params)
    assert err.value.field == field
    assert expected in err.value.message


def test_make_policy_errors_are_located_inside_the_policy_entry():
    # the experiment loader prefixes the entry's place in its file (tests/study)
    with pytest.raises(InputError) as err:
        make_policy("snapstream", {"sink": -2})
    assert err.value.file is None and str(err.value).startswith("params.sink: ")
    with pytest.raises(InputError, match="expected a mapping") as err:
        make_policy("full", [1, 2])
    assert err.value.field == "params"
