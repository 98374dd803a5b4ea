"""``h2o``: heavy-hitter eviction (H2O, Zhang et al. 2023): a fixed budget of the most recent
tokens plus the tokens with the largest accumulated attention, evicting during decode
(Scissorhands keeps the same kind of statistic over a window of recent queries).

Capacity: a ``[heavy | ring of recent tokens]`` cache of ``heavy + recent`` slots per layer,
plus one FP32 accumulated score per slot and KV head (the policy's state, beside the cache)
when the context can outgrow the budget (one that cannot never evicts and keeps none).
A prompt longer than the budget is compressed in prefill; from then on every decode step adds one
token and evicts one.

Time (modelling choices; H2O publishes no kernels):

* **Prefill** (``h2o_prefill``, prompts longer than the budget): H2O's score of a prompt token is
  the attention it received from every later prompt query, summed over heads. FlashAttention
  (the MHA kernel) never forms those probabilities, so this kernel recomputes the causal
  ``Q K^T`` tile by tile (the MHA kernel's tiles, FLOPs exactly those of its QK half), normalises
  each row with the MHA kernel's row statistics (max and sum, FP32, as SnapKV's kernel does:
  :mod:`sn40l_sim.kvcache.prefill_kernels`), sums columns over query rows and heads, picks the
  ``heavy`` top positions of ``[0, L - recent)`` and gathers them and the ``recent`` last rows into
  the fixed cache, writing their scores. Sockets sharing a KV head all-reduce the per-position
  scores (FP32) and each gathers ``1 / row_shards`` of the rows (under a split that does not
  follow the KV groups, the two sockets holding a group's query heads reduce and each gathers
  all of its replica's rows: :mod:`sn40l_sim.kvcache.prefill_kernels`). A prompt within the budget whose
  context outgrows it (prompt + max_new_tokens - 1 + drafts) is scored the same way, since decode
  evicts by those scores, but nothing is selected or gathered (:meth:`H2O.context_prefill_kernels`).
* **Decode** (``h2o_evict``, every step of a context longer than the budget): the step's attention
  probabilities of every cached token are needed again (a flash-style decode kernel does not keep
  them), so the scores are recomputed against the cached keys and softmaxed
  (:func:`~sn40l_sim.kvcache.decode_kernels.rescore_ops`), summed over the query heads of each KV
  head, added to the FP32 accumulator (read and written), the lowest-scoring heavy slot is found,
  and the token leaving the recent ring moves into it (one row and its score, read and written).
  Sockets sharing a KV head all-reduce their partial sums, and each moves the row in its replica.

>>> h = H2O.from_params({"budget": 1024})
>>> (h.heavy, h.recent), h.cache_len(4096, 0), h.cache_len(100, 5), h.static_cache_len(4096, 256)
((512, 512), 1024, 105, 1024)
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from sn40l_sim.errors import InputError
from sn40l_sim.ir import ACT_BYTES, DTYPE_BYTES, Collective, FusedKernel, Operator, ParallelPlan, Shape
from sn40l_sim.kvcache.base import check_int, register
from sn40l_sim.kvcache.decode_kernels import decode_shard, rescore_ops, row_width
from sn40l_sim.kvcache.footprint import KVFootprint
from sn40l_sim.kvcache.policies.shared import DEFAULT_BUDGET, Budgeted, check_lengths
from sn40l_sim.kvcache.prefill_kernels import copy_ops, evictable_len, scoring_key_reads
from sn40l_sim.kvcache.sizing import kv_sharding, query_head_dim
from sn40l_sim.models.flash import causal_tile_pairs
from sn40l_sim.models.kv_format import kv_stored_bytes
from sn40l_sim.models.spec import ModelSpec
from sn40l_sim.models.template import template_for

#: accumulated scores are FP32
SCORE_BYTES = DTYPE_BYTES["fp32"]


@register
@dataclass(frozen=True)
class H2O(Budgeted):
    """Heavy hitters plus a ring of recent tokens, evicting the lowest accumulated attention.

    Parameters
    ----------
    heavy : int
        Slots for the heavy hitters (default 16384). With 0 the cache is a plain ring of the
        recent tokens (StreamingLLM's without sinks): no score is kept or computed.
    recent : int
        Ring of the most recent tokens (default 16384; >= 1). H2O's own runs split the budget
        evenly between the two, which ``params: {budget: N}`` does too (``recent = N // 2``
        unless given).
    """

    name = "h2o"
    heavy: int = DEFAULT_BUDGET // 2
    recent: int = DEFAULT_BUDGET // 2

    def __post_init__(self) -> None:
        check_int(self.name, "heavy", self.heavy, 0)
        check_int(self.name, "recent", self.recent, 1)

    @classmethod
    def _split_budget(cls, budget: Any, params: dict[str, Any]) -> dict[str, Any]:
        recent = params.setdefault("recent", max(1, budget // 2))
        check_int(cls.name, "recent", recent, 1)
        if budget < recent:
            raise InputError(f"KV policy {cls.name!r}: expected budget >= recent = {recent}, got {budget}",
                             field="budget")
        if "heavy" in params and params["heavy"] != budget - recent:
            raise InputError(f"KV policy {cls.name!r}: budget {budget} != heavy {params['heavy']} + recent "
                             f"{recent}; give budget or heavy, not both", field="budget")
        params["heavy"] = budget - recent
        return params

    @property
    def budget(self) -> int:
        """Slots of the cache: ``heavy + recent``."""
        return self.heavy + self.recent

    def budget_tokens(self) -> int:
        return self.budget

    def cache_len(self, prompt_len: int, generated: int) -> int:
        check_lengths(prompt_len, generated, "generated")
        return min(prompt_len + generated, self.budget)

    def static_cache_len(self, prompt_len: int, max_new_tokens: int) -> int:
        check_lengths(prompt_len, max_new_tokens, "max_new_tokens")
        return min(prompt_len + max_new_tokens, self.budget)

    def footprint(self, model: ModelSpec, prompt_len: int, max_new_tokens: int) -> KVFootprint:
        slots = self.static_cache_len(prompt_len, max_new_tokens)
        # no heavy slots: nothing competes on its score, so no score is kept; nor does a context
        # that never outgrows the budget, which never evicts (no h2o_evict kernel accumulates
        # scores: decode_kernels), as ArkVale keeps no digests for a sequence its buffer holds
        evicts = self.heavy > 0 and prompt_len + max_new_tokens > self.budget
        return KVFootprint(slots=slots, state_bytes=slots * SCORE_BYTES if evicts else 0)

    def prefill_state_bytes(self, model: ModelSpec, prompt_len: int, max_new_tokens: int) -> int:
        # the scores prefill writes (h2o_prefill_kernel's write_scores): those of the rows it keeps,
        # the prompt's own when it fits the budget, not of the slots decode's tokens fill later
        if not self.footprint(model, prompt_len, max_new_tokens).state_bytes:
            return 0
        return self.cache_len(prompt_len, 0) * SCORE_BYTES

    def prefill_kernels(self, model: ModelSpec, prompt_len: int, tp: int) -> list[FusedKernel]:
        if prompt_len <= self.budget:
            return []
        if self.heavy == 0:
            # a selection of nothing: the recent rows are copied, nothing scored (as snapkv's
            # topk 0 and snapstream's do)
            return [h2o_recent_only_kernel(model, tp, self.recent)]
        return [h2o_prefill_kernel(model, prompt_len, tp, heavy=self.heavy, recent=self.recent)]

    def context_prefill_kernels(self, model: ModelSpec, prompt_len: int, context_len: int,
                                tp: int) -> list[FusedKernel]:
        if self.heavy > 0 and prompt_len <= self.budget < context_len:
            # the prompt fits, but decode evicts by accumulated attention (h2o_evict): the prompt's
            # tokens start with the attention their later prompt queries gave them, as when it is
            # compressed, though nothing is selected or moved
            return [h2o_prefill_kernel(model, prompt_len, tp, heavy=self.heavy, recent=self.recent, select=False)]
        return self.prefill_kernels(model, prompt_len, tp)

    def decode_kernels(self, model: ModelSpec, shape: Shape, plan: ParallelPlan) -> list[FusedKernel]:
        # a context that fits the budget never evicts: its static cache is the budget only when the
        # context fills it exactly (prompt + max_new_tokens - 1 + drafts, Shape.context_len, when given);
        # with no heavy slots the token leaving the ring is overwritten, a plain ring (streamingllm's)
        if self.heavy == 0 or shape.kv_len < self.budget or 0 < shape.context_len <= self.budget:
            return []
        return [h2o_evict_kernel(model, shape, plan, heavy=self.heavy)]


def h2o_recent_only_kernel(model: ModelSpec, tp: int, recent: int) -> FusedKernel:
    """H2O's prompt compression with no heavy slots: the last ``recent`` rows gathered into the
    cache (:func:`h2o_prefill_kernel`'s ``gather_recent``), nothing scored."""
    shard = kv_sharding(model, tp)
    ops = copy_ops("gather_recent", "recent_rows", model, math.ceil(recent / shard.row_shards), shard.kv_heads_per_socket,
                   gather=True)
    return FusedKernel(name="h2o_prefill", kind="h2o_prefill", phase="prefill", operators=tuple(ops), shards=tp)


def h2o_prefill_kernel(model: ModelSpec, prompt_len: int, tp: int, *, heavy: int, recent: int,
                       select: bool = True) -> FusedKernel:
    """The H2O prompt compression of one layer, per socket shard under ``tp`` (module docstring).
    With ``select`` False (a prompt within the budget whose context outgrows it) only the scores:
    the prompt's rows stay where prefill wrote them and their accumulated scores are written."""
    shard = kv_sharding(model, tp)
    qh, kvh, rs = shard.query_heads, shard.kv_heads_per_socket, shard.row_shards
    d = query_head_dim(model)
    flash = template_for(model).flash
    tiles = causal_tile_pairs(prompt_len, flash.block_q, flash.block_kv)
    # each query row's (max, sum) from the MHA kernel, and the queries themselves
    q_bytes = prompt_len * qh * (d * ACT_BYTES + 2 * SCORE_BYTES)
    streamed = sum(cols * pairs for _, cols, pairs in tiles)
    # the keys streamed once per tile pair, as MHA streams them
    first, ops = scoring_key_reads(model, qh, kvh, d, streamed, q_bytes, "h2o_dequant_keys", distinct_rows=prompt_len)
    for i, (rows, cols, pairs) in enumerate(tiles):
        ops.append(Operator("h2o_scores" if i == 0 else f"h2o_scores#{i + 1}", "gemm",
                            flops=2 * rows * cols * d * qh * pairs, m=rows, n=cols, k=d, count=qh * pairs,
                            **(first if i == 0 else {})))
    scores = qh * sum(rows * cols * pairs for rows, cols, pairs in tiles)
    evict = evictable_len(prompt_len, 0, recent)
    ops += [
        # exp(s / sqrt(d) - max) / sum with the row's statistics, masked above the diagonal
        Operator("h2o_probs", "elementwise", elements=scores, transcendentals=scores, dtype="fp32"),
        # over the query rows and this socket's heads of each KV head: one score per position
        Operator("h2o_column_sums", "reduction", elements=scores, dtype="fp32"),
    ]
    kept = heavy + recent
    if select:
        ops.append(Operator("h2o_topk", "topk", elements=kvh * evict, dtype="fp32"))
        ops += copy_ops("gather_heavy", "heavy_rows", model, math.ceil(min(heavy, evict) / rs), kvh, gather=True)
        ops += copy_ops("gather_recent", "recent_rows", model, math.ceil(recent / rs), kvh, gather=True)
    else:
        kept = prompt_len
    # the kept tokens' accumulated scores start the decode accumulator
    ops.append(Operator("write_scores", "elementwise", elements=kvh * kept, dtype="fp32",
                        kv_write_bytes=kvh * kept * SCORE_BYTES))
    collectives: tuple[Collective, ...] = ()
    if shard.score_shards > 1:   # the sockets holding query heads of a KV head (uneven splits too)
        collectives = (Collective("all_reduce", kvh * prompt_len * SCORE_BYTES, shard.score_shards, name="h2o_scores"),)
    return FusedKernel(name="h2o_prefill", kind="h2o_prefill", phase="prefill", operators=tuple(ops),
                       collectives=collectives, shards=tp)


def h2o_evict_kernel(model: ModelSpec, shape: Shape, plan: ParallelPlan, *, heavy: int) -> FusedKernel:
    """The H2O accumulation and eviction of one layer in one decode step, per socket shard."""
    shard = decode_shard(model, shape, plan)
    kv_len, seqs, kvh = shape.kv_len, shard.seqs, shard.kv_heads_per_socket
    slots = seqs * kvh * kv_len
    ops = rescore_ops(model, shard, kv_len, "h2o")
    # each socket sharing a KV head keeps a replica of its rows, and moves the rows in its own: one
    # token leaves the recent ring per query row of the step (the drafts' rows too)
    moved = seqs * kvh * row_width(model) * shard.queries
    ops += [
        Operator("h2o_sum_heads", "reduction", elements=seqs * shard.query_heads * shard.queries * kv_len,
                 dtype="fp32"),
        Operator("h2o_accumulate", "elementwise", elements=slots, dtype="fp32",
                 kv_read_bytes=slots * SCORE_BYTES, kv_write_bytes=slots * SCORE_BYTES),
        # the lowest accumulated score among the heavy slots (the loser is evicted)
        Operator("h2o_argmin", "topk", elements=seqs * kvh * max(heavy, 1), dtype="fp32"),
        # the tokens leaving the recent ring take those slots: their rows and their scores
        Operator("h2o_move_row", "scatter", elements=moved,
                 kv_read_bytes=kv_stored_bytes(model, moved) + seqs * kvh * shard.queries * SCORE_BYTES,
                 kv_write_bytes=kv_stored_bytes(model, moved) + seqs * kvh * shard.queries * SCORE_BYTES),
    ]
    collectives: tuple[Collective, ...] = ()
    if shard.score_shards > 1:   # the sockets holding query heads of a KV head (uneven splits too)
        collectives = (Collective("all_reduce", slots * SCORE_BYTES, shard.score_shards, name="h2o_scores"),)
    return FusedKernel(name="h2o_evict", kind="h2o_evict", phase="decode", operators=tuple(ops),
                       collectives=collectives, shards=plan.sockets)
