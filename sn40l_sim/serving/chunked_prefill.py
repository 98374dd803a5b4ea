"""Chunked prefill on a co-located node: prefill split into chunks that take turns with decode steps.

Without chunking a co-located node prefills every waiting prompt (while it has free slots) before
its next decode step, so a long prompt stalls every sequence decoding on the node for its whole
prefill: the TPOT interference that shows in the percentiles. With ``serving.prefill_chunk: C``
the node prefills at most ``C`` prompt tokens between two decode steps (Sarathi-Serve's chunked
prefill, OSDI 2024), continuing the same prompt, first come first served, at the next turn. SN40L
runs one static graph at a time, so a chunk and a decode step run one after the other rather than
fused into one batch: a decode step waits for at most ``C`` tokens of prefill.

A chunk of prompt tokens ``[start, end)`` costs ``prefill(end)`` cycles when it starts the prompt,
else those of its own graph (compiled for its length ``end - start``) whose attention also covers
the ``start`` earlier tokens, reading their keys and values from where the earlier chunks left them
(the cache; MLA's per-head keys from activations): a :class:`~sn40l_sim.ir.Shape` of phase
``prefill`` with ``kv_len = start`` (:mod:`sn40l_sim.models.flash`). So a chunk costs more the later
it comes, as its queries meet more keys. Graphs are timed at the multiples of the chunk size and
a chunk starting between two of them (the budget spans prompts, so a prompt may start mid-turn)
interpolated linearly (:func:`interpolated_chunk_cycles`, :mod:`sn40l_sim.serving.earlier_keys`),
which bounds the graphs to time however the prompts split. A prompt of more than
:data:`CHUNK_PREFIX_INTERVALS` chunks (a small chunk: an 8K prompt in 1-token chunks is 8,192
graphs, over ten minutes of mapping) times each chunk graph at no more than
``CHUNK_PREFIX_INTERVALS + 1`` multiples, chosen where its cycles bend
(:func:`~sn40l_sim.serving.earlier_keys.refined_points`: the mapper changes plan at some counts of
keys, so the cycles jump there), and interpolates linearly between them (:class:`ChunkCycles`;
docs/validation.md gives the error measured against timing every multiple). The chunks of a prompt cost at least its unchunked prefill where the
fixed costs of a call (configuration, weights streamed per call) outweigh the attention saved
by the chunks' finer causal masking (a whole prompt computes its diagonal tiles' masked halves in
full, a chunk only its own), as it does for the shipped models (tests/study/test_chunk_costs.py):
the price of the lower interference. (A prompt shorter than the compiled length it runs on whole, 2,100
tokens on the 4,096-token graph, may cost less in chunks, which pad only the last: the results'
``prefill_overhead_fraction`` is then below 0. So may a prompt whose whole graph's activations leave
the first memory tier where a chunk's fit: the node keeps room for one chunk's, and a whole prompt is
timed with its own, as on a node without chunks, ``MemoryFit.whole_prompt_placement``.) A compressing KV policy's prefill kernels (SnapKV's selection,
the ring's construction) select from the whole prompt's cache, so they run once, after the last
chunk, over the whole prompt (``prefill_policy_cycles``: the cycles those kernels take in the whole
prompt's graph), and no chunk's graph runs them over its own tokens. The budget spans prompts (a turn
finishes one prompt and starts the next), so a chunk at least as long as all the prompts that ever
wait at once gives exactly the unchunked schedule; one as long as a single prompt may still split
the second of two waiting prompts. Every turn switches graphs twice, so each chunk and each decode
step after one first loads the configurations the other graph took (the loop's ``switch_to``).

Examples
--------
A call's fixed 100 cycles, 1 per token and 1 per (query, earlier key) pair:

>>> timed = lambda tokens, earlier: 100 + tokens + tokens * earlier
>>> [interpolated_chunk_cycles(timed, 4, start, 4) for start in (0, 4, 6, 8)]
[104, 120, 128, 136]
"""
from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

from sn40l_sim.serving.earlier_keys import between_multiples, between_points, interpolated_cycles, refined_points
from sn40l_sim.serving.scheduler import Wait

#: The most intervals between the prefixes (multiples of the chunk) one chunk graph is timed at for a
#: prompt: a prompt of at most this many chunks times its graph at every multiple, as many as it has
#: chunks (the shipped experiments' chunks: 16 at most); a longer one at this many + 1 chosen by
#: :func:`~sn40l_sim.serving.earlier_keys.refined_points`, which bounds a small chunk's cost to a
#: few seconds of mapping a graph length (docs/validation.md, "A small chunk's graphs are timed at
#: 65 prefixes at most").
CHUNK_PREFIX_INTERVALS = 64
#: The equal spans :func:`~sn40l_sim.serving.earlier_keys.refined_points` starts from (17 of the 65
#: points), the others going where the cycles stray from a line: of 8, 16 and 32, 16 left the least
#: worst-chunk error on every graph measured against timing every multiple (docs/validation.md).
CHUNK_PREFIX_SPANS = 16


