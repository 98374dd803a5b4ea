"""Grouped-query attention (Llama-3.1): Q/K/V projections, prefill and decode attention.

``heads`` query heads share ``kv_heads`` K/V heads of ``head_dim``. Tensor parallelism splits heads:
a socket holds ``ceil(heads / tp)`` consecutive query heads and the KV heads of their groups
(``ceil(kv_heads / tp)`` when the split follows the groups; one more where a socket's heads span two
groups), so with more sockets than KV heads each KV head is replicated on ``tp / kv_heads`` sockets
(and so is its cache). When ``tp`` is a multiple of ``kv_heads`` each group has sockets of its own
and the split follows the groups even when ``heads / tp`` is not whole
(:meth:`GQAAttentionSpec.socket_kv_heads`).
With ``attention_dp > 1`` the sequences are split ``dp`` ways and the heads ``tp / dp`` ways, and
all-to-alls switch layouts around the attention, as for MLA.

The cache holds K and V: ``kv_len * kv_heads * head_dim * 2 * kv_bytes`` per layer and sequence.
Prefill attention is causal FlashAttention reading K/V tiles from the cache the QKV kernel wrote
(once per query tile and KV head; a later chunk of a chunked prefill also reads the earlier
chunks' from it); decode attention streams the whole cache once, for all the
``queries = 1 + drafts`` rows of a sequence in a speculative verify step (the ``group x queries``
query rows of a KV head form one GEMM against it).
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Literal

from sn40l_sim.ir import AttentionShape, ParallelPlan
from sn40l_sim.models.context import ACT, SCORE
from sn40l_sim.models.families.base import AttentionSpec, CachedTensor, head_groups, register_family
from sn40l_sim.models.flash import causal_tile_pairs, padded_rows, padded_tile_pairs
from sn40l_sim.models.tensors import Tensor
from sn40l_sim.schema import PositiveInt

if TYPE_CHECKING:
    from sn40l_sim.models.context import Ctx, Step


def _att(c: Ctx) -> GQAAttentionSpec:
    return c.model.attention  # type: ignore[return-value]


def _d(c: Ctx) -> int:
    return _att(c).head_dim


def _kv_heads(c: Ctx, ways: int) -> int:
    return _att(c).socket_kv_heads(ways)


def _proj(c: Ctx, name: str, out: str) -> list[Step]:
    t, (k, n) = c.tokens, c.dims(name)
    return c.gemm(name, t, name, reads=(("xn", t * k * ACT),), writes=((out, t * n * ACT),))


def q_proj(c: Ctx) -> list[Step]:
    """``[T, hidden] @ [hidden, heads/tp * head_dim]``."""
    return _proj(c, "q_proj", "q")


def k_proj(c: Ctx) -> list[Step]:
    """``[T, hidden] @ [hidden, kv_heads/tp * head_dim]``."""
    return _proj(c, "k_proj", "k_new")


def v_proj(c: Ctx) -> list[Step]:
    """``[T, hidden] @ [hidden, kv_heads/tp * head_dim]``."""
    return _proj(c, "v_proj", "v_new")


def gqa_rope(c: Ctx) -> list[Step]:
    """Rotary embedding of the socket's query and key heads."""
    t, d, kvh = c.tokens, _d(c), _kv_heads(c, c.tp)
    return c.simd("rope", "elementwise", t * (c.proj_heads + kvh) * d,
                  reads=(("q", t * c.proj_heads * d * ACT), ("k_new", t * kvh * d * ACT)),
                  writes=(("q_rot", t * c.proj_heads * d * ACT),))


def kv_cache_write(c: Ctx) -> list[Step]:
    """Write the new tokens' K and V rows (``queries`` per sequence) of this socket's KV heads to
    the cache."""
    rows = c.seqs * c.queries
    kvh, d = _kv_heads(c, c.head_ways), _d(c)
    size = rows * kvh * d * 2
    return c.simd("kv_cache_write", "scatter", size,
                  reads=(("k_new", c.tokens * _kv_heads(c, c.tp) * d * ACT),
                         ("v_new", c.tokens * _kv_heads(c, c.tp) * d * ACT)),
                  kv_write_elements=size)


