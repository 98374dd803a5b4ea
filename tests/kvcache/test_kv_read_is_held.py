"""The cache a decode step's attention reads is the cache its socket holds: the memory rule
(kvcache/sizing.py) and the attention formulas (models/families) agree on every parallel plan,
including sockets sharing a KV head (each holds a replica) and attention groups of several
sockets (1 < attention_dp < tp)."""
from __future__ import annotations

from pathlib import Path

import pytest

from sn40l_sim.ir import ParallelPlan, Shape
from sn40l_sim.kvcache import make_policy
from sn40l_sim.kvcache.sizing import kv_bytes_per_socket
from sn40l_sim.models.builder import build_graph
from sn40l_sim.models.families.gqa import GQAAttentionSpec
from sn40l_sim.models.loader import load_model

GRAPHS = Path(__file__).resolve().parents[2] / "graphs"


@pytest.mark.parametrize("name", ["llama3_1_8b", "llama3_1_70b", "deepseek_r1"])
@pytest.mark.parametrize("tp, dp", [(8, 1), (16, 1), (16, 2), (16, 4), (16, 16)])
@pytest.mark.parametrize("batch", [1, 5, 16])
def test_a_decode_step_reads_exactly_the_cache_its_socket_holds(name: str, tp: int, dp: int, batch: int) -> None:
    model, plan, kv_len = load_model(GRAPHS / f"{name}.yaml"), ParallelPlan(tp, dp), 1000
    graph = build_graph(model, Shape("decode", batch, 0, kv_len), plan)
    read = sum(op.kv_read_bytes for kernel in graph.kernels() for op in kernel.operators)
    assert read == kv_bytes_per_socket(model, plan, batch, kv_len)


def test_a_socket_whose_query_heads_span_two_kv_groups_holds_and_reads_both() -> None:
    # 24 query heads in 6 groups of 4 over 8 sockets: the second socket runs heads 3-5, of groups
    # 0 and 1, so it needs the K and V of two heads, not ceil(6 / 8) = 1
    llama = load_model(Path(__file__).parents[2] / "graphs" / "llama3_1_8b.yaml")
    model = llama.model_copy(update={"attention": llama.attention.model_copy(update={"heads": 24, "kv_heads": 6})})
    plan, kv_len = ParallelPlan(8), 1024
    graph = build_graph(model, Shape("decode", 1, 0, kv_len=kv_len), plan)
    qk = next(op for op in graph.graph.nodes["L00.decoder"]["kernel"].operators if op.name == "gqa_qk")
    head_dim = model.attention.head_dim
    assert qk.kv_read_bytes == 2 * kv_len * head_dim * 2
    assert kv_bytes_per_socket(model, plan, 1, kv_len) == 2 * kv_len * 2 * head_dim * 2 * model.layers


