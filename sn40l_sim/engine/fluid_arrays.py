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
  the unfrozen flows all hold one rate, so an iteration costs the channels and the flows that
  freeze, not every flow;
- a channel's residual is decremented by the step once per unfrozen flow crossing it, with the
  floats one subtraction at a time gives (float subtraction does not compose: ``r - s - s`` need
  not equal ``r - 2 * s``), reached in runs that provably round alike (:func:`_subtract_repeatedly`).

The network moves its flows here above a flow-count threshold and back below half of it
(:data:`~sn40l_sim.engine.fluid.ARRAY_FLOWS`); the flows' list stays the network's and keeps its
order, in which completions fire.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from sn40l_sim.engine.fluid import Channel, _Flow

#: a flow is capped out once its rate reaches this fraction of its cap (both paths of the
#: network's progressive filling read it: FluidNetwork._reallocate and FlowArrays._fill)
CAP_FRACTION = 1 - 1e-12
#: below this many subtractions (steps x channels) one ``np.subtract.accumulate`` costs less than a
#: round of binade runs (measured on rings of 32-64 sockets)
_PLAIN_AREA = 6000
#: a channel is saturated once its residual falls to this fraction of its capacity (both paths)
SATURATED_FRACTION = 1e-12


def _starts(lengths: np.ndarray) -> np.ndarray:
    """Offsets of each flow's first path entry, for ``reduceat`` over the entries."""
    starts = np.zeros(len(lengths), dtype=np.intp)
    np.cumsum(lengths[:-1], out=starts[1:])
    return starts


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The indices ``starts[i] .. starts[i] + lengths[i] - 1`` of every ``i``, one after the other.

    >>> _ranges(np.array([5, 0]), np.array([2, 3])).tolist()
    [5, 6, 0, 1, 2]
    """
    ends = np.cumsum(lengths)
    return np.repeat(starts - ends + lengths, lengths) + np.arange(ends[-1] if len(ends) else 0)


def _subtract_repeatedly(values: np.ndarray, times: np.ndarray, step: float, saturated_below: np.ndarray,
                         rounds: int = 2, plain_area: int | None = None) -> np.ndarray:
    """``values[c]`` with ``step`` subtracted ``times[c]`` times one after the other (rounding each),
    or, where that surely ends at or below ``saturated_below[c]``, a value that does too.

    The Python loop subtracts once per user, and a channel may have hundreds, so this takes
    shortcuts that give the same floats:

    - a channel whose result is surely saturated (its users all freeze, and its residual is never
      read again) gets ``v - n * step``: it is within the loop's rounding error of the loop's
      result, and both are below the saturation level with that error to spare;
    - while a value stays in one binade (``[2^e, 2^(e+1))``, spacing ``u``), subtracting ``step``
      rounds to subtracting the same multiple of ``u`` each time (unless ``step / u`` ends in exactly
      one half, a tie broken by parity), so a run of subtractions is one integer product in units
      of ``u``; a subtraction leaving the binade is done as it is, and the run resumes below;
    - after ``rounds`` of those (none once at most ``plain_area``, by default
      :data:`_PLAIN_AREA`, subtractions are left),
      ``np.subtract.accumulate`` does what is left one subtraction at a time (sequential by
      definition, whatever the values).

    >>> values, times = np.array([1.0, 1.0, 7.3]), np.array([3, 1, 500])
    >>> got = _subtract_repeatedly(values, times, 0.1, np.full(3, -np.inf))
    >>> expected = 7.3
    >>> for _ in range(500): expected -= 0.1
    >>> got.tolist() == [1.0 - 0.1 - 0.1 - 0.1, 0.9, expected]
    True
    """
    # infinite or huge steps and values take the plain path below; their overflows are expected
    with np.errstate(over="ignore", invalid="ignore"):
        return _subtract_in_runs(values, times, step, saturated_below, rounds,
                                 _PLAIN_AREA if plain_area is None else plain_area)


def _subtract_in_runs(values: np.ndarray, times: np.ndarray, step: float, saturated_below: np.ndarray,
                      rounds: int, plain_area: int) -> np.ndarray:
    """:func:`_subtract_repeatedly`'s work."""
    out = values.astype(float)
    left = times.astype(np.int64)
    # the loop's result is within n rounding errors of at most 2^-53 (|v| + n |step|) each of v - n step,
    # which itself is two roundings from the float below
    approx = values - left * step
    slack = (left + 4) * 2.0**-52 * (np.abs(values) + left * abs(step))
    surely = approx + slack <= saturated_below
    out[surely] = approx[surely]
    left[surely] = 0
    if not math.isfinite(step) or step < 0:
        rounds = 0
    for _ in range(rounds):
        todo = np.flatnonzero(left)
        if (int(left.max()) + 1) * len(todo) <= plain_area:
            break  # few enough subtractions left to do them all one at a time
        r, k = out[todo], left[todo]
        _, exponent = np.frexp(r)  # r in [2^(exponent-1), 2^exponent): units u = 2^(exponent-53)
        units = np.ldexp(r, 53 - exponent)  # an integer in [2^52, 2^53) when r is normal
        # a power-of-two scaling: exact unless it underflows, and then far below one half, where
        # the decrement (0) and the room (ceil gives 1) are what the exact value gives
        step_units = np.ldexp(step, 53 - exponent)
        decrement = np.rint(step_units)
        # room: how far the value may drop (in units) with the exact difference still in the binade
        room = units - 2.0**52 - np.ceil(step_units)
        fast = (np.isfinite(r) & (r >= 2.0**-900) & (room >= 0) & (step_units < 2.0**52)
                & (step_units - np.floor(step_units) != 0.5))
        room = np.where(fast, room, 0).astype(np.int64)
        decrement = np.where(fast, decrement, 0).astype(np.int64)
        runs = np.where(fast, np.where(decrement > 0, np.minimum(k, room // np.maximum(decrement, 1) + 1), k), 0)
        landed = np.ldexp((np.where(fast, units, 0).astype(np.int64) - runs * decrement).astype(float), exponent - 53)
        r = np.where(fast, landed, r)
        k = k - runs
        # the step after a run leaves the binade, and a value off the fast path takes plain steps
        plain = k > 0
        out[todo], left[todo] = np.where(plain, r - step, r), k - plain
    todo = np.flatnonzero(left)
    if len(todo):
        column = np.full((int(left.max()) + 1, len(todo)), step)
        column[0] = out[todo]
        out[todo] = np.subtract.accumulate(column, axis=0)[left[todo], np.arange(len(todo))]
    return out


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
        for flow, left in zip(finished, self.remaining[done].tolist(), strict=True):
            flow.remaining = left   # below 0: what it moved past its last byte (FluidNetwork._finish)
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
        self.rate = self._fill(capacity)

    def _fill(self, capacity: np.ndarray) -> np.ndarray:
        """Progressive filling over shared channels: the rates.

        Every unfrozen flow has gained the same steps from 0.0 in the same order, so it has one
        rate, ``level``; a frozen flow keeps the level it froze at. The smallest ``cap - rate`` of
        the unfrozen flows is then ``min(cap) - level`` (rounding is monotonic), and an iteration
        touches only the channels, the flows that freeze and the entries of both.
        """
        n_flows, entry_ch, entry_flow = len(self.cap), self.entry_ch, self.entry_flow
        users = np.bincount(entry_ch, minlength=len(capacity))
        # each channel's entries, for its flows; a 16-bit key lets numpy's stable sort be a radix sort
        # (the same permutation, several times faster on a 64-socket collective's 20,000 entries)
        key = entry_ch.astype(np.int16) if len(capacity) < 2**15 else entry_ch
        by_channel = np.argsort(key, kind="stable")
        channel_entries = users.copy()
        channel_start = np.concatenate([[0], np.cumsum(users)])
        capped_at = self.cap * CAP_FRACTION
        any_cap = bool(np.isfinite(self.cap).any())
        rate = np.zeros(n_flows)
        unfrozen = np.ones(n_flows, dtype=bool)
        residual = capacity.copy()
        saturated_below = SATURATED_FRACTION * capacity
        level, n_unfrozen = 0.0, n_flows
        while n_unfrozen:
            used = np.flatnonzero(users)
            step = float((residual[used] / users[used]).min())
            if any_cap:
                step = min(step, float(self.cap[unfrozen].min()) - level)
            step = max(step, 0.0)
            level += step
            residual[used] = _subtract_repeatedly(residual[used], users[used], step, saturated_below[used])
            saturated = used[residual[used] <= saturated_below[used]]
            freeze = np.zeros(n_flows, dtype=bool)
            if len(saturated):
                crossing = _ranges(channel_start[saturated], channel_entries[saturated])
                freeze[entry_flow[by_channel[crossing]]] = True
            if any_cap:
                freeze |= level >= capped_at
            freeze &= unfrozen
            frozen = np.flatnonzero(freeze)
            if not len(frozen):  # float corner: nothing froze, stop rather than spin
                break
            rate[frozen] = level
            unfrozen[frozen] = False
            n_unfrozen -= len(frozen)
            users -= np.bincount(entry_ch[_ranges(self.starts[frozen], self.lengths[frozen])], minlength=len(users))
        rate[unfrozen] = level
        return rate

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
