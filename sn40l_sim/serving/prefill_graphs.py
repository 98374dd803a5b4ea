"""The prefill graphs one point times, each once: a whole prompt's, and a chunk's or a prefix hit's
suffix's after earlier tokens of its prompt, with or without the KV policy's kernels, each with the
configurations it loads again after a decode step (its ``switch_load_cycles``).

A point's serving run asks for them many times (every request's prompt, every chunk, every hit);
each compiled length and count of earlier tokens is timed once, and a graph's cycles and its reload
come from the same timing, so a co-located node is charged the reload of the graph whose cycles it
runs, read at the same timed points (docs/architecture.md, serving: "A co-located node that
switches graphs"). :meth:`PrefillGraphs.serving_fields` gives them to
:class:`~sn40l_sim.serving.setup.ServingSetup`.

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
from sn40l_sim.serving.chunked_prefill import chunk_timings
from sn40l_sim.serving.prefix_cache import prefix_hit_cycles, suffix_cycles
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

    def of(self, prompt_len: int, earlier: int = 0, bare: bool = False,
           free: StepCosts | None = None) -> tuple[int, int]:
        """``(cycles, configuration loads)`` of the graph compiled for ``prompt_len`` after
        ``earlier`` tokens; ``bare``: without the policy's kernels (from ``free``, else the
        policy-free costs given at construction), when there are such costs."""
        free = free or self.free
        bare = bare and free is not None
        key = bare, compiled_size(prompt_len, self.s.prefill_lens, "prompt length"), earlier
        if key not in self.timed:
            timing = (free if bare else self.costs).prefill(key[1], memory=self.memory_for(key[1], earlier),
                                                            earlier=earlier)
            cycles, switch = int(timing.cycles), int(timing.switch_load_cycles)
            if self.s.prefill_node is not None:   # the serving loop counts the decode node's clock
                cycles = math.ceil(cycles * self.clock_hz / self.s.prefill_node.socket.clock_hz)
            self.timed[key] = cycles, switch
        return self.timed[key]

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

    def serving_fields(self) -> dict[str, Any]:
        """The :class:`~sn40l_sim.serving.setup.ServingSetup` fields of the prefill graphs."""
        s, apart = self.s, self.free is not None
        return {"prefill_cycles": self.whole, "prefix_hit_cycles": self.hit,
                **chunk_timings(self.bare, self.whole, s.prefill_chunk, policy_apart=apart, prompt_len=s.prompt_len,
                                switch=self.bare_switch),
                "prefill_switch_cycles": self.switch,
                # a chunk's or a hit suffix's graph, without the policy's kernels
                "prefill_part_switch_cycles": (lambda rows: self.bare_switch(rows, 0)) if apart else None,
                "prefix_hit_switch_cycles": self.hit_switch}