@pytest.mark.parametrize("tp, dp", [(8, 1), (16, 1), (16, 2)])
def test_sockets_split_a_group_of_their_own_when_tp_is_a_multiple_of_the_kv_heads(tp: int, dp: int) -> None:
    # Qwen2-7B: 28 query heads in 4 groups of 7. Over 8 (or 16) head-splitting sockets each group
    # gets 2 (4) sockets of its own, holding 4 + 3 (2 + 2 + 2 + 1) of its heads: at most
    # ceil(28 / ways) query heads, as the consecutive split, and one KV head, where the consecutive
    # split gave the socket of heads 4-7 (6-7) groups 0 and 1, so twice the cache per socket
    model = load_model(Path(__file__).parents[1] / "models" / "public_models" / "qwen2_7b.yaml")
    plan, kv_len, batch = ParallelPlan(tp, dp), 1000, 4
    ways, d = tp // dp, model.attention.head_dim
    graph = build_graph(model, Shape("decode", batch, 0, kv_len), plan)
    qk = next(op for op in graph.graph.nodes["L00.decoder"]["kernel"].operators if op.name == "gqa_qk")
    seqs = -(-batch // dp)
    assert qk.kv_read_bytes == seqs * 1 * kv_len * d * 2
    assert kv_bytes_per_socket(model, plan, batch, kv_len) == seqs * kv_len * 2 * d * 2 * model.layers
    # the layout exists: each group's 7 heads dealt over its ways / 4 sockets
    group, sockets_per_group = 7, ways // 4
    loads = [len(range(s, group, sockets_per_group)) for s in range(sockets_per_group)]
    assert sum(loads) == group and max(loads) == -(-28 // ways)


def test_the_group_split_needs_no_more_kv_heads_than_the_consecutive_one() -> None:
    # every head count, KV head count dividing it and power-of-two ways up to 16: the count never
    # exceeds the consecutive split's, and is 1 exactly when each group can have sockets of its own
    for heads in range(1, 49):
        for kv in (k for k in range(1, heads + 1) if heads % k == 0):
            spec = GQAAttentionSpec(kind="gqa", heads=heads, kv_heads=kv, head_dim=64)
            group = heads // kv
            for ways in (1, 2, 4, 8, 16):
                per = -(-heads // ways)
                consecutive = max((min(heads, s + per) - 1) // group - s // group + 1 for s in range(0, heads, per))
                got = spec.socket_kv_heads(ways)
                assert got <= consecutive, (heads, kv, ways)
                assert (got == 1) == (ways % kv == 0 or consecutive == 1), (heads, kv, ways)


@pytest.mark.parametrize("tp", [8, 16])
def test_a_socket_whose_query_heads_span_two_kv_groups_projects_both(tp: int) -> None:
    # Phi-3-medium's shape: 40 query heads in 10 groups of 4. Over 16 sockets a socket runs 3 heads
    # and the second (heads 3-5) spans groups 0 and 1: it writes two KV heads to its cache, so its K
    # and V projections hold two heads' columns, not ceil(10 / 16) = 1 (the weights and FLOPs were a
    # head short while the cache write read two heads' rows)
    llama = load_model(Path(__file__).parents[2] / "graphs" / "llama3_1_8b.yaml")
    model = llama.model_copy(update={"attention": llama.attention.model_copy(update={"heads": 40, "kv_heads": 10})})
    batch, d, hidden = 4, model.attention.head_dim, model.hidden
    graph = build_graph(model, Shape("decode", batch, 0, kv_len=1000), ParallelPlan(tp))
    ops = {op.name: op for op in graph.graph.nodes["L00.decoder"]["kernel"].operators}
    assert model.attention.socket_kv_heads(tp) == 2
    for name in ("k_proj", "v_proj"):
        assert ops[name].n == 2 * d and ops[name].weight_bytes == hidden * 2 * d * 2
    # the cache write stores, per new token, the K and V rows the projections made
    assert ops["kv_cache_write"].kv_write_bytes == batch * 2 * (ops["k_proj"].n * 2)


def test_the_sockets_reducing_a_kv_heads_scores_are_those_holding_its_query_heads() -> None:
    # every head count, KV head count dividing it and ways up to 20: kv_head_sockets is the most
    # sockets whose query heads (the group split when the ways are a multiple of the KV heads, else
    # the consecutive ceil(heads / ways) runs that socket_kv_heads counts) fall in one group
    for heads in range(1, 49):
        for kv in (k for k in range(1, heads + 1) if heads % k == 0):
            spec = GQAAttentionSpec(kind="gqa", heads=heads, kv_heads=kv, head_dim=64)
            group = heads // kv
            for ways in range(1, 21):
                if ways % kv == 0:
                    want = ways // kv
                else:
                    per = -(-heads // ways)
                    holders = [{s // per for s in range(g, g + group)} for g in range(0, heads, group)]
                    want = max(len(h) for h in holders)
                assert spec.kv_head_sockets(ways) == want, (heads, kv, ways)


def _brute_force_rows(heads: int, kv_heads: int, ways: int) -> tuple[int, int]:
    """(query heads, KV heads) of the busiest socket, dealing the heads one by one to the split the
    KV head counts assume (each group over sockets of its own when ``ways`` is a multiple of the KV
    heads, else consecutive runs of ceil(heads / ways))."""
    group, per = heads // kv_heads, -(-heads // ways)
    owner = ([g * (ways // kv_heads) + (h % group) % (ways // kv_heads) for g in range(kv_heads) for h in range(group)]
             if ways % kv_heads == 0 else [h // per for h in range(heads)])
    sockets = [[h for h in range(heads) if owner[h] == s] for s in range(ways)]
    return max(map(len, sockets)), max(len({h // group for h in held}) for held in sockets)


@pytest.mark.parametrize("name", ["llama3_1_8b", "llama3_1_70b", "llama3_1_405b"])
def test_decode_attention_scores_the_query_heads_its_socket_holds(name: str) -> None:
    # a socket's query heads spread over the KV heads they span: Llama-3.1-8B over 12 sockets holds
    # 3 heads of 2 KV heads, whose GEMMs ran ceil(3 / 2) = 2 rows each, 4 rows for 3 heads (+33% of
    # the scores' FLOPs, softmax and score bytes, and of H2O's rescore and ArkVale's digest scores,
    # in 23 of the 48 Llama-3.1 cases of 1-16 ways); even splits keep their single GEMM
    model = load_model(GRAPHS / f"{name}.yaml")
    model = model.model_copy(update={"layers": 1})
    a, batch, kv_len, d = model.attention, 3, 512, model.attention.head_dim
    shape = Shape("decode", batch, 0, kv_len, context_len=40000)
    h2o, arkvale = make_policy("h2o", {"heavy": 256, "recent": 256}), make_policy("arkvale", {"budget": 4096,
                                                                                              "digest": "centroid"})
    pages = -(-40000 // arkvale.page_tokens)
    for ways in range(1, 17):
        heads, kvh = _brute_force_rows(a.heads, a.kv_heads, ways)
        assert kvh == a.socket_kv_heads(ways)
        plan = ParallelPlan(ways)
        ops = [op for k in build_graph(model, shape, plan).kernels() for op in k.operators]
        qk = [op for op in ops if op.name.split("#")[0] == "gqa_qk"]
        pv = [op for op in ops if op.name.split("#")[0] == "gqa_pv"]
        (softmax,) = [op for op in ops if op.name == "gqa_softmax"]
        assert sum(op.flops for op in qk) == sum(op.flops for op in pv) == 2 * batch * heads * kv_len * d, ways
        assert sum(op.count for op in qk) == batch * kvh and max(op.m for op in qk) == -(-heads // kvh)
        assert softmax.elements == batch * heads * kv_len
        assert len(qk) == (1 if heads % kvh == 0 else 2)
        for policy, scores, n in ((h2o, "h2o_scores", 4096), (arkvale, "digest_scores", pages)):
            kernel_ops = [op for k in policy.decode_kernels(model, Shape("decode", batch, 0, 4096, context_len=40000), plan)
                          for op in k.operators if op.name.split("#")[0] == scores]
            assert sum(op.flops for op in kernel_ops) == 2 * batch * heads * n * d, (policy.name, ways)


def test_the_split_kv_combine_follows_both_shapes_of_the_weighted_sum() -> None:
    # over 12 sockets the scores and weighted sum each have a second GEMM (KV heads with a query
    # head fewer): the merge of a long cache's partials comes after both, not between them
    from sn40l_sim.mapper._examples import example_socket
    from sn40l_sim.mapper.attention import with_combines

    model = load_model(GRAPHS / "llama3_1_8b.yaml").model_copy(update={"layers": 1})
    (decoder,) = [k for k in build_graph(model, Shape("decode", 1, 0, 131072), ParallelPlan(12)).kernels()
                  if k.name.endswith("decoder")]
    names = [op.name for op in with_combines(example_socket(), decoder.operators, 4)]
    assert names[names.index("gqa_qk"):names.index("gqa_qk.combine") + 1] == [
        "gqa_qk", "gqa_qk#2", "gqa_softmax", "gqa_pv", "gqa_pv#2", "gqa_qk.combine"]
