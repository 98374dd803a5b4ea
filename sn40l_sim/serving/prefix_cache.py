"""Prefix caching: requests that share a prompt prefix (a system prompt, the earlier turns of a
conversation) compute and store its KV once.

A request may carry a prefix (:attr:`~sn40l_sim.serving.workload.Request.prefix_id` and
``prefix_len``: its first ``prefix_len`` prompt tokens are those of every request with the same id).
With ``serving.prefix_cache`` on, the serving loop (:mod:`sn40l_sim.serving.loop`) asks a
:class:`PrefixTracker`:

* **at prefill**, whether the node already holds the prefix (a request using it is in flight: from
  its prefill to its last token). A hit computes the rest of the prompt only, but those queries
  attend over the prefix's keys too: it runs the suffix's graph over the cached prefix
  (:func:`prefix_hit_cycles`, timed as a later chunk of a chunked prefill is:
  :mod:`sn40l_sim.serving.earlier_keys`; on a co-located node, after decode steps, it first loads
  that graph's configurations, read at the same points: :func:`suffix_cycles`). With static graphs
  the suffix runs in the graph compiled for the next length up, so it reuses the prefix's first
  ``prompt - compiled(prompt - prefix)`` tokens and recomputes the rest in rows the graph would otherwise pad (fewer queries over the
  same keys than with the whole prefix reused), and it prefills the whole prompt when that graph is
  the prompt's own (or no cheaper; counted as ``held_not_reused``, not as a hit, since it saves
  nothing): a hit never costs more than a miss, and a longer held prefix
  no more than a shorter one (fewer queries over the same keys; tests/study/test_prefix_hit_costs.py
  checks it on the mapped graphs). A miss prefills the whole prompt and holds the prefix from then on;
  a user whose prefix is longer than the one held (the first user's, whose prompt was shorter)
  holds the rest of it from then on too.
  The prefix's KV stays on the node until its last user finishes (*freed when the last user leaves*),
  if it fits in what the node's memory placement leaves free of its first tier (else it is not kept;
  a co-located node keeping whole caches needs no such room: the prefix is its users' own cache);
* **at each decode step**, the KV its node holds: a prefix shared by several sequences on one
  decode node is stored once, so the node holds every sequence's own tokens plus each distinct
  prefix once, and saves ``(users - 1) x prefix`` tokens' bytes (stored + saved is always what the
  node would hold without sharing).

**SnapStream and other compressing policies.** A compressed cache cannot be extended as a prefix:
SnapKV chooses the tokens each sequence keeps from the attention of the prompt's last window, so the
cache it keeps for one prompt is not the cache of another prompt's first tokens; nor is a cache that
drops prompt tokens in decode (a ring wrapping over them, H2O evicting), each sequence writing its own
tokens over the prefix's. With a policy whose cache does not keep the whole prompt for the sequence's
life, this model therefore keeps the uncompressed prefix KV on the
prefill node (where the prompt's full cache exists before compression anyway; its bytes are reported
as ``prefill_prefix_bytes_peak``) and reuses it for prefill compute only; each decode sequence keeps
its own compressed cache (no decode-side sharing, ``decode_kv_shared`` false). The compressed cache
is chosen over the whole prompt's, so, as after a chunked prefill's last chunk
(:mod:`sn40l_sim.serving.chunked_prefill`), a hit runs the suffix's graph without the policy's
prefill kernels (SnapKV's selection, the ring's construction) and then those kernels over the whole
prompt, for what they add to its prefill (``policy_cycles``): a hit saves what it saves with the
full cache, and the kernels cost a hit what they cost a miss.

Examples
--------
>>> tracker = PrefixTracker(PrefixCaching(share_decode_kv=True, kv_bytes_per_token=2), nodes=1,
...                         prefill_cycles=lambda p: 10 * p, hit_cycles=lambda p, held: (10 * (p - held), held))
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

from sn40l_sim.serving.batching import compiled_size
from sn40l_sim.serving.earlier_keys import between_points, interpolated_cycles

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
    docstring); ``prefill_cycles`` is ``prompt_len -> cycles`` of a prefill without reuse,
    ``hit_cycles`` ``(prompt_len, held prefix tokens) -> (cycles, tokens reused)`` of one with
    (:func:`prefix_hit_cycles`)."""

    def __init__(self, caching: PrefixCaching, nodes: int, prefill_cycles: Callable[[int], int],
                 hit_cycles: Callable[[int, int], tuple[int, int]], other_tokens: Sequence[int] = ()) -> None:
        self.caching, self.nodes, self.prefill_cycles_of = caching, nodes, prefill_cycles
        self.hit_cycles_of = hit_cycles
        #: per node, cached tokens it holds besides prefixes in the same room (a disaggregated
        #: prefill node's caches waiting for their transfer), read when a prefix asks for room
        self.other_tokens = other_tokens
        self.held: list[dict[int, _Held]] = [{} for _ in range(nodes)]
        #: request id -> the node that holds its prefix for it
        self.holder: dict[int, int] = {}
        self.requests_with_prefix = 0
        #: requests that reused at least one held prefix token (a hit), and those whose node held
        #: the prefix but reused none of it (the suffix needs the prompt's own compiled graph)
        self.hits = 0
        self.held_not_reused = 0
        self.prefill_tokens_saved = 0
        self.prefill_cycles_saved = 0
        self.peak_prefill_prefix_tokens = 0

    def prefill_cycles(self, request: Any, node: int) -> int:
        """Cycles of ``request``'s prefill on ``node``, its prefix reused when the node holds it."""
        return self.prefill(request, node)[0]

    def prefill(self, request: Any, node: int) -> tuple[int, int]:
        """``(cycles, rows)`` of ``request``'s prefill on ``node``: ``rows`` are the prompt tokens
        of the graph it runs (a hit's suffix, else the whole prompt), whose configurations a
        co-located node loads after decode steps."""
        full = self.prefill_cycles_of(request.prompt_len)
        if request.prefix_id < 0 or request.prefix_len <= 0:
            return full, request.prompt_len
        self.requests_with_prefix += 1
        prefix = min(request.prefix_len, request.prompt_len - 1)   # the last token is always computed
        held = self.held[node].get(request.prefix_id)
        self.holder[request.id] = node
        if held is None:
            if self._room(node, prefix):
                self.held[node][request.prefix_id] = _Held(prefix, 1)
                self.peak_prefill_prefix_tokens = max(self.peak_prefill_prefix_tokens, self.held_tokens(node))
            else:   # no room left on the node: prefilled, not kept
                del self.holder[request.id]
            return full, request.prompt_len
        held.users += 1
        cycles, reused = self.hit_cycles_of(request.prompt_len, min(prefix, held.tokens))
        if reused > 0:
            self.hits += 1
        else:   # prefilled whole: counting it a hit overstated the hit rate
            self.held_not_reused += 1
        self.prefill_tokens_saved += reused
        self.prefill_cycles_saved += full - cycles
        if prefix > held.tokens and self._room(node, prefix - held.tokens):
            # the prefix held is its first user's, cut to that prompt less one (with_prefixes): this
            # user has just computed the rest of its own, longer one on the node, which keeps it as a
            # miss keeps its prefix. Kept at the first user's length, a trace's short first prompt left
            # every later user of the group reusing that much of it while the group stayed in flight
            # (experiments/prefix_cache.yaml: 1,082 of 1,732 prefills finding their prefix held)
            held.tokens = prefix
            self.peak_prefill_prefix_tokens = max(self.peak_prefill_prefix_tokens, self.held_tokens(node))
        return cycles, request.prompt_len - reused

    def _room(self, node: int, tokens: int) -> bool:
        """Whether ``node`` has room for ``tokens`` more prefix tokens beside what it holds (its
        prefixes and the caches waiting for their transfer)."""
        capacity = self.caching.capacity_tokens
        other = self.other_tokens[node] if node < len(self.other_tokens) else 0
        return capacity is None or self.held_tokens(node) + other + tokens <= capacity

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


