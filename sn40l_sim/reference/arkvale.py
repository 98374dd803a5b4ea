"""A functional numpy reference of DDR offload with recall (after ArkVale): pages of the whole cache
in a store, a digest per page, and each decode step attending over the recent tokens plus the pages
its digests select.

The simulator's policy (:mod:`sn40l_sim.kvcache.policies.arkvale`) has the same rules: the store
keeps every token; the buffer decode attention reads holds the ``recent`` last tokens and
``pages`` pages of ``page_tokens`` tokens; each step scores every page that holds a token outside
the recent window, selects the best ``pages`` per KV head, and fetches those not already in the
buffer (:attr:`ArkCache.recalled` counts them, the turnover the simulator's ``recall_fraction``
stands for).

Digests (Quest's and ArkVale's bounding box): per page and channel the largest and smallest key.
For a query ``q``, ``sum_c max(q_c max_c, q_c min_c)`` is at least ``q . k`` for every key ``k`` of
the page (:func:`page_scores`), so a page holding a token the query attends to strongly scores
high. ``digest="centroid"`` uses the mean key instead (no bound). A KV head's page score is the
largest over its query heads (over all heads with ``shared=True``).

Examples
--------
>>> rng = np.random.default_rng(0)
>>> q, k, v = rng.normal(size=(2, 40, 4)), rng.normal(size=(1, 40, 4)), rng.normal(size=(1, 40, 3))
>>> cache = ArkCache.from_prompt(k[:, :32], v[:, :32], recent=4, pages=2, page_tokens=4)
>>> out = decode_step(cache, q[:, 32], k[:, 32], v[:, 32])
>>> len(cache.attended[0]), cache.attended[0][-4:], len(cache.store_positions())
(12, [29, 30, 31, 32], 33)
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


def digests(keys: np.ndarray, page_tokens: int, kind: str = "bounds") -> np.ndarray:
    """``[G, P, 2, dk]`` (max and min per channel) or ``[G, P, 1, dk]`` (mean) of the keys'
    pages; the last page may be partial."""
    groups, length, dk = keys.shape
    pages = -(-length // page_tokens)
    rows = 2 if kind == "bounds" else 1
    out = np.zeros((groups, pages, rows, dk))
    for p in range(pages):
        block = keys[:, p * page_tokens:(p + 1) * page_tokens]
        if kind == "bounds":
            out[:, p, 0], out[:, p, 1] = block.max(axis=1), block.min(axis=1)
        else:
            out[:, p, 0] = block.mean(axis=1)
    return out


def page_scores(query: np.ndarray, digest: np.ndarray, kind: str = "bounds") -> np.ndarray:
    """``[P]`` scores of one query head ``[dk]`` against one KV head's digests ``[P, rows, dk]``."""
    if kind == "bounds":
        return np.maximum(query * digest[:, 0], query * digest[:, 1]).sum(axis=1)
    return digest[:, 0] @ query


@dataclass
class ArkCache:
    """One sequence's store, digests and buffer for one layer (mutated by :func:`decode_step`)."""

    keys: np.ndarray           # [G, T, dk]: the store
    values: np.ndarray         # [G, T, dv]
    recent: int
    pages: int
    page_tokens: int
    digest: str = "bounds"
    shared: bool = False
    #: pages per KV head in the buffer after the last step
    buffer_pages: list[set[int]] = field(default_factory=list)
    #: positions each KV head attended at the last step, sorted
    attended: list[list[int]] = field(default_factory=list)
    #: pages fetched from the store at each step (summed over KV heads)
    recalled: list[int] = field(default_factory=list)

    @classmethod
    def from_prompt(cls, keys: np.ndarray, values: np.ndarray, *, recent: int, pages: int, page_tokens: int,
                    digest: str = "bounds", shared: bool = False) -> ArkCache:
        """A store holding the prompt, with an empty buffer (the first step recalls its pages)."""
        if recent < 1 or pages < 1 or page_tokens < 1 or digest not in ("bounds", "centroid"):
            raise ValueError(f"need recent, pages, page_tokens >= 1 and a known digest, got "
                             f"{recent}, {pages}, {page_tokens}, {digest!r}")
        groups = keys.shape[0]
        return cls(keys.copy(), values.copy(), recent, pages, page_tokens, digest, shared,
                   [set() for _ in range(groups)])

    @property
    def budget(self) -> int:
        """Slots of the buffer: ``recent + pages * page_tokens``."""
        return self.recent + self.pages * self.page_tokens

    def store_positions(self) -> list[int]:
        """Every position the store holds."""
        return list(range(self.keys.shape[1]))


def decode_step(cache: ArkCache, query: np.ndarray, key: np.ndarray, value: np.ndarray,
                scale: float | None = None) -> np.ndarray:
    """One decode step: the new token joins the store (and the recent window), the pages holding
    tokens outside the window are scored and the best ``pages`` per KV head fill the buffer (the
    ones not already there are recalled), then attention runs over the window and those pages'
    tokens outside it. Returns ``[H, dv]``."""
    cache.keys = np.concatenate([cache.keys, key[:, None]], axis=1)
    cache.values = np.concatenate([cache.values, value[:, None]], axis=1)
    t = cache.keys.shape[1] - 1
    heads, dk = query.shape
    groups = cache.keys.shape[0]
    scale = 1.0 / np.sqrt(dk) if scale is None else scale
    window_start = max(0, t + 1 - cache.recent)
    candidates = -(-window_start // cache.page_tokens)     # pages with a token before the window
    summary = digests(cache.keys[:, :window_start], cache.page_tokens, cache.digest) if candidates else None
    members = [list(range(heads))] * groups if cache.shared else \
        [list(range(g * (heads // groups), (g + 1) * (heads // groups))) for g in range(groups)]
    kv_of = [h // (heads // groups) for h in range(heads)]
    recalled, attended = 0, []
    for g in range(groups):
        chosen: set[int] = set()
        if candidates:
            best = np.max([page_scores(query[h], summary[kv_of[h]], cache.digest) for h in members[g]], axis=0)
            order = np.lexsort((np.arange(candidates), -best))     # best first, earlier page on a tie
            chosen = set(order[:cache.pages].tolist())
        recalled += len(chosen - cache.buffer_pages[g])
        cache.buffer_pages[g] = chosen
        from_pages = {p for page in chosen for p in range(page * cache.page_tokens,
                                                          min((page + 1) * cache.page_tokens, window_start))}
        attended.append(sorted(from_pages | set(range(window_start, t + 1))))
    cache.recalled.append(recalled)
    cache.attended = attended
    out = np.zeros((heads, cache.values.shape[2]))
    for h in range(heads):
        held = attended[kv_of[h]]
        logits = cache.keys[kv_of[h], held] @ query[h] * scale
        w = np.exp(logits - logits.max())
        out[h] = w @ cache.values[kv_of[h], held] / w.sum()
    return out