def interpolated_chunk_cycles(timed: Callable[[int, int], int], chunk: int, earlier: int, tokens: int) -> int:
    """Cycles of a chunk of ``tokens`` after ``earlier`` tokens of its prompt, from ``timed(tokens,
    earlier)`` called only at multiples of ``chunk``: exact at one, linear between the two around it."""
    return interpolated_cycles(timed, tokens, earlier, *between_multiples(chunk, earlier))


class ChunkCycles:
    """``prefill_chunk_cycles(earlier, tokens)`` of prompts of at most ``prompt_len`` tokens in
    chunks of ``chunk``, from ``graph(tokens, earlier)`` timed at multiples of ``chunk``: at every
    one a prompt can reach while there are at most ``intervals`` chunks to a prompt
    (:func:`interpolated_chunk_cycles`); else, for each chunk length, at the ``intervals + 1`` of them
    :func:`~sn40l_sim.serving.earlier_keys.refined_points` chooses (timed when that length first
    runs), linear between.

    Chunks of 4 tokens of 8K prompts (2,048 chunks to a prompt), whose graph costs 500 cycles more
    from 2,000 earlier tokens on (the mapper changing plan): 24 prefixes timed, two of them either
    side of the jump, and every chunk's cycles exact.

    >>> timed = lambda tokens, earlier: 100 + tokens + tokens * earlier + (500 if earlier >= 2000 else 0)
    >>> cycles = ChunkCycles(timed, 4, 8192, intervals=64)
    >>> cycles(12, 4), cycles(2000, 4), cycles(1996, 4), len(cycles.prefixes(4))
    (152, 8604, 8088, 24)
    """

    def __init__(self, graph: Callable[[int, int], int], chunk: int, prompt_len: int,
                 intervals: int = CHUNK_PREFIX_INTERVALS, spans: int = CHUNK_PREFIX_SPANS,
                 switch: Callable[[int, int], int] | None = None) -> None:
        self.graph, self.chunk, self.intervals, self.spans = graph, chunk, intervals, spans
        self.switch_graph = switch
        self.multiples = -(-prompt_len // chunk)     # the last multiple a chunk's start lies below
        self._prefixes: dict[int, tuple[int, ...]] = {}

    def prefixes(self, tokens: int) -> tuple[int, ...]:
        """The earlier-token counts a chunk of ``tokens`` is timed at (all multiples up to the
        prompt's while there are at most ``intervals`` chunks to a prompt)."""
        if tokens not in self._prefixes:
            if self.multiples <= self.intervals:
                points = range(self.multiples + 1)
            else:
                points = refined_points(self.multiples, lambda i: self.graph(tokens, i * self.chunk),
                                        self.intervals + 1, self.spans).keys()
            self._prefixes[tokens] = tuple(sorted(i * self.chunk for i in points))
        return self._prefixes[tokens]

    def __call__(self, earlier: int, tokens: int) -> int:
        return interpolated_cycles(self.graph, tokens, earlier, *self.around(earlier, tokens))

    def switch(self, earlier: int, tokens: int) -> int:
        """Configuration loads of the same chunk's graph after a decode step, from ``switch(tokens,
        earlier)`` (given at construction) of the graphs its cycles are read from, linear between
        them as those are: a later chunk's graph is mapped for its own attention, so what it reloads
        after decode is its own, not the first chunk's (docs/architecture.md, serving: "A co-located
        node that switches graphs")."""
        return interpolated_cycles(self.switch_graph, tokens, earlier, *self.around(earlier, tokens))

    def around(self, earlier: int, tokens: int) -> tuple[int, int]:
        """The timed prefixes around ``earlier`` for a chunk of ``tokens``."""
        if self.multiples <= self.intervals:    # timed lazily, at the two multiples around
            return between_multiples(self.chunk, earlier)
        return between_points(self.prefixes(tokens), earlier)


def chunk_timings(graph: Callable[[int, int], int], whole: Callable[[int], int], chunk: int | None, *,
                  policy_apart: bool, prompt_len: int, switch: Callable[[int, int], int] | None = None,
                  ) -> dict[str, Callable[..., int] | None]:
    """:class:`~sn40l_sim.serving.setup.ServingSetup`'s ``prefill_chunk_cycles``,
    ``prefill_policy_cycles`` and ``prefill_chunk_switch_cycles`` (all None without a ``chunk``) from
    ``graph(tokens, earlier)``, the cycles of a chunk's graph timed at multiples of ``chunk``
    (:class:`ChunkCycles`, for prompts of at most ``prompt_len`` tokens), ``whole(prompt_len)``,
    those of a whole prompt's prefill, and ``switch(tokens, earlier)``, the configuration loads of a
    chunk's graph after a decode step (None: none given, the loop charges the first chunk's).
    ``policy_apart``: ``graph`` has none of the KV policy's prefill kernels, which run once, after
    the last chunk, for the cycles they add to the whole prompt's prefill.

    >>> t = chunk_timings(lambda n, e: 100 + n + e, lambda p: 100 + p + 7, 4, policy_apart=True, prompt_len=8)
    >>> t["prefill_chunk_cycles"](4, 4), t["prefill_policy_cycles"](8)
    (108, 7)
    """
    if chunk is None:
        return {"prefill_chunk_cycles": None, "prefill_policy_cycles": None, "prefill_chunk_switch_cycles": None}
    cycles = ChunkCycles(graph, chunk, prompt_len, switch=switch)
    return {"prefill_chunk_cycles": cycles,
            "prefill_policy_cycles": (lambda p: max(0, whole(p) - graph(p, 0))) if policy_apart else None,
            "prefill_chunk_switch_cycles": cycles.switch if switch is not None else None}


def chunk_cycles(setup: Any, start: int, end: int, prompt_len: int) -> int:
    """Cycles of prefilling tokens ``[start, end)`` of a prompt of ``prompt_len`` tokens after
    ``start`` tokens were prefilled (``setup`` a :class:`~sn40l_sim.serving.setup.ServingSetup`
    with ``prefill_chunk_cycles``): a whole prompt in one chunk as unchunked; with
    ``prefill_policy_cycles``, each chunk's graph without the KV policy's kernels and the last one
    followed by them over the whole prompt.

    >>> from types import SimpleNamespace
    >>> setup = SimpleNamespace(prefill_cycles=lambda n: 100 + n + 5, prefill_policy_cycles=lambda n: 5,
    ...                         prefill_chunk_cycles=lambda earlier, n: 100 + n + earlier)
    >>> chunk_cycles(setup, 0, 8, 8), [chunk_cycles(setup, s, s + 4, 8) for s in (0, 4)]
    (113, [104, 113])
    """
    if start == 0 and (end == prompt_len or setup.prefill_policy_cycles is None):
        return setup.prefill_cycles(end)
    cycles = setup.prefill_chunk_cycles(start, end - start)
    if setup.prefill_policy_cycles is not None and end == prompt_len:
        cycles += setup.prefill_policy_cycles(prompt_len)
    return cycles


def chunked_colocated_node(serving: Any, node: Any, chunk: int) -> Generator[Wait, None, None]:
    """The process of one co-located node with chunked prefill (``serving`` is the loop's
    state, :class:`sn40l_sim.serving.loop._Serving`; ``node`` its decode node). It yields the
    cycles to wait or the signal to wait for (:meth:`sn40l_sim.serving.scheduler.Scheduler.process`)."""
    env, setup = serving.env, serving.setup
    log, done = None, 0          # the prompt being prefilled and its tokens prefilled so far
    while True:
        budget = chunk
        while budget > 0:
            if log is None:
                if not (serving.waiting and node.table.free):
                    break
                log, done = serving.waiting.popleft(), 0
                log.decode_node, log.slot, log.slot_acquired = node.index, node.table.acquire(log.request.id), env.now
                log.prefill_node = node.index
                node.hold(log)
            end = min(log.request.prompt_len, done + budget)
            # the chunk runs its own graph (its rows), so it loads that graph's configurations; a
            # whole prompt in one chunk runs the prompt's graph, with the KV policy's kernels
            # (chunk_cycles), as unchunked
            whole = done == 0 and end == log.request.prompt_len
            yield from serving.switch_to(node, "prefill", end - done, part=not whole, earlier=done)
            if done == 0:   # after the graph switch, as an unchunked prefill starts
                log.prefill_start = env.now
            cycles = chunk_cycles(setup, done, end, log.request.prompt_len)
            yield cycles
            log.prefill_chunks.append((env.now - cycles, env.now))
            serving.busy["colocated_prefill"][node.index] += cycles
            budget -= end - done
            done = end
            if done == log.request.prompt_len:
                log.first_token = env.now
                log.add_token(env.now)
                serving._prefilled_here(node, log)
                log = None
        serving._join(node)
        if node.book.stepping:
            # with prefill still to do, one step and then the next chunk; else a run of steps until
            # something else is due (an arrival: the book's own limit), as without chunks
            yield from serving.switch_to(node, "decode")
            pending = log is not None or bool(serving.waiting and node.table.free)
            yield from serving._decode_steps(node, 1 if pending else None)
        elif log is None and not (serving.waiting and node.table.free):
            yield serving.arrival