def _tiles(c: Ctx):
    """The computed tile pairs: whole tiles in the kernel's padded version (:mod:`..flash`)."""
    f = c.template.flash
    if c.flash_padded:
        return padded_tile_pairs(c.shape.prompt_len, f.block_q, f.block_kv, c.earlier)
    return causal_tile_pairs(c.shape.prompt_len, f.block_q, f.block_kv, c.earlier)


def _kv_stream(c: Ctx) -> int:
    """Elements of K (or V) tiles streamed: once per computed tile pair and KV head (whole tiles
    when they are padded: the padding is read with them)."""
    cols = sum(cl * n for _, cl, n in _tiles(c))
    return c.seqs * _kv_heads(c, c.head_ways) * cols * _d(c)


def _flash(c: Ctx, name: str, qk: bool, extra: dict) -> list[Step]:
    steps: list[Step] = []
    for i, (rows, cols, pairs) in enumerate(_tiles(c)):
        m, n, k = (rows, cols, _d(c)) if qk else (rows, _d(c), cols)
        first = i == 0
        steps += c.gemm(name if first else f"{name}#{i + 1}", m, n=n, k=k,
                        count=c.seqs * c.attn_heads * pairs, **(extra if first else {}))
    return steps


def _flash_scores(c: Ctx) -> int:
    """Scores computed over the causal tile pairs."""
    return c.seqs * c.attn_heads * sum(r * cl * p for r, cl, p in _tiles(c))


def flash_qk(c: Ctx) -> list[Step]:
    """Prefill scores over computed causal tile pairs; K tiles read from the cache."""
    per_row = c.seqs * c.attn_heads * _d(c) * ACT
    # the padded version reads whole query tiles: the rows past the prompt traffic, not a larger tensor
    pad = padded_rows(c.shape.prompt_len, c.template.flash.block_q) * per_row if c.flash_padded else 0
    return _flash(c, "flash_qk", True, dict(reads=(("q_rot", c.shape.prompt_len * per_row),),
                                            rereads=(("q_rot", pad),) if pad else (), kv_read_elements=_kv_stream(c),
                                            writes=(("scores", _flash_scores(c) * SCORE),)))


def flash_softmax(c: Ctx) -> list[Step]:
    """Online softmax: one exp per computed score."""
    n = _flash_scores(c)
    return c.simd("flash_softmax", "softmax", n, transcendentals=n, reads=(("scores", n * SCORE),),
                  writes=(("probs", n * ACT),))


def flash_pv(c: Ctx) -> list[Step]:
    """Prefill ``P V``; V tiles read from the cache."""
    out = c.seqs * c.shape.prompt_len * c.attn_heads * _d(c) * ACT
    return _flash(c, "flash_pv", False, dict(kv_read_elements=_kv_stream(c), reads=(("probs", _flash_scores(c) * ACT),),
                                             writes=(("attn_o", out),)))


def _groups(c: Ctx) -> tuple[tuple[int, int], ...]:
    """(query rows per KV head and sequence, KV heads with that many) on the socket in the
    attention layout: its query heads spread over the KV heads they span (:func:`head_groups`, two
    sizes when a socket's heads straddle a group boundary), times the sequence's query rows."""
    return tuple((m * c.queries, n) for m, n in head_groups(c.attn_heads, _kv_heads(c, c.head_ways)))


def _variant(name: str, i: int) -> str:
    return name if i == 0 else f"{name}#{i + 1}"


def gqa_qk(c: Ctx) -> list[Step]:
    """Decode scores: per sequence and KV head ``[group * queries, d] @ [d, kv_len]``; streams K.
    A second GEMM covers the KV heads with one query head fewer on an uneven split."""
    kvh, kv_len, d = _kv_heads(c, c.head_ways), c.shape.kv_len, _d(c)
    groups, steps = _groups(c), []
    rows = sum(g * n for g, n in groups)
    for i, (g, n) in enumerate(groups):
        # the first carries the whole socket's traffic, and the caches the mapper spreads over tiles
        extra = dict(reads=(("q_rot", c.tokens * c.proj_heads * d * ACT),), kv_read_elements=c.seqs * kvh * kv_len * d,
                     writes=(("scores", c.seqs * rows * kv_len * SCORE),),
                     attention=AttentionShape(c.seqs * kvh, g, kv_len, d)) if i == 0 else {}
        steps += c.gemm(_variant("gqa_qk", i), g, n=kv_len, k=d, count=c.seqs * n, **extra)
    return steps


