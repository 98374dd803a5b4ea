"""Several models on one node: every model's weights in the slow tier, the active ones in the fast
tier, and a scheduler that decides which model the node runs next.

SN40L's three memory tiers exist to hold many models on one node (SambaNova, arXiv 2405.07518:
"Composition of Experts"): the weights of every model stay in DDR, the models the node is running
sit in HBM, and a model that is not resident is copied in before it runs. This module simulates one
co-located node that serves requests for several models; the costs come in as numbers (one
:class:`ModelCosts` per model: its compiled decode batch, step and prefill cycles, and the bytes it
holds in the fast tier), so it knows nothing of kernels. The study layer times each model on the
node alone (:func:`sn40l_sim.serving.point.simulate_point`) and hands the numbers here.

The node does one thing at a time, in cycles: copy a model in, prefill one request of the model it
runs (a request waits for a free slot of its model's static decode graph), or run one decode step of
that model (every active sequence of it gets one token). A model is *resident* while its fast-tier
footprint (its weights, the KV its slots reserve and its activations, as its memory placement put
them) is held; the resident footprints never exceed the fast tier's usable bytes. Making room evicts
the least recently run resident model: the KV of its sequences still decoding is written back to the
slow tier (its bytes over the copy bandwidth) and copied in again with its weights when it returns.
Switching to a model that is not resident costs ``(weight bytes + its written-back KV) / copy
bandwidth``, the copy bandwidth being the slower of the two tiers' achievable bandwidths (the
hardware file's ``memory.<tier>.bytes_per_s_per_unit`` and ``efficiency``; :func:`copy_bytes_per_s`).
Each step is timed in its own steady state, its kernels finding the configurations they left
loaded; a prefill or decode step run after another graph (another model's, or the other phase of
the same model) first loads those configurations again (``ModelCosts.switch_cycles``), whether or
not its weights had to be copied. The scheduler policies (:data:`POLICIES`):

``on_demand``
    Switch whenever another model needs the node: a waiting request (with a free slot) is
    prefilled first, the model of the oldest one first; otherwise the models with sequences decoding
    take decode steps in turn (the one stepped least recently first).
``batch_by_model``
    Keep the node on the current model while it has work, until ``quantum`` cycles have passed since
    it was switched in while another model has work; then switch to the model with the oldest waiting
    request (else the one with sequences decoding stepped least recently).
``prewarm``
    As ``batch_by_model``, and while the node computes, copy in the model predicted to run next (the
    one ``batch_by_model`` would switch to; with none waiting, the most frequent model among the last
    arrivals) when it fits beside the current one, as WarmServe does (the copy engine is separate
    from the compute; the copy's share of the fast tier's bandwidth is not taken from the steps: at
    DDR's ~80 GB/s against HBM's 1.6 TB/s per socket it is a few percent).

Examples
--------
Two models that cannot be resident together; requests alternate between them:

>>> from sn40l_sim.serving.workload import Request
>>> a = ModelCosts("a", slots=1, decode_step_cycles=10, prefill_cycles=lambda p: 5, cache_tokens=lambda p, g: p + g,
...                kv_bytes_per_token=1, slot_cache_tokens=20, weight_bytes=600, fast_bytes=700)
>>> b = ModelCosts("b", 1, 10, lambda p: 5, lambda p, g: p + g, 1, 20, 500, 600)
>>> node = NodeMemory(fast_bytes=1000, slow_bytes=10_000, copy_bytes_per_cycle=10.0)
>>> reqs = [Request(0, 0, 4, 3), Request(1, 0, 4, 3)]
>>> run = simulate_models(reqs, [0, 1], [a, b], node, "batch_by_model", quantum_cycles=1000)
>>> [(r.request.id, r.first_token, r.finish) for r in run.requests], run.switches, run.switch_cycles
([(0, 65, 85), (1, 140, 160)], 2, 110)
"""
from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Sequence

from sn40l_sim.errors import InfeasibleError, InvariantError
from sn40l_sim.serving.batching import SlotTable
from sn40l_sim.serving.multi_model_specs import ModelCosts, MultiModelRun, NodeMemory, Switch, copy_bytes_per_s
from sn40l_sim.serving.serving_log import RequestLog, StepLog
from sn40l_sim.serving.step_table import StepTable
from sn40l_sim.serving.workload import Request

#: the scheduler policies, in the order experiments list them
POLICIES = ("on_demand", "batch_by_model", "prewarm")
#: arrivals the prewarm policy counts to predict the next model when none is waiting
PREDICT_WINDOW = 32


