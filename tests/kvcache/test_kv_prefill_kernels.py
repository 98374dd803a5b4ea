"""The extra prefill kernels of the compressing policies (kvcache/prefill_kernels.py): exact costs
per socket shard, sharding between sockets, and which kernels run for short prompts."""
import math
from itertools import pairwise
from pathlib import Path

import pytest
from kv_test_models import deepseek_r1, llama

from sn40l_sim.ir import ParallelPlan, Shape
from sn40l_sim.kvcache import SnapKV, SnapStream, StreamingLLM, make_policy
from sn40l_sim.kvcache.decode_kernels import decode_shard
from sn40l_sim.kvcache.sizing import kv_sharding
from sn40l_sim.models.loader import load_model

L128K = 131072


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


@pytest.mark.parametrize("tp, reduced, sockets", [(6, 3, 2), (10, 2, 2), (12, 2, 2), (8, 1, 1), (16, 1, 2)])
def test_sockets_holding_query_heads_of_one_kv_head_reduce_its_scores_even_when_the_split_is_uneven(tp, reduced, sockets):
    # Llama-3.1-70B's 64 query heads in 8 groups of 8. Over 12 sockets a socket holds 6 heads
    # (heads 6-11 on the second: groups 0 and 1), so group 0's heads fall on sockets 0 and 1, each
    # summing its own heads' scores: the two must all-reduce the per-position scores of the busiest
    # socket's 2 KV heads (FP32) to select the same rows, as the sockets splitting a group of TP16
    # do (where each holds one KV head); over 8 sockets each group is whole on one socket
    model, prompt, E = llama("70b"), 32768, 32768 - 32
    for name, params, bytes_per_head in (("snapkv", {"budget": 8192}, E * 4),
                                         ("snapstream", {"budget": 8192}, (prompt - 4 - 1024) * 4),
                                         ("h2o", {"budget": 8192}, prompt * 4)):
        (kernel, *_) = make_policy(name, params).prefill_kernels(model, prompt, tp)
        got = [(c.kind, c.group, c.bytes) for c in kernel.collectives]
        want = [("all_reduce", sockets, reduced * bytes_per_head)] if sockets > 1 else []
        assert got == want, (name, tp)


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


def test_a_middle_that_fits_the_top_k_slots_is_copied_not_scored():
    # 4K prompt, budget 8192: sink 4 + ring 1024 leave a middle of 3,068 positions for 7,164 top-K
    # slots, so SnapKV has nothing to drop; it used to score them all (8% of the prefill)
    snap = make_policy("snapstream", {"budget": 8192})
    kinds = {k.kind: k for k in snap.prefill_kernels(deepseek_r1(), 4096, 16)}
    assert set(kinds) == {"snapkv", "ring_buffer"}
    kept = kinds["snapkv"]
    assert all(op.kind in ("gather", "elementwise") for op in kept.operators) and not kept.collectives
    assert sum(op.flops for op in kept.operators) == 0
    # each socket writes 1/16 of the middle's rows (MLA's one latent shared by 16 sockets)
    assert sum(op.kv_write_bytes for op in kept.operators) == math.ceil(3068 / 16) * 576 * 2 * 1
    # one more middle position than slots and the scores come back
    longer = {k.kind: k for k in snap.prefill_kernels(deepseek_r1(), 4 + 1024 + 7164 + 1, 16)}
    assert any(op.name == "scores" for op in longer["snapkv"].operators)


def test_snapkv_without_top_k_slots_copies_its_window_and_scores_nothing():
    # budget == window: the cache is the last 4096 prompt tokens; scoring a selection of none cost
    # DeepSeek's 32K prefill 6.3% of a layer where the ring's copy costs 0.24%
    r1 = deepseek_r1()
    (kept,) = make_policy("snapkv", {"budget": 4096, "observation_window": 4096}).prefill_kernels(r1, 32768, 16)
    assert kept.kind == "snapkv" and not kept.collectives
    assert sum(op.flops for op in kept.operators) == 0 and "scores" not in _ops(kept)
    # each socket writes 1/16 of the window's rows, as with top-K slots
    assert sum(op.kv_write_bytes for op in kept.operators) == 4096 // 16 * 576 * 2
    (scored,) = make_policy("snapkv", {"budget": 4097, "observation_window": 4096}).prefill_kernels(r1, 32768, 16)
    assert {op.name: op.kv_write_bytes for op in kept.operators}.items() <= \
        {op.name: op.kv_write_bytes for op in scored.operators}.items()
    assert _ops(scored)["scores"].flops > 0