def gqa_softmax(c: Ctx) -> list[Step]:
    """Softmax over ``kv_len`` scores per query head and query row of each sequence."""
    n = c.seqs * c.attn_heads * c.queries * c.shape.kv_len
    return c.simd("gqa_softmax", "softmax", n, transcendentals=n, reads=(("scores", n * SCORE),),
                  writes=(("probs", n * ACT),))


def gqa_pv(c: Ctx) -> list[Step]:
    """Decode ``P V``: per sequence and KV head ``[group * queries, kv_len] @ [kv_len, d]``; streams V
    (a second GEMM as in :func:`gqa_qk`)."""
    kvh, kv_len, d = _kv_heads(c, c.head_ways), c.shape.kv_len, _d(c)
    steps: list[Step] = []
    for i, (g, n) in enumerate(_groups(c)):
        extra = dict(kv_read_elements=c.seqs * kvh * kv_len * d,
                     reads=(("probs", c.seqs * c.attn_heads * c.queries * kv_len * ACT),),
                     writes=(("attn_o", c.tokens * c.proj_heads * d * ACT),)) if i == 0 else {}
        steps += c.gemm(_variant("gqa_pv", i), g, n=d, k=kv_len, count=c.seqs * n, **extra)
    return steps


OPERATORS = {f.__name__: f for f in (q_proj, k_proj, v_proj, gqa_rope, kv_cache_write, flash_qk,
                                     flash_softmax, flash_pv, gqa_qk, gqa_softmax, gqa_pv)}


def gqa_q_to_dp(c: Ctx) -> int:
    """All-to-all of the new Q, K, V rows from the TP to the DP layout. Bytes one socket sends:
    its heads' rows of the other sockets' sequences; the busiest sender runs the fewest sequences
    (:attr:`~sn40l_sim.models.context.Ctx.fewest_seqs`, as in the MLA family's ``mla_q_to_dp``)."""
    heads = c.proj_heads + 2 * _kv_heads(c, c.tp)
    return (c.tokens - c.fewest_seqs * c.queries) * heads * _d(c) * ACT if c.dp > 1 else 0


def gqa_o_to_tp(c: Ctx) -> int:
    """All-to-all of the head outputs back to the TP layout. Bytes one socket sends: the other
    sockets' heads of its own sequences' rows."""
    return c.seqs * c.queries * (c.attn_heads - c.proj_heads) * _d(c) * ACT if c.dp > 1 else 0


SIZES = {f.__name__: f for f in (gqa_q_to_dp, gqa_o_to_tp)}


