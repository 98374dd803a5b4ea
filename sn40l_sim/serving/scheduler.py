"""The event scheduler the serving loop runs on: SimPy's order of events, without its machinery.

The loop's results can depend on the order of the events that fall on one cycle (who gets a free
decode slot, whether a sequence joins a step), so that order is part of the model: SimPy's. SimPy
processes an event queue ordered by cycle, then priority (a process's start, ``URGENT``, before
everything else, ``NORMAL``), then the order the events were scheduled in. :class:`Scheduler`
keeps the same queue of ``(cycle, priority, sequence number, callback)``, but an event is a
callback, not an object with a list of callbacks resuming generators: a serve of 4,096 requests
takes some 30,000 events, and SimPy's own bookkeeping was about a third of its time.

Each piece schedules exactly the events its SimPy counterpart would, in the same order, except
events nothing waits on (a process's end, a release with no request queued, a signal no one
listens to), which change neither what happens nor the order of the others:

* :meth:`Scheduler.process` runs a generator that yields cycles to wait (a ``Timeout``) or a
  :class:`Signal` to wait for, started as a SimPy process is (an ``URGENT`` event now);
* :class:`Signal` is a re-armable event: ``fire()`` wakes every waiter in one ``NORMAL`` event;
* :class:`Link` is a ``simpy.Resource(capacity=1)``: a request is granted in an event of its own,
  the next queued one in the event of the release before it;
* :meth:`Scheduler.stop` ends :meth:`Scheduler.run` as ``env.run(until=event)`` does when the
  event succeeds now. The tests run each piece against SimPy's own.

One priority is the loop's own, not SimPy's: :meth:`Scheduler.last` (``LATE``) runs after every
other event of its cycle, those the cycle's events schedule for it included. A decode step starts
there, so that a cache that arrives at the cycle a step starts joins that step whatever order the
two events were scheduled in (a model rule, not an accident of scheduling; ``docs/architecture.md``).

Examples
--------
>>> clock = Scheduler()
>>> link, seen = Link(clock), []
>>> for name in "ab":
...     clock.soon(lambda name=name: link.request(lambda: seen.append((name, clock.now))))
>>> clock.at(5, link.release)
>>> clock.at(9, clock.stop)
>>> clock.run()
>>> seen, clock.now
([('a', 0), ('b', 5)], 9)
"""
from __future__ import annotations

import functools
import heapq
import itertools
from collections import deque
from collections.abc import Callable, Generator
from typing import Union

#: SimPy's priorities: a process's start, then every other event of the cycle; and the loop's
#: own, after both (:meth:`Scheduler.last`)
URGENT, NORMAL, LATE = 0, 1, 2

#: what a process yields: cycles to wait, or a signal to wait for
Wait = Union[int, "Signal"]


class _Stop(Exception):
    """Raised by the stop event to leave :meth:`Scheduler.run`."""


