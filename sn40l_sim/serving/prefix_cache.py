"""Prefix caching: requests that share a prompt prefix (a system prompt, the earlier turns of a
conversation) compute and store its KV once.

A request may carry a prefix (:attr:`~sn40l_sim.serving.workload.Request.prefix_id` and
``prefix_len``: its first ``prefix_len`` prompt tokens are those of every request with the same id).
With ``serving.prefix_cache`` on, the serving loop (:mod:`sn40l_sim.serving.loop`) asks a
:class:`PrefixTracker`:

* **at prefill**, whether the node already holds the prefix (a request using it is in flight: from
  its prefill to its last token). A hit prefills the rest of the prompt only:
  ``max(prefill(prompt - prefix), prefill(prompt) - prefill(prefix))`` cycles (the first is the
  graph compiled for the suffix alone, the second what the prompt costs beyond its prefix: with the
  static prefill graphs' compiled lengths neither is exact; the larger keeps the attention of the
  suffix over the prefix's keys). A miss prefills the whole prompt and holds the prefix from then on.
  The prefix's KV stays on the node until its last user finishes (*freed when the last user leaves*),
  if it fits in what the node's memory placement leaves free of its first tier (else it is not kept);
* **at each decode step**, the KV its node holds: a prefix shared by several sequences on one
  decode node is stored once, so the node holds every sequence's own tokens plus each distinct
  prefix once, and saves ``(users - 1) x prefix`` tokens' bytes (stored + saved is always what the
  node would hold without sharing).

**SnapStream and other compressing policies.** A compressed cache cannot be extended as a prefix:
SnapKV chooses the tokens each sequence keeps from the attention of the prompt's last window, so the
cache it keeps for one prompt is not the cache of another prompt's first tokens. With a policy whose
cache is shorter than the prompt, this model therefore keeps the uncompressed prefix KV on the
prefill node (where the prompt's full cache exists before compression anyway; its bytes are reported
as ``prefill_prefix_bytes_peak``) and reuses it for prefill compute only; each decode sequence keeps
its own compressed cache (no decode-side sharing, ``decode_kv_shared`` false).

Examples
--------
>>> tracker = PrefixTracker(PrefixCaching(share_decode_kv=True, kv_bytes_per_token=2), nodes=1,
...                         prefill_cycles=lambda p: 10 * p)
>>> from sn40l_sim.serving.workload import Request
>>> a, b = Request(0, 0, 100, 4, prefix_id=7, prefix_len=60), Request(1, 0, 100, 4, prefix_id=7, prefix_len=60)
>>> tracker.prefill_cycles(a, 0), tracker.prefill_cycles(b, 0)     # a misses, b hits
(1000, 400)
>>> tracker.decode_kv_tokens([(a, 100), (b, 100)])                 # (stored, saved) tokens
(140, 60)
>>> tracker.release(a), tracker.release(b), tracker.held_tokens(0)
(None, None, 0)
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

#: seeds the draw of prefixes, beside the workload's seed (so the workload's own draws do not move)
PREFIX_DRAW_STREAM = 0x7066


@dataclass(frozen=True)
class PrefixCaching:
    """How a point caches prefixes: whether decode nodes share a prefix's KV (not for a compressed
    cache) and the uncompressed KV bytes per token a prefill node holds for a cached prefix."""

    share_decode_kv: bool
    kv_bytes_per_token: int
    #: prefix tokens a prefill node can hold beside what its placement already holds (None: no
    #: limit); a prefix that does not fit is prefilled and not kept
    capacity_tokens: int | None = None


@dataclass
class _Held:
    tokens: int
    users: int


class PrefixTracker:
    """The prefixes each of ``nodes`` nodes holds, and what reusing them saved (see the module
    docstring); ``prefill_cycles`` is ``prompt_len -> cycles`` of a prefill without reuse."""

    def __init__(self, caching: PrefixCaching, nodes: int, prefill_cycles: Callable[[int], int],
                 other_tokens: Sequence[int] = ()) -> None:
        self.caching, self.nodes, self.prefill_cycles_of = caching, nodes, prefill_cycles
        #: per node, cached tokens it holds besides prefixes in the same room (a disaggregated
        #: prefill node's caches waiting for their transfer), read when a prefix asks for room
        self.other_tokens = other_tokens
        self.held: list[dict[int, _Held]] = [{} for _ in range(nodes)]
        #: request id -> the node that holds its prefix for it
        self.holder: dict[int, int] = {}
        self.requests_with_prefix = 0
        self.hits = 0
        self.prefill_tokens_saved = 0
        self.prefill_cycles_saved = 0
        self.peak_prefill_prefix_tokens = 0

    def prefill_cycles(self, request: Any, node: int) -> int:
        """Cycles of ``request``'s prefill on ``node``, its prefix reused when the node holds it."""
        full = self.prefill_cycles_of(request.prompt_len)
        if request.prefix_id < 0 or request.prefix_len <= 0:
            return full
        self.requests_with_prefix += 1
        prefix = min(request.prefix_len, request.prompt_len - 1)   # the last token is always computed
        held = self.held[node].get(request.prefix_id)
        self.holder[request.id] = node
        if held is None:
            capacity = self.caching.capacity_tokens
            other = self.other_tokens[node] if node < len(self.other_tokens) else 0
            if capacity is None or self.held_tokens(node) + other + prefix <= capacity:
                self.held[node][request.prefix_id] = _Held(prefix, 1)
                self.peak_prefill_prefix_tokens = max(self.peak_prefill_prefix_tokens, self.held_tokens(node))
            else:   # no room left on the node: prefilled, not kept
                del self.holder[request.id]
            return full
        held.users += 1
        reused = min(prefix, held.tokens)
        suffix = request.prompt_len - reused
        cycles = min(full, max(self.prefill_cycles_of(suffix), full - self.prefill_cycles_of(reused)))
        self.hits += 1
        self.prefill_tokens_saved += reused
        self.prefill_cycles_saved += full - cycles
        return cycles

    def release(self, request: Any) -> None:
        """``request`` finished: the prefix leaves its node with its last user."""
        node = self.holder.pop(request.id, None)
        if node is None:
            return
        held = self.held[node][request.prefix_id]
        held.users -= 1
        if held.users == 0:
            del self.held[node][request.prefix_id]

    def held_tokens(self, node: int) -> int:
        """Prefix tokens ``node`` holds for prefill reuse."""
        return sum(h.tokens for h in self.held[node].values())

    def decode_kv_tokens(self, sequences: Iterable[tuple[Any, int]]) -> tuple[int, int]:
        """``(stored, saved)`` cache tokens of a decode node's ``(request, cache tokens)`` pairs
        (:func:`decode_kv_tokens` with this tracker's caching)."""
        return decode_kv_tokens(self.caching, sequences)


