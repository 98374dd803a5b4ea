"""A functional numpy reference of SnapStream: prefill compression and ring-buffer decode.

It runs on real arrays so that tests can check the cache layout and the attention it yields
against attention computed directly over the tokens SnapStream is meant to keep. The simulator's
cost model (:mod:`sn40l_sim.kvcache.prefill_kernels`) and cache lengths
(:mod:`sn40l_sim.kvcache.policies`) follow the same rules.

Shapes: ``H`` query heads, ``G`` KV heads (query head ``h`` reads KV head ``h // (H / G)``),
``L`` prompt positions, ``S = sink + recent + topk`` cache slots. MLA is ``G = 1`` (one shared
latent per token; ``dk = 576`` in the absorbed form) with ``shared=True``: one selection per
sequence and layer from scores summed over all heads.

Every slot records the position it holds (``positions``) and whether it holds data yet
(``valid``). Ring slots that are still padding record the position that will land in them.

Examples
--------
The paper's Figure 4: ``L = 26``, one sink, a ring of 4.

>>> lay = Layout(sink=1, recent=4, topk=2)
>>> [g.tolist() for g in ring_gather_positions(26, lay)]
[[21, 22, 23, 24], [25, 26, 27, 28]]
>>> rng = np.random.default_rng(0)
>>> q, k, v = rng.normal(size=(2, 26, 8)), rng.normal(size=(1, 26, 8)), rng.normal(size=(1, 26, 8))
>>> cache = prefill(q, k, v, lay, window=4, pool_kernel=3, shared=True)
>>> cache.ring_positions().tolist(), cache.valid[0, 1:5].tolist()
([25, 26, 23, 24], [True, False, True, True])
>>> for p in (26, 27):
...     _ = decode_step(cache, rng.normal(size=(2, 8)), rng.normal(size=(1, 8)), rng.normal(size=(1, 8)))
>>> cache.positions[0, :5].tolist()
[0, 25, 26, 27, 24]
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Layout:
    """The fixed cache ``[sink | ring of recent | top-K]`` of one sequence and layer.

    >>> lay = Layout(sink=1, recent=4, topk=3)
    >>> lay.static_len, [lay.slot(p) for p in (0, 1, 4, 25, 26, 27)]
    (8, [0, 1, 4, 1, 2, 3])
    """

    sink: int
    recent: int
    topk: int

    def __post_init__(self) -> None:
        if self.sink < 0 or self.recent < 1 or self.topk < 0:
            raise ValueError(f"need sink >= 0, recent >= 1, topk >= 0: {self}")

    @property
    def static_len(self) -> int:
        """Slots of the fixed cache, ``sink + recent + topk``."""
        return self.sink + self.recent + self.topk

    @property
    def topk_start(self) -> int:
        """First slot of the top-K region (just after the ring)."""
        return self.sink + self.recent

    def slot(self, position: int) -> int:
        """Slot of ``position``: itself among the sinks, else ``sink + (p - sink) mod recent``."""
        if position < self.sink:
            return position
        return self.sink + (position - self.sink) % self.recent

    def evictable(self, prompt_len: int) -> int:
        """Positions of the middle ``[sink, L - recent)`` that SnapKV chooses from."""
        return max(prompt_len - (self.sink + self.recent), 0)

    def valid_topk(self, prompt_len: int) -> int:
        """``min(max(L - (sink + recent), 0), K)``."""
        return min(self.evictable(prompt_len), self.topk)


@dataclass
class RingCache:
    """One sequence's cache for one layer (mutated in place by :func:`decode_step`)."""

    layout: Layout
    keys: np.ndarray        # [G, S, dk]
    values: np.ndarray      # [G, S, dv]
    positions: np.ndarray   # [G, S] int; -1 for empty top-K slots
    valid: np.ndarray       # [G, S] bool
    valid_topk: int
    prompt_len: int
    next_position: int
    #: positions chosen by SnapKV per KV head, ascending, shape [G, valid_topk]
    selected: np.ndarray

    def ring_positions(self, head: int = 0) -> np.ndarray:
        """Positions recorded in the ring slots (padding slots included)."""
        lay = self.layout
        return self.positions[head, lay.sink:lay.topk_start]

    def held_positions(self, head: int = 0) -> np.ndarray:
        """Sorted positions whose KV the cache holds for KV head ``head``."""
        return np.sort(self.positions[head][self.valid[head]])


