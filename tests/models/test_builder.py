"""The fused-kernel graphs: exact FLOPs, sharding, KV traffic, structure and determinism."""
from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
import pytest

from sn40l_sim.errors import InputError
from sn40l_sim.ir import FusedKernel, Operator, ParallelPlan, Shape
from sn40l_sim.models import params as P
from sn40l_sim.models.builder import build_graph
from sn40l_sim.models.flash import causal_tile_pairs
from sn40l_sim.models.loader import load_model
from sn40l_sim.models.template import GRAPHS_DIR

L = 131072
TP16 = ParallelPlan(tp=16)
DECODE16 = ParallelPlan(tp=16, attention_dp=16)


def prefill(model, length=L, plan=TP16, **kw):
    return build_graph(model, Shape("prefill", batch=1, prompt_len=length), plan, **kw)


def decode(model, batch=16, kv_len=L, plan=DECODE16, drafts=0, **kw):
    return build_graph(model, Shape("decode", batch=batch, prompt_len=0, kv_len=kv_len, drafts=drafts), plan, **kw)


def layer(graph, i):
    return {k.kind: k for k in graph.kernels() if k.layer == i}


def ops(kernel):
    return {op.name: op for op in kernel.operators}


@pytest.fixture(scope="module")
def r1_graphs(r1):
    return {"prefill": prefill(r1), "decode": decode(r1), "prefill_small": prefill(r1, 20000)}


def test_every_gemm_is_exactly_2mnk(r1, llama8b, r1_graphs):
    graphs = list(r1_graphs.values()) + [prefill(llama8b, 10000, ParallelPlan(8)), decode(llama8b, 5, 777, ParallelPlan(8))]
    n = 0
    for g in graphs:
        for k in g.kernels():
            for op in k.operators:
                if op.kind == "gemm":
                    assert op.flops == 2 * op.m * op.n * op.k * op.count, (k.name, op.name)
                    assert min(op.m, op.n, op.k, op.count) > 0
                    n += 1
                else:
                    assert op.flops == 0
    assert n > 1000


def test_prefill_mha_flops_count_computed_causal_tiles(r1_graphs):
    mha = layer(r1_graphs["prefill"], 3)["mha"]
    pairs = 16 * 17 // 2            # 16 tiles of 8192, causal skip at block granularity
    heads = 128 // 16
    tile = 8192 * 8192
    assert mha.flops == heads * pairs * tile * 2 * (192 + 128)
    assert ops(mha)["mha_softmax"].transcendentals == heads * pairs * tile


def test_prefill_uneven_tiles_are_exact(r1_graphs):
    mha = layer(r1_graphs["prefill_small"], 3)["mha"]
    scores = sum(r * c * n for r, c, n in causal_tile_pairs(20000, 8192, 8192))
    assert mha.flops == 8 * scores * 2 * (192 + 128)
    # every query sees itself and all earlier keys, so at least the causal triangle is computed
    assert scores >= 20000 * 20001 // 2


def test_decode_absorbed_attention_flops_and_kv(r1_graphs):
    mla = layer(r1_graphs["decode"], 3)["mla"]
    o = ops(mla)
    # DP16 at batch 16: one sequence per socket, 128 heads, one 576/512-wide KV head
    assert o["absorbed_qk"].flops + o["absorbed_pv"].flops == 2 * 128 * (576 + 512) * L
    assert o["absorbed_qk"].kv_read_bytes == L * 576 * 2
    assert o["cache_write"].kv_write_bytes == 576 * 2


def test_decode_kv_read_is_linear_in_kv_len(r1, llama8b):
    for model, plan in ((r1, DECODE16), (llama8b, ParallelPlan(8))):
        reads = [sum(op.kv_read_bytes for k in decode(model, 8, n, plan).kernels() for op in k.operators)
                 for n in (1000, 2000, 3000)]
        assert reads[1] - reads[0] == reads[2] - reads[1] == reads[0] > 0


def test_llama_decode_reads_the_whole_gqa_cache(llama8b):
    g = decode(llama8b, batch=4, kv_len=5000, plan=ParallelPlan(1))
    total = sum(op.kv_read_bytes for k in g.kernels() for op in k.operators)
    assert total == 32 * 4 * 5000 * 8 * 128 * 2 * 2  # layers x seqs x kv_len x kv_heads x d x (K,V) x 2 B
    assert total == 4 * 5000 * P.kv_bytes_per_token(llama8b)


