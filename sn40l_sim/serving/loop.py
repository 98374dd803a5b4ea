"""The serving model: requests, prefill, KV transfer and static-graph continuous batching in SimPy.

Time is integer RDU cycles. Step costs come in as numbers (from
:class:`sn40l_sim.serving.step_costs.StepTimer` in the simulator, from a fake in tests), so this module
knows nothing of kernels:

* **Prefill** runs one request at a time (batch 1) on a node, ``prefill_cycles(prompt_len)``; it
  emits the first output token when it ends.
* **Disaggregated** (``mode="disaggregated"``): prefill nodes take requests first come, first
  served. A prefilled sequence waits until some decode node has a free slot (the node with most
  free slots, lowest index on ties), reserves it, and its cache crosses the prefill node's link in
  ``transfer_cycles(prompt_len)`` (one transfer at a time per link). The prefill node keeps going
  meanwhile (the cache waits in its memory).
* **Co-located** (``mode="colocated"``): each node prefills and decodes. When a request waits and
  a slot is free, the node prefills it (decode steps wait: prefill blocks decode), else it runs a
  decode step. No transfer.
* **Decode**: a node's static graph steps all its slots at once in ``decode_step_cycles``; a
  sequence that arrived during a step joins at the next step boundary; each step gives every
  active sequence one token, plus, with speculative decoding (``speculation``, see
  :mod:`sn40l_sim.serving.speculation`), the drafts it accepts: ``1 + A`` tokens, ``A`` drawn per
  sequence and step (a geometric count truncated at the drafts) from a generator seeded by
  ``(seed, request id)``, so a request's draws do not depend on what else is served, and capped
  so that no sequence exceeds its ``output_len``. All of a step's tokens come out at its end. A
  sequence that has its ``output_len`` tokens frees its slot at the end of the step.

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

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import simpy

from sn40l_sim.serving.batching import SlotTable
from sn40l_sim.serving.chunked_prefill import chunked_colocated_node
from sn40l_sim.serving.prefix_cache import PrefixCaching, PrefixTracker
from sn40l_sim.serving.speculation import Speculation
from sn40l_sim.serving.workload import Request


@dataclass(frozen=True)
class ServingSetup:
    """Everything the serving model needs, in cycles and tokens.

    Attributes
    ----------
    mode : {"disaggregated", "colocated"}
    prefill_nodes, decode_nodes : int
        Node counts (``prefill_nodes`` is ignored when co-located).
    slots : int
        Compiled decode batch per decode node.
    decode_step_cycles : int
        One decode step of the static graph (all slots).
    prefill_cycles, transfer_cycles : callable
        ``prompt_len -> cycles`` of prefill and of the KV transfer to a decode node.
    cache_tokens : callable
        ``(prompt_len, generated) -> tokens`` cached per layer (the KV policy's ``cache_len``).
    kv_bytes_per_token : int
        KV bytes per cached token over all layers.
    slot_cache_tokens : int
        Tokens reserved per slot where a sequence's whole cache lives: its static slot, or the
        store of a policy that keeps one in another tier (the occupancy is measured against it).
    speculation : Speculation
        Drafts verified per step and their acceptance rate (none by default: one token per step).
    seed : int
        Seeds the draws of accepted drafts (with each request's id).
    """

    mode: Literal["disaggregated", "colocated"]
    prefill_nodes: int
    decode_nodes: int
    slots: int
    decode_step_cycles: int
    prefill_cycles: Callable[[int], int]
    transfer_cycles: Callable[[int], int]
    cache_tokens: Callable[[int, int], int]
    kv_bytes_per_token: int
    slot_cache_tokens: int
    speculation: Speculation = field(default_factory=Speculation)
    seed: int = 0
    #: reuse of shared prompt prefixes (None: every prompt prefilled and stored whole)
    prefix_caching: PrefixCaching | None = None
    #: co-located: prompt tokens prefilled between two decode steps (None: whole prompts;
    #: serving/chunked_prefill.py)
    prefill_chunk: int | None = None

    @property
    def kv_capacity_bytes(self) -> int:
        """KV bytes reserved for the slots of one decode node."""
        return self.slots * self.slot_cache_tokens * self.kv_bytes_per_token


@dataclass
class RequestLog:
    """What happened to one request (all times in cycles; -1 where a stage did not happen)."""

    request: Request
    prefill_node: int = -1
    prefill_start: int = -1
    first_token: int = -1
    transfer_start: int = -1
    transfer_end: int = -1
    decode_node: int = -1
    slot: int = -1
    #: when the slot was taken (reserved for the transfer, or at prefill when co-located)
    slot_acquired: int = -1
    join: int = -1
    finish: int = -1
    #: the cycle each output token came out (the first one from prefill)
    token_cycles: list[int] = field(default_factory=list)

    @property
    def generated(self) -> int:
        return len(self.token_cycles)


@dataclass(frozen=True)
class StepLog:
    """One decode step of one node: sequences stepped, tokens they got, slots holding a sequence
    and KV bytes resident at its end."""

    node: int
    start: int
    end: int
    active: int
    slots_in_use: int
    kv_bytes: int
    #: tokens the step gave its sequences: ``active`` plus the accepted drafts
    tokens: int = 0
    #: KV bytes not held because sequences share a prefix (prefix caching; 0 otherwise)
    kv_bytes_saved: int = 0


@dataclass
class ServingLog:
    """The outcome of :func:`simulate`."""

    setup: ServingSetup
    requests: list[RequestLog]
    steps: list[StepLog]
    end_cycle: int
    #: busy cycles per node, by role: ``prefill[i]``, ``decode[i]`` (decode steps), ``link[i]``
    busy: dict[str, list[int]]
    #: what prefix caching reused (None without it)
    prefixes: PrefixTracker | None = None


class _Signal:
    """A re-armable SimPy event: processes ``wait()``; ``fire()`` wakes them all."""

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self.event = env.event()

    def wait(self) -> simpy.Event:
        return self.event

    def fire(self) -> None:
        if not self.event.triggered:
            self.event.succeed()
        self.event = self.env.event()


@dataclass
class _DecodeNode:
    index: int
    table: SlotTable
    wake: _Signal
    #: sequences whose cache has arrived and that join at the next step
    arrived: list[RequestLog] = field(default_factory=list)
    #: sequences with a reserved slot whose cache is still crossing the link
    incoming: list[RequestLog] = field(default_factory=list)
    active: list[RequestLog] = field(default_factory=list)


class _Serving:
    def __init__(self, env: simpy.Environment, requests: list[Request], setup: ServingSetup) -> None:
        self.env, self.setup = env, setup
        self.logs = [RequestLog(r) for r in sorted(requests, key=lambda r: (r.arrival_cycle, r.id))]
        self.waiting: deque[RequestLog] = deque()
        self.ready: deque[RequestLog] = deque()
        self.arrival = _Signal(env)
        self.done = env.event()
        self.finished = 0
        self.steps: list[StepLog] = []
        self._draws: dict[int, np.random.Generator] = {}
        colocated = setup.mode == "colocated"
        n_prefill = 0 if colocated else setup.prefill_nodes
        self.busy = {"prefill": [0] * n_prefill, "decode": [0] * setup.decode_nodes, "link": [0] * n_prefill}
        if colocated:
            self.busy["colocated_prefill"] = [0] * setup.decode_nodes
        self.nodes = [_DecodeNode(i, SlotTable(setup.slots), _Signal(env)) for i in range(setup.decode_nodes)]
        self.links = [simpy.Resource(env, capacity=1) for _ in range(n_prefill)]
        self.prefixes = None if setup.prefix_caching is None else PrefixTracker(
            setup.prefix_caching, n_prefill or setup.decode_nodes, setup.prefill_cycles)
        env.process(self._arrivals())
        for i in range(n_prefill):
            env.process(self._prefill_node(i))
        for node in self.nodes:
            if colocated and setup.prefill_chunk is not None:
                env.process(chunked_colocated_node(self, node, setup.prefill_chunk))
            else:
                env.process(self._colocated_node(node) if colocated else self._decode_node(node))

    # -- shared pieces ---------------------------------------------------------------------
    def _arrivals(self):
        for log in self.logs:
            if log.request.arrival_cycle > self.env.now:
                yield self.env.timeout(log.request.arrival_cycle - self.env.now)
            self.waiting.append(log)
            self.arrival.fire()

    def _finish(self, log: RequestLog) -> None:
        log.finish = self.env.now
        self.finished += 1
        if self.prefixes is not None:
            self.prefixes.release(log.request)
        if self.finished == len(self.logs):
            self.done.succeed()

    def _prefill(self, log: RequestLog, node: int, busy: list[int]):
        log.prefill_node, log.prefill_start = node, self.env.now
        cycles = self.setup.prefill_cycles(log.request.prompt_len) if self.prefixes is None else \
            self.prefixes.prefill_cycles(log.request, node)   # a held prefix is not prefilled again
        yield self.env.timeout(cycles)
        busy[node] += cycles
        log.first_token = self.env.now
        log.token_cycles.append(self.env.now)

    def _step_tokens(self, log: RequestLog) -> int:
        """Tokens one step gives ``log``'s sequence: 1 plus the drafts it accepts, capped at what
        the request still needs."""
        spec = self.setup.speculation
        accepted = 0
        if spec.drafts:
            request_id = log.request.id
            if request_id not in self._draws:
                self._draws[request_id] = np.random.default_rng([self.setup.seed, request_id])
            accepted = spec.accepted(self._draws[request_id])
        return min(1 + accepted, log.request.output_len - log.generated)

    def _decode_step(self, node: _DecodeNode):
        start = self.env.now
        yield self.env.timeout(self.setup.decode_step_cycles)
        self.busy["decode"][node.index] += self.setup.decode_step_cycles
        tokens = 0
        for log in node.active:
            n = self._step_tokens(log)
            log.token_cycles.extend([self.env.now] * n)
            tokens += n
        # logged before finished sequences leave, so the step's peak KV is what is recorded
        kv_bytes, saved = (self._kv_bytes(node), 0) if self.prefixes is None else self._shared_kv_bytes(node)
        self.steps.append(StepLog(node.index, start, self.env.now, len(node.active), node.table.in_use,
                                  kv_bytes, tokens, saved))
        still = []
        for log in node.active:
            if log.generated == log.request.output_len:
                node.table.release(log.slot, log.request.id)
                self._finish(log)
            else:
                still.append(log)
        node.active = still

    def _kv_bytes(self, node: _DecodeNode) -> int:
        tokens = sum(self.setup.cache_tokens(log.request.prompt_len, max(0, log.generated - 1))
                     for log in node.active + node.arrived + node.incoming)
        return tokens * self.setup.kv_bytes_per_token

    def _shared_kv_bytes(self, node: _DecodeNode) -> tuple[int, int]:
        """``(held, saved)`` KV bytes of ``node`` with each shared prefix stored once."""
        stored, saved = self.prefixes.decode_kv_tokens(
            (log.request, self.setup.cache_tokens(log.request.prompt_len, max(0, log.generated - 1)))
            for log in node.active + node.arrived + node.incoming)
        return stored * self.setup.kv_bytes_per_token, saved * self.setup.kv_bytes_per_token

    def _join(self, node: _DecodeNode) -> None:
        for log in node.arrived:
            log.join = self.env.now
        node.active.extend(node.arrived)
        node.arrived = []

    # -- disaggregated ---------------------------------------------------------------------
    def _prefill_node(self, index: int):
        while True:
            while not self.waiting:
                yield self.arrival.wait()
            log = self.waiting.popleft()
            yield from self._prefill(log, index, self.busy["prefill"])
            if log.request.output_len == 1:
                self._finish(log)
            else:
                self.ready.append(log)
                self._dispatch()

    def _dispatch(self) -> None:
        while self.ready:
            node = max(self.nodes, key=lambda n: (n.table.free, -n.index))
            if node.table.free == 0:
                return
            log = self.ready.popleft()
            log.decode_node, log.slot, log.slot_acquired = node.index, node.table.acquire(log.request.id), self.env.now
            node.incoming.append(log)
            self.env.process(self._transfer(log, node))

    def _transfer(self, log: RequestLog, node: _DecodeNode):
        link = self.links[log.prefill_node]
        with link.request() as slot_on_link:
            yield slot_on_link
            log.transfer_start = self.env.now
            cycles = self.setup.transfer_cycles(log.request.prompt_len)
            yield self.env.timeout(cycles)
            self.busy["link"][log.prefill_node] += cycles
            log.transfer_end = self.env.now
        node.incoming.remove(log)
        node.arrived.append(log)
        node.wake.fire()

    def _decode_node(self, node: _DecodeNode):
        while True:
            self._join(node)
            if not node.active:
                yield node.wake.wait()
                continue
            yield from self._decode_step(node)
            self._dispatch()

    # -- co-located ------------------------------------------------------------------------
    def _colocated_node(self, node: _DecodeNode):
        while True:
            if self.waiting and node.table.free:
                log = self.waiting.popleft()
                log.decode_node, log.slot, log.slot_acquired = node.index, node.table.acquire(log.request.id), self.env.now
                node.incoming.append(log)
                yield from self._prefill(log, node.index, self.busy["colocated_prefill"])
                node.incoming.remove(log)
                if log.request.output_len == 1:
                    node.table.release(log.slot, log.request.id)
                    self._finish(log)
                else:
                    node.arrived.append(log)
                continue
            self._join(node)
            if node.active:
                yield from self._decode_step(node)
            else:
                yield self.arrival.wait()


def simulate(requests: list[Request], setup: ServingSetup) -> ServingLog:
    """Serve ``requests`` until every one has all its tokens; returns the log.

    Raises
    ------
    ValueError
        For an empty request list or a request with no output token.
    """
    if not requests:
        raise ValueError("no requests to serve")
    if any(r.output_len < 1 for r in requests):
        raise ValueError("every request generates at least one token")
    env = simpy.Environment()
    serving = _Serving(env, requests, setup)
    env.run(until=serving.done)
    return ServingLog(setup, sorted(serving.logs, key=lambda log: log.request.id), serving.steps,
                      int(env.now), serving.busy, serving.prefixes)