class Scheduler:
    """A queue of callbacks by cycle, priority and order of scheduling (SimPy's).

    Attributes
    ----------
    now : int
        The current cycle.

    Examples
    --------
    A process yields the cycles it waits; :meth:`last` runs after everything else due at its
    cycle, even an event scheduled later for the same cycle:

    >>> clock, seen = Scheduler(), []
    >>> def decode_node():
    ...     yield 10
    ...     clock.last(lambda: seen.append(("step starts", clock.now)))
    ...     clock.at(0, lambda: seen.append(("cache arrives", clock.now)))
    ...     yield 5
    ...     clock.stop()
    >>> clock.process(decode_node())
    >>> clock.run()
    >>> seen, clock.now
    ([('cache arrives', 10), ('step starts', 10)], 15)
    """

    def __init__(self) -> None:
        self.now = 0
        self._queue: list[tuple[int, int, int, Callable[[], None]]] = []
        self._order = itertools.count()

    def at(self, delay: int, callback: Callable[[], None], priority: int = NORMAL) -> None:
        """Run ``callback`` ``delay`` cycles from now (SimPy: a ``Timeout``, or with ``delay`` 0 an
        event succeeded now)."""
        heapq.heappush(self._queue, (self.now + delay, priority, next(self._order), callback))

    def soon(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` at this cycle where a SimPy process started now would start."""
        heapq.heappush(self._queue, (self.now, URGENT, next(self._order), callback))

    def last(self, callback: Callable[[], None], order: int | None = None) -> None:
        """Run ``callback`` at this cycle after every other event due at it, including the ones
        those events schedule for it (no SimPy counterpart: see the module's docstring); among
        themselves in the order they were scheduled, or by ``order`` (from :meth:`new_order`)."""
        heapq.heappush(self._queue, (self.now, LATE, next(self._order) if order is None else order, callback))

    def new_order(self) -> int:
        """The place of an event scheduled now, for :meth:`last`'s ``order``."""
        return next(self._order)

    def pending(self) -> list[tuple[int, int, int, Callable[[], None]]]:
        """The events due, as ``(cycle, priority, order, callback)``, in no particular order."""
        return self._queue

    def peek(self) -> float:
        """The cycle of the next event (infinity when none is due)."""
        return self._queue[0][0] if self._queue else float("inf")

    def process(self, generator: Generator[Wait, None, None]) -> None:
        """Run ``generator`` as a SimPy process: from now, resumed after each wait it yields."""
        self.soon(lambda: self._resume(generator))

    def _resume(self, generator: Generator[Wait, None, None]) -> None:
        try:
            wait = next(generator)
        except StopIteration:
            return
        if isinstance(wait, Signal):
            wait.wait(lambda: self._resume(generator))
        elif isinstance(wait, RunWait):
            self.at(wait, RunEnd(self._resume, generator))
        else:
            self.at(wait, lambda: self._resume(generator))

    def stop(self) -> None:
        """End :meth:`run` once the events already due at this cycle before this one are done."""
        self.at(0, _raise_stop)

    def run(self) -> None:
        """Process events in order until :meth:`stop`'s.

        Raises
        ------
        RuntimeError
            When no event is left before the stop (the loop waits for something that never comes).
        """
        queue, pop = self._queue, heapq.heappop
        try:
            while queue:
                self.now, _, _, callback = pop(queue)
                callback()
        except _Stop:
            return
        raise RuntimeError("no event left to process, and the serve has not ended")


def _raise_stop() -> None:
    raise _Stop


class RunWait(int):
    """Cycles a process waits for a run of decode steps: its resume is a :class:`RunEnd`."""


class RunEnd(functools.partial):  # type: ignore[type-arg]
    """The event that ends a run of a decode node's steps (told apart from every other event by
    :mod:`sn40l_sim.serving.run_bounds`): ``RunEnd(callback, *args)`` calls ``callback(*args)``
    (a partial: no Python frame of its own to call through at every run's end)."""

    __slots__ = ()


class Signal:
    """A re-armable event: ``wait(callback)`` until the next ``fire()``, which wakes every waiter,
    in the order they came, in one event (none scheduled when no one waits).

    Examples
    --------
    A process waiting for a free slot yields the signal; it resumes in the event ``fire`` schedules:

    >>> clock = Scheduler()
    >>> freed, seen = Signal(clock), []
    >>> def waiting_request():
    ...     yield freed
    ...     seen.append(clock.now)
    ...     clock.stop()
    >>> clock.process(waiting_request())
    >>> clock.at(7, freed.fire)
    >>> clock.run()
    >>> seen
    [7]
    """

    def __init__(self, clock: Scheduler) -> None:
        self.clock = clock
        self._waiters: list[Callable[[], None]] = []

    def wait(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` at the next ``fire()``'s event."""
        self._waiters.append(callback)

    def fire(self) -> None:
        """Wake the waiters, if any."""
        if self._waiters:
            waiters, self._waiters = self._waiters, []
            self.clock.at(0, functools.partial(_call_each, waiters))


def _call_each(callbacks: list[Callable[[], None]]) -> None:
    for callback in callbacks:
        callback()


class Link:
    """A link that carries one transfer at a time, first come, first served: the events of a
    ``simpy.Resource(capacity=1)`` (a request granted in an event of its own, the next queued
    request granted in the event of the release before it)."""

    def __init__(self, clock: Scheduler) -> None:
        self.clock = clock
        self.busy = False
        self._queue: deque[Callable[[], None]] = deque()

    def request(self, start: Callable[[], None]) -> None:
        """Queue a transfer; ``start`` runs when the link is granted to it."""
        self._queue.append(start)
        self._grant()

    def _grant(self) -> None:
        if not self.busy and self._queue:
            self.busy = True
            self.clock.at(0, self._queue.popleft())

    def release(self) -> None:
        """The transfer holding the link is done."""
        self.busy = False
        if self._queue:   # with none queued, a request made before the release event would be granted at once
            self.clock.at(0, self._grant)
