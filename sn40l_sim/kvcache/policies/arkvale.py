"""``arkvale``: DDR offload with recall (after ArkVale, Chen et al. 2024): the whole cache lives in a
slower, larger memory tier (DDR on SN40L: 1.5 TB per socket); HBM holds a recall buffer and a
digest of every page; each decode step scores the digests against the query and recalls the pages
it selects over that tier's bandwidth.

Capacity (:meth:`ArkVale.footprint`): the store holds every token of the sequence
(``prompt + max_new_tokens`` rounded up to whole pages) in ``tier``; HBM holds the buffer decode
attention reads, ``budget`` slots (a ring of the ``recent`` last tokens plus
``(budget - recent) / page_tokens`` recalled pages), and per page and KV head a digest of its keys.
So the largest batch is set by the store's tier, and HBM needs only the buffers and digests.

Time, per layer (modelling choices; ArkVale's kernels are GPU ones):

* **Digests** (``digest: bounds``, default): per page and channel the maximum and minimum key
  (two BF16 rows), scored as Quest does, ``sum_c max(q_c max_c, q_c min_c)`` per query head: two
  products per channel and a max (one SIMD pass over ``2 x`` the elements), a sum over the channels,
  and, for grouped heads, the largest over the KV head's query heads. ``digest: centroid`` keeps the
  mean key (one row) and scores it with a GEMM.
* **Recall**: the top ``(budget - recent) / page_tokens`` pages are selected per KV head, and
  ``recall_fraction`` of them are fetched from the store into the buffer each step, replacing
  pages that dropped out (ArkVale keeps recalled pages while they stay selected; how many change per
  step depends on the model and the text, so it is a parameter: 1.0 recalls every selected page every
  step, the upper bound). The new token's row is also written to the store and its page's digest
  updated.
* **Prefill** (prompts longer than the buffer): the digests of the prompt's pages (a min and max per
  channel over each page's rows) and the first buffer (the recent ring and the pages the last
  prompt query selects), on the prefill node; the whole prompt's cache then goes to the decode
  node's store with the KV transfer. A prompt that fits the buffer but whose context outgrows it
  (prompt + max_new_tokens - 1 + drafts) gets its pages' digests alone, since decode scores them
  (:meth:`ArkVale.context_prefill_kernels`).

>>> a = ArkVale.from_params({"budget": 8192})
>>> (a.recent, a.pages, a.page_tokens), a.static_cache_len(131072, 128), a.cache_len(131072, 5)
((1024, 224, 32), 8192, 131077)
>>> a.store_rows(131072, 128)
131200
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from sn40l_sim.errors import InputError
from sn40l_sim.ir import ACT_BYTES, DTYPE_BYTES, Collective, FusedKernel, Operator, ParallelPlan, Shape
from sn40l_sim.kvcache.base import check_int, register
from sn40l_sim.kvcache.decode_kernels import decode_shard, group_gemms, row_width, scored_width
from sn40l_sim.kvcache.footprint import KVFootprint
from sn40l_sim.kvcache.policies.shared import DEFAULT_BUDGET, DEFAULT_RECENT_FRACTION, Budgeted, check_lengths, padded
from sn40l_sim.kvcache.prefill_kernels import copy_ops
from sn40l_sim.kvcache.sizing import kv_sharding
from sn40l_sim.models.kv_format import kv_stored_bytes
from sn40l_sim.models.spec import ModelSpec

#: ArkVale's page size (tokens per page)
DEFAULT_PAGE_TOKENS = 32
#: assumed: one in eight of the selected pages changes per step (see the module docstring)
DEFAULT_RECALL_FRACTION = 0.125
#: digests are kept in BF16, page scores in FP32
DIGEST_BYTES = ACT_BYTES
SCORE_BYTES = DTYPE_BYTES["fp32"]


@register
@dataclass(frozen=True)
class ArkVale(Budgeted):
    """The whole cache in a store in ``tier``; a recall buffer and page digests in HBM.

    Parameters
    ----------
    recent : int
        Ring of the most recent tokens in the buffer (default 4096; ``params: {budget: N}`` sets
        an eighth of ``N``).
    pages : int
        Recalled pages the buffer holds (default 896: a 32768-token buffer).
    page_tokens : int
        Tokens per page (default 32, ArkVale's).
    recall_fraction : float
        Share of the selected pages fetched from the store each step, in ``(0, 1]`` (default 0.125,
        an assumption).
    digest : {"bounds", "centroid"}
        Page summary: per-channel max and min of the keys (default) or their mean.
    tier : str
        Memory tier of the store (default ``ddr``); the hardware must have it.

    ``params: {budget: N}`` gives the buffer's total: ``recent + pages * page_tokens = N``.
    """

    name = "arkvale"
    recent: int = DEFAULT_BUDGET // DEFAULT_RECENT_FRACTION
    pages: int = (DEFAULT_BUDGET - DEFAULT_BUDGET // DEFAULT_RECENT_FRACTION) // DEFAULT_PAGE_TOKENS
    page_tokens: int = DEFAULT_PAGE_TOKENS
    recall_fraction: float = DEFAULT_RECALL_FRACTION
    digest: Literal["bounds", "centroid"] = "bounds"
    tier: str = "ddr"

    def __post_init__(self) -> None:
        check_int(self.name, "recent", self.recent, 1)
        check_int(self.name, "pages", self.pages, 1)
        check_int(self.name, "page_tokens", self.page_tokens, 1)
        f = self.recall_fraction
        if isinstance(f, bool) or not isinstance(f, (int, float)) or not 0 < f <= 1:
            raise InputError(f"KV policy {self.name!r}: expected a fraction in (0, 1], got {f!r}",
                             field="recall_fraction")
        if self.digest not in ("bounds", "centroid"):
            raise InputError(f"KV policy {self.name!r}: expected bounds or centroid, got {self.digest!r}",
                             field="digest")
        if not isinstance(self.tier, str) or not self.tier:
            raise InputError(f"KV policy {self.name!r}: expected the name of a memory tier, got {self.tier!r}",
                             field="tier")

    @classmethod
    def _split_budget(cls, budget: Any, params: dict[str, Any]) -> dict[str, Any]:
        page = params.setdefault("page_tokens", DEFAULT_PAGE_TOKENS)
        check_int(cls.name, "page_tokens", page, 1)
        recent = params.setdefault("recent", max(1, budget // DEFAULT_RECENT_FRACTION))
        check_int(cls.name, "recent", recent, 1)
        rest = budget - recent
        if rest < page or rest % page:
            raise InputError(f"KV policy {cls.name!r}: expected budget - recent ({budget} - {recent}) to be a "
                             f"positive multiple of page_tokens ({page})", field="budget")
        if "pages" in params and params["pages"] != rest // page:
            raise InputError(f"KV policy {cls.name!r}: budget {budget} != recent {recent} + pages "
                             f"{params['pages']} x page_tokens {page}; give budget or pages, not both",
                             field="budget")
        params["pages"] = rest // page
        return params

    def memory_tiers(self) -> dict[str, str]:
        return {"tier": self.tier}

    @property
    def budget(self) -> int:
        """Slots of the HBM buffer: ``recent + pages * page_tokens``."""
        return self.recent + self.pages * self.page_tokens

    def offloads(self, prompt_len: int, max_new_tokens: int) -> bool:
        """Whether a sequence outgrows the buffer (else it all stays in HBM and nothing is recalled)."""
        return prompt_len + max_new_tokens > self.budget

    def budget_tokens(self) -> int:
        return self.budget

    def cache_len(self, prompt_len: int, generated: int) -> int:
        check_lengths(prompt_len, generated, "generated")
        return prompt_len + generated          # every token is kept (in the store)

    def static_cache_len(self, prompt_len: int, max_new_tokens: int) -> int:
        check_lengths(prompt_len, max_new_tokens, "max_new_tokens")
        return min(prompt_len + max_new_tokens, self.budget)

    def store_rows(self, prompt_len: int, max_new_tokens: int) -> int:
        """Rows of the store per layer: the whole context, in whole pages."""
        return padded(prompt_len + max_new_tokens, self.page_tokens)

    def footprint(self, model: ModelSpec, prompt_len: int, max_new_tokens: int) -> KVFootprint:
        slots = self.static_cache_len(prompt_len, max_new_tokens)
        if not self.offloads(prompt_len, max_new_tokens):
            return KVFootprint(slots=slots)
        rows = self.store_rows(prompt_len, max_new_tokens)
        return KVFootprint(slots=slots, state_bytes=self._digest_bytes(model, rows // self.page_tokens),
                           store_rows=rows, store_tier=self.tier)

    def prefill_state_bytes(self, model: ModelSpec, prompt_len: int, max_new_tokens: int) -> int:
        # the digests prefill builds (_digest_build_kernel): the prompt's pages, its last one partial;
        # decode digests the pages of the tokens it generates (the recall kernel's update_digest)
        if not self.offloads(prompt_len, max_new_tokens):
            return 0
        return self._digest_bytes(model, math.ceil(prompt_len / self.page_tokens))

    def _digest_bytes(self, model: ModelSpec, pages: int) -> int:
        """Bytes of the digests of ``pages`` pages, per KV head and layer."""
        return pages * self._digest_rows * scored_width(model) * DIGEST_BYTES

    @property
    def _digest_rows(self) -> int:
        return 2 if self.digest == "bounds" else 1

    def recalled_pages(self) -> int:
        """Pages fetched from the store per step, sequence and KV head."""
        return math.ceil(self.recall_fraction * self.pages)

    def prefill_kernels(self, model: ModelSpec, prompt_len: int, tp: int) -> list[FusedKernel]:
        if prompt_len <= self.budget:
            return []
        return [self._digest_build_kernel(model, prompt_len, tp)]

    def context_prefill_kernels(self, model: ModelSpec, prompt_len: int, context_len: int,
                                tp: int) -> list[FusedKernel]:
        if prompt_len <= self.budget < context_len:
            # the prompt fills the buffer as it is, but decode scores the digests of every page of
            # the context (recall): its pages' digests are built here, as for a longer prompt
            return [self._digest_build_kernel(model, prompt_len, tp, fill_buffer=False)]
        return self.prefill_kernels(model, prompt_len, tp)

    def decode_kernels(self, model: ModelSpec, shape: Shape, plan: ParallelPlan) -> list[FusedKernel]:
        if shape.context_len <= 0:
            raise InputError(f"KV policy {self.name!r} scores every page of the context each step: the "
                             "decode shape must carry context_len (prompt + max_new_tokens - 1 + drafts)", field="context_len")
        if shape.context_len <= self.budget:
            return []
        return [self._recall_kernel(model, shape, plan)]

    def _digest_build_kernel(self, model: ModelSpec, prompt_len: int, tp: int, *,
                             fill_buffer: bool = True) -> FusedKernel:
        """Digests of the prompt's pages and (``fill_buffer``: a prompt longer than the buffer) the
        first buffer, one layer, per socket shard."""
        shard = kv_sharding(model, tp)
        kvh, rs = shard.kv_heads_per_socket, shard.row_shards
        d, rows = scored_width(model), math.ceil(prompt_len / rs)
        pages = math.ceil(prompt_len / self.page_tokens / rs)
        digests = kvh * pages * self._digest_rows * d
        keys = kvh * rows * d
        ops = [
            # max and min (or the sum, for the mean) of each channel over the page's rows
            Operator("digest_reduce", "reduction", elements=self._digest_rows * keys, n=self.page_tokens,
                     kv_read_bytes=kv_stored_bytes(model, keys)),
            Operator("write_digests", "elementwise", elements=digests, kv_write_bytes=digests * DIGEST_BYTES),
        ]
        if fill_buffer:
            # the pages the last prompt query selects fill the buffer with the recent ring
            ops.append(Operator("select_pages", "topk", elements=kvh * math.ceil(prompt_len / self.page_tokens),
                                dtype="fp32"))
            ops += copy_ops("gather_buffer", "buffer_rows", model, math.ceil(self.budget / rs), kvh, gather=True)
        collectives: tuple[Collective, ...] = ()
        if rs > 1:   # the sockets sharing a KV head exchange their pages' digests
            collectives = (Collective("all_gather", kvh * math.ceil(prompt_len / self.page_tokens)
                                      * self._digest_rows * d * DIGEST_BYTES, rs, name="digests"),)
        return FusedKernel(name="digest_build", kind="digest_build", phase="prefill", operators=tuple(ops),
                           collectives=collectives, shards=tp)

    def _recall_kernel(self, model: ModelSpec, shape: Shape, plan: ParallelPlan) -> FusedKernel:
        """Score the digests, select and recall pages, store the new row: one layer, one decode step."""
        shard = decode_shard(model, shape, plan)
        seqs, kvh = shard.seqs, shard.kv_heads_per_socket
        qh = shard.query_heads * shard.queries   # every query row of the step scores the digests
        d, width = scored_width(model), row_width(model)
        pages = math.ceil(shape.context_len / self.page_tokens)
        digests = seqs * kvh * pages * self._digest_rows * d
        ops: list[Operator] = []
        if self.digest == "bounds":
            per_head = seqs * qh * pages * d
            ops += [Operator("digest_bound", "elementwise", elements=2 * per_head,
                             act_in_bytes=seqs * qh * d * ACT_BYTES, kv_read_bytes=digests * DIGEST_BYTES),
                    Operator("digest_sum", "reduction", elements=per_head, n=d, dtype="fp32")]
        else:
            ops += group_gemms("digest_scores", shard, pages, d,
                               dict(act_in_bytes=seqs * qh * d * ACT_BYTES, kv_read_bytes=digests * DIGEST_BYTES))
        if shard.group * shard.queries > 1:   # a page's score: the largest over its query heads and rows
            ops.append(Operator("page_scores", "reduction", elements=seqs * qh * pages, n=shard.group * shard.queries,
                                dtype="fp32"))
        ops.append(Operator("select_pages", "topk", elements=seqs * kvh * pages, dtype="fp32"))
        # each socket sharing a KV head keeps a replica of the buffer (and of the store), so it
        # recalls the pages into its own and stores the new row in its own
        recalled = seqs * kvh * self.recalled_pages() * self.page_tokens * width
        stored = kv_stored_bytes(model, recalled)
        new_row = seqs * kvh * width * shard.queries   # the step writes a row per query row
        ops += [
            Operator("recall_pages", "gather", elements=recalled, k=width, kv_offload_read_bytes=stored),
            Operator("write_recalled", "elementwise", elements=recalled, kv_write_bytes=stored),
            # the new token's row (written to the buffer's ring by attention) joins the store
            Operator("store_new_row", "scatter", elements=new_row, kv_read_bytes=kv_stored_bytes(model, new_row),
                     kv_offload_write_bytes=kv_stored_bytes(model, new_row)),
            Operator("update_digest", "elementwise", elements=seqs * kvh * self._digest_rows * d,
                     kv_read_bytes=seqs * kvh * self._digest_rows * d * DIGEST_BYTES,
                     kv_write_bytes=seqs * kvh * self._digest_rows * d * DIGEST_BYTES),
        ]
        collectives: tuple[Collective, ...] = ()
        if shard.score_shards > 1:   # partial page scores of the sockets holding a KV head's query heads
            collectives = (Collective("all_reduce", seqs * kvh * pages * SCORE_BYTES, shard.score_shards,
                                      name="page_scores"),)
        return FusedKernel(name="recall", kind="recall", phase="decode", operators=tuple(ops),
                           collectives=collectives, shards=plan.sockets)
