"""Multi-head latent attention (DeepSeek-V3/R1): projections, prefill and decode attention.

Shapes per token (docs/reference.md §2): ``q = q_b(norm(q_a(x)))`` gives ``heads x (nope + rope)``
(128 x 192); ``kv_a(x)`` gives the 512-wide latent plus the 64-wide RoPE key, which is what the
cache stores (576 elements, shared by all heads); ``kv_b`` expands the latent into per-head
``k_nope`` (128) and ``v`` (128).
A model without query compression (``q_lora_rank: null``, DeepSeek-V2-Lite's configuration)
projects the query in one head-split GEMM, ``q_proj``, where the template would run ``q_a``,
``q_norm`` and ``q_b``; its template names ``q_proj`` instead (a template naming the other form
is refused by name).

Prefill runs the non-absorbed form, heads split over sockets: each socket expands K and V for its
``ceil(heads / tp)`` heads, writes Q, K (192 wide, the shared RoPE key broadcast) and V (128) to
HBM for the attention kernel, and writes its ``1 / tp`` share of the prompt's latent rows to the
KV cache (the latent is shared by heads, so the sockets split it by tokens for the transfer to the
decode node). Attention is causal FlashAttention over ``flash.block_q x flash.block_kv`` tiles
(:mod:`sn40l_sim.models.flash`), K/V tiles streamed from HBM once per query tile. A later chunk
of a chunked prefill (``Shape.kv_len`` earlier tokens) attends over the earlier chunks' per-head
keys and values too, which the node holds as activations from their QKV kernels (sized in
``serving/memory_fit.py``) rather than rebuilding them from the cached latents: their ``kv_b``
up-projection is not repeated, the chunk only streams them.

Decode runs the absorbed form: ``W_UK`` (the K half of ``kv_b``) is folded into the query in the TP
layout (``q_absorb``: per head ``[B, 128] @ [128, 512]``), an all-to-all moves the 576-wide queries
to the data-parallel layout, where each socket runs its ``ceil(B / dp)`` sequences with all heads
against one shared KV head (``[heads, 576] @ [576, kv_len]`` then ``[heads, kv_len] @ [kv_len,
512]``: ``2 * heads * (576 + 512)`` FLOPs per cached token), and an all-to-all brings the 512-wide
head outputs back for ``W_UV`` (the V half of ``kv_b``) and the row-parallel output projection.
In decode a socket's cache holds the whole latent of each of its sequences (replicated over
``tp / dp`` sockets when heads are split within a sequence). A speculative verify step has
``queries = 1 + drafts`` rows per sequence: they share one pass over the sequence's cache (its
``heads x queries`` query rows form one GEMM against it), so the cache bytes read do not change
while the attention FLOPs, softmax and the rows written to the cache grow ``queries`` times.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, ClassVar, Literal

from sn40l_sim.ir import AttentionShape, ParallelPlan
from sn40l_sim.models.context import ACT, SCORE
from sn40l_sim.models.families.base import AttentionSpec, CachedTensor, register_family
from sn40l_sim.models.flash import causal_tile_pairs, padded_rows, padded_tile_pairs
from sn40l_sim.models.tensors import Tensor
from sn40l_sim.schema import PositiveInt

if TYPE_CHECKING:
    from sn40l_sim.models.context import Ctx, Step


def _att(c: Ctx) -> MLAAttentionSpec:
    return c.model.attention  # type: ignore[return-value]


def _latent_width(c: Ctx) -> int:
    """Elements one token caches per layer: the latent and the RoPE key (576 for DeepSeek-R1)."""
    return _att(c).kv_lora_rank + _att(c).qk_rope_head_dim


def q_a(c: Ctx) -> list[Step]:
    """Query down-projection ``[T, hidden] @ [hidden, q_lora_rank]`` (its shard)."""
    t = c.tokens
    return c.gemm("q_a", t, "q_a", reads=(("xn", t * c.model.hidden * ACT),),
                  writes=(("q_lat", t * _att(c).q_lora_rank * ACT),))


def q_proj(c: Ctx) -> list[Step]:
    """Query projection without compression (``q_lora_rank: null``, DeepSeek-V2-Lite), split by
    heads: ``[T, hidden] @ [hidden, heads/tp * 192]``; it stands for ``q_a``, ``q_norm`` and ``q_b``."""
    t, (k, n) = c.tokens, c.dims("q_proj")
    return c.gemm("q_proj", t, "q_proj", reads=(("xn", t * k * ACT),), writes=(("q", t * n * ACT),))


def kv_a(c: Ctx) -> list[Step]:
    """KV down-projection ``[T, hidden] @ [hidden, kv_lora_rank + rope]`` (its shard)."""
    t = c.tokens
    return c.gemm("kv_a", t, "kv_a", reads=(("xn", t * c.model.hidden * ACT),),
                  writes=(("kv_lat", t * _latent_width(c) * ACT),))


def q_norm(c: Ctx) -> list[Step]:
    """RMSNorm of the (all-gathered) query latent."""
    t, w = c.tokens, _att(c).q_lora_rank
    return c.simd("q_norm", "elementwise", t * w, transcendentals=t, weight="q_norm",
                  reads=(("q_lat", t * w * ACT),), writes=(("q_latn", t * w * ACT),))


def kv_norm(c: Ctx) -> list[Step]:
    """RMSNorm of the KV latent (the RoPE key part passes through)."""
    t = c.tokens
    return c.simd("kv_norm", "elementwise", t * _att(c).kv_lora_rank, transcendentals=t, weight="kv_norm",
                  reads=(("kv_lat", t * _latent_width(c) * ACT),), writes=(("kv_latn", t * _latent_width(c) * ACT),))


def q_b(c: Ctx) -> list[Step]:
    """Query up-projection, split by heads: ``[T, q_lora] @ [q_lora, heads/tp * 192]``."""
    t, (k, n) = c.tokens, c.dims("q_b")
    return c.gemm("q_b", t, "q_b", reads=(("q_latn", t * k * ACT),), writes=(("q", t * n * ACT),))


def kv_b(c: Ctx) -> list[Step]:
    """Prefill: K-nope and V up-projection, split by heads: ``[T, 512] @ [512, heads/tp * 256]``."""
    t, (_, n) = c.tokens, c.dims("kv_b")
    return c.gemm("kv_b", t, "kv_b", reads=(("kv_latn", t * _latent_width(c) * ACT),),
                  writes=(("kv_up", t * n * ACT),))


def mla_rope(c: Ctx) -> list[Step]:
    """Rotary embedding of each head's 64-wide query part and of the shared 64-wide key."""
    t, r = c.tokens, _att(c).qk_rope_head_dim
    return c.simd("rope", "elementwise", t * c.proj_heads * r + t * r,
                  reads=(("q", t * c.proj_heads * (r + _att(c).qk_nope_head_dim) * ACT),),
                  writes=(("q_rot", t * c.proj_heads * r * ACT),))


