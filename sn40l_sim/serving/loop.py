"""The serving model: requests, prefill, KV transfer and static-graph continuous batching.

Time is integer RDU cycles; events are processed in SimPy's order by the loop's own scheduler
(:mod:`sn40l_sim.serving.scheduler`). Step costs come in as numbers (from
:class:`sn40l_sim.serving.step_costs.StepTimer` in the simulator, from a fake in tests), so this module
knows nothing of kernels:

* **Prefill** runs one request at a time (batch 1) on a node, ``prefill_cycles(prompt_len)``; it
  emits the first output token when it ends.
* **Disaggregated** (``mode="disaggregated"``): prefill nodes take requests first come, first
  served. A prefilled sequence waits until some decode node has a free slot (the node with most
  free slots, lowest index on ties), reserves it, and its cache crosses the prefill node's link and
  the decode node's in ``transfer_cycles(prompt_len)`` (one transfer at a time per link, each end
  taken first come, first served: the sender's, then the receiver's). The prefill node keeps going
  meanwhile, the cache waiting in its memory until its transfer ends; with ``prefill_hold_tokens``
  it starts a prefill only while the caches waiting there (and the prefixes it keeps) fit in what
  its placement leaves free, and otherwise waits for a transfer to end (back-pressure: a node
  whose memory is full of caches for busy decode nodes stops taking prompts).
* **Co-located** (``mode="colocated"``): each node prefills and decodes. When a request waits and
  a slot is free, the node prefills it (decode steps wait: prefill blocks decode), else it runs a
  decode step. No transfer. Each graph's cost is its steady state, its kernels finding the
  configurations they left loaded; where the node switches from one graph to the other, the
  configurations the other took are loaded again first (``decode_switch_cycles``,
  ``prefill_switch_cycles``; busy as ``graph_switch``), and so where one prefill graph follows
  another (``prefill_pair_switch_cycles``).
* **Decode**: a node's static graph steps all its slots at once in ``decode_step_cycles``; a
  sequence that arrived during a step joins at the next step boundary, and one whose cache arrives
  at the very cycle a step starts joins that step (the step starts after the cycle's other
  events); each step gives every active sequence one token, plus, with speculative decoding
  (``speculation``, see :mod:`sn40l_sim.serving.speculation`), the drafts it accepts: ``1 + A`` tokens, ``A`` drawn per
  sequence and step (a geometric count truncated at the drafts) from a generator seeded by
  ``(seed, request id)``, so a request's draws do not depend on what else is served, and capped
  so that no sequence exceeds its ``output_len``. All of a step's tokens come out at its end. A
  sequence that has its ``output_len`` tokens frees its slot at the end of the step.
* **By requests**: a node's book (:mod:`sn40l_sim.serving.decode_books`) takes each sequence's
  tokens and cached tokens for all its steps when it joins, and a run of steps that ends before
  anything that can change the node is due (disaggregated, :mod:`sn40l_sim.serving.run_bounds`;
  co-located, anything at all) advances in one event; ``stepwise=True`` walks every step (the
  reference: the same log). Prefix caching (:mod:`sn40l_sim.serving.prefix_cache`) and chunked
  prefill (a co-located node's prefill chunks alternate with single decode steps,
  :mod:`sn40l_sim.serving.chunked_prefill`) work by requests and step by step alike.

Examples
--------
>>> from sn40l_sim.serving.workload import Request
>>> setup = ServingSetup(mode="disaggregated", prefill_nodes=1, decode_nodes=1, slots=2,
...     decode_step_cycles=10, prefill_cycles=lambda p: p, transfer_cycles=lambda p: 5,
...     cache_tokens=lambda p, g: p + g, kv_bytes_per_token=1, slot_cache_tokens=110)
>>> log = simulate([Request(0, 0, 100, 3), Request(1, 0, 100, 2)], setup)
>>> [(r.first_token, r.join, r.token_cycles) for r in log.requests]
[(100, 105, [100, 115, 125]), (200, 205, [200, 215])]
>>> log.end_cycle, sum(len(r.token_cycles) for r in log.requests)
(215, 5)
"""
from __future__ import annotations

import functools
from collections import deque
from collections.abc import Generator

