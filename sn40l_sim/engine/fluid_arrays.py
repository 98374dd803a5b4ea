"""The flows of a busy :class:`~sn40l_sim.engine.fluid.FluidNetwork` as numpy arrays.

A collective's direct algorithm on a ring or torus of tens of sockets puts thousands of multi-hop
flows in the network at once, and the network recomputes every flow's rate at each start and
finish; looping over flows x hops in Python per progressive-filling iteration then costs minutes.
:class:`FlowArrays` keeps the numbers the network reads and writes per event (remaining bytes,
rates, caps, the completion thresholds and the flows' paths as channel indices) in arrays, and does
the network's arithmetic on them with the same float operations, so that every flow completes at
the cycle the per-flow Python code gives:

- ``remaining -= rate * dt`` elementwise, and ``min(remaining / rate)`` for the next wake-up;
- progressive filling with one global step per iteration (the smallest ``residual / users`` of the
  channels still in use, and the smallest unused cap), the same saturation and freezing tests;
- a channel's residual is decremented by the step once per unfrozen flow crossing it, one
  subtraction at a time as the Python loop does (float subtraction does not compose: ``r - s - s``
  need not equal ``r - 2 * s``), vectorised across channels instead of across users.

The network moves its flows here above a flow-count threshold and back below half of it
(:data:`~sn40l_sim.engine.fluid.ARRAY_FLOWS`); the flows' list stays the network's and keeps its
order, in which completions fire.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from sn40l_sim.engine.fluid import Channel, _Flow

#: a flow is capped out once its rate reaches this fraction of its cap (the tests of
#: FluidNetwork._reallocate, kept equal to them)
_CAP_FRACTION = 1 - 1e-12
#: a channel is saturated once its residual falls to this fraction of its capacity
_SATURATED = 1e-12


def _starts(lengths: np.ndarray) -> np.ndarray:
    """Offsets of each flow's first path entry, for ``reduceat`` over the entries."""
    starts = np.zeros(len(lengths), dtype=np.intp)
    np.cumsum(lengths[:-1], out=starts[1:])
    return starts


def _subtract_repeatedly(values: np.ndarray, times: np.ndarray, step: float) -> np.ndarray:
    """``values[c]`` with ``step`` subtracted ``times[c]`` times one after the other (rounding each).

    ``np.subtract.accumulate`` down a column computes ``v - s``, then ``(v - s) - s``, ... one
    rounded subtraction at a time, as the Python loop does; the columns are the channels.

    >>> _subtract_repeatedly(np.array([1.0, 1.0]), np.array([3, 1]), 0.1).tolist() == [1.0 - 0.1 - 0.1 - 0.1, 0.9]
    True
    """
    column = np.full((int(times.max()) + 1, len(values)), step)
    column[0] = values
    return np.subtract.accumulate(column, axis=0)[times, np.arange(len(values))]