def write_qkv(c: Ctx) -> list[Step]:
    """Prefill: lay out per-head Q (192), K (128 nope + shared 64 rope) and V (128) in HBM."""
    a, t, hp = _att(c), c.tokens, c.proj_heads
    qk = a.qk_nope_head_dim + a.qk_rope_head_dim
    return c.simd("write_qkv", "elementwise", t * hp * (2 * qk + a.v_head_dim),
                  reads=(("q", t * hp * qk * ACT), ("q_rot", t * hp * a.qk_rope_head_dim * ACT),
                         ("kv_up", t * hp * (a.qk_nope_head_dim + a.v_head_dim) * ACT),
                         ("kv_latn", t * _latent_width(c) * ACT)),
                  writes=(("q_heads", t * hp * qk * ACT), ("k_heads", t * hp * qk * ACT),
                          ("v_heads", t * hp * a.v_head_dim * ACT)))


def write_latent_cache(c: Ctx) -> list[Step]:
    """Prefill: this socket's ``1 / (tp / dp)`` share of the prompt's 576-wide cache rows."""
    rows = -(-c.seqs * c.shape.prompt_len // c.head_ways)
    size = rows * _latent_width(c)
    return c.simd("write_latent_cache", "scatter", size, reads=(("kv_latn", size * ACT),),
                  kv_write_elements=size)


def _tiles(c: Ctx) -> list[tuple[int, int, int]]:
    """The computed tile pairs of the prompt's rows, over the keys of any earlier chunks too:
    whole tiles in the kernel's padded version (:mod:`sn40l_sim.models.flash`)."""
    f = c.template.flash
    if c.flash_padded:
        return padded_tile_pairs(c.shape.prompt_len, f.block_q, f.block_kv, c.earlier)
    return causal_tile_pairs(c.shape.prompt_len, f.block_q, f.block_kv, c.earlier)


def _q_reads(c: Ctx, name: str, width: int) -> dict:
    """The reads of the queries (``name``, ``width`` per head): the padded version reads whole
    query tiles, the rows past the prompt traffic rather than a larger tensor."""
    per_row = c.seqs * c.attn_heads * width * ACT
    pad = padded_rows(c.shape.prompt_len, c.template.flash.block_q) if c.flash_padded else 0
    return dict(reads=((name, c.shape.prompt_len * per_row),), rereads=((name, pad * per_row),) if pad else ())


def _flash(c: Ctx, name: str, k_dim: int, n_dim: int | None, extra: dict) -> list[Step]:
    """One GEMM per tile shape of causal attention; ``n_dim=None`` means the QK^T product."""
    steps: list[Step] = []
    for i, (rows, cols, pairs) in enumerate(_tiles(c)):
        count = c.seqs * c.attn_heads * pairs
        m, n, k = (rows, cols, k_dim) if n_dim is None else (rows, n_dim, cols)
        steps += c.gemm(name if i == 0 else f"{name}#{i + 1}", m, n=n, k=k, count=count,
                        **(extra if i == 0 else {}))
    return steps


def _kv_stream(c: Ctx, name: str, width: int) -> dict:
    """The reads of the K or V tiles (``name``, ``width`` per head), streamed once per computed
    tile pair: the tensor's first full read, and the re-reads of the later query tiles (traffic,
    not resident memory). A later chunk reads the earlier chunks' keys and values too: the
    activations the QKV kernels of those chunks wrote, held for it (``serving/memory_fit.py``)."""
    tiles = sum(cols * pairs for _, cols, pairs in _tiles(c))
    keys = c.earlier + c.shape.prompt_len
    per_row = c.seqs * c.attn_heads * width * ACT
    return dict(reads=((name, keys * per_row),), rereads=((name, (tiles - keys) * per_row),))


def mha_qk(c: Ctx) -> list[Step]:
    """Prefill scores ``Q K^T`` over computed tile pairs (head dim 192)."""
    a = _att(c)
    qk = a.qk_nope_head_dim + a.qk_rope_head_dim
    q, keys = _q_reads(c, "q_heads", qk), _kv_stream(c, "k_heads", qk)
    return _flash(c, "mha_qk", qk, None, dict(reads=q["reads"] + keys["reads"], rereads=q["rereads"] + keys["rereads"],
                                              writes=(("scores", _mha_scores(c) * SCORE),)))


def _mha_scores(c: Ctx) -> int:
    """Scores computed over the causal tile pairs."""
    return c.seqs * c.attn_heads * sum(r * cl * n for r, cl, n in _tiles(c))


def mha_softmax(c: Ctx) -> list[Step]:
    """Online softmax over the computed scores: one exp per score."""
    scores = _mha_scores(c)
    return c.simd("mha_softmax", "softmax", scores, transcendentals=scores, reads=(("scores", scores * SCORE),),
                  writes=(("probs", scores * ACT),))


def mha_pv(c: Ctx) -> list[Step]:
    """Prefill ``P V`` over computed tile pairs (value dim 128)."""
    v = _att(c).v_head_dim
    rows = c.seqs * c.shape.prompt_len * c.attn_heads
    values = _kv_stream(c, "v_heads", v)
    return _flash(c, "mha_pv", 0, v, dict(reads=(("probs", _mha_scores(c) * ACT),) + values["reads"],
                                          rereads=values["rereads"], writes=(("attn_o", rows * v * ACT),)))


def q_absorb(c: Ctx) -> list[Step]:
    """Decode: fold ``W_UK`` into the query, per head ``[T, 128] @ [128, 512]`` (K half of kv_b)."""
    a, t, hp = _att(c), c.tokens, c.proj_heads
    share = (a.qk_nope_head_dim, a.qk_nope_head_dim + a.v_head_dim)
    return c.gemm("q_absorb", t, "kv_b", n=a.kv_lora_rank, k=a.qk_nope_head_dim, count=hp, share=share,
                  reads=(("q", t * hp * (a.qk_nope_head_dim + a.qk_rope_head_dim) * ACT),),
                  writes=(("q_abs", t * hp * a.kv_lora_rank * ACT),))


def cache_write(c: Ctx) -> list[Step]:
    """Decode: write the new tokens' 576-wide latent rows (``queries`` per sequence) of this
    socket's sequences."""
    size = c.seqs * c.queries * _latent_width(c)
    return c.simd("cache_write", "scatter", size, reads=(("kv_latn", c.tokens * _latent_width(c) * ACT),),
                  kv_write_elements=size)


def absorbed_qk(c: Ctx) -> list[Step]:
    """Decode scores: per sequence ``[heads * queries, 576] @ [576, kv_len]``; streams the cached
    latent once for all the sequence's query rows."""
    kv_len, width = c.shape.kv_len, _latent_width(c)
    rows = c.attn_heads * c.queries
    return c.gemm("absorbed_qk", rows, n=kv_len, k=width, count=c.seqs,
                  reads=(("q_abs", c.tokens * c.proj_heads * _att(c).kv_lora_rank * ACT),
                         ("q_rot", c.tokens * c.proj_heads * _att(c).qk_rope_head_dim * ACT)),
                  kv_read_elements=c.seqs * kv_len * width,
                  writes=(("scores", c.seqs * rows * kv_len * SCORE),),
                  attention=AttentionShape(c.seqs, rows, kv_len, _att(c).kv_lora_rank))


def absorbed_softmax(c: Ctx) -> list[Step]:
    """Softmax over ``kv_len`` scores per head and query row of each sequence."""
    n = c.seqs * c.attn_heads * c.queries * c.shape.kv_len
    return c.simd("absorbed_softmax", "softmax", n, transcendentals=n, reads=(("scores", n * SCORE),),
                  writes=(("probs", n * ACT),))


def absorbed_pv(c: Ctx) -> list[Step]:
    """Decode ``P V``: per sequence ``[heads * queries, kv_len] @ [kv_len, 512]`` (V is the latent
    itself, read once with the scores' tile)."""
    w, rows = _att(c).kv_lora_rank, c.attn_heads * c.queries
    return c.gemm("absorbed_pv", rows, n=w, k=c.shape.kv_len, count=c.seqs,
                  reads=(("probs", c.seqs * rows * c.shape.kv_len * ACT),),
                  writes=(("o_lat", c.seqs * rows * w * ACT),))


def v_unabsorb(c: Ctx) -> list[Step]:
    """Decode: ``W_UV`` per head ``[T, 512] @ [512, 128]`` (V half of kv_b), back in TP layout."""
    a, t, hp = _att(c), c.tokens, c.proj_heads
    share = (a.v_head_dim, a.qk_nope_head_dim + a.v_head_dim)
    return c.gemm("v_unabsorb", t, "kv_b", n=a.v_head_dim, k=a.kv_lora_rank, count=hp, share=share,
                  reads=(("o_lat", t * hp * a.kv_lora_rank * ACT),),
                  writes=(("attn_o", t * hp * a.v_head_dim * ACT),))


OPERATORS = {f.__name__: f for f in (q_a, q_proj, kv_a, q_norm, kv_norm, q_b, kv_b, mla_rope, write_qkv,
                                     write_latent_cache, mha_qk, mha_softmax, mha_pv, q_absorb,
                                     cache_write, absorbed_qk, absorbed_softmax, absorbed_pv, v_unabsorb)}


def latent(c: Ctx) -> int:
    """All-gather of the column-split down-projections' outputs ``[T, q_lora + kv_lora + rope]``."""
    # a model without query compression has no q_a: its q_proj is split by heads and needs no gather
    width = sum(c.tensors[t].cols for t in ("q_a", "kv_a") if t in c.tensors and c.rule(t) == "column")
    return c.tokens * width * ACT if c.tp > 1 else 0


def mla_q_to_dp(c: Ctx) -> int:
    """All-to-all of the absorbed 576-wide queries from the TP (heads) to the DP (sequences)
    layout. Bytes one socket sends: its ``heads/tp`` heads of the other sockets' sequences' rows,
    ``(B - floor(B/dp)) * queries * heads/tp * 576`` BF16. The collective contract counts what a
    member sends, and the busiest sender is the socket running the fewest sequences
    (:attr:`~sn40l_sim.models.context.Ctx.fewest_seqs`): when ``dp`` does not divide the batch,
    or the batch is below ``dp``, some socket runs ``floor(B/dp)`` of them, none below ``dp``,
    and sends its heads of every sequence."""
    return (c.tokens - c.fewest_seqs * c.queries) * c.proj_heads * _latent_width(c) * ACT if c.dp > 1 else 0


def mla_o_to_tp(c: Ctx) -> int:
    """All-to-all of the 512-wide head outputs back to the TP layout. Bytes one socket sends:
    the other sockets' heads of its own sequences' rows, ``B/dp * queries * (heads - heads/tp) * 512``
    BF16."""
    return c.seqs * c.queries * (c.attn_heads - c.proj_heads) * _att(c).kv_lora_rank * ACT if c.dp > 1 else 0


SIZES = {f.__name__: f for f in (latent, mla_q_to_dp, mla_o_to_tp)}

#: the query's two forms: compressed (``q_a``, ``q_norm``, ``q_b``) or projected directly (``q_proj``)
FORMULA_WEIGHTS = {**{op: (op, "attention.q_lora_rank") for op in ("q_a", "q_norm", "q_b")},
                    "q_proj": ("q_proj", "attention.q_lora_rank: null")}


@register_family
class MLAAttentionSpec(AttentionSpec):
    """Multi-head latent attention (DeepSeek): one cached latent + RoPE key per token and layer."""

    kind: Literal["mla"]
    #: width of the compressed query (``q_a``, ``q_norm``, ``q_b``); written ``null`` for a model
    #: that projects the query directly (DeepSeek-V2-Lite's ``q_lora_rank: null``: one ``q_proj``).
    #: Required either way, so a model file that forgets it is refused rather than read as ``null``
    q_lora_rank: PositiveInt | None
    kv_lora_rank: PositiveInt
    qk_nope_head_dim: PositiveInt
    qk_rope_head_dim: PositiveInt
    v_head_dim: PositiveInt

    operators: ClassVar = OPERATORS
    sizes: ClassVar = SIZES
    formula_weights: ClassVar = FORMULA_WEIGHTS
    # prefill runs the non-absorbed form over the prompt's tiles, decode the absorbed one over the cache
    phase_operators: ClassVar = {**dict.fromkeys(("mha_qk", "mha_softmax", "mha_pv"), "prefill"),
                                 **dict.fromkeys(("absorbed_qk", "absorbed_softmax", "absorbed_pv"), "decode")}
    default_template: ClassVar[str] = "kernels_deepseek.yaml"
    # prefill runs the non-absorbed form: the QKV kernel writes a 192-wide key per query head
    prefill_key_source: ClassVar = "activations"
    title: ClassVar[str] = "multi-head latent attention"

    def weight_tensors(self, hidden: int) -> list[Tensor]:
        """``q_a``, ``q_norm``, ``q_b`` (or ``q_proj`` without query compression), ``kv_a``,
        ``kv_norm``, ``kv_b``, ``o_proj`` (heads kept whole when split)."""
        qk = self.qk_nope_head_dim + self.qk_rope_head_dim
        if self.q_lora_rank is None:
            query = [Tensor("q_proj", rows=hidden, cols=self.heads * qk, col_granule=qk)]
        else:
            query = [Tensor("q_a", rows=hidden, cols=self.q_lora_rank),
                     Tensor("q_norm", rows=self.q_lora_rank, group="norms", vector=True),
                     Tensor("q_b", rows=self.q_lora_rank, cols=self.heads * qk, col_granule=qk)]
        return [
            *query,
            Tensor("kv_a", rows=hidden, cols=self.kv_lora_rank + self.qk_rope_head_dim),
            Tensor("kv_norm", rows=self.kv_lora_rank, group="norms", vector=True),
            Tensor("kv_b", rows=self.kv_lora_rank, cols=self.heads * (self.qk_nope_head_dim + self.v_head_dim),
                   col_granule=self.qk_nope_head_dim + self.v_head_dim),
            Tensor("o_proj", rows=self.heads * self.v_head_dim, cols=hidden, row_granule=self.v_head_dim),
        ]

    def cached_tensors(self) -> tuple[CachedTensor, ...]:
        """The latent and the RoPE key: one row shared by all heads, so a single "KV head"."""
        return (CachedTensor("latent", self.kv_lora_rank, 1),
                CachedTensor("rope_key", self.qk_rope_head_dim, 1, valued=False))

    def query_head_dim(self) -> int:
        """``qk_nope_head_dim + qk_rope_head_dim`` (192 for DeepSeek)."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    def prefill_kv_head_width(self) -> int:
        """The QKV kernel's per-head key (``qk_nope + qk_rope``, 192) and value (``v_head_dim``,
        128) that prefill attention reads (``write_qkv``)."""
        return self.query_head_dim() + self.v_head_dim

    def problems(self) -> Iterator[tuple[str, str]]:
        """RoPE rotates pairs of elements."""
        if self.qk_rope_head_dim % 2:
            yield "qk_rope_head_dim", f"RoPE rotates pairs: qk_rope_head_dim must be even, got {self.qk_rope_head_dim}"

    def reference_plans(self) -> tuple[ParallelPlan, ParallelPlan]:
        """The SnapStream paper's deployment: prefill TP16, decode TP16 with attention DP16."""
        return ParallelPlan(tp=16), ParallelPlan(tp=16, attention_dp=16)
