"""A KV policy acting in decode: a toy H2O-style policy, defined and registered in this test, adds
a score-and-evict kernel to every layer of every decode step; the kernel appears in the decode
graph (not in prefill) and the serving step timer charges its time."""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pytest

from sn40l_sim.engine.run_graph import EngineOptions
from sn40l_sim.hardware.loader import load_hardware
from sn40l_sim.ir import FusedKernel, Operator, ParallelPlan, Shape
from sn40l_sim.kvcache import POLICIES, KVPolicy, make_policy, register
from sn40l_sim.kvcache.decode_kernels import decode_shard
from sn40l_sim.kvcache.sizing import kv_dtype_bytes, kv_sharding, kv_share, kv_width
from sn40l_sim.models.builder import build_graph
from sn40l_sim.models.loader import load_model
from sn40l_sim.models.spec import ModelSpec
from sn40l_sim.study.assemble import step_timer

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class EvictEveryStep(KVPolicy):
    """Heavy-hitter eviction: a fixed cache of ``budget`` tokens; each decode step adds the new
    queries' attention weights (summed over this socket's heads and the step's query rows) to
    running per-position scores, finds the lowest-scoring position and overwrites it with the new
    token's row."""

    name = "toy_h2o"
    budget: int = 1024

    def cache_len(self, prompt_len: int, generated: int) -> int:
        return min(prompt_len + generated, self.budget)

    def static_cache_len(self, prompt_len: int, max_new_tokens: int) -> int:
        return self.budget

    def prefill_kernels(self, model: ModelSpec, prompt_len: int, tp: int) -> list[FusedKernel]:
        return []

    def decode_kernels(self, model: ModelSpec, shape: Shape, plan: ParallelPlan) -> list[FusedKernel]:
        seqs = math.ceil(shape.batch / plan.attention_dp)
        heads = kv_sharding(model, plan.tp // plan.attention_dp).query_heads
        positions = seqs * shape.kv_len
        row = seqs * kv_width(model)
        queries = 1 + shape.drafts
        ops = (Operator("accumulate_scores", "reduction", elements=positions * heads * queries, dtype="fp32"),
               Operator("lowest_score", "topk", elements=positions, dtype="fp32"),
               Operator("overwrite_row", "scatter", elements=row, kv_write_bytes=row * kv_dtype_bytes(model)))
        return [FusedKernel(name="h2o_evict", kind="h2o_evict", phase="decode", operators=ops,
                            shards=plan.sockets)]


@pytest.fixture
def toy_policy():
    register(EvictEveryStep)
    yield make_policy("toy_h2o", {"budget": 4096})
    del POLICIES["toy_h2o"]


@pytest.fixture(scope="module")
def llama8b():
    return load_model(ROOT / "graphs" / "llama3_1_8b.yaml")


def test_the_decode_hook_adds_a_kernel_to_every_layer(toy_policy, llama8b):
    plan = ParallelPlan(tp=8)
    graph = build_graph(llama8b, Shape("decode", 16, 0, 4096), plan, toy_policy)
    names = [k.name for k in graph.kernels()]
    evictions = [k for k in graph.kernels() if k.kind == "h2o_evict"]
    assert [k.layer for k in evictions] == list(range(llama8b.layers))
    # after the layer's own kernels, before the next layer's
    assert names[names.index("L00.decoder") + 1] == "L00.h2o_evict"
    assert names[names.index("L00.h2o_evict") + 1] == "L01.decoder"
    assert evictions[0].operators[0].elements == 16 * 4096 * 4   # 32 heads over 8 sockets
    prefill = build_graph(llama8b, Shape("prefill", 1, 4096), plan, toy_policy)
    assert not any(k.kind == "h2o_evict" for k in prefill.kernels())


def test_the_decode_hook_runs_in_every_draft_run_too(toy_policy):
    r1 = load_model(ROOT / "graphs" / "deepseek_r1.yaml")
    graph = build_graph(r1, Shape("decode", 16, 0, 4096, drafts=2), ParallelPlan(16, 16), toy_policy)
    evictions = [k for k in graph.kernels() if k.kind == "h2o_evict"]
    assert [k.name for k in evictions][-3:] == ["L60.h2o_evict", "MTP0.h2o_evict", "MTP1.h2o_evict"]
    assert len(evictions) == r1.layers + 2
    # the hook sees each run's own shape: the verify step's 3 rows per sequence, one in a draft run
    main, draft = evictions[0].operators[0].elements, evictions[-1].operators[0].elements
    assert main == 3 * draft
    plain = build_graph(r1, Shape("decode", 16, 0, 4096), ParallelPlan(16, 16), toy_policy)
    assert not any(k.name.startswith("MTP") for k in plain.kernels())


def test_the_step_timer_charges_the_decode_kernels(toy_policy, llama8b):
    node = load_hardware(ROOT / "hw_configs" / "sn40l_node8.yaml")
    plan = ParallelPlan(tp=8)
    # the serving StepTimer, with the real builder and mapper the assembly step gives it; kernel
    # calls free, so the hook's kernels are all the difference
    free = EngineOptions(kernel_boundaries=False, kernel_looping=False)
    with_hook = step_timer(node, llama8b, toy_policy, plan, plan, engine=free).decode_step(16, 4096)
    without = step_timer(node, llama8b, make_policy("full", {}), plan, plan, engine=free).decode_step(16, 4096)
    evict = with_hook.kernel_cycles["h2o_evict"]
    assert evict > 0 and "h2o_evict" not in without.kernel_cycles
    # at least the hook's own kernels: between two decoder layers they also break the run of
    # consecutive calls over which a decoder kernel's configuration is charged, so the mapper may
    # choose a smaller plan for it
    assert with_hook.cycles >= without.cycles + evict
    # with kernel calls as they are, the policy's kernel also breaks the decoder-layer loop: every
    # call then pays its boundary and reloads a configuration
    looped = step_timer(node, llama8b, make_policy("full", {}), plan, plan).decode_step(16, 4096)
    broken = step_timer(node, llama8b, toy_policy, plan, plan).decode_step(16, 4096)
    assert broken.cycles - looped.cycles > evict


def test_shipped_policies_add_nothing_to_decode(llama8b):
    shape, plan = Shape("decode", 16, 0, 4096), ParallelPlan(tp=8)
    for name in ("full", "snapstream", "streamingllm", "snapkv"):
        assert make_policy(name, {}).decode_kernels(llama8b, shape, plan) == []


@pytest.mark.parametrize("policy, params, kernel", [("h2o", {"budget": 1024}, "h2o_evict"),
                                                    ("arkvale", {"budget": 1024}, "recall")])
def test_a_policys_decode_kernel_serves_every_query_row_of_a_verify_step(policy, params, kernel):
    # two drafts: three query rows per sequence score the cache and write rows, as attention does
    r1 = load_model(ROOT / "graphs" / "deepseek_r1.yaml")
    made = make_policy(policy, params)
    plan = ParallelPlan(16, 16)

    def ops(drafts: int) -> dict[str, Operator]:
        shape = Shape("decode", 64, 0, kv_len=1024, drafts=drafts, context_len=8192 + 16)
        (k,) = [k for k in made.decode_kernels(r1, shape, plan) if k.kind == kernel]
        return {op.name: op for op in k.operators}

    plain, verify = ops(0), ops(2)
    scored = "h2o_scores" if policy == "h2o" else "digest_bound"
    written = "h2o_move_row" if policy == "h2o" else "store_new_row"
    if policy == "h2o":
        assert verify[scored].flops == 3 * plain[scored].flops
    else:
        assert verify[scored].elements == 3 * plain[scored].elements
    assert verify[written].elements == 3 * plain[written].elements


def test_the_busiest_socket_decodes_the_batchs_ceiling_share(llama8b):
    # 17 sequences over 4 attention data-parallel groups: the busiest socket holds 5 of them; 32
    # query and 8 KV heads over the 4 sockets of each group: 8 and 2 a socket, 4 query heads a KV head
    shard = decode_shard(llama8b, Shape("decode", 17, 0, 4096), ParallelPlan(tp=16, attention_dp=4))
    assert (shard.seqs, shard.query_heads, shard.kv_heads_per_socket, shard.row_shards, shard.group) == (5, 8, 2, 1, 4)


def test_a_socket_whose_query_heads_straddle_two_kv_groups_holds_both(llama8b):
    # 32 query heads in 8 groups of 4 over 12 sockets: ceil(32 / 12) = 3 heads a socket, and the
    # second socket's heads 3-5 belong to groups 0 and 1, so its decode policy kernels read the
    # cache of 2 KV heads (as the cache it holds, kv_share), not ceil(8 / 12) = 1
    plan = ParallelPlan(tp=12)
    shard = decode_shard(llama8b, Shape("decode", 8, 0, 4096), plan)
    assert (shard.seqs, shard.query_heads, shard.kv_heads_per_socket, shard.row_shards) == (8, 3, 2, 1)
    assert kv_share(llama8b, plan, 8) == (8, 2)
    kernel = make_policy("h2o", {"heavy": 2048, "recent": 2048}).decode_kernels(
        llama8b, Shape("decode", 8, 0, 4096), plan)[0]
    scores = next(op for op in kernel.operators if op.name == "h2o_scores")
    assert scores.kv_read_bytes == 8 * 2 * 4096 * 128 * 2   # seqs x KV heads x tokens x head_dim x BF16


@pytest.mark.parametrize("plan, sockets", [(ParallelPlan(tp=12), 2), (ParallelPlan(tp=16, attention_dp=2), 1),
                                           (ParallelPlan(tp=16), 2), (ParallelPlan(tp=8), 1)])
def test_decode_policy_kernels_reduce_scores_among_the_sockets_holding_a_kv_heads_query_heads(llama8b, plan, sockets):
    # 32 query heads in 8 groups of 4 over 12 sockets (3 a socket): group 0's heads 0-3 are on
    # sockets 0 and 1, each summing the scores of its own heads into its replica's accumulator (H2O)
    # or page scores (ArkVale); the two must all-reduce them to evict and recall the same tokens, as
    # the two sockets of a group under TP16 do. Over 8 ways (TP8, or TP16 with 2-way DP) a group is
    # whole on one socket.
    shape = Shape("decode", 8, 0, 4096, context_len=40000)
    ways = plan.tp // plan.attention_dp
    seqs, kvh = -(-8 // plan.attention_dp), llama8b.attention.socket_kv_heads(ways)
    (evict,) = make_policy("h2o", {"heavy": 2048, "recent": 2048}).decode_kernels(llama8b, shape, plan)
    (recall,) = make_policy("arkvale", {"budget": 4096}).decode_kernels(llama8b, shape, plan)
    for kernel, per_head in ((evict, 4096 * 4), (recall, math.ceil(40000 / 32) * 4)):
        want = [("all_reduce", sockets, seqs * kvh * per_head)] if sockets > 1 else []
        assert [(c.kind, c.group, c.bytes) for c in kernel.collectives] == want, kernel.name
