"""The SimPy pieces the serving loop runs on, as plain callbacks on SimPy events.

SimPy orders the events of one cycle by priority (a process's start before anything else), then
by when they were scheduled. Who gets a decode slot, and whether a sequence joins a step, can
depend on that order when several things happen on the same cycle, so the loop's results depend
on the exact events it schedules. These pieces schedule exactly the events a SimPy process, a
``simpy.Resource`` and a re-armable event would, in the same order, but run callbacks instead of
resuming generators, and leave out the events nothing waits on (a process's end, a release with
no request queued, a signal no one listens to): leaving out an event that has no callbacks
changes neither the order of the others nor what happens.

Examples
--------
>>> env = simpy.Environment()
>>> link, seen = Link(env), []
>>> for name in "ab":
...     soon(env, lambda name=name: link.request(lambda: seen.append((name, env.now))))
>>> _ = env.timeout(5).callbacks.append(lambda _: link.release())
>>> env.run()
>>> seen
[('a', 0), ('b', 5)]
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable

import simpy
from simpy.events import URGENT


class _Call(simpy.Event):
    """An event that runs ``callback`` when processed, scheduled now at ``priority``."""

    def __init__(self, env: simpy.Environment, callback: Callable[[], None], priority: int) -> None:
        super().__init__(env)
        self.callbacks.append(lambda _: callback())
        self._ok, self._value = True, None
        env.schedule(self, priority)


def soon(env: simpy.Environment, callback: Callable[[], None]) -> None:
    """Run ``callback`` at this cycle where a SimPy process started now would start (the
    ``Initialize`` event: before the cycle's ordinary events, after those of its kind already due)."""
    _Call(env, callback, URGENT)


def later(env: simpy.Environment, callback: Callable[[], None]) -> None:
    """Run ``callback`` at this cycle where an event succeeded now would be processed."""
    _Call(env, callback, simpy.events.NORMAL)


def after(env: simpy.Environment, cycles: int, callback: Callable[[], None]) -> None:
    """Run ``callback`` ``cycles`` from now (a SimPy timeout)."""
    env.timeout(cycles).callbacks.append(lambda _: callback())


class Signal:
    """A re-armable SimPy event: ``wait()`` gives the event to wait on, ``fire()`` wakes every
    waiter (an event no one waits on is not scheduled)."""

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self.event = env.event()

    def wait(self) -> simpy.Event:
        """The event the next ``fire()`` succeeds."""
        return self.event

    def fire(self) -> None:
        """Wake the waiters, if any."""
        if self.event.callbacks:
            self.event.succeed()
            self.event = self.env.event()


class Link:
    """A link that carries one transfer at a time, first come, first served: the events of a
    ``simpy.Resource(capacity=1)`` (a request granted in an event of its own, the next queued
    request granted in the event of the release before it)."""

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self.busy = False
        self._queue: deque[Callable[[], None]] = deque()

    def request(self, start: Callable[[], None]) -> None:
        """Queue a transfer; ``start`` runs when the link is granted to it."""
        self._queue.append(start)
        self._grant()

    def _grant(self) -> None:
        if not self.busy and self._queue:
            self.busy = True
            later(self.env, self._queue.popleft())

    def release(self) -> None:
        """The transfer holding the link is done."""
        self.busy = False
        if self._queue:   # with none queued, a request made before the release event would be granted at once
            later(self.env, self._grant)