def kv_heads_per_socket(heads: int, kv_heads: int, ways: int) -> int:
    """KV heads the busiest of ``ways`` head-splitting sockets needs (see
    :meth:`GQAAttentionSpec.socket_kv_heads`)."""
    if ways % kv_heads == 0:
        return 1
    per_socket, group = -(-heads // ways), heads // kv_heads
    return max(((min(heads, s + per_socket) - 1) // group - s // group + 1)
               for s in range(0, heads, per_socket))


def sockets_per_kv_head(heads: int, kv_heads: int, ways: int) -> int:
    """The most of ``ways`` head-splitting sockets holding query heads of one KV group (see
    :meth:`GQAAttentionSpec.kv_head_sockets`): ``ways / kv_heads`` when each group has sockets of
    its own, else the sockets the consecutive split's ``ceil(heads / ways)``-head runs put in a group."""
    if ways % kv_heads == 0:
        return ways // kv_heads
    per_socket, group = -(-heads // ways), heads // kv_heads
    return max((min(heads, g + group) - 1) // per_socket - g // per_socket + 1 for g in range(0, heads, group))


def heads_per_socket(heads: int, kv_heads: int, ways: int) -> tuple[int, ...]:
    """Query heads each of ``ways`` head-splitting sockets holds, most first, under the split
    :func:`kv_heads_per_socket` and :func:`sockets_per_kv_head` count KV heads for (see
    :meth:`GQAAttentionSpec.socket_heads`)."""
    if heads < ways:
        return (1,) * ways
    if ways % kv_heads == 0:    # each group's heads as evenly as they go over its own sockets
        share, extra = divmod(heads // kv_heads, ways // kv_heads)
        return (share + 1,) * (extra * kv_heads) + (share,) * (ways - extra * kv_heads)
    per_socket = -(-heads // ways)
    runs = [min(per_socket, heads - s) for s in range(0, heads, per_socket)]
    return tuple(runs) + (0,) * (ways - len(runs))


def kv_heads_by_socket(heads: int, kv_heads: int, ways: int) -> tuple[int, ...]:
    """KV heads each of ``ways`` head-splitting sockets holds, most first, under the split of
    :func:`heads_per_socket` (the busiest holds :func:`kv_heads_per_socket`): one each when each
    group has sockets of its own or the heads are replicated, else the groups a consecutive run
    spans (none for a socket with no heads)."""
    if heads < ways or ways % kv_heads == 0:
        return (1,) * ways
    per_socket, group = -(-heads // ways), heads // kv_heads
    spans = [(min(heads, s + per_socket) - 1) // group - s // group + 1 for s in range(0, heads, per_socket)]
    return tuple(sorted(spans, reverse=True)) + (0,) * (ways - len(spans))


@dataclass(frozen=True)
class KVHeadSplit:
    """:func:`kv_heads_per_socket` of one model, as a value (equal, hashed and pickled by its
    numbers) that a weight tensor carries to size its K and V projections' shards."""

    heads: int
    kv_heads: int

    def __call__(self, ways: int) -> int:
        return kv_heads_per_socket(self.heads, self.kv_heads, ways)


@register_family
class GQAAttentionSpec(AttentionSpec):
    """Grouped-query attention (Llama): ``kv_heads`` K/V heads shared by ``heads`` query heads."""

    kind: Literal["gqa"]
    kv_heads: PositiveInt
    head_dim: PositiveInt

    operators: ClassVar = OPERATORS
    sizes: ClassVar = SIZES
    # FlashAttention covers the prompt's causal tiles, the decode GEMMs the cached kv_len tokens
    phase_operators: ClassVar = {**dict.fromkeys(("flash_qk", "flash_softmax", "flash_pv"), "prefill"),
                                 **dict.fromkeys(("gqa_qk", "gqa_softmax", "gqa_pv"), "decode")}
    default_template: ClassVar[str] = "kernels_llama.yaml"
    # the prefill attention kernel reads K tiles from the cache the QKV kernel wrote
    prefill_key_source: ClassVar = "cache"
    title: ClassVar[str] = "grouped-query attention"

    def weight_tensors(self, hidden: int) -> list[Tensor]:
        """``q_proj``, ``k_proj``, ``v_proj``, ``o_proj`` (heads kept whole when split)."""
        d, split = self.head_dim, KVHeadSplit(self.heads, self.kv_heads)
        return [
            Tensor("q_proj", rows=hidden, cols=self.heads * d, col_granule=d),
            # a socket projects the K and V heads of its query heads' groups, two where they span two
            Tensor("k_proj", rows=hidden, cols=self.kv_heads * d, col_granule=d, socket_granules=split),
            Tensor("v_proj", rows=hidden, cols=self.kv_heads * d, col_granule=d, socket_granules=split),
            Tensor("o_proj", rows=self.heads * d, cols=hidden, row_granule=d),
        ]

    def cached_tensors(self) -> tuple[CachedTensor, ...]:
        """Keys and values, ``kv_heads x head_dim`` each."""
        return (CachedTensor("keys", self.head_dim, self.kv_heads, valued=False),
                CachedTensor("values", self.head_dim, self.kv_heads, scored=False))

    def query_head_dim(self) -> int:
        """``head_dim``."""
        return self.head_dim

    def socket_kv_heads(self, ways: int) -> int:
        """KV heads the busiest socket needs: its ``ceil(heads / ways)`` consecutive query heads
        can span two KV groups (24 heads in 6 groups of 4 over 8 sockets: the second socket has
        heads 3-5, of groups 0 and 1), and each group's K and V must be on the socket.

        When the ways are a multiple of the KV heads, each group is given ``ways / kv_heads``
        sockets of its own, which split its query heads (``ceil(heads / ways)`` at most each, as
        the consecutive split) and hold one KV head: Qwen2-7B's 28 heads in 4 groups of 7 over 8
        sockets run 4 + 3 heads per group, where the consecutive split would give the second
        socket heads 4-7, of groups 0 and 1. (This is the split ``check`` describes when it warns
        of heads split unevenly: 4 of the 8 sockets hold 3.)

        >>> GQAAttentionSpec(kind="gqa", heads=24, kv_heads=6, head_dim=128).socket_kv_heads(8)
        2
        >>> GQAAttentionSpec(kind="gqa", heads=64, kv_heads=8, head_dim=128).socket_kv_heads(16)
        1
        >>> GQAAttentionSpec(kind="gqa", heads=28, kv_heads=4, head_dim=128).socket_kv_heads(8)
        1
        """
        return kv_heads_per_socket(self.heads, self.kv_heads, ways)

    def socket_heads(self, ways: int) -> tuple[int, ...]:
        """Query heads per socket under the split the KV head counts assume: per group as evenly
        as they go when each group has sockets of its own, else consecutive runs of
        ``ceil(heads / ways)``, which leave the last sockets fewer or none (64 heads over 9
        sockets: 8 runs of 8, one socket with none; the even split's runs of 7 and 8 would put
        two groups' heads on most sockets, which :meth:`socket_kv_heads` does not count).

        >>> GQAAttentionSpec(kind="gqa", heads=64, kv_heads=8, head_dim=128).socket_heads(9)
        (8, 8, 8, 8, 8, 8, 8, 8, 0)
        >>> GQAAttentionSpec(kind="gqa", heads=28, kv_heads=4, head_dim=128).socket_heads(8)
        (4, 4, 4, 4, 3, 3, 3, 3)
        """
        return heads_per_socket(self.heads, self.kv_heads, ways)

    def socket_kv_split(self, ways: int) -> tuple[int, ...]:
        """KV heads each socket holds under :meth:`socket_heads`' split: Llama-3.2-3B's 24 heads in
        8 groups of 3 over 12 sockets go 2 a socket, but every third socket's 2 span two groups.

        >>> GQAAttentionSpec(kind="gqa", heads=24, kv_heads=8, head_dim=128).socket_kv_split(12)
        (2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1)
        >>> GQAAttentionSpec(kind="gqa", heads=28, kv_heads=4, head_dim=128).socket_kv_split(8)
        (1, 1, 1, 1, 1, 1, 1, 1)
        """
        return kv_heads_by_socket(self.heads, self.kv_heads, ways)

    def kv_head_sockets(self, ways: int) -> int:
        """Sockets holding query heads of one KV head, at most: when the ways are not a multiple of
        the KV heads a group's query heads can fall on two sockets even with fewer sockets than KV
        heads (64 heads in 8 groups over 12 sockets: heads 6-7 of group 0 are on the second
        socket, beside group 1's 8-11), and those sockets must reduce the group's scores together.

        >>> GQAAttentionSpec(kind="gqa", heads=64, kv_heads=8, head_dim=128).kv_head_sockets(12)
        2
        >>> GQAAttentionSpec(kind="gqa", heads=64, kv_heads=8, head_dim=128).kv_head_sockets(8)
        1
        >>> GQAAttentionSpec(kind="gqa", heads=64, kv_heads=8, head_dim=128).kv_head_sockets(16)
        2
        """
        return sockets_per_kv_head(self.heads, self.kv_heads, ways)

    def problems(self) -> Iterator[tuple[str, str]]:
        """Every KV head serves the same number of query heads, and RoPE (``gqa_rope``, over the
        whole head as in Llama) rotates pairs of a head's elements, as MLA's check of its RoPE width."""
        if self.heads % self.kv_heads:
            yield "kv_heads", f"heads ({self.heads}) must be divisible by kv_heads ({self.kv_heads})"
        if self.head_dim % 2:
            yield "head_dim", f"RoPE rotates pairs: head_dim must be even, got {self.head_dim}"

    def reference_plans(self) -> tuple[ParallelPlan, ParallelPlan]:
        """TP8 in both phases: one socket per KV head of Llama-3.1."""
        return ParallelPlan(tp=8), ParallelPlan(tp=8)
