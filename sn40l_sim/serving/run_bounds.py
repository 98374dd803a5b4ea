"""How far a decode node's run of steps may go, on several decode nodes: to the first event that
can change what the node does, not to the next event of the whole serve (docs/architecture.md, the
serving loop in "The layers, bottom up").

A run is advanced in one event (:class:`~sn40l_sim.serving.decode_books.RunBook`); the steps it
skips must be steps the step-by-step loop takes with the same state and in the same order. What can
change a disaggregated node ``A``'s steps, or be changed by them:

* a reservation on ``A`` (a dispatch) or a cache landing on it: ``A`` with a cache on its way runs
  to the next event of the serve, as before. Otherwise only a dispatch can reach ``A``, and one
  happens at a prefill's end, or at another node's step where a sequence finishes; that one frees
  slots only there and ``ready`` is empty unless every node is full, so it dispatches only to the
  node that freed them, but what it sends can set off a chain (a transfer's end lets a held-back
  prefill node start) that reaches ``A``;
* ``A``'s own steps change nothing outside the node until one of its sequences finishes (its own
  limit): a step without a finish releases no slot and its dispatch finds no node with room.

A co-located node takes a waiting request at a step boundary where it has a free slot, and goes to
wait for an arrival when it has nothing to step; the nodes share only the queue of waiting requests
and that wait. A node with requests waiting runs to the next event of the serve, as before; with
none, nothing reaches it before an arrival, and another node's steps that follow a step (no prompt
of its own to prefill, no sequence finishing) touch neither.

So a run ends before the first event due that is not another node's decode steps (an arrival,
prefill, chunk, graph switch, link grant, transfer or signal: each can start a chain that reaches
``A``), and before the first step in which another node's sequence can finish or after which it
prefills (a lower bound from its book: its sequences change only through joins, which need one of
those events first). Everything between is other nodes' steps, which touch nothing ``A`` reads. The
order of the events on one cycle matters only between such steps of two nodes whose boundaries fall
on the same cycles, and in the log:

* disaggregated, a node's boundaries are ordered among other nodes' on one cycle by their chains of
  steps (:meth:`~sn40l_sim.serving.scheduler.Scheduler.last`). A node's chain starts where it is
  woken (its first boundary's place in the order of events); step by step, each boundary schedules
  the step's end, whose event schedules the next boundary, so nodes stepping in step keep the order
  they had, and one stepping since an earlier cycle comes before one woken at this cycle: the order
  of their chains, which runs that skip those events keep;
* co-located, a node runs one step per event while another node's steps end on its boundaries'
  cycles (each step scheduled where the step-by-step loop schedules it);
* the log is sorted back into the step-by-step order, by end cycle and then chain
  (:class:`RunBounds`).
"""
from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

import numpy as np

from sn40l_sim.serving.scheduler import LATE, RunEnd

if TYPE_CHECKING:
    from sn40l_sim.serving.scheduler import Scheduler
    from sn40l_sim.serving.setup import ServingSetup
    from sn40l_sim.serving.step_table import StepTable

INFINITY = float("inf")


class BoundedClock:
    """What :meth:`RunBook.steps_to_run` reads of the clock: the cycle now and the first cycle
    something that can change its node is due (``peek``), worked out only when read: a full node's
    next step usually finishes a sequence, and then the run is one step whatever is due."""

    __slots__ = ("now", "_bounds", "_node")

    def __init__(self, now: int, bounds: RunBounds, node: Any) -> None:
        self.now, self._bounds, self._node = now, bounds, node

    def peek(self) -> float:
        bounds, node = self._bounds, self._node
        due = bounds.env.peek()
        if not bounds.colocated:
            # disaggregated, the bound is never before the serve's next event, so when that comes
            # after the node's own next finish the run ends there either way: no need to look further
            book = node.book
            if due > self.now + (book.next_finish_step - len(book.ends) + 1) * bounds.step_cycles:
                return due
        # a bound two steps away or less makes the run one step (steps_to_run): where it lies then
        # changes nothing, and on full nodes the others' next finishes usually put it there
        return bounds.bound(node, one_step=self.now + 2 * bounds.step_cycles)