class SlowTierFull(InfeasibleError):
    """Evicting a model would write back more KV than the slow tier has room for beside every
    model's weights and the KV the models keep there: the node's capacity, not a bug (those alone
    fit; the study layer checked).

    Attributes
    ----------
    model : str
        The model whose eviction overflows (the first of those evicted at once).
    cycle : int
        When.
    held_bytes, capacity_bytes : int
        What the slow tier would hold (weights and KV written back) and its usable bytes.
    """

    def __init__(self, model: str, cycle: int, held_bytes: int, capacity_bytes: int) -> None:
        super().__init__(f"evicting model {model} at cycle {cycle} writes its sequences' KV back: the slow tier "
                         f"would hold {held_bytes} B (every model's weights, the KV the models keep there and the KV "
                         f"written back) of its usable {capacity_bytes} B")
        self.model, self.cycle, self.held_bytes, self.capacity_bytes = model, cycle, held_bytes, capacity_bytes


class _Node:
    """The state of the simulation (one node; the policies read it)."""

    def __init__(self, requests: Sequence[Request], model_of: Sequence[int], models: Sequence[ModelCosts],
                 memory: NodeMemory, policy: str, quantum_cycles: int) -> None:
        self.models, self.memory, self.policy, self.quantum = list(models), memory, policy, quantum_cycles
        n = len(models)
        self.logs = [RequestLog(r) for r in sorted(requests, key=lambda r: r.id)]
        self.model_of = list(model_of)
        self.order = sorted(self.logs, key=lambda log: (log.request.arrival_cycle, log.request.id))
        self.next_arrival = 0
        self.waiting: list[deque[RequestLog]] = [deque() for _ in range(n)]
        self.active: list[list[RequestLog]] = [[] for _ in range(n)]
        self.tables = [SlotTable(m.slots) for m in models]
        self.recent: deque[int] = deque(maxlen=PREDICT_WINDOW)
        self.now = 0
        self.current: int | None = None
        self.since = 0
        #: the graph the node ran last, ``(model, "prefill" | "decode", prompt length of a prefill)``
        self.last_graph: tuple[int, str, int] | None = None
        #: resident model -> the cycle its copy completes
        self.resident: dict[int, int] = {}
        self.last_run = [-1] * n
        self.written_back = [0] * n        # KV bytes of a model's sequences held in the slow tier
        self.copy_free = 0                 # the copy engine is busy until this cycle
        self.run = MultiModelRun(self.models, policy, self.logs, self.model_of, [StepTable() for _ in range(n)], [], 0,
                                 [0] * n, [0] * n, loads=[0] * n)
        self.finished = 0
        self._check_memory()

    # -- memory ------------------------------------------------------------------------------
    def _fast_held(self) -> int:
        return sum(self.models[m].fast_bytes for m in self.resident)

    def _slow_held(self) -> int:
        # a model's store in the slow tier (ArkVale's pages) stays there whether it runs or not
        return sum(m.weight_bytes + m.slow_bytes for m in self.models) + sum(self.written_back)

    def _check_memory(self) -> None:
        fast, slow = self._fast_held(), self._slow_held()
        self.run.peak_fast_bytes = max(self.run.peak_fast_bytes, fast)
        self.run.peak_slow_bytes = max(self.run.peak_slow_bytes, slow)
        if fast > self.memory.fast_bytes or slow > self.memory.slow_bytes:
            raise InvariantError("memory_within_capacity", f"cycle {self.now}: fast tier {fast} B of "
                                 f"{self.memory.fast_bytes}, slow tier {slow} B of {self.memory.slow_bytes}")

    def _live_kv(self, m: int) -> int:
        costs = self.models[m]
        return sum(costs.cache_tokens(log.request.prompt_len, max(0, log.generated - 1))
                   for log in self.active[m]) * costs.kv_bytes_per_token

    def _cycles(self, n_bytes: int) -> int:
        return math.ceil(n_bytes / self.memory.copy_bytes_per_cycle)

    def _make_room(self, target: int, keep: set[int]) -> int | None:
        """Evict least recently run models (not in ``keep``) until ``target`` fits; returns the
        write-back cycles, or None when it cannot fit without evicting one of ``keep``."""
        need = self.models[target].fast_bytes
        victims = sorted((m for m in self.resident if m not in keep and m != target), key=lambda m: self.last_run[m])
        held, chosen = self._fast_held(), []
        for m in victims:
            if held + need <= self.memory.fast_bytes:
                break
            chosen.append(m)
            held -= self.models[m].fast_bytes
        if held + need > self.memory.fast_bytes:
            return None
        # the evicted sequences' KV goes to the slow tier before the target's own written-back KV
        # leaves it (the copy engine writes back first), so both count at once; a tier too small for
        # that is the input's capacity (one clear line), not the invariant _check_memory guards
        slow = self._slow_held() + sum(self._live_kv(m) for m in chosen)
        self.run.peak_slow_bytes = max(self.run.peak_slow_bytes, slow)
        if chosen and slow > self.memory.slow_bytes:
            raise SlowTierFull(self.models[chosen[0]].name, self.now, slow, self.memory.slow_bytes)
        cycles = 0
        for m in chosen:
            kv = self._live_kv(m)
            self.written_back[m] += kv
            self.run.written_back_bytes += kv
            cycles += self._cycles(kv)
            del self.resident[m]
        return cycles

    def _load(self, target: int, start: int, keep: set[int]) -> bool:
        """Start copying ``target`` in on the copy engine at ``start`` (or when it is free)."""
        write_back = self._make_room(target, keep)
        if write_back is None:
            return False
        n_bytes = self.models[target].weight_bytes + self.written_back[target]
        begin = max(start, self.copy_free)
        self.copy_free = begin + write_back + self._cycles(n_bytes)
        self.resident[target] = self.copy_free
        self.written_back[target] = 0
        self.run.copied_bytes += n_bytes
        self.run.loads[target] += 1
        self._check_memory()
        return True

    def switch_to(self, target: int) -> None:
        """Make ``target`` the model the node runs, waiting for its copy when it is not resident."""
        if target == self.current:
            return
        copied = 0
        if target not in self.resident:
            copied = self.models[target].weight_bytes + self.written_back[target]
            if not self._load(target, self.now, keep=set()):
                raise InvariantError("memory_within_capacity", f"model {self.models[target].name} does not fit "
                                     "in the fast tier alone")
        ready = self.resident[target]
        waited = max(0, ready - self.now)
        self.run.switches_log.append(Switch(self.now, target, copied, waited))
        self.now += waited
        self.current, self.since = target, self.now

    # -- requests ----------------------------------------------------------------------------
    def admit(self) -> None:
        while self.next_arrival < len(self.order) and self.order[self.next_arrival].request.arrival_cycle <= self.now:
            log = self.order[self.next_arrival]
            m = self.model_of[log.request.id]
            self.waiting[m].append(log)
            self.recent.append(m)
            self.next_arrival += 1

    def can_prefill(self, m: int) -> bool:
        return bool(self.waiting[m]) and self.tables[m].free > 0

    def has_work(self, m: int) -> bool:
        return self.can_prefill(m) or bool(self.active[m])

    def _run_graph(self, m: int, graph: str, prompt_len: int = 0) -> None:
        """The node runs ``graph`` of model ``m`` next (a prefill of ``prompt_len`` tokens): it first
        loads the configurations another graph took, if it ran another one last (this model's
        prefill of another prompt included, as a co-located node does, :mod:`.prefill_pairs`)."""
        last, self.last_graph = self.last_graph, (m, graph, prompt_len)
        if last is not None and last != self.last_graph:
            # the same model's prefill of another prompt: what that prefill's graph took
            after = last[2] if last[:2] == (m, "prefill") else None
            cycles = self.models[m].switch_cycles(graph, prompt_len, after)
            if cycles:
                self.run.graph_switches.append((m, self.now, self.now + cycles, graph))
            self.now += cycles
            self.run.graph_switch_cycles += cycles

    def prefill(self, m: int) -> None:
        log = self.waiting[m].popleft()
        log.decode_node, log.slot_acquired = 0, self.now
        log.slot = self.tables[m].acquire(log.request.id)
        self._run_graph(m, "prefill", log.request.prompt_len)
        log.prefill_node, log.prefill_start = 0, self.now
        cycles = self.models[m].prefill_cycles(log.request.prompt_len)
        self.now += cycles
        self.run.prefill_busy[m] += cycles
        log.first_token = self.now
        log.add_token(self.now)
        if log.request.output_len == 1:
            self.tables[m].release(log.slot, log.request.id)
            self._finish(log)
        else:
            log.join = self.now
            self.active[m].append(log)

    def decode(self, m: int) -> None:
        self._run_graph(m, "decode")
        costs, start = self.models[m], self.now
        self.now += costs.decode_step_cycles
        self.run.decode_busy[m] += costs.decode_step_cycles
        for log in self.active[m]:
            log.add_token(self.now)
        self.run.steps[m].append(StepLog(0, start, self.now, len(self.active[m]), self.tables[m].in_use,
                                         self._live_kv(m), len(self.active[m])))
        still = []
        for log in self.active[m]:
            if log.generated == log.request.output_len:
                self.tables[m].release(log.slot, log.request.id)
                self._finish(log)
            else:
                still.append(log)
        self.active[m] = still

    def _finish(self, log: RequestLog) -> None:
        log.finish = self.now
        self.finished += 1

    # -- the policies ------------------------------------------------------------------------
    def _oldest_waiting(self, exclude: int | None = None) -> int | None:
        ready = [m for m in range(len(self.models)) if m != exclude and self.can_prefill(m)]
        return min(ready, key=lambda m: (self.waiting[m][0].request.arrival_cycle, m), default=None)

    def _stalest_active(self, exclude: int | None = None) -> int | None:
        decoding = [m for m in range(len(self.models)) if m != exclude and self.active[m]]
        return min(decoding, key=lambda m: (self.last_run[m], m), default=None)

    def _other(self, exclude: int | None) -> int | None:
        """The model to switch to from ``exclude``: oldest waiting request, else stalest decoding."""
        found = self._oldest_waiting(exclude)
        return found if found is not None else self._stalest_active(exclude)

    def choose(self) -> int | None:
        if self.policy == "on_demand":
            found = self._oldest_waiting()
            return found if found is not None else self._stalest_active()
        current = self.current
        if current is not None and self.has_work(current):
            other = self._other(current)
            if other is None or self.now - self.since < self.quantum:
                return current
            return other
        return self._other(None)

    def prewarm(self) -> None:
        """Copy in the model predicted to run next, beside the current one, if it fits."""
        nxt = self._other(self.current)
        if nxt is None and self.recent:
            counts = Counter(m for m in self.recent if m != self.current)
            nxt = max(counts, key=lambda m: (counts[m], -m)) if counts else None
        if nxt is None or nxt in self.resident or self.copy_free > self.now:
            return
        keep = {self.current} if self.current is not None else set()
        self._load(nxt, self.now, keep)

    def step(self) -> None:
        m = self.choose()
        if m is None:   # idle until the next arrival
            self.now = max(self.now, self.order[self.next_arrival].request.arrival_cycle)
            return
        self.switch_to(m)
        if self.policy == "prewarm":
            self.prewarm()
        self.last_run[m] = self.now
        if self.policy == "on_demand" or self.can_prefill(m):
            # prefill first (as the co-located loop does); on_demand chose m for a waiting request
            # when there was one, else for its decoding sequences
            if self.can_prefill(m):
                self.prefill(m)
                return
        self.decode(m)


