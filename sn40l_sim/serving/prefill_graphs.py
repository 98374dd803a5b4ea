"""The prefill graphs one point times, each once: a whole prompt's, and a chunk's or a prefix hit's
suffix's after earlier tokens of its prompt, with or without the KV policy's kernels, each with the
configurations it loads again after a decode step (its ``switch_load_cycles``).

A point's serving run asks for them many times (every request's prompt, every chunk, every hit);
each compiled length and count of earlier tokens is timed once, and a graph's cycles and its reload
come from the same timing, so a co-located node is charged the reload of the graph whose cycles it
runs, read at the same timed points (docs/architecture.md, serving: "A co-located node that
switches graphs"). So is the reload of one prefill graph run right after another
(:meth:`PrefillGraphs.pair_switch`): each ordered pair of timed graphs once, from their placed
graphs' calls (:mod:`sn40l_sim.serving.prefill_pairs`; kept in the disk cache). :meth:`PrefillGraphs.serving_fields` gives
them to :class:`~sn40l_sim.serving.setup.ServingSetup`.

Examples
--------
>>> from types import SimpleNamespace
>>> from sn40l_sim.serving.fixed_costs import FixedStepCosts
>>> s = SimpleNamespace(prefill_lens=(1024, 2048, 4096), prefill_node=None, prefill_chunk=None, prompt_len=4096)
>>> graphs = PrefillGraphs(s, 1.6e9, FixedStepCosts(prefill_cycles_per_token={"mha": 1000}), lambda n, e=0: None)
>>> graphs.whole(3000), graphs.hit(3072, 2048)     # a 1,024-row suffix over 2,048 cached tokens
(4096000, (3121152, 2048))
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from sn40l_sim.serving.batching import compiled_size
from sn40l_sim.serving.chunked_prefill import ChunkCycles, chunk_timings
from sn40l_sim.serving.earlier_keys import between_points
from sn40l_sim.serving.prefill_pairs import CallLoads, GraphPairs
from sn40l_sim.serving.prefix_cache import prefix_hit_cycles, suffix_cycles
from sn40l_sim.serving.setup import PrefillRun
from sn40l_sim.serving.step_costs import StepCosts


class PrefillGraphs:
    """The prefill timings of point ``s`` (a :class:`~sn40l_sim.serving.point.PointSetup`) from
    ``costs`` (the prefill node's), counted in the decode node's clock ``clock_hz``; ``memory_for``
    is ``(compiled length, earlier) ->`` the graph's memory placement; ``free``, with a chunk or a
    prefix cache, the same node's costs without the KV policy's kernels, which time a chunk's and a
    hit suffix's graph (the kernels then run once, over the whole prompt)."""

    def __init__(self, s: Any, clock_hz: float, costs: StepCosts, memory_for: Callable[..., Any],
                 free: StepCosts | None = None) -> None:
        self.s, self.clock_hz, self.costs, self.memory_for, self.free = s, clock_hz, costs, memory_for, free
        #: (without the policy's kernels, compiled prompt length, earlier tokens of a chunk or a
        #: cached prefix) -> (prefill cycles, its configuration loads after a decode step)
        self.timed: dict[tuple[bool, int, int], tuple[int, int]] = {}
        #: (graph run first, graph run next) -> the second's reload after the first (timed keys)
        self.pairs: dict[tuple[tuple[bool, int, int], tuple[bool, int, int]], int] = {}
        self._profiles: dict[tuple[bool, int, int], CallLoads | None] = {}
        self._chunks: ChunkCycles | None = None
        node = getattr(costs, "node", None)
        self._graph_pairs = GraphPairs(node.socket) if node is not None else None

    def of(self, prompt_len: int, earlier: int = 0, bare: bool = False,
           free: StepCosts | None = None) -> tuple[int, int]:
        """``(cycles, configuration loads)`` of the graph compiled for ``prompt_len`` after
        ``earlier`` tokens; ``bare``: without the policy's kernels (from ``free``, else the
        policy-free costs given at construction), when there are such costs."""
        free = free or self.free
        key = self._key(prompt_len, earlier, bare and free is not None)
        bare = key[0]
        if key not in self.timed:
            timing = (free if bare else self.costs).prefill(key[1], memory=self.memory_for(key[1], earlier),
                                                            earlier=earlier)
            cycles, switch = int(timing.cycles), int(timing.switch_load_cycles)
            if self.s.prefill_node is not None:   # the serving loop counts the decode node's clock
                cycles = math.ceil(cycles * self.clock_hz / self.s.prefill_node.socket.clock_hz)
            self.timed[key] = cycles, switch
        return self.timed[key]

    def _key(self, prompt_len: int, earlier: int = 0, bare: bool = False) -> tuple[bool, int, int]:
        """The timed graph's key: ``bare``, without the policy's kernels (:meth:`of` says when there
        are such costs; a serving run's graphs have them when ``free`` was given at construction),
        its compiled length and earlier tokens."""
        return bare, compiled_size(prompt_len, self.s.prefill_lens, "prompt length"), earlier

    def whole(self, prompt_len: int) -> int:
        """Cycles of a whole prompt's prefill, the policy's kernels included."""
        return self.of(prompt_len)[0]

    def switch(self, prompt_len: int) -> int:
        """Configuration loads of a whole prompt's graph after a decode step."""
        return self.of(prompt_len)[1]

    def bare(self, rows: int, earlier: int) -> int:
        """Cycles of a chunk's or a hit suffix's graph (without the policy's kernels when there are
        policy-free costs)."""
        return self.of(rows, earlier, bare=True)[0]

    def bare_switch(self, rows: int, earlier: int) -> int:
        """Configuration loads of the same graph after a decode step."""
        return self.of(rows, earlier, bare=True)[1]

    def hit(self, prompt_len: int, held: int) -> tuple[int, int]:
        """``(cycles, tokens reused)`` of a prefill whose first ``held`` tokens are cached: the
        suffix's graph, then the policy's selection over the whole prompt (as after a chunked
        prefill's last chunk): SnapKV chooses the kept tokens from the whole prompt's cache."""
        selection = max(0, self.whole(prompt_len) - self.bare(prompt_len, 0)) if self.free else 0
        return prefix_hit_cycles(self.bare, self.s.prefill_lens, prompt_len, held, policy_cycles=selection)

    def hit_switch(self, reused: int, rows: int) -> int:
        """Configuration loads of a hit's suffix graph of ``rows`` after ``reused`` cached tokens,
        read at the timed points its cycles are (:func:`~sn40l_sim.serving.prefix_cache.suffix_cycles`)."""
        return suffix_cycles(self.bare_switch, self.s.prefill_lens, rows, reused)

    def pair_switch(self, before: PrefillRun, run: PrefillRun) -> int:
        """Configuration loads of prefill ``run`` right after prefill ``before`` on a co-located
        node, read at the timed graphs its cycles are (a chunk's or a hit suffix's between two
        counts of earlier tokens: linear between the pairs of graphs around, as its cycles are);
        each ordered pair of timed graphs replayed once (:mod:`sn40l_sim.serving.prefill_pairs`).
        A pair that would run faster than its steady state (a configuration the two share) is
        charged nothing: the steady state is what the graph's cycles already count."""
        total = 0.0
        for first, share in self._graphs_of(before):
            for second, weight in self._graphs_of(run):
                if first != second:
                    total += share * weight * self._pair(first, second)
        return max(0, math.ceil(total))

    def _graphs_of(self, run: PrefillRun) -> tuple[tuple[tuple[bool, int, int], float], ...]:
        """The timed graphs ``run``'s cycles are read from, with their weights: a whole prompt's
        graph, a first chunk's, or a later chunk's or hit suffix's two around its earlier tokens
        (where :class:`~sn40l_sim.serving.chunked_prefill.ChunkCycles` and
        :func:`~sn40l_sim.serving.prefix_cache.suffix_cycles` read them)."""
        bare = self.free is not None     # a chunk's or a suffix's graph, without the policy's kernels
        if not (run.part and run.earlier):
            return ((self._key(run.rows, 0, bare=run.part and bare), 1.0),)
        if run.hit or self._chunks is None:
            low, high = between_points((0, *sorted(self.s.prefill_lens)), run.earlier)
        else:
            low, high = self._chunks.around(run.earlier, run.rows)
        if run.earlier == low:
            return ((self._key(run.rows, low, bare), 1.0),)
        up = (run.earlier - low) / (high - low)
        return ((self._key(run.rows, low, bare), 1.0 - up), (self._key(run.rows, high, bare), up))

    def _pair(self, first: tuple[bool, int, int], second: tuple[bool, int, int]) -> int:
        if (first, second) not in self.pairs:
            before, graph = self._profile(first), self._profile(second)
            self.pairs[first, second] = 0 if before is None or graph is None else \
                self._graph_pairs.reload_after(before, graph)
        return self.pairs[first, second]

    def _profile(self, key: tuple[bool, int, int]) -> CallLoads | None:
        """The calls of the placed graph timed under ``key`` (None from step costs that place no
        graphs: a stand-in's have no kernels to reload)."""
        if key not in self._profiles:
            bare, length, earlier = key
            costs = self.free if bare else self.costs
            calls = getattr(costs, "prefill_calls", None)
            self._profiles[key] = None if calls is None or self._graph_pairs is None else self._graph_pairs.profile(
                calls(length, memory=self.memory_for(length, earlier), earlier=earlier))
        return self._profiles[key]

    def serving_fields(self) -> dict[str, Any]:
        """The :class:`~sn40l_sim.serving.setup.ServingSetup` fields of the prefill graphs."""
        s, apart = self.s, self.free is not None
        chunks = chunk_timings(self.bare, self.whole, s.prefill_chunk, policy_apart=apart, prompt_len=s.prompt_len,
                               switch=self.bare_switch)
        self._chunks = chunks["prefill_chunk_cycles"]
        return {"prefill_cycles": self.whole, "prefix_hit_cycles": self.hit, **chunks,
                "prefill_switch_cycles": self.switch,
                # a chunk's or a hit suffix's graph, without the policy's kernels
                "prefill_part_switch_cycles": (lambda rows: self.bare_switch(rows, 0)) if apart else None,
                "prefix_hit_switch_cycles": self.hit_switch,
                "prefill_pair_switch_cycles": self.pair_switch}
