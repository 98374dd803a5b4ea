"""A kernel's overlapped collectives as they run beside its stream: :class:`Windows`.

Each overlapped collective has a window of the kernel's data tiles (:mod:`sn40l_sim.mapper.windows`:
the whole stream, or the part of the operator whose output it carries). It starts once its
window's first tile is out of the pipeline and runs on the socket's links after whatever holds them.
Its last data tile's share (``bytes`` over the window's tiles) can go only after the window's last
tile: the collective ends no sooner than that share after it, and the share takes the links like
any transfer (a collective holding them, such as an attention data-parallel all-to-all, delays
it), for what of it the collective's own time past the window's end has not covered. A window that
closes before the stream's end holds the stream there: the later data tiles read the reduced rows,
so they wait for the collective to end (``stalled``, counted as a wait for collectives).

The kernel's stream calls :meth:`Windows.reach` at every data tile where a window opens or closes
(:meth:`Windows.split` cuts its chunks there), in order.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import simpy

from sn40l_sim.engine.collectives import CollectiveModel
from sn40l_sim.mapper.windows import window_tiles

if TYPE_CHECKING:
    from sn40l_sim.engine.collective_run import CollectiveRun
    from sn40l_sim.engine.resources import SocketResources
    from sn40l_sim.ir import Collective


def open_gate(env: simpy.Environment) -> simpy.Event:
    """A gate already open (a call's compute waits for nothing before its first tile)."""
    event = env.event()
    event.succeed()
    return event


@dataclass
class _Window:
    run: CollectiveRun
    first: int
    stop: int
    #: the collective's last share (its bytes over the window's tiles)
    tail: Collective
    opened: simpy.Event
    closed: simpy.Event
    closed_at: int = 0
    done: simpy.Process | None = None


class Windows:
    """The overlapped collectives ``runs`` of a kernel streaming ``sections`` x ``tiles`` data tiles
    (``fractions``: each one's window; a collective naming no operator has the whole stream and its
    share of ``tiles``, as before windows were placed). ``start(run, delay)`` starts a collective's
    transfer on the links ``delay`` cycles from now, a process that ends counting it alive
    (``res.live_collectives``, which opening it counted)."""

    def __init__(self, res: SocketResources, runs: Sequence[CollectiveRun], fractions: Sequence[tuple[float, float]],
                 tiles: int, sections: int, model: CollectiveModel | None, first_tile_cycles: int,
                 start: Callable[[CollectiveRun, int], simpy.Process] | None) -> None:
        self.res = res
        self.total = max(1, tiles) * max(1, sections)
        self.stalled = 0
        self.items: list[_Window] = []
        for run, fraction in zip(runs, fractions, strict=True):
            if run.collective.after:
                first, stop = window_tiles(fraction, self.total)
            else:
                first, stop = 0, self.total
            share = max(1, stop - first if run.collective.after else tiles)
            assert model is not None and start is not None, "collectives need their model and start"
            tail = replace(run.collective, bytes=math.ceil(run.collective.bytes / share))
            item = _Window(run, first, stop, tail, res.env.event(), res.env.event())
            item.done = res.env.process(self._run(item, first_tile_cycles, start, model))
            self.items.append(item)

    @property
    def points(self) -> tuple[int, ...]:
        """The data tiles inside the stream where a window opens or closes."""
        return tuple(sorted({t for w in self.items for t in (w.first, w.stop) if 0 < t < self.total}))

    def split(self, first: int, n: int) -> list[int]:
        """Data tiles ``first .. first+n-1`` cut where a window opens or closes."""
        cuts = [t for t in self.points if first < t < first + n]
        edges = [first, *cuts, first + n]
        return [b - a for a, b in zip(edges, edges[1:], strict=False)]

    def reach(self, tile: int) -> Generator[simpy.Event, Any, None]:
        """The stream has sent ``tile`` data tiles: open and close the windows there, then wait for
        the collectives of those that close before the stream's end."""
        env = self.res.env
        for w in self.items:
            if w.first <= tile and not w.opened.triggered:
                # alive from now (a stream started now does not run alone), until its transfer ends
                self.res.live_collectives += 1
                w.opened.succeed()
            if w.stop <= tile and not w.closed.triggered:
                w.closed_at = env.now
                w.closed.succeed()
        for w in self.items:
            if w.stop == tile < self.total and not w.done.triggered:
                before = env.now
                yield w.done
                self.stalled += env.now - before

    def ends(self) -> list[simpy.Process]:
        """Every window's collective, share included."""
        return [w.done for w in self.items]

    def _run(self, w: _Window, delay: int, start: Callable[[CollectiveRun, int], simpy.Process],
             model: CollectiveModel) -> Generator[simpy.Event, Any, None]:
        env = self.res.env
        yield w.opened
        yield start(w.run, delay)
        yield w.closed
        # the share's time past the window's end that the collective's own time has not covered
        # (timed only as far as that needs: the share usually fits in what the collective outlasts)
        needed = model.excess_cycles(w.tail, max(0, w.run.end - w.closed_at))
        if needed > 0:
            with self.res.p2p.request() as links:
                yield links
                yield env.timeout(needed)