def simulate_models(requests: Sequence[Request], model_of: Sequence[int], models: Sequence[ModelCosts],
                    memory: NodeMemory, policy: str, *, quantum_cycles: int) -> MultiModelRun:
    """Serve ``requests`` (request ``i`` asks for model ``model_of[i]``) on one node under ``policy``.

    Raises
    ------
    ValueError
        For an unknown policy, a request id that is not its index, or a model index out of range.
    SlowTierFull
        If evicting a model would write back more KV than the slow tier holds beside the weights.
    InvariantError
        If the fast or slow tier would hold more than its usable bytes (a bug: every step checks it).
    """
    if policy not in POLICIES:
        raise ValueError(f"unknown scheduler policy {policy!r}; expected one of {', '.join(POLICIES)}")
    if sorted(r.id for r in requests) != list(range(len(requests))) or len(model_of) != len(requests):
        raise ValueError("request ids must be 0..n-1, each with a model")
    if any(not 0 <= m < len(models) for m in model_of):
        raise ValueError("a request asks for a model that is not served")
    node = _Node(requests, model_of, models, memory, policy, quantum_cycles)
    while node.finished < len(node.logs):
        node.admit()
        node.step()
    node.run.end_cycle = node.now
    return node.run


__all__ = ["POLICIES", "PREDICT_WINDOW", "ModelCosts", "MultiModelRun", "NodeMemory", "SlowTierFull", "Switch",
           "copy_bytes_per_s", "simulate_models"]
