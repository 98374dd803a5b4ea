"""Attention families are plug-ins: a toy family defined here, in the test, loads from a model
file, counts its parameters and KV bytes, builds prefill and decode graphs, shards its cache,
gets SnapStream's prefill kernels and is described, without touching the package.

The toy is multi-query attention: ``heads`` query heads share one key/value head of ``head_dim``;
one fused projection ``wqkv`` makes Q, K and V.
"""
from __future__ import annotations

from typing import ClassVar, Literal

import pytest

from sn40l_sim.errors import InputError
from sn40l_sim.ir import ParallelPlan, Shape
from sn40l_sim.kvcache import make_policy
from sn40l_sim.kvcache.sizing import kv_sharding, kv_width
from sn40l_sim.models import params as P
from sn40l_sim.models.builder import build_graph
from sn40l_sim.models.context import ACT, Ctx, Step
from sn40l_sim.models.families import FAMILIES, AttentionSpec, CachedTensor, register_family
from sn40l_sim.models.families.gqa import GQAAttentionSpec
from sn40l_sim.models.loader import load_model
from sn40l_sim.models.spec import ModelSpec
from sn40l_sim.models.template import load_templates
from sn40l_sim.models.tensors import Tensor
from sn40l_sim.report.describe import describe_model
from sn40l_sim.schema import PositiveInt

LAYERS, HIDDEN, HEADS, HEAD_DIM, VOCAB, FFN = 2, 64, 4, 16, 100, 128


def toy_qkv(c: Ctx) -> list[Step]:
    """``[T, hidden] @ [hidden, (heads + 2) * head_dim]`` and the cache write of the new rows."""
    t, d = c.tokens, c.model.attention.head_dim
    rows = c.seqs * (c.shape.prompt_len if c.phase == "prefill" else 1)
    return c.gemm("toy_qkv", t, "wqkv", reads=(("xn", t * c.model.hidden * ACT),),
                  writes=(("q", t * c.proj_heads * d * ACT),), kv_write=rows * 2 * d * c.kv_bytes)


def toy_attend(c: Ctx) -> list[Step]:
    """Decode: every query head against the one shared K/V head, ``kv_len`` cached tokens."""
    d, kv_len = c.model.attention.head_dim, max(c.shape.kv_len, c.shape.prompt_len)
    return c.gemm("toy_attend", c.attn_heads, n=kv_len, k=d, count=c.seqs,
                  reads=(("q", c.tokens * c.proj_heads * d * ACT),),
                  writes=(("attn_o", c.tokens * c.proj_heads * d * ACT),),
                  kv_read=c.seqs * kv_len * 2 * d * c.kv_bytes)


def toy_q_to_dp(c: Ctx) -> int:
    """All-to-all of the new query rows to the sequences' sockets when attention runs data-parallel
    over the batch (``toy_attend`` counts the socket's sequences: models/gathers.py)."""
    return (c.tokens - c.fewest_seqs) * c.proj_heads * c.model.attention.head_dim * ACT if c.dp > 1 else 0


def toy_o_to_tp(c: Ctx) -> int:
    """And of the head outputs back to the heads' sockets."""
    return c.seqs * (c.attn_heads - c.proj_heads) * c.model.attention.head_dim * ACT if c.dp > 1 else 0


class ToyAttentionSpec(AttentionSpec):
    """Multi-query attention: one K/V head for all query heads."""

    kind: Literal["toy"]
    head_dim: PositiveInt

    operators: ClassVar = {"toy_qkv": toy_qkv, "toy_attend": toy_attend}
    sizes: ClassVar = {"toy_q_to_dp": toy_q_to_dp, "toy_o_to_tp": toy_o_to_tp}
    default_template: ClassVar[str] = "kernels_toy.yaml"
    title: ClassVar[str] = "toy multi-query attention"

    def weight_tensors(self, hidden: int) -> list[Tensor]:
        d = self.head_dim
        return [Tensor("wqkv", rows=hidden, cols=(self.heads + 2) * d, col_granule=d),
                Tensor("o_proj", rows=self.heads * d, cols=hidden, row_granule=d)]

    def cached_tensors(self) -> tuple[CachedTensor, ...]:
        return (CachedTensor("kv", 2 * self.head_dim, 1),)

    def query_head_dim(self) -> int:
        return self.head_dim

    def problems(self):
        if self.head_dim % 2:
            yield "head_dim", f"head_dim must be even, got {self.head_dim}"