def earliest_finish(node: Any, now: int, step_cycles: int) -> float:
    """The first cycle a step of ``node`` can end with a sequence finishing, or after which it runs a
    chunk of prefill, while nothing joins it but what has already arrived (a lower bound)."""
    book = node.book
    if node.late_pending:            # its next step starts now, after this cycle's other events
        first = now + step_cycles if node.arrived else INFINITY
        if book.stepping:
            first = min(first, now + (book.next_finish_step - len(book.ends) + 1) * step_cycles)
        return first
    if node.run_end is None:          # waiting for a cache or a request, prefilling, switching graphs
        return INFINITY
    end_cycle, last_step, then_prefill = node.run_end
    if then_prefill:
        return end_cycle
    first = end_cycle + (book.next_finish_step - last_step) * step_cycles
    return min(first, end_cycle + step_cycles) if node.arrived else first


class RunBounds:
    """The runs of a serve by requests on several decode nodes: each run's clock (:meth:`clock`),
    and the chain of every logged step, to sort the log into the order the step-by-step loop logs
    it (by end cycle; on one cycle, the order of the nodes' chains)."""

    def __init__(self, env: Scheduler, nodes: list[Any], setup: ServingSetup, waiting: deque[Any]) -> None:
        self.env, self.nodes, self.step_cycles, self.waiting = env, nodes, setup.decode_step_cycles, waiting
        self.colocated = setup.mode == "colocated"
        # each run's chain and steps, expanded to one chain per step only to sort the log
        self.run_chains: list[int] = []
        self.run_steps: list[int] = []
        self._clocks = {id(node): BoundedClock(0, self, node) for node in nodes}

    def clock(self, node: Any) -> BoundedClock:
        """The clock ``node``'s next run reads: now, and the first cycle something can change it."""
        clock = self._clocks[id(node)]    # one per node, read before the next run asks for it
        clock.now = self.env.now
        return clock

    def bound(self, node: Any, one_step: float = -INFINITY) -> float:
        """The first cycle at which an event that can change ``node``'s steps may happen (the run's
        steps must end before it); or, once one at or before ``one_step`` is found, that one (the
        caller runs a single step for any bound up to ``one_step``)."""
        env, now, cycles = self.env, self.env.now, self.step_cycles
        if node.incoming or node.arrived or (self.colocated and self.waiting):
            return env.peek()
        pending = env.pending()
        if pending and not self.colocated:
            # disaggregated, the bound is never before the serve's next event: when that event can
            # change the node, it is the bound (the heap's first entry is the next event)
            cycle, priority, _, callback = pending[0]
            if priority != LATE and not isinstance(callback, RunEnd):
                return cycle
        due = INFINITY
        for other in self.nodes:   # (first: a node that is full finishes a sequence within a step or two)
            if other is not node:
                due = min(due, earliest_finish(other, now, cycles))
                if self.colocated and other.run_end is not None and (other.run_end[0] - now) % cycles == 0:
                    due = min(due, now + cycles)     # its steps end with ours: one step per event
                if due <= one_step:
                    return due
        for cycle, priority, _, callback in pending:
            if cycle < due and priority != LATE and not isinstance(callback, RunEnd):
                due = cycle
        return due

    def logged(self, node: Any, count: int) -> None:
        """``node`` logged ``count`` steps."""
        self.run_chains.append(node.chain)
        self.run_steps.append(count)

    def sort(self, steps: StepTable) -> None:
        """Put ``steps`` (all logged, each with :meth:`logged`) in step-by-step order."""
        chains = np.repeat(np.array(self.run_chains, dtype=np.int64), np.array(self.run_steps, dtype=np.int64))
        steps.reorder(np.lexsort((chains, steps.column("end"))))