def _gemms(graph, layer_index):
    return {(k.kind, op.name): op for k in graph.kernels() if k.layer == layer_index
            for op in k.operators if op.kind == "gemm"}


@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_sharded_gemms_sum_to_the_unsharded_totals(r1, phase):
    build = (lambda plan: prefill(r1, 16384, plan)) if phase == "prefill" else (lambda plan: decode(r1, 16, 4096, plan))
    one, sixteen = _gemms(build(ParallelPlan(1)), 3), _gemms(build(ParallelPlan(16, 16 if phase == "decode" else 1)), 3)
    assert one.keys() == sixteen.keys()
    rules = {"q_a": "column", "kv_a": "column", "q_b": "column", "kv_b": "column", "o_proj": "row",
             "expert_gate_up": "column", "expert_down": "row", "shared_gate_up": "column", "shared_down": "row",
             "q_absorb": "heads", "v_unabsorb": "heads", "mha_qk": "heads", "mha_pv": "heads",
             "absorbed_qk": "sequences", "absorbed_pv": "sequences"}
    checked = 0
    for key, op in one.items():
        if key[1] in rules:
            assert sixteen[key].flops * 16 == op.flops, key
            if op.weight_bytes:
                # weights split 16 ways (FP8 scale blocks a shard straddles aside)
                assert sixteen[key].weight_bytes * 16 == pytest.approx(op.weight_bytes, rel=0.01), key
            checked += 1
        elif key[1] == "router_gemm":
            assert sixteen[key] == op  # replicated
    assert checked >= 9


def _weights_read(graph):
    return sum(k.weight_bytes for k in graph.kernels())


def test_a_pass_reads_every_stored_weight_once(r1, llama70b):
    """Per socket, the weights a graph streams equal what the socket stores, except that the
    embedding is read only at the looked-up rows and the MTP module reads the shared LM head again."""
    from sn40l_sim.models.tensors import inventory
    for model, plan, graph, mtp in ((r1, DECODE16, decode(r1, expert_loading="all", drafts=1), True),
                                    (r1, TP16, prefill(r1, 4096, expert_loading="all"), False),
                                    (llama70b, ParallelPlan(8), decode(llama70b, 4, 100, ParallelPlan(8)), False)):
        tensors = {t.name: t for t in inventory(model)}
        emb = tensors["embedding"].shard_bytes(model, "row", plan.tp)
        head = tensors["lm_head"].shard_bytes(model, "column", plan.tp)
        gathers = sum(op.weight_bytes for k in graph.kernels() for op in k.operators if op.name == "embed_gather")
        stored = P.weight_bytes_per_socket(model, plan, include_mtp=mtp)
        assert _weights_read(graph) - gathers == stored - emb + (head if mtp else 0)


def _routed(kernel):
    return sum(op.weight_bytes for op in kernel.operators if op.name.startswith("expert_"))


def test_expert_loading_touched_reads_the_expected_experts(r1):
    all_ = layer(decode(r1, batch=16, expert_loading="all"), 3)["ffn"]
    touched = layer(decode(r1, batch=16, expert_loading="touched"), 3)["ffn"]
    expected = P.expected_distinct_experts(256, 8, 16)
    assert _routed(touched) / _routed(all_) == pytest.approx(expected / 256, rel=1e-5)
    assert dict(touched.notes)["experts_touched"] == pytest.approx(expected, abs=1e-3)
    assert dict(all_.notes)["experts_loaded"] == 256
    skewed = layer(decode(r1, batch=16, expert_loading="touched", routing_skew=1.0), 3)["ffn"]
    assert _routed(skewed) < _routed(touched)
    assert all_.flops == touched.flops  # FLOPs follow the tokens, not the loading