TEMPLATE = """\
kind: kernels
name: toy
attention: toy
flash: {block_q: 64, block_kv: 64}
sharding: {embedding: row, final_norm: replicated, lm_head: column, attn_norm: replicated,
           ffn_norm: replicated, wqkv: column, o_proj: row, dense_gate_up: column, dense_down: row}
prefill:
  blocks: {head: [embedding], dense_layer: [attention, ffn], tail: [lm_head]}
  kernels:
    embedding: {operators: [embed_gather], collectives: [{size: embed_reduce, kind: all_reduce}]}
    attention:
      operators: [attn_norm, toy_qkv, toy_attend, o_proj, attn_residual]
      collectives: [{size: hidden, kind: all_reduce}]
    ffn: &ffn
      operators: [ffn_norm, dense_gate_up, dense_act, dense_down, ffn_residual]
      collectives: [{size: hidden, kind: all_reduce}]
    # sampling over the vocab-parallel logits gathers each socket's candidates (models/gathers.py)
    lm_head: &lm_head {operators: [final_norm, lm_head, sample], collectives: [{size: candidates, kind: all_gather}]}
decode:
  blocks: {head: [embedding], dense_layer: [attention, ffn], tail: [lm_head]}
  kernels:
    embedding: {operators: [embed_gather], collectives: [{size: embed_reduce, kind: all_reduce}]}
    attention:
      operators: [attn_norm, toy_qkv, toy_attend, o_proj, attn_residual]
      collectives: [{size: toy_q_to_dp, kind: all_to_all}, {size: toy_o_to_tp, kind: all_to_all},
                    {size: hidden, kind: all_reduce}]
    ffn: *ffn
    lm_head: *lm_head
"""

MODEL = f"""\
kind: model
name: toy-mqa
layers: {LAYERS}
hidden: {HIDDEN}
dense_ffn: {FFN}
vocab: {VOCAB}
weight_dtype: bf16
attention: {{kind: toy, heads: {HEADS}, head_dim: {HEAD_DIM}}}
kernels: kernels_toy.yaml
"""


@pytest.fixture
def toy(tmp_path):
    """The toy family, registered for one test; the model file and its template in tmp_path."""
    register_family(ToyAttentionSpec)
    (tmp_path / "kernels_toy.yaml").write_text(TEMPLATE)
    (tmp_path / "toy.yaml").write_text(MODEL)
    yield tmp_path / "toy.yaml"
    del FAMILIES["toy"]


def test_a_registered_family_loads_and_counts(toy):
    model = load_model(toy)
    assert isinstance(model.attention, ToyAttentionSpec)
    d = HEAD_DIM
    assert P.kv_bytes_per_token(model) == LAYERS * 2 * d * 2 == LAYERS * kv_width(model) * 2
    per_layer = HIDDEN * (HEADS + 2) * d + HEADS * d * HIDDEN + 2 * HIDDEN + 3 * HIDDEN * FFN
    assert P.total_params(model) == LAYERS * per_layer + 2 * VOCAB * HIDDEN + HIDDEN
    # one shared K/V head: every socket of a TP group holds it and splits its rows
    assert kv_sharding(model, 4) == kv_sharding(model, 4).__class__(query_heads=1, kv_heads_per_socket=1, row_shards=4,
                                                                         score_shards=4)


