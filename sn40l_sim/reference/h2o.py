"""A functional numpy reference of heavy-hitter eviction (H2O): the tokens a cache keeps, step by
step, and the attention it yields.

The simulator's policy (:mod:`sn40l_sim.kvcache.policies.h2o`) has the same capacity rules: a
``[heavy | recent]`` cache of ``heavy + recent`` slots; a prompt longer than that keeps its last
``recent`` tokens and the ``heavy`` earlier ones with the largest accumulated attention; in decode,
the token leaving the recent window competes with the heavy tokens and the lowest accumulated
score among them is evicted (H2O's rule: evict the non-recent token with the least accumulated
attention), so the cache never exceeds its budget and the new token is always attended.

A token's score is the attention it has received from every query so far (prompt queries causally
in prefill, then each decode query), summed over the query heads of its KV head (over all heads
with ``shared=True``, MLA's one latent). Ties go to the earlier position (evicted first).

Shapes as in :mod:`sn40l_sim.reference.snapstream`: ``queries [H, L, dk]``, ``keys [G, L, dk]``,
``values [G, L, dv]``.

Examples
--------
>>> rng = np.random.default_rng(0)
>>> q, k, v = rng.normal(size=(2, 12, 4)), rng.normal(size=(1, 12, 4)), rng.normal(size=(1, 12, 3))
>>> cache = prefill(q[:, :8], k[:, :8], v[:, :8], heavy=2, recent=3)
>>> len(cache.held(0)), cache.held(0)[-3:]
(5, [5, 6, 7])
>>> _ = decode_step(cache, q[:, 8], k[:, 8], v[:, 8])
>>> len(cache.held(0)), 8 in cache.held(0)
(5, True)
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class H2OCache:
    """One sequence's H2O cache for one layer: per KV head, the positions held and their scores."""

    heavy: int
    recent: int
    keys: np.ndarray           # [G, T, dk]: every token seen (the reference keeps them to re-read)
    values: np.ndarray         # [G, T, dv]
    scores: np.ndarray         # [G, T]: accumulated attention (0 for tokens never attended)
    kept: list[set[int]] = field(default_factory=list)
    shared: bool = False
    next_position: int = 0

    @property
    def budget(self) -> int:
        """Slots of the cache, ``heavy + recent``."""
        return self.heavy + self.recent

    def held(self, head: int = 0) -> list[int]:
        """Sorted positions the cache holds for KV head ``head``."""
        return sorted(self.kept[head])


def _probs(q: np.ndarray, k: np.ndarray, scale: float) -> np.ndarray:
    logits = k @ q * scale
    w = np.exp(logits - logits.max())
    return w / w.sum()


def _head_groups(heads: int, groups: int, shared: bool) -> list[list[int]]:
    """Query heads whose attention counts towards each KV head's scores."""
    if shared:
        return [list(range(heads))] * groups
    size = heads // groups
    return [list(range(g * size, (g + 1) * size)) for g in range(groups)]


def prompt_scores(queries: np.ndarray, keys: np.ndarray, *, shared: bool = False,
                  scale: float | None = None) -> np.ndarray:
    """``[G, L]``: the attention each prompt position receives from every later-or-equal prompt
    query (causal), summed over the query heads of its KV head (all heads with ``shared``)."""
    heads, length, dk = queries.shape
    groups = keys.shape[0]
    scale = 1.0 / np.sqrt(dk) if scale is None else scale
    out = np.zeros((groups, length))
    kv_of = [h // (heads // groups) for h in range(heads)]
    for g, members in enumerate(_head_groups(heads, groups, shared)):
        for h in members:
            for i in range(length):
                out[g, :i + 1] += _probs(queries[h, i], keys[kv_of[h], :i + 1], scale)
    return out


def prefill(queries: np.ndarray, keys: np.ndarray, values: np.ndarray, *, heavy: int, recent: int,
            shared: bool = False, scale: float | None = None) -> H2OCache:
    """The cache after a prompt: everything if it fits, else the last ``recent`` positions and the
    ``heavy`` earlier ones with the largest accumulated scores."""
    heads, length, _ = queries.shape
    groups = keys.shape[0]
    if heavy < 0 or recent < 1 or heads % groups or keys.shape[1] != length:
        raise ValueError(f"need heavy >= 0, recent >= 1 and consistent shapes: {queries.shape}, {keys.shape}")
    scores = prompt_scores(queries, keys, shared=shared, scale=scale)
    cache = H2OCache(heavy, recent, keys.copy(), values.copy(), scores, shared=shared, next_position=length)
    for g in range(groups):
        if length <= heavy + recent:
            cache.kept.append(set(range(length)))
            continue
        older = np.arange(length - recent)
        # largest score first, the earlier position on a tie
        order = older[np.lexsort((older, -scores[g, older]))]
        cache.kept.append(set(order[:heavy].tolist()) | set(range(length - recent, length)))
    return cache


def decode_step(cache: H2OCache, query: np.ndarray, key: np.ndarray, value: np.ndarray,
                scale: float | None = None) -> np.ndarray:
    """One decode step of the token at ``cache.next_position``: the token leaving the recent
    window competes with the heavy ones (the lowest accumulated score is evicted when the cache
    is full), the new token joins, attention runs over the kept tokens and its probabilities are
    added to their scores. Returns ``[H, dv]``."""
    t = cache.next_position
    heads, dk = query.shape
    groups = cache.keys.shape[0]
    scale = 1.0 / np.sqrt(dk) if scale is None else scale
    cache.keys = np.concatenate([cache.keys, key[:, None]], axis=1)
    cache.values = np.concatenate([cache.values, value[:, None]], axis=1)
    cache.scores = np.concatenate([cache.scores, np.zeros((groups, 1))], axis=1)
    for g in range(groups):
        kept = cache.kept[g]
        if len(kept) >= cache.budget:
            # the non-recent tokens once t joins: the heavy ones and the one leaving the window
            candidates = np.array(sorted(p for p in kept if p < t + 1 - cache.recent))
            order = candidates[np.lexsort((candidates, cache.scores[g, candidates]))]
            kept.discard(int(order[0]))
        kept.add(t)
    cache.next_position = t + 1
    out = np.zeros((heads, cache.values.shape[2]))
    kv_of = [h // (heads // groups) for h in range(heads)]
    for h in range(heads):
        g = kv_of[h]
        held = cache.held(g)
        p = _probs(query[h], cache.keys[g, held], scale)
        out[h] = p @ cache.values[g, held]
        for target in range(groups):
            if cache.shared or target == g:
                cache.scores[target, held] += p
    return out