def test_expert_loading_follows_the_batch_by_default(r1):
    """The default streams the experts the batch touches: more with every batch, all of them at a
    large batch; ``all`` streams every expert whatever the batch."""
    batches = (1, 4, 16, 64, 256, 2048)
    default = [_routed(layer(decode(r1, batch=b, kv_len=1024), 3)["ffn"]) for b in batches]
    static = [_routed(layer(decode(r1, batch=b, kv_len=1024, expert_loading="all"), 3)["ffn"]) for b in batches]
    assert all(a < b for a, b in zip(default[:-1], default[1:], strict=True))
    assert len(set(static)) == 1
    assert default[0] == pytest.approx(static[0] * 8 / 256, rel=1e-5)  # one token: its 8 experts
    assert default[-1] == static[-1]                                    # 2048 tokens touch all 256


def test_graph_is_a_deterministic_dag(r1):
    g = decode(r1, drafts=1)
    assert nx.is_directed_acyclic_graph(g.graph)
    names = [k.name for k in g.kernels()]
    assert names == [k.name for k in decode(r1, drafts=1).kernels()]
    assert len(set(names)) == len(names)
    assert names[0] == "embedding" and names[1:3] == ["L00.mla", "L00.ffn"]
    assert names[-5:] == ["MTP0.mtp_proj", "MTP0.mla", "MTP0.ffn", "MTP0.lm_head", "MTP0.sampling"]
    assert [k.layer for k in g.kernels() if k.name.startswith("L")] == sorted(
        k.layer for k in g.kernels() if k.name.startswith("L"))


def test_identical_layers_have_identical_signatures(r1_graphs):
    for g in r1_graphs.values():
        by_kind: dict = {}
        for k in g.kernels():
            if k.layer is not None:
                dense = k.layer < 3
                by_kind.setdefault((dense, k.name.split(".", 1)[1]), set()).add(k.signature())
        assert all(len(sigs) == 1 for sigs in by_kind.values()), [key for key, s in by_kind.items() if len(s) > 1]
    mla_dense = layer(r1_graphs["decode"], 0)["mla"]
    mla_moe = layer(r1_graphs["decode"], 3)["mla"]
    assert mla_dense.signature() != mla_moe.signature()  # the MoE layers' MLA kernel runs the router


def test_kernel_structure_follows_the_deployment(r1_graphs):
    pre = layer(r1_graphs["prefill"], 3)
    assert list(pre) == ["qkv", "mha", "o_proj", "router", "moe_ffn"]
    assert list(layer(r1_graphs["prefill"], 0)) == ["qkv", "mha", "o_proj_ffn"]
    o_proj = pre["o_proj"].collectives
    assert [(c.kind, c.bytes, c.overlapped) for c in o_proj] == [("all_reduce", L * 7168 * 2, True)]
    assert pre["moe_ffn"].collectives[0].overlapped
    dec = layer(r1_graphs["decode"], 3)
    assert list(dec) == ["mla", "ffn"]
    kinds = [(c.kind, c.bytes) for c in dec["mla"].collectives]
    # all-to-alls count what one socket sends: 8 heads of the 15 other sequences, then the
    # 120 other heads of its one sequence
    assert kinds == [("all_gather", 16 * (1536 + 576) * 2), ("all_to_all", 15 * 8 * 576 * 2),
                     ("all_to_all", 1 * 120 * 512 * 2), ("all_reduce", 16 * 7168 * 2)]
    assert all(k.shards == 16 for k in r1_graphs["decode"].kernels())
    lm = [k for k in r1_graphs["prefill"].kernels() if k.kind == "lm_head"][0]
    assert ops(lm)["lm_head"].m == 1  # prefill: last token only


@dataclass(frozen=True)
class _TwoKernelPolicy:
    """Test double of a KV policy (a KVPolicyHooks): two fixed kernels per layer in prefill, none in
    decode."""

    def prefill_kernels(self, model, prompt_len, tp):
        op = Operator(name="scores", kind="gemm", flops=2 * 4 * 5 * 6, m=4, n=5, k=6, kv_read_bytes=prompt_len)
        return [FusedKernel("compress", "compress", "prefill", (op,), shards=tp),
                FusedKernel("ring", "ring", "prefill", (), shards=tp)]

    def decode_kernels(self, model, shape, plan):
        return []