def test_a_registered_family_builds_graphs(toy):
    model = load_model(toy)
    decode = build_graph(model, Shape("decode", batch=2, prompt_len=0, kv_len=512), ParallelPlan(tp=2))
    assert [k.name for k in decode.kernels()] == ["embedding", "L00.attention", "L00.ffn", "L01.attention",
                                                  "L01.ffn", "lm_head"]
    attend = next(op for op in decode.graph.nodes["L01.attention"]["kernel"].operators if op.name == "toy_attend")
    # both sequences, the whole 512-token cache of the one K/V head, BF16
    assert attend.kv_read_bytes == 2 * 512 * 2 * HEAD_DIM * 2
    assert attend.flops == 2 * (HEADS // 2) * 512 * HEAD_DIM * 2
    policy = make_policy("snapstream", {"budget": 64, "recent": 16})
    prefill = build_graph(model, Shape("prefill", batch=1, prompt_len=256), ParallelPlan(tp=2), policy)
    assert {"L00.snapkv", "L00.ring_buffer", "L01.snapkv"} <= {k.name for k in prefill.kernels()}


def test_a_registered_family_is_described(toy):
    text = describe_model(toy)
    assert "toy multi-query attention (toy): 4 query heads, 32 elements cached per token and layer" in text


def test_a_family_checks_its_own_fields(toy, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(MODEL.replace(f"head_dim: {HEAD_DIM}", "head_dim: 15"))
    with pytest.raises(InputError, match="head_dim must be even") as info:
        load_model(bad)
    assert info.value.field == "attention.head_dim" and info.value.line == 8


def test_a_template_may_only_name_its_own_familys_formulas(toy, tmp_path):
    path = tmp_path / "mixed.yaml"
    path.write_text(TEMPLATE.replace("toy_attend", "absorbed_qk"))
    with pytest.raises(InputError, match="unknown operator formula 'absorbed_qk' for toy attention"):
        load_templates(path)


def test_unknown_kinds_name_the_registered_ones(toy):
    data = dict(kind="model", name="x", layers=1, hidden=8, dense_ffn=8, vocab=8, weight_dtype="bf16",
                attention=dict(kind="mha", heads=2))
    with pytest.raises(Exception, match="expected one of gqa, mla, toy"):
        ModelSpec.model_validate(data)


def test_without_registration_the_kind_is_unknown(tmp_path):
    (tmp_path / "kernels_toy.yaml").write_text(TEMPLATE)
    (tmp_path / "toy.yaml").write_text(MODEL)
    with pytest.raises(InputError, match="unknown attention kind; expected one of gqa, mla") as info:
        load_model(tmp_path / "toy.yaml")
    assert info.value.field == "attention.kind"
    with pytest.raises(InputError, match="unknown attention kind 'toy'") as info:
        load_templates(tmp_path / "kernels_toy.yaml")
    assert info.value.field == "attention"


def test_a_second_family_under_a_registered_kind_is_refused():
    # it would silently replace grouped-query attention for every Llama model loaded after it
    class Impostor(ToyAttentionSpec):
        """Calls itself gqa."""

        kind: Literal["gqa"]

    with pytest.raises(TypeError, match="attention kind 'gqa' of .*Impostor .* is already registered by GQAAttentionSpec"):
        register_family(Impostor)
    assert FAMILIES["gqa"] is GQAAttentionSpec
    register_family(GQAAttentionSpec)          # the same class again: its module imported a second time
    assert FAMILIES["gqa"] is GQAAttentionSpec


def test_the_split_the_kv_head_counts_assume_is_the_one_reported():
    # check's uneven-heads warning reads socket_heads; it described an even split (64 heads over 9
    # sockets: 8 of the 9 hold 7) while socket_kv_heads and kv_head_sockets count KV heads of runs
    # of ceil(heads / ways) (8 sockets with one group each, one with none). Brute force: walk the
    # reported split's consecutive heads and count the groups each socket and each group touch.
    for heads, kv_heads in ((32, 8), (64, 8), (128, 8), (28, 4), (24, 6)):
        spec = GQAAttentionSpec(kind="gqa", heads=heads, kv_heads=kv_heads, head_dim=128)
        group = heads // kv_heads
        for ways in range(1, 17):
            split = spec.socket_heads(ways)
            assert len(split) == ways and split[0] == -(-heads // ways)
            assert sum(split) == heads or heads < ways
            if heads < ways:
                continue
            if ways % kv_heads == 0:    # each group over sockets of its own, as evenly as it goes
                per = ways // kv_heads
                own = [group // per + (i < group % per) for i in range(per)] * kv_heads
                assert split == tuple(sorted(own, reverse=True))
                assert (spec.socket_kv_heads(ways), spec.kv_head_sockets(ways)) == (1, per)
                continue
            start, socket_groups, group_sockets = 0, [], {}
            for socket, n in enumerate(split):
                groups = {h // group for h in range(start, start + n)}
                socket_groups.append(len(groups))
                for g in groups:
                    group_sockets.setdefault(g, set()).add(socket)
                start += n
            assert spec.socket_kv_heads(ways) == max(socket_groups), (heads, kv_heads, ways)
            assert spec.kv_head_sockets(ways) == max(map(len, group_sockets.values())), (heads, kv_heads, ways)
