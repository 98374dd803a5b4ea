"""What the extra kernels of a KV policy that acts in decode share: how one decode step's attention
splits over the sockets, and the widths of the cached rows they read.

Counts mirror the attention formulas of the model's family (:mod:`sn40l_sim.models.context`):
``attention_dp`` splits the sequences, the remaining ``tp / attention_dp`` ways split the heads;
a socket runs the attention of ``ceil(batch / dp)`` sequences with ``ceil(heads / ways)`` query
heads and the KV heads those span (the family's ``socket_kv_heads``, as for the cache the socket
holds, :func:`~sn40l_sim.kvcache.sizing.kv_share`: two where its query heads straddle a group
boundary), and when the ways are a multiple of the KV heads ``ways / kv_heads`` sockets share one
(``row_shards``, :func:`~sn40l_sim.kvcache.sizing.row_shards`: each holds a replica of its rows,
:func:`sn40l_sim.kvcache.sizing.kv_bytes_per_socket`, and they must agree on what they keep).

Examples
--------
>>> from sn40l_sim.ir import ParallelPlan, Shape
>>> from sn40l_sim.models.loader import load_model
>>> r1, llama = load_model("graphs/deepseek_r1.yaml"), load_model("graphs/llama3_1_70b.yaml")
>>> decode_shard(r1, Shape("decode", 64, 0, 32768), ParallelPlan(16, 16))
DecodeShard(seqs=4, query_heads=128, kv_heads_per_socket=1, row_shards=1, score_shards=1, queries=1)
>>> decode_shard(llama, Shape("decode", 8, 0, 32768), ParallelPlan(16))
DecodeShard(seqs=8, query_heads=4, kv_heads_per_socket=1, row_shards=2, score_shards=2, queries=1)
>>> scored_width(r1), row_width(r1), scored_width(llama), row_width(llama)
(576, 576, 128, 256)
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from sn40l_sim.ir import ACT_BYTES, Operator, ParallelPlan, Shape
from sn40l_sim.kvcache.sizing import cached_tensors, kv_heads, row_shards
from sn40l_sim.models.families import head_groups
from sn40l_sim.models.kv_format import kv_op_dtype, kv_quantised, kv_stored_bytes
from sn40l_sim.models.spec import ModelSpec


@dataclass(frozen=True)
class DecodeShard:
    """The busiest socket's share of one decode step's attention."""

    #: sequences whose attention the socket runs
    seqs: int
    #: query heads of those sequences on the socket
    query_heads: int
    #: KV heads of those sequences on the socket (the model's total is :func:`~sn40l_sim.kvcache.sizing.kv_heads`)
    kv_heads_per_socket: int
    #: sockets sharing one KV head, each with a replica of its rows (1 when each socket has its own KV heads)
    row_shards: int
    #: sockets holding query heads of one KV head, which reduce its partial scores: ``row_shards``,
    #: or 2 where an uneven split puts a group's query heads on two sockets (:class:`~sn40l_sim.kvcache.sizing.KVSharding`)
    score_shards: int
    #: query rows per sequence a step runs: 1, plus its speculative drafts
    queries: int = 1

    @property
    def group(self) -> int:
        """Query heads of the KV head with the most on the socket."""
        return math.ceil(self.query_heads / self.kv_heads_per_socket)

    @property
    def groups(self) -> tuple[tuple[int, int], ...]:
        """(query heads, KV heads with that many) on the socket: two sizes when its heads straddle
        a group boundary (:func:`~sn40l_sim.models.families.head_groups`), so a GEMM per KV head
        counts the heads the socket holds, not ``group`` for each."""
        return head_groups(self.query_heads, self.kv_heads_per_socket)


def group_gemms(name: str, shard: DecodeShard, n: int, k: int, first: dict) -> list[Operator]:
    """The GEMMs ``[heads * queries, k] @ [k, n]`` per sequence and KV head of ``shard``, one per
    size of :attr:`DecodeShard.groups` (``name``, then ``name#2``); ``first`` (the traffic) goes
    on the first."""
    ops = []
    for i, (heads, held) in enumerate(shard.groups):
        m, count = heads * shard.queries, shard.seqs * held
        ops.append(Operator(name if i == 0 else f"{name}#{i + 1}", "gemm", flops=2 * m * n * k * count, m=m, n=n,
                            k=k, count=count, **(first if i == 0 else {})))
    return ops


def decode_shard(model: ModelSpec, shape: Shape, plan: ParallelPlan) -> DecodeShard:
    """How one decode step of ``shape`` splits over the sockets of ``plan`` (busiest socket)."""
    ways = plan.tp // plan.attention_dp
    groups = kv_heads(model)
    return DecodeShard(seqs=math.ceil(shape.batch / plan.attention_dp),
                       query_heads=math.ceil(model.attention.heads / ways),
                       kv_heads_per_socket=model.attention.socket_kv_heads(ways), row_shards=row_shards(groups, ways),
                       score_shards=model.attention.kv_head_sockets(ways),
                       queries=1 + shape.drafts)


def scored_width(model: ModelSpec) -> int:
    """Elements per KV head and token that decode scores read (keys; MLA's latent and RoPE key)."""
    return sum(t.width for t in cached_tensors(model) if t.scored)


def row_width(model: ModelSpec) -> int:
    """Elements per KV head and token of the whole cached row (every cached tensor)."""
    return sum(t.width for t in cached_tensors(model))


def rescore_ops(model: ModelSpec, shard: DecodeShard, kv_len: int, prefix: str) -> list[Operator]:
    """Scores of every cached token against this step's queries, recomputed by a policy kernel:
    per sequence and KV head ``[group, d] @ [d, kv_len]`` over the scored tensors, the cached keys
    streamed again (widened first when quantised) and the queries read as activations, then their
    softmax. FlashAttention-style decode attention never forms normalised probabilities of every
    token, so a policy that needs them (H2O) pays this pass."""
    d = scored_width(model)
    elements = shard.seqs * shard.kv_heads_per_socket * kv_len * d
    ops: list[Operator] = []
    if kv_quantised(model):
        ops.append(Operator(f"{prefix}_dequant_keys", "elementwise", elements=elements, dtype=kv_op_dtype(model)))
    # every query row of the step (its drafts' too) against every cached token
    ops += group_gemms(f"{prefix}_scores", shard, kv_len, d,
                       dict(act_in_bytes=shard.seqs * shard.query_heads * shard.queries * d * ACT_BYTES,
                            kv_read_bytes=kv_stored_bytes(model, elements)))
    probs = shard.seqs * shard.query_heads * shard.queries * kv_len
    ops.append(Operator(f"{prefix}_softmax", "softmax", elements=probs, transcendentals=probs, dtype="fp32"))
    return ops