def ring_gather_positions(prompt_len: int, layout: Layout) -> tuple[np.ndarray, np.ndarray]:
    """Positions read by the two ring gathers: the ring-aligned block holding position ``L``
    (where the first decoded token lands) and the block before it. Needs ``L >= sink + recent``.
    """
    lay = layout
    if prompt_len < lay.sink + lay.recent:
        raise ValueError(f"prompt of {prompt_len} is shorter than sink + recent: no ring gathers")
    hi_start = lay.sink + ((prompt_len - lay.sink) // lay.recent) * lay.recent
    hi = np.arange(hi_start, hi_start + lay.recent)
    return hi - lay.recent, hi


def observation_scores(queries: np.ndarray, keys: np.ndarray, prompt_len: int, *, sink: int,
                       recent: int, window: int, scale: float) -> np.ndarray:
    """Per query head, the attention the last ``window`` queries pay to each evictable position.

    ``W = softmax(Q_obs K_evict^T * scale)`` per query row over the evictable middle
    ``[sink, L - recent)`` (causally masked: a query never sees later keys; a row with no visible
    key contributes nothing), summed over the window rows. Returns ``[H, E]``.
    """
    heads, groups = queries.shape[0], keys.shape[0]
    lo, hi = sink, max(prompt_len - recent, sink)
    q_pos = np.arange(max(prompt_len - window, 0), prompt_len)
    k_pos = np.arange(lo, hi)
    visible = k_pos[None, :] <= q_pos[:, None]
    out = np.zeros((heads, hi - lo))
    for h in range(heads):
        g = h // (heads // groups)
        logits = queries[h, q_pos] @ keys[g, lo:hi].T * scale
        logits = np.where(visible, logits, -np.inf)
        row_max = logits.max(axis=1, initial=-np.inf, keepdims=True)
        row_max = np.where(np.isfinite(row_max), row_max, 0.0)
        weights = np.where(visible, np.exp(logits - row_max), 0.0)
        totals = weights.sum(axis=1, keepdims=True)
        out[h] = (weights / np.where(totals > 0, totals, 1.0)).sum(axis=0)
    return out


def pool_scores(scores: np.ndarray, kernel: int) -> np.ndarray:
    """Average pooling along the last axis: odd ``kernel``, stride 1, zero padding ``kernel // 2``
    counted in the mean (SnapKV's ``avg_pool1d``).

    >>> pool_scores(np.array([[0., 3., 0., 0.]]), 3).tolist()
    [[1.0, 1.0, 1.0, 0.0]]
    """
    if kernel % 2 != 1:
        raise ValueError(f"pool kernel must be odd, got {kernel}")
    half = kernel // 2
    padded = np.pad(scores, [(0, 0)] * (scores.ndim - 1) + [(half, half)])
    window = np.lib.stride_tricks.sliding_window_view(padded, kernel, axis=-1)
    return window.sum(axis=-1) / kernel


def select_topk(pooled: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``min(k, E)`` largest pooled scores per row, ascending; ties go to the
    earlier position. Returns ``[rows, min(k, E)]``.

    >>> select_topk(np.array([[0.1, 0.5, 0.5, 0.9]]), 2).tolist()
    [[1, 3]]
    """
    count = min(k, pooled.shape[-1])
    rows = []
    for row in pooled:
        order = np.lexsort((np.arange(row.size), -row))  # last key is primary
        rows.append(np.sort(order[:count]))
    return np.array(rows, dtype=np.int64).reshape(pooled.shape[0], count)


def snapkv_select(queries: np.ndarray, keys: np.ndarray, prompt_len: int, layout: Layout, *,
                  window: int, pool_kernel: int, shared: bool, scale: float) -> np.ndarray:
    """SnapKV's choice of positions from the evictable middle, per KV head ``[G, valid_topk]``.

    Per KV head the scores of its query heads are summed; with ``shared=True`` (MLA) the scores
    of all heads are summed and every KV head gets the same selection.
    """
    heads, groups = queries.shape[0], keys.shape[0]
    scores = observation_scores(queries, keys, prompt_len, sink=layout.sink,
                                recent=layout.recent, window=window, scale=scale)
    if shared:
        combined = np.repeat(scores.sum(axis=0, keepdims=True), groups, axis=0)
    else:
        combined = scores.reshape(groups, heads // groups, -1).sum(axis=1)
    chosen = select_topk(pool_scores(combined, pool_kernel), layout.topk)
    return chosen + layout.sink


def prefill(queries: np.ndarray, keys: np.ndarray, values: np.ndarray, layout: Layout, *,
            window: int = 32, pool_kernel: int = 7, shared: bool = False,
            scale: float | None = None) -> RingCache:
    """Compress a prompt's KV into the fixed SnapStream cache.

    Parameters
    ----------
    queries : ndarray, shape [H, L, dk]
        The prompt's queries (only the last ``window`` are used).
    keys, values : ndarray, shapes [G, L, dk] and [G, L, dv]
        The prompt's KV.
    layout : Layout
    window, pool_kernel : int
        SnapKV's observation window and average-pooling kernel.
    shared : bool
        One selection for all heads (MLA) instead of one per KV head.
    scale : float, optional
        Softmax scale, default ``1 / sqrt(dk)``.
    """
    heads, prompt_len, dk = queries.shape
    groups, dv = keys.shape[0], values.shape[2]
    if heads % groups or keys.shape[1] != prompt_len or values.shape[1] != prompt_len:
        raise ValueError(f"inconsistent shapes {queries.shape}, {keys.shape}, {values.shape}")
    scale = 1.0 / np.sqrt(dk) if scale is None else scale
    lay = layout
    size = lay.static_len
    cache = RingCache(layout=lay, keys=np.zeros((groups, size, dk)),
                      values=np.zeros((groups, size, dv)),
                      positions=np.full((groups, size), -1, dtype=np.int64),
                      valid=np.zeros((groups, size), dtype=bool), valid_topk=0,
                      prompt_len=prompt_len, next_position=prompt_len,
                      selected=np.zeros((groups, 0), dtype=np.int64))
    if prompt_len < lay.sink + lay.recent:
        # short prompt: the prompt followed by padding; decode appends in place (slot(p) == p)
        cache.keys[:, :prompt_len], cache.values[:, :prompt_len] = keys, values
        cache.positions[:, :lay.topk_start] = np.arange(lay.topk_start)
        cache.valid[:, :prompt_len] = True
        return cache
    # sinks
    cache.keys[:, :lay.sink], cache.values[:, :lay.sink] = keys[:, :lay.sink], values[:, :lay.sink]
    cache.positions[:, :lay.sink] = np.arange(lay.sink)
    cache.valid[:, :lay.sink] = True
    # ring: two gathers from the prompt buffer padded past L, then a per-slot select
    lo, hi = ring_gather_positions(prompt_len, lay)
    pad = hi[-1] + 1 - prompt_len
    k_buf = np.concatenate([keys, np.zeros((groups, pad, dk))], axis=1)
    v_buf = np.concatenate([values, np.zeros((groups, pad, dv))], axis=1)
    take_hi = hi <= prompt_len  # the hi block up to position L (the first decoded token's slot)
    ring_pos = np.where(take_hi, hi, lo)
    ring = slice(lay.sink, lay.topk_start)
    cache.keys[:, ring] = np.where(take_hi[None, :, None], k_buf[:, hi], k_buf[:, lo])
    cache.values[:, ring] = np.where(take_hi[None, :, None], v_buf[:, hi], v_buf[:, lo])
    cache.positions[:, ring] = ring_pos
    cache.valid[:, ring] = ring_pos < prompt_len
    # top-K of the evictable middle, gathered after the ring
    chosen = np.zeros((groups, 0), dtype=np.int64)
    if lay.valid_topk(prompt_len) > 0:
        chosen = snapkv_select(queries, keys, prompt_len, lay, window=window,
                               pool_kernel=pool_kernel, shared=shared, scale=scale)
    count = chosen.shape[1]
    top = slice(lay.topk_start, lay.topk_start + count)
    for g in range(groups):
        cache.keys[g, top], cache.values[g, top] = keys[g, chosen[g]], values[g, chosen[g]]
    cache.positions[:, top] = chosen
    cache.valid[:, top] = True
    cache.valid_topk, cache.selected = count, chosen
    return cache


def attend(query: np.ndarray, keys: np.ndarray, values: np.ndarray, mask: np.ndarray,
           scale: float) -> np.ndarray:
    """Softmax attention of one token's ``[H, dk]`` queries over ``[G, S, *]`` KV where
    ``mask [G, S]`` is True. Returns ``[H, dv]``."""
    heads, groups = query.shape[0], keys.shape[0]
    out = np.zeros((heads, values.shape[2]))
    for h in range(heads):
        g = h // (heads // groups)
        logits = keys[g, mask[g]] @ query[h] * scale
        weights = np.exp(logits - logits.max())
        out[h] = weights @ values[g, mask[g]] / weights.sum()
    return out


def decode_step(cache: RingCache, query: np.ndarray, key: np.ndarray, value: np.ndarray,
                scale: float | None = None) -> np.ndarray:
    """One decode step of the token at ``cache.next_position``: scatter its KV (``[G, dk]``,
    ``[G, dv]``) into its ring slot, then attend over the valid slots. Returns ``[H, dv]``.

    Sinks and top-K slots are never written (except sink slots still empty after a prompt
    shorter than the sinks, which fill in place).
    """
    position = cache.next_position
    slot = cache.layout.slot(position)
    cache.keys[:, slot], cache.values[:, slot] = key, value
    cache.positions[:, slot] = position
    cache.valid[:, slot] = True
    cache.next_position = position + 1
    scale = 1.0 / np.sqrt(query.shape[1]) if scale is None else scale
    return attend(query, cache.keys, cache.values, cache.valid, scale)