def test_policy_kernels_follow_every_layer(r1):
    g = prefill(r1, 1024, policy=_TwoKernelPolicy())
    names = [k.name for k in g.kernels()]
    for i in range(61):
        last = f"L{i:02d}.{'moe_ffn' if i >= 3 else 'o_proj_ffn'}"
        j = names.index(last)
        assert names[j + 1: j + 3] == [f"L{i:02d}.compress", f"L{i:02d}.ring"]
    compress = [k for k in g.kernels() if k.kind == "compress"]
    assert len({k.signature() for k in compress}) == 1 and compress[0].operators[0].kv_read_bytes == 1024
    assert len([k for k in decode(r1, policy=_TwoKernelPolicy()).kernels() if k.kind == "compress"]) == 0


def test_activation_traffic_crosses_kernel_boundaries_only(r1_graphs):
    dec = layer(r1_graphs["decode"], 3)
    o = ops(dec["mla"])
    # the MLA kernel reads the residual stream once and writes the new residual and the normed input
    assert sum(op.act_in_bytes for op in dec["mla"].operators) == 16 * 7168 * 2
    assert o["q_b"].act_in_bytes == o["q_b"].act_out_bytes == 0  # latent stays on chip
    pre = layer(r1_graphs["prefill"], 3)
    # attention re-streams K and V tiles once per computed tile pair
    k_tiles = 8 * 136 * 8192 * 192 * 2
    assert ops(pre["mha"])["mha_qk"].act_in_bytes == L * 8 * 192 * 2 + k_tiles


def test_bad_shapes_and_options(r1):
    with pytest.raises(InputError, match="unknown graph option"):
        decode(r1, experts="all")
    with pytest.raises(InputError, match="expert_loading"):
        decode(r1, expert_loading="some")
    with pytest.raises(InputError, match="attention_dp"):
        decode(r1, plan=ParallelPlan(tp=16, attention_dp=3))
    with pytest.raises(InputError, match="kv_len"):
        decode(r1, kv_len=0)
    with pytest.raises(InputError, match="has no mtp section"):
        decode(load_model(GRAPHS_DIR / "llama3_1_8b.yaml"), plan=ParallelPlan(8), drafts=1)


def test_llama_attention_data_parallel_holds_whole_sequences(llama8b):
    g = decode(llama8b, batch=16, kv_len=1000, plan=ParallelPlan(tp=8, attention_dp=8))
    att = layer(g, 0)["decoder"]
    # 2 sequences per socket, all 8 KV heads of each, K and V
    assert sum(op.kv_read_bytes for op in att.operators) == 2 * 1000 * 8 * 128 * 2 * 2
    assert {c.kind for c in att.collectives} == {"all_to_all", "all_reduce"}
    tp_only = layer(decode(llama8b, batch=16, kv_len=1000, plan=ParallelPlan(tp=8)), 0)["decoder"]
    assert {c.kind for c in tp_only.collectives} == {"all_reduce"}
    assert att.flops == tp_only.flops  # same work, split by sequences instead of heads


@pytest.mark.parametrize("batch, fewest", [(16, 1), (20, 1), (4, 0), (1, 0)])
def test_queries_to_data_parallel_count_the_busiest_sender(r1, llama8b, batch, fewest):
    # In the switch from heads (TP) to sequences (DP), a socket sends its heads' rows of every
    # sequence it does not run; the one running the fewest, floor(B / dp), sends the most. Below
    # dp sequences most sockets run none and still send their heads of every sequence (the
    # all-to-all used to vanish at batch 1 and count the owner's share at batch 4 and 20).
    mla = layer(decode(r1, batch=batch, kv_len=1024, drafts=2), 3)["mla"]
    sent = {c.name: c.bytes for c in mla.collectives if c.kind == "all_to_all"}
    assert sent["mla_q_to_dp"] == (batch - fewest) * 3 * 8 * 576 * 2
    # the way back is sent by the socket running the most sequences, ceil(B / dp)
    assert sent["mla_o_to_tp"] == -(-batch // 16) * 3 * 120 * 512 * 2
    gqa = layer(decode(llama8b, batch=batch // 2 or 1, kv_len=1000, plan=ParallelPlan(tp=8, attention_dp=8)),
                0)["decoder"]
    b8 = batch // 2 or 1
    # 4 query heads and one K and one V head of 128 per socket at TP8
    q = {c.name: c.bytes for c in gqa.collectives if c.kind == "all_to_all"}["gqa_q_to_dp"]
    assert q == (b8 - b8 // 8) * (4 + 2) * 128 * 2