def prefix_hit_cycles(timed: Callable[[int, int], int], lens: Sequence[int], prompt_len: int,
                      held: int, *, policy_cycles: int = 0) -> tuple[int, int]:
    """``(cycles, tokens reused)`` of prefilling a prompt of ``prompt_len`` tokens whose first
    ``held`` are cached, with the static graphs compiled for ``lens`` (sorted), ``timed(rows,
    earlier)`` the cycles of the graph of ``rows`` (a compiled length) after ``earlier`` cached
    tokens (called with ``earlier`` at 0 and the ``lens``, interpolated between:
    :mod:`sn40l_sim.serving.earlier_keys`).

    The suffix runs in the graph compiled for its length, filled with the prompt's last ``rows``
    tokens: it reuses ``prompt_len - rows`` cached tokens (at most ``held``), or none when that
    graph is the whole prompt's or no cheaper than it. ``policy_cycles``: when ``timed`` has none
    of the KV policy's prefill kernels, what they add to the whole prompt's prefill; they select
    from the whole prompt's cache, so they run once after the suffix (or the whole prompt) and
    both charges include them. A cost of 100 cycles a call, 10 a row and 1 a (row, earlier key)
    pair, graphs of 4, 8 and 16 rows:

    >>> timed = lambda rows, earlier: 100 + 10 * rows + rows * earlier
    >>> [prefix_hit_cycles(timed, (4, 8, 16), 16, held) for held in (4, 8, 10, 13)]
    [(260, 0), (244, 8), (244, 8), (188, 12)]
    >>> prefix_hit_cycles(timed, (4, 8, 16), 16, 13, policy_cycles=30)
    (218, 12)
    """
    full = timed(compiled_size(prompt_len, lens, "prompt length"), 0) + policy_cycles
    rows = compiled_size(prompt_len - held, lens, "prompt length")
    reused = prompt_len - rows
    if reused <= 0:
        return full, 0
    cycles = suffix_cycles(timed, lens, rows, reused) + policy_cycles
    return (cycles, reused) if cycles < full else (full, 0)


def suffix_cycles(timed: Callable[[int, int], int], lens: Sequence[int], rows: int, reused: int) -> int:
    """``timed(rows, earlier)`` of a hit's suffix graph of ``rows`` (a compiled length) after
    ``reused`` cached tokens, called at 0 and the compiled ``lens`` around ``reused`` only, linear
    between: :func:`prefix_hit_cycles` reads the suffix's cycles so, and a co-located node its
    configuration loads after a decode step (the same graphs' ``switch_load_cycles``), so that the
    reload charged is that of the graphs the cycles came from, and no other graph is timed for it.

    >>> suffix_cycles(lambda rows, earlier: 7 + rows * earlier, (4, 8, 16), 4, 12)
    55
    """
    return interpolated_cycles(timed, rows, reused, *between_points((0, *sorted(lens)), reused))


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