import numpy as np

from sn40l_sim.serving.batching import SlotTable
from sn40l_sim.serving.chunked_prefill import chunked_colocated_node
from sn40l_sim.serving.colocated import colocated_node
from sn40l_sim.serving.decode_books import DecodeNode, RunBook, StepwiseBook
from sn40l_sim.serving.drafts import drafted_tokens
from sn40l_sim.serving.prefix_cache import PrefixTracker
from sn40l_sim.serving.run_bounds import RunBounds
from sn40l_sim.serving.scheduler import Link, RunEnd, RunWait, Scheduler, Signal, Wait
from sn40l_sim.serving.serving_log import RequestLog, ServingLog, StepLog
from sn40l_sim.serving.setup import PrefillRun, ServingSetup
from sn40l_sim.serving.step_table import StepTable
from sn40l_sim.serving.workload import Request

__all__ = ["RequestLog", "ServingLog", "ServingSetup", "StepLog", "simulate"]


class _Serving:
    def __init__(self, env: Scheduler, requests: list[Request], setup: ServingSetup, stepwise: bool) -> None:
        self.env, self.setup = env, setup
        self.logs = [RequestLog(r) for r in sorted(requests, key=lambda r: (r.arrival_cycle, r.id))]
        self.waiting: deque[RequestLog] = deque()
        self.ready: deque[RequestLog] = deque()
        self.arrival = Signal(env)
        self.finished = 0
        self.steps = StepTable()
        # a prompt's cache and state, held on its prefill node until its transfer ends (prompts share a few lengths)
        self._prefilled_tokens = functools.lru_cache(maxsize=4096)(setup.held_tokens or (lambda p: setup.cache_tokens(p, 0)))
        self._drafted: dict[int, tuple[int, np.ndarray]] | None = None
        colocated = setup.mode == "colocated"
        n_prefill = 0 if colocated else setup.prefill_nodes
        self.busy = {"prefill": [0] * n_prefill, "decode": [0] * setup.decode_nodes, "link": [0] * n_prefill}
        if colocated:
            self.busy.update(colocated_prefill=[0] * setup.decode_nodes, graph_switch=[0] * setup.decode_nodes)
        #: the graph switches of the co-located nodes, as :attr:`ServingLog.switches` lists them
        self.switches: list[tuple[int, int, int, str]] = []
        #: the graph each co-located node ran last (``"decode"``, a :class:`PrefillRun`; None before any)
        self.last_graph: list[str | PrefillRun | None] = [None] * setup.decode_nodes
        self.nodes = [DecodeNode(i, SlotTable(setup.slots), Signal(env), self._book(i, stepwise))
                      for i in range(setup.decode_nodes)]
        #: runs up to what can change their node (:mod:`.run_bounds`)
        self.bounds = RunBounds(env, self.nodes, setup, self.waiting) if not stepwise and setup.decode_nodes > 1 else None
        self.links = [Link(env) for _ in range(n_prefill)]
        #: each decode node's end of the transfers (its host link or P2P ports take one at a time)
        self.ingress = [Link(env) for _ in range(0 if colocated else setup.decode_nodes)]
        #: per prefill node: cached tokens of the prefilled sequences whose transfer has not ended,
        #: and whether the node waits for one to end before its next prefill
        self.holding, self.held_back = [0] * n_prefill, [False] * n_prefill
        self.prefixes = None if setup.prefix_caching is None else PrefixTracker(
            setup.prefix_caching, n_prefill or setup.decode_nodes, setup.prefill_cycles, setup.prefix_hit_cycles,
            self.holding)
        # the disaggregated nodes and the arrivals are callbacks, the co-located nodes processes;
        # all start as SimPy processes would, in this order (:mod:`.scheduler`)
        env.soon(lambda: self._arrive(0))
        for i in range(n_prefill):
            env.soon(lambda i=i: self._prefill_next(i))
        for node in self.nodes:
            if colocated and setup.prefill_chunk is not None:
                env.process(chunked_colocated_node(self, node, setup.prefill_chunk))
            elif colocated:
                env.process(colocated_node(self, node))
            else:
                env.soon(lambda node=node: self._decode_next(node))

    def _book(self, index: int, stepwise: bool) -> StepwiseBook | RunBook:
        """A decode node's book; by requests, every request's drafts are drawn up front, in bulk
        (:mod:`sn40l_sim.serving.drafts`; each takes its own as it joins)."""
        if stepwise:
            return StepwiseBook(index, self.setup)
        if self._drafted is None:
            spec, needed = self.setup.speculation, {log.request.id: log.request.output_len - 1 for log in self.logs}
            needed = {i: n for i, n in needed.items() if n > 0}
            drawn = drafted_tokens(spec, self.setup.seed, needed) if spec.drafts else {}
            self._drafted = {i: (needed[i], per_step) for i, per_step in drawn.items()}
        return RunBook(index, self.setup, self._drafted)

    # -- shared pieces ---------------------------------------------------------------------
    def _arrive(self, i: int) -> None:
        """Requests from the ``i``-th on join the queue as their arrival cycle comes."""
        logs, env = self.logs, self.env
        while i < len(logs):
            log = logs[i]
            if log.request.arrival_cycle > env.now:
                env.at(log.request.arrival_cycle - env.now, lambda i=i: self._arrive(i))
                return
            self.waiting.append(log)
            self.arrival.fire()
            i += 1

    def _finish(self, log: RequestLog) -> None:
        log.finish = self.env.now
        self.finished += 1
        if self.prefixes is not None:
            self.prefixes.release(log.request)
        if self.finished == len(self.logs):
            self.env.stop()

    def _start_prefill(self, log: RequestLog, node: int) -> int:
        """``log``'s prefill starts on ``node``: its cycles."""
        log.prefill_node, log.prefill_start = node, self.env.now
        return self._prefill_graph(log, node)[0]

    def _prefill_graph(self, log: RequestLog, node: int) -> tuple[int, int]:
        """``(cycles, rows)`` of ``log``'s prefill on ``node`` and the prompt tokens of the graph
        it runs (fewer than the prompt's for a prefix hit: a held prefix is not prefilled again)."""
        if self.prefixes is None:
            return self.setup.prefill_cycles(log.request.prompt_len), log.request.prompt_len
        return self.prefixes.prefill(log.request, node)

    def _end_prefill(self, log: RequestLog, node: int, busy: list[int], cycles: int) -> None:
        busy[node] += cycles
        log.first_token = self.env.now
        log.add_token(self.env.now)

    def _start_steps(self, node: DecodeNode, most: int | None = None) -> tuple[int, int, int]:
        """One event of decode steps starts: as many as the node's book says nothing else can
        happen in (at most ``most``: chunked prefill has a chunk to run after the next step).
        Returns the start cycle, the steps and their cycles."""
        count = node.book.steps_to_run(self.env if self.bounds is None else self.bounds.clock(node))
        if most is not None:
            count = min(count, most)
        # its end and last step, and whether a chunk may follow (for the other nodes' runs)
        node.run_end = (self.env.now + count * self.setup.decode_step_cycles, len(node.book.ends) + count - 1,
                        most is not None) if self.bounds is not None else None
        return self.env.now, count, count * self.setup.decode_step_cycles

    def _end_steps(self, node: DecodeNode, start: int, count: int, cycles: int) -> None:
        """The steps are done: log them; the sequences that finished leave their slots."""
        self.busy["decode"][node.index] += cycles
        node.run_end = None
        if self.bounds is not None:
            self.bounds.logged(node, count)
        for log in node.book.record(start, count, node, self.steps):
            node.table.release(log.slot, log.request.id)
            self._finish(log)

    def _decode_steps(self, node: DecodeNode, most: int | None = None) -> Generator[Wait, None, None]:
        start, count, cycles = self._start_steps(node, most)
        yield RunWait(cycles)
        self._end_steps(node, start, count, cycles)

    def _join(self, node: DecodeNode) -> None:
        if node.arrived:
            for log in node.arrived:
                log.join = self.env.now
            node.book.join(node.arrived)
            node.arrived = []

    # -- disaggregated ---------------------------------------------------------------------
    def _prefill_next(self, index: int) -> None:
        """Prefill node ``index`` is free: it prefills the next waiting request, or waits for one
        (or, its memory full of caches waiting to leave, for a transfer to end)."""
        if not self.waiting:
            self.arrival.wait(lambda: self._prefill_next(index))
            return
        room = self.setup.prefill_hold_tokens
        if room is not None and self._held_on(index) > room:
            self.held_back[index] = True
            return
        log = self.waiting.popleft()
        cycles = self._start_prefill(log, index)
        self.env.at(cycles, lambda: self._prefilled(index, log, cycles))

    def _held_on(self, index: int) -> int:
        """Cached tokens prefill node ``index`` holds beside the prompt it may prefill next."""
        return self.holding[index] + (self.prefixes.held_tokens(index) if self.prefixes is not None else 0)

    def _prefilled(self, index: int, log: RequestLog, cycles: int) -> None:
        self._end_prefill(log, index, self.busy["prefill"], cycles)
        if log.request.output_len == 1:
            self._finish(log)
        else:
            self.holding[index] += self._prefilled_tokens(log.request.prompt_len)
            self.ready.append(log)
            self._dispatch()
        self._prefill_next(index)

    def _dispatch(self) -> None:
        while self.ready:
            node, most = None, 0    # the node with most free slots, the first of them on ties
            for other in self.nodes:
                free = other.table.free
                if free > most:
                    node, most = other, free
            if node is None:
                return
            log = self.ready.popleft()
            log.decode_node, log.slot, log.slot_acquired = node.index, node.table.acquire(log.request.id), self.env.now
            node.hold(log)
            self._transfer(log, node)

    def _transfer(self, log: RequestLog, node: DecodeNode) -> None:
        """``log``'s cache crosses its prefill node's link and ``node``'s when both are free, then
        waits to join ``node``'s next step (the events a SimPy process holding the links would
        take)."""
        link, ingress, env = self.links[log.prefill_node], self.ingress[node.index], self.env

        def start() -> None:
            log.transfer_start = env.now
            cycles = self.setup.transfer_cycles(log.request.prompt_len)
            env.at(cycles, lambda: end(cycles))

        def end(cycles: int) -> None:
            source = log.prefill_node
            self.busy["link"][source] += cycles
            log.transfer_end = env.now
            ingress.release()
            link.release()
            node.incoming.remove(log)
            node.arrived.append(log)
            node.wake.fire()
            self.holding[source] -= self._prefilled_tokens(log.request.prompt_len)
            if self.held_back[source]:   # the cache has left: the node may have room again
                self.held_back[source] = False
                env.soon(lambda: self._prefill_next(source))

        env.soon(lambda: link.request(lambda: ingress.request(start)))

    def _step_boundary(self, node: DecodeNode, woken: bool = False) -> None:
        """``node`` is at a step boundary (or woken by an arrival): its next step starts after every
        other event of this cycle, so a cache that arrives at the cycle joins it (a tie broken
        toward joining, whatever order the events were scheduled in); nodes' boundaries on one cycle
        in the order of their chains of steps, a chain starting where a node is woken (:mod:`.run_bounds`)."""
        node.late_pending, node.chain = True, self.env.new_order() if woken else node.chain
        self.env.last(functools.partial(self._decode_next, node), node.chain)

    def _decode_next(self, node: DecodeNode) -> None:
        """At a step boundary of ``node``, the cycle's other events done: the arrived sequences
        join, then the next steps run, or the node waits for a sequence."""
        node.late_pending = False
        if node.arrived:
            self._join(node)
        if not node.book.stepping:
            node.wake.wait(lambda: self._step_boundary(node, woken=True))
            return
        start, count, cycles = self._start_steps(node)
        self.env.at(cycles, RunEnd(self._decoded, node, start, count, cycles))

    def _decoded(self, node: DecodeNode, start: int, count: int, cycles: int) -> None:
        self._end_steps(node, start, count, cycles)
        if self.ready:
            self._dispatch()
        self._step_boundary(node)

    # -- co-located ------------------------------------------------------------------------
    def switch_to(self, node: DecodeNode, graph: str, prompt_len: int = 0, part: bool = False,
                  earlier: int = 0, hit: bool = False) -> Generator[Wait, None, None]:
        """Co-located ``node`` runs ``graph`` next: it first loads the configurations the other graph took, if
        it ran that one last (yields their cycles; busy as ``graph_switch``); ``part``: a prefill graph of part
        of a prompt (a chunk, a prefix hit's suffix); after ``earlier`` > 0 tokens (of a chunk's prompt, or
        reused by a ``hit``) it loads its own graph's, read where its cycles are. After another prefill
        graph (another compiled length, a chunk's or a suffix's other earlier tokens) it loads what that
        one took of its units (``prefill_pair_switch_cycles``)."""
        ran = graph if graph == "decode" else PrefillRun(prompt_len, earlier, part, hit and part and earlier > 0)
        last, self.last_graph[node.index] = self.last_graph[node.index], ran
        if last is None or last == ran:
            return
        setup = self.setup
        reload = setup.prefix_hit_switch_cycles if hit else setup.prefill_chunk_switch_cycles
        if graph == "decode":
            cycles = setup.decode_switch_cycles
        elif last != "decode":
            # another prefill graph ran last: its kernels may have taken some of this one's units
            pair = setup.prefill_pair_switch_cycles
            cycles = pair(last, ran) if pair is not None else 0
        elif part and earlier and reload is not None:
            cycles = reload(earlier, prompt_len)
        else:
            cycles = ((setup.prefill_part_switch_cycles if part else None) or setup.prefill_switch_cycles)(prompt_len)
        if cycles:
            self.busy["graph_switch"][node.index] += cycles
            self.switches.append((node.index, self.env.now, self.env.now + cycles, graph))
            yield cycles

    def _prefilled_here(self, node: DecodeNode, log: RequestLog) -> None:
        """``log``'s prompt is prefilled on its own decode node: a one-token request is done and
        frees its slot; any other joins the node's batch at the next step boundary."""
        node.incoming.remove(log)
        if log.request.output_len == 1:
            node.book.drop(log)
            node.table.release(log.slot, log.request.id)
            self._finish(log)
        else:
            node.arrived.append(log)