class FlowArrays:
    """Numeric state of the flows in ``flows`` (the network's list, shared and kept in order).

    Parameters
    ----------
    flows : list of _Flow
        The network's flows; their ``remaining`` and ``rate`` are read once here and written back
        by :meth:`write_back`, the arrays being the truth in between.
    done_rel, done_abs : float
        The network's completion tolerance: a flow is done once ``remaining`` is at most
        ``done_rel * n_bytes + done_abs``.
    """

    def __init__(self, flows: list[_Flow], done_rel: float, done_abs: float) -> None:
        self.flows = flows
        self._done_rel, self._done_abs = done_rel, done_abs
        self._index: dict[Channel, int] = {}
        self._channels: list[Channel] = []
        self._capacity = np.zeros(0)
        self.remaining = np.zeros(0)
        self.rate = np.zeros(0)
        self.cap = np.zeros(0)
        self.done_below = np.zeros(0)
        self.lengths = np.zeros(0, dtype=np.intp)
        self.entry_ch = np.zeros(0, dtype=np.intp)
        self.entry_flow = np.zeros(0, dtype=np.intp)
        self.starts = np.zeros(0, dtype=np.intp)
        self._busy: list[Channel] | None = None
        self._pending: list[_Flow] = []
        for flow in flows:
            self.add(flow)

    def add(self, flow: _Flow) -> None:
        """Take in a flow the network has just appended to its list (batched until next needed)."""
        self._pending.append(flow)

    def _flush(self) -> None:
        if not self._pending:
            return
        new, self._pending = self._pending, []
        channels: list[int] = []
        for flow in new:
            for ch in flow.path:
                if ch not in self._index:
                    self._index[ch] = len(self._channels)
                    self._channels.append(ch)
                channels.append(self._index[ch])
        if len(self._capacity) < len(self._channels):
            self._capacity = np.array([ch.bytes_per_cycle for ch in self._channels])
        lengths = np.array([len(f.path) for f in new], dtype=np.intp)
        first = len(self.lengths)
        from_flows = ([f.remaining for f in new], [f.rate for f in new], [f.cap for f in new],
                      # the Python test's own expression, evaluated once per flow
                      [self._done_rel * f.n_bytes + self._done_abs for f in new])
        self.remaining, self.rate, self.cap, self.done_below = (
            np.concatenate([old, np.array(col, dtype=float)])
            for old, col in zip((self.remaining, self.rate, self.cap, self.done_below), from_flows, strict=True))
        self.entry_ch = np.concatenate([self.entry_ch, np.array(channels, dtype=np.intp)])
        self.entry_flow = np.concatenate([self.entry_flow, np.repeat(np.arange(first, first + len(new)), lengths)])
        self.lengths = np.concatenate([self.lengths, lengths])
        self.starts = _starts(self.lengths)
        self._busy = None

    def advance(self, dt: int) -> list[Channel]:
        """Move every flow's bytes on by ``dt`` cycles at its rate; the channels that were busy."""
        self._flush()
        self.remaining -= self.rate * dt
        if self._busy is None:
            used = np.bincount(self.entry_ch, minlength=len(self._channels))
            self._busy = [self._channels[c] for c in np.flatnonzero(used).tolist()]
        return self._busy

    def finish(self) -> list[_Flow]:
        """Drop the flows whose bytes have all moved from the arrays and the list; those flows,
        in the list's order."""
        self._flush()
        done = self.remaining <= self.done_below
        if not done.any():
            return []
        keep = ~done
        finished = [self.flows[i] for i in np.flatnonzero(done).tolist()]
        self.flows[:] = [self.flows[i] for i in np.flatnonzero(keep).tolist()]
        entry_keep = keep[self.entry_flow]
        renumber = np.cumsum(keep) - 1
        self.entry_ch = self.entry_ch[entry_keep]
        self.entry_flow = renumber[self.entry_flow[entry_keep]]
        self.remaining, self.rate, self.cap, self.done_below, self.lengths = (
            a[keep] for a in (self.remaining, self.rate, self.cap, self.done_below, self.lengths))
        self.starts = _starts(self.lengths)
        self._busy = None
        return finished

    def reallocate(self) -> None:
        """Max-min fair rates with per-flow caps (progressive filling), as the Python code computes."""
        self._flush()
        if not len(self.rate):
            return
        capacity = self._capacity
        if np.bincount(self.entry_ch).max() == 1:
            # no channel is shared: every flow runs at its own bottleneck
            self.rate = np.minimum(self.cap, np.minimum.reduceat(capacity[self.entry_ch], self.starts))
            return
        rate = np.zeros(len(self.cap))
        residual = capacity.copy()
        saturated_below = _SATURATED * capacity
        # the unfrozen flows (indices into the arrays) and their path entries, shrinking as they freeze
        unfrozen = np.arange(len(self.cap))
        entry_ch, entry_flow = self.entry_ch, self.entry_flow
        while len(unfrozen):
            users = np.bincount(entry_ch, minlength=len(capacity))
            used = np.flatnonzero(users)
            cap, rate_now = self.cap[unfrozen], rate[unfrozen]
            step = float((residual[used] / users[used]).min())
            step = min(step, float((cap - rate_now).min()))
            step = max(step, 0.0)
            rate_now += step
            rate[unfrozen] = rate_now
            residual[used] = _subtract_repeatedly(residual[used], users[used], step)
            saturated = residual <= saturated_below
            keep = rate_now < cap * _CAP_FRACTION
            keep[entry_flow[saturated[entry_ch]]] = False  # a flow crossing a saturated channel
            if keep.all():  # float corner: nothing froze, stop rather than spin
                break
            entry_keep = keep[entry_flow]
            renumber = np.cumsum(keep) - 1
            entry_ch, entry_flow = entry_ch[entry_keep], renumber[entry_flow[entry_keep]]
            unfrozen = unfrozen[keep]
        self.rate = rate

    def soonest(self) -> float:
        """Cycles until the first flow would finish at the current rates (``min(remaining / rate)``)."""
        self._flush()
        if not self.rate.all():
            raise ZeroDivisionError("float division by zero")  # what the Python code raises
        return float((self.remaining / self.rate).min())

    def write_back(self) -> None:
        """Give the flows their remaining bytes and rates back (the network leaves the arrays)."""
        self._flush()
        for flow, remaining, rate in zip(self.flows, self.remaining.tolist(), self.rate.tolist(), strict=True):
            flow.remaining, flow.rate = remaining, rate