def test_a_middle_exactly_as_long_as_the_top_k_slots_is_copied_not_scored():
    # sink 4 + ring 1024 + top-K 7164: a prompt of exactly 8192 tokens leaves a middle of 7164
    # positions, one per top-K slot, so the selection would keep every one of them: scoring them
    # is work for nothing (the boundary between the two cases of the test above)
    snap = make_policy("snapstream", {"budget": 8192})
    assert (snap.sink, snap.recent, snap.topk) == (4, 1024, 7164)
    kinds = {k.kind: k for k in snap.prefill_kernels(deepseek_r1(), 8192, 16)}
    kept = kinds["snapkv"]
    assert sum(op.flops for op in kept.operators) == 0 and "scores" not in _ops(kept)
    assert sum(op.kv_write_bytes for op in kept.operators) == math.ceil(7164 / 16) * 576 * 2


def test_an_observation_window_longer_than_the_prompt_scores_with_every_prompt_query():
    # the last min(window, L) queries score the middle: a 4096-query window over a 1000-token
    # prompt has 1000 queries (its middle, 1000 - 4 - 60 = 936 positions, is still over the top-K)
    params = {"sink": 4, "recent": 60, "topk": 64, "observation_window": 4096}
    snapkv = make_policy("snapstream", params).prefill_kernels(llama("8b"), 1000, 1)[0]
    assert _ops(snapkv)["scores"].m == 1000
    assert _ops(snapkv)["scores"].n == 936


def test_plain_snapkv_copies_the_ceiling_share_of_the_window_on_sockets_sharing_a_kv_head():
    # Llama-3.1-8B at tp 16: 8 KV heads, 2 sockets each; a 5-row window is 3 rows on the busiest
    # socket, of its one KV head's 128-wide keys and values
    kernel = make_policy("snapkv", {"observation_window": 5, "topk": 64}).prefill_kernels(llama("8b"), 1000, 16)[0]
    ops = _ops(kernel)
    assert ops["gather_window_keys"].elements == ops["gather_window_values"].elements == 3 * 128
    assert ops["write_window_rows"].elements == 3 * 256


@pytest.mark.parametrize("tp", [9, 10, 11, 13, 14, 15])
def test_a_split_not_following_the_kv_groups_gathers_every_row_of_each_replica(tp):
    # Qwen2-7B: 28 query heads in 4 groups of 7. Over 10 sockets (runs of 3 heads) group 0 is on
    # sockets 0-2 and socket 2 also holds group 1, shared with sockets 3-4: no set of sockets owns a
    # group to split its rows between, so each gathers every kept row into its replica (the
    # module docstring, KVSharding). row_shards was tp // 4 = 2 or 3: each socket gathered a half or
    # a third of the rows, shares that do not add up to its replica (nor to the group's 3 or 4 sharers)
    model = load_model(Path(__file__).parents[1] / "models" / "public_models" / "qwen2_7b.yaml")
    shard = kv_sharding(model, tp)
    assert shard.row_shards == decode_shard(model, Shape("decode", 1, 0, 1000), ParallelPlan(tp)).row_shards == 1
    kernel = make_policy("snapkv", {"observation_window": 5, "topk": 64}).prefill_kernels(model, 1000, tp)[0]
    d = model.attention.head_dim
    assert _ops(kernel)["gather_window_keys"].elements == shard.kv_heads_per_socket * 5 * d
    assert _ops(kernel)["gather_topk_keys"].elements == shard.kv_heads_per_socket * 64 * d