def simulate(requests: list[Request], setup: ServingSetup, *, stepwise: bool = False) -> ServingLog:
    """Serve ``requests`` until every one has all its tokens; returns the log.

    ``stepwise`` advances every decode step in its own event and recomputes every sequence's
    tokens and KV at each (the reference, :class:`~sn40l_sim.serving.decode_books.StepwiseBook`);
    by default each sequence's steps are booked once, when it joins, and runs of steps in which
    nothing else happens advance in one event (:class:`~sn40l_sim.serving.decode_books.RunBook`), with the same log.

    Raises
    ------
    ValueError
        For an empty request list or a request with no output token.

    Examples
    --------
    Two 100-token prompts at once (a cycle a token), 3 and 2 outputs, 10-cycle steps: apart, the
    first decodes while the second prefills; co-located, both prefill before the first step:

    >>> from dataclasses import replace
    >>> from sn40l_sim.serving.workload import Request
    >>> apart = ServingSetup(mode="disaggregated", prefill_nodes=1, decode_nodes=1, slots=2,
    ...     decode_step_cycles=10, prefill_cycles=lambda p: p, transfer_cycles=lambda p: 5,
    ...     cache_tokens=lambda p, g: p + g, kv_bytes_per_token=1, slot_cache_tokens=110)
    >>> for setup in (apart, replace(apart, mode="colocated")):
    ...     log = simulate([Request(0, 0, 100, 3), Request(1, 0, 100, 2)], setup)
    ...     print(setup.mode, [r.token_cycles for r in log.requests], log.end_cycle)
    disaggregated [[100, 115, 125], [200, 215]] 215
    colocated [[100, 210, 220], [200, 210]] 220
    """
    if not requests:
        raise ValueError("no requests to serve")
    if any(r.output_len < 1 for r in requests):
        raise ValueError("every request generates at least one token")
    env = Scheduler()
    serving = _Serving(env, requests, setup, stepwise)
    env.run()
    if serving.bounds is not None:
        serving.bounds.sort(serving.steps)
    return ServingLog(setup, sorted(serving.logs, key=lambda log: log.request.id), serving.steps,
                      int(env.now), serving.busy, serving.prefixes, switches=serving.switches)