def has_prefix(request: Any) -> bool:
    """Whether ``request`` starts with a shared prefix."""
    return request.prefix_id >= 0 and request.prefix_len > 0


def prefix_tokens(request: Any) -> int:
    """Tokens of ``request``'s prefix that can be reused (the prompt's last token is always computed)."""
    return min(request.prefix_len, request.prompt_len - 1)


def decode_kv_tokens(caching: PrefixCaching, sequences: Iterable[tuple[Any, int]]) -> tuple[int, int]:
    """``(stored, saved)`` cache tokens of a decode node's ``(request, cache tokens)`` pairs: each
    distinct prefix stored once when decode sharing is on, else nothing saved.

    >>> from sn40l_sim.serving.workload import Request
    >>> a, b = Request(0, 0, 100, 4, prefix_id=7, prefix_len=60), Request(1, 0, 100, 4, prefix_id=7, prefix_len=60)
    >>> decode_kv_tokens(PrefixCaching(True, 2), [(a, 100), (b, 40)]), decode_kv_tokens(PrefixCaching(False, 2), [(a, 100)])
    ((100, 40), (100, 0))
    """
    pairs = list(sequences)
    total = sum(tokens for _, tokens in pairs)
    if not caching.share_decode_kv:
        return total, 0
    users: dict[int, list[int]] = {}
    for request, tokens in pairs:
        if has_prefix(request):
            users.setdefault(request.prefix_id, []).append(min(prefix_tokens(request), tokens))
    saved = sum(sum(lens) - max(lens) for lens in users.values())
    return total - saved, saved


def with_prefixes(requests: Sequence[Any], share: float, tokens: int, groups: int, seed: int) -> list[Any]:
    """``requests`` with prefixes drawn: each, with probability ``share``, starts with one of
    ``groups`` prefixes (uniformly) of ``tokens`` tokens (at most its prompt less one).

    >>> from sn40l_sim.serving.workload import Request
    >>> out = with_prefixes([Request(i, 0, 100, 1) for i in range(1000)], 0.5, 64, 4, seed=0)
    >>> 450 < sum(r.prefix_id >= 0 for r in out) < 550, sorted({r.prefix_len for r in out}), max(r.prefix_id for r in out)
    (True, [0, 64], 3)
    """
    rng = np.random.default_rng([seed, PREFIX_DRAW_STREAM])
    shared = rng.random(len(requests)) < share
    ids = rng.integers(0, groups, size=len(requests))
    return [replace(r, prefix_id=int(ids[i]), prefix_len=min(tokens, r.prompt_len - 1)) if shared[i] and
            r.prompt_len > 1 else r for i, r in enumerate(requests)]
