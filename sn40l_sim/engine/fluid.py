"""Shared bandwidth as a fluid: concurrent transfers split each channel's bytes per cycle.

A :class:`FluidNetwork` holds channels (a memory tier of a socket, one direction of a P2P
link, ...) and the transfers (flows) currently crossing them. Every flow follows a path of one or
more channels and may carry its own rate cap (e.g. the AGCU limit of the stage that issues it).
Rates are max-min fair (progressive filling): each flow gets an equal share of its bottleneck
channel, shares a capped or otherwise-bottlenecked flow cannot use go to the others. Rates are
recomputed only when a flow starts or ends, so a transfer costs two SimPy events however large it
is. Time is in integer cycles: a flow finishing at a fractional time completes at the next whole
cycle.

Examples
--------
Two transfers of 1000 bytes over one 10 bytes/cycle channel, the second starting at cycle 20:
the first runs alone for 20 cycles (200 bytes), then both share 5 bytes/cycle each.

>>> import simpy
>>> env = simpy.Environment()
>>> net = FluidNetwork(env)
>>> hbm = net.channel("hbm", 10.0)
>>> done = {}
>>> def user(name, delay):
...     yield env.timeout(delay)
...     yield net.transfer((hbm,), 1000)
...     done[name] = env.now
>>> _ = env.process(user("a", 0)); _ = env.process(user("b", 20))
>>> env.run()
>>> done
{'a': 180, 'b': 200}
>>> hbm.bytes_moved, hbm.busy_cycles
(2000, 200)
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import simpy

from sn40l_sim.engine.fluid_arrays import CAP_FRACTION, SATURATED_FRACTION, FlowArrays
from sn40l_sim.engine.fluid_lone import _DONE_ABS, _DONE_REL

# a lone flow's cycles, without the network (re-exported: where they are looked for)
from sn40l_sim.engine.fluid_lone import lone_flow_cycles as lone_flow_cycles
from sn40l_sim.engine.fluid_lone import lone_flow_cycles_array as lone_flow_cycles_array

#: above this many flows at once the network keeps its flows' numbers in numpy arrays
#: (:mod:`.fluid_arrays`, the same arithmetic), and goes back to per-flow Python below half of it:
#: a collective's thousands of concurrent flows then cost array operations, while the engine's few
#: flows keep the cheaper scalar code
ARRAY_FLOWS = 96


@dataclass(eq=False)
class Channel:
    """One shared bandwidth resource.

    Attributes
    ----------
    name : str
        Label, e.g. ``"s0.hbm"`` or ``"p2p 3->7"``.
    bytes_per_cycle : float
        Capacity shared by all flows crossing the channel.
    busy_cycles : int
        Cycles during which at least one flow crossed the channel.
    bytes_moved : int
        Bytes of all completed flows that crossed the channel.
    """

    name: str
    bytes_per_cycle: float
    busy_cycles: int = 0
    bytes_moved: int = 0
    active: int = 0


@dataclass(eq=False)
class _Flow:
    """One transfer crossing ``path``: ``remaining`` of its ``n_bytes``, its ``rate`` (the max-min
    fair share it holds now) and ``cap`` both in bytes per cycle."""

    path: tuple[Channel, ...]
    n_bytes: int
    remaining: float
    cap: float
    done: simpy.Event
    rate: float = 0.0


@dataclass(eq=False)
class FluidNetwork:
    """Channels and the transfers crossing them, inside one SimPy environment.

    Parameters
    ----------
    env : simpy.Environment
        The environment whose clock counts RDU cycles.
    """

    env: simpy.Environment
    channels: dict[str, Channel] = field(default_factory=dict)
    _flows: list[_Flow] = field(default_factory=list)
    _last: int = 0
    _generation: int = 0
    _pending: bool = False
    _arrays: FlowArrays | None = None

    def channel(self, name: str, bytes_per_cycle: float) -> Channel:
        """Add (or return the existing) channel ``name`` with capacity ``bytes_per_cycle``."""
        if name in self.channels:
            return self.channels[name]
        if not bytes_per_cycle > 0:
            raise ValueError(f"channel {name!r} needs a positive capacity, got {bytes_per_cycle!r}")
        self.channels[name] = Channel(name, float(bytes_per_cycle))
        return self.channels[name]

    def transfer(self, path: tuple[Channel, ...], n_bytes: int, cap: float = math.inf,
                 moved: float = 0.0) -> simpy.Event:
        """Start moving ``n_bytes`` across every channel of ``path``; the event fires when done, at
        the whole cycle after the last byte, its value the bytes the flow moved in that cycle past
        its last one (a stream's next transfer takes them: ``moved``).

        Parameters
        ----------
        path : tuple of Channel
            Channels the bytes cross at once (a route of links, or a single memory tier).
        n_bytes : int
            Bytes to move (0 completes at once).
        cap : float
            Most bytes per cycle this flow can use whatever the channels offer.
        moved : float
            Bytes of these already moved, by the stream's transfer before this one past its own
            last byte (that transfer's event's value; the channels booked the cycle with it). Any
            beyond ``n_bytes`` are again this event's value.

        Examples
        --------
        1001 bytes then 999 at 10 a cycle: the first ends at cycle 101 having moved 9 of the second.

        >>> import simpy
        >>> env = simpy.Environment(); net = FluidNetwork(env); hbm = net.channel("hbm", 10.0)
        >>> def stream():
        ...     ahead = yield net.transfer((hbm,), 1001)
        ...     yield net.transfer((hbm,), 999, moved=ahead)
        >>> _, _ = env.process(stream()), env.run()
        >>> env.now   # 201 were the 9 bytes lost
        200
        """
        if n_bytes < 0:
            raise ValueError(f"n_bytes must be >= 0, got {n_bytes}")
        if not cap > 0:
            raise ValueError(f"cap must be positive, got {cap!r}")
        done = self.env.event()
        if n_bytes == 0 or not path:
            done.succeed(float(moved) if n_bytes == 0 else 0.0)
            return done
        self._advance()
        flow = _Flow(tuple(path), int(n_bytes), float(n_bytes) - float(moved), float(cap), done)
        for ch in flow.path:
            ch.active += 1
        self._flows.append(flow)
        if self._arrays is not None:
            self._arrays.add(flow)
        elif len(self._flows) > ARRAY_FLOWS:
            self._arrays = FlowArrays(self._flows, _DONE_REL, _DONE_ABS)
        if not self._pending:
            # transfers often start together (every member of a collective at once): share out
            # the rates once for all of them, at the end of this instant's starts
            self._pending = True
            self._generation += 1
            settle = self.env.timeout(0)
            generation = self._generation
            settle.callbacks.append(lambda _event: self._settle(generation))
        return done

    def transfer_alone(self, path: tuple[Channel, ...], n_bytes: int, cap: float = math.inf,
                       start: int | None = None) -> int | None:
        """Account a transfer that nothing shares, without events: its cycles, or None (then the
        caller must use :meth:`transfer`).

        For a caller that knows no other flow starts on the network before this one ends (the
        engine's kernels while no collective is alive). Alone, the flow's rate is its narrowest
        channel's capacity (capped), and the events :meth:`transfer` would cause are its settling
        at once and its wake-ups, each after the cycles its remaining bytes need (at least one),
        until they are within the completion tolerance; this replays that arithmetic step for
        step (the same float operations in the same order), books what the events would (channel
        bytes and busy cycles, the generation counter, the clock of the last update) and returns
        the cycles after which the transfer's event would fire. ``start`` is
        the cycle it would start at (default: now; a caller accounting several transfers one after
        the other, alone, gives each its own). None when another flow is in the network or a start
        is settling, when nothing is to move, or when the cap is not positive (:meth:`transfer`
        says why).

        >>> import simpy
        >>> env = simpy.Environment()
        >>> net = FluidNetwork(env)
        >>> hbm = net.channel("hbm", 10.0)
        >>> net.transfer_alone((hbm,), 1001), net.transfer_alone((hbm,), 1000), hbm.bytes_moved, hbm.busy_cycles
        (101, 100, 2001, 201)
        """
        if self._flows or self._pending:
            return None
        lone = self.lone_flow(path, n_bytes, cap)
        if lone is None:
            return None
        cycles, wakes = lone
        moved: dict[Channel, int] = {}
        for ch in path:
            moved[ch] = moved.get(ch, 0) + int(n_bytes)
        self.book_alone(1, wakes, (self.env.now if start is None else start) + cycles,
                        dict.fromkeys(path, cycles), moved)
        return cycles

    @staticmethod
    def lone_flow(path: tuple[Channel, ...], n_bytes: int, cap: float = math.inf) -> tuple[int, int] | None:
        """The cycles a transfer alone on ``path`` takes and the wake-ups the network would give
        it on the way (:meth:`transfer_alone`'s arithmetic, booking nothing); None when nothing is
        to move or the cap is not positive.

        >>> hbm = Channel("hbm", 10.0)
        >>> FluidNetwork.lone_flow((hbm,), 1001), FluidNetwork.lone_flow((hbm,), 0)
        ((101, 1), None)
        """
        if n_bytes <= 0 or not path or not cap > 0:
            return None
        # _reallocate's rate for a flow sharing no channel, and _schedule's and _wake's steps
        rate = min(float(cap), min(ch.bytes_per_cycle for ch in path))
        remaining = float(int(n_bytes))
        done_below = _DONE_REL * int(n_bytes) + _DONE_ABS
        cycles = wakes = 0
        while True:
            delay = max(1, math.ceil(remaining / rate - 1e-9))
            remaining -= rate * delay
            cycles += delay
            wakes += 1
            if remaining <= done_below:
                break
        return cycles, wakes

    def book_alone(self, transfers: int, wakes: int, end: int, busy: dict[Channel, int],
                   moved: dict[Channel, int]) -> None:
        """Book what ``transfers`` lone transfers run one after the other (:meth:`lone_flow`)
        would have through the events: the generation counter (a settling and ``wakes`` wake-ups
        in all), the clock of the last update (``end``, when the last one ended), and each
        channel's busy cycles and bytes moved."""
        self._generation += transfers + wakes
        self._last = end
        for ch, cycles in busy.items():
            ch.busy_cycles += cycles
        for ch, n_bytes in moved.items():
            ch.bytes_moved += n_bytes

    def rates(self) -> list[float]:
        """The rate (bytes per cycle) each flow holds now, in the order the flows started."""
        return self._arrays.rate.tolist() if self._arrays is not None else [flow.rate for flow in self._flows]

    def _advance(self) -> None:
        now = self.env.now
        dt = now - self._last
        self._last = now
        if dt <= 0 or not self._flows:
            return
        if self._arrays is not None:
            for ch in self._arrays.advance(dt):
                ch.busy_cycles += dt
            return
        busy = set()
        for flow in self._flows:
            flow.remaining -= flow.rate * dt
            busy.update(flow.path)
        for ch in busy:
            ch.busy_cycles += dt

    def _settle(self, generation: int) -> None:
        self._pending = False
        if generation != self._generation:
            return
        self._advance()
        self._finish()
        self._reallocate()
        self._schedule()

    def _reallocate(self) -> None:
        """Max-min fair rates with per-flow caps (progressive filling)."""
        if self._arrays is not None:
            self._arrays.reallocate()
            return
        flows = self._flows
        if all(ch.active == 1 for f in flows for ch in f.path):
            # no channel is shared: every flow runs at its own bottleneck
            for f in flows:
                f.rate = min(f.cap, min(ch.bytes_per_cycle for ch in f.path))
            return
        residual = {}
        for flow in flows:
            flow.rate = 0.0
            for ch in flow.path:
                residual[ch] = ch.bytes_per_cycle
        unfrozen = list(flows)
        while unfrozen:
            users: dict[Channel, int] = {}
            for flow in unfrozen:
                for ch in flow.path:
                    users[ch] = users.get(ch, 0) + 1
            step = min(residual[ch] / n for ch, n in users.items())
            step = min(step, min(f.cap - f.rate for f in unfrozen))
            step = max(step, 0.0)
            for flow in unfrozen:
                flow.rate += step
                for ch in flow.path:
                    residual[ch] -= step
            saturated = {ch for ch in users if residual[ch] <= SATURATED_FRACTION * ch.bytes_per_cycle}
            still = [f for f in unfrozen
                     if f.rate < f.cap * CAP_FRACTION and not saturated.intersection(f.path)]
            if len(still) == len(unfrozen):  # float corner: nothing froze, stop rather than spin
                break
            unfrozen = still

    def _schedule(self) -> None:
        if not self._flows:
            return
        if self._arrays is not None:
            soonest = self._arrays.soonest()
        else:
            soonest = min(f.remaining / f.rate for f in self._flows)
        delay = max(1, math.ceil(soonest - 1e-9))
        self._generation += 1
        generation = self._generation
        wake = self.env.timeout(delay)
        wake.callbacks.append(lambda _event: self._wake(generation))

    def _wake(self, generation: int) -> None:
        if generation != self._generation:
            return  # superseded by a later start or finish
        self._advance()
        if self._finish():
            self._reallocate()
        self._schedule()

    def _finish(self) -> bool:
        """Complete the flows whose bytes have all moved; True if any did."""
        if self._arrays is not None:
            finished = self._arrays.finish()  # also drops them from self._flows
            if len(self._flows) <= ARRAY_FLOWS // 2:
                self._arrays.write_back()
                self._arrays = None
        else:
            finished, left = [], []
            for f in self._flows:
                (finished if f.remaining <= _DONE_REL * f.n_bytes + _DONE_ABS else left).append(f)
            if finished:
                self._flows = left
        if finished:
            for flow in finished:
                for ch in flow.path:
                    ch.active -= 1
                    ch.bytes_moved += flow.n_bytes
                # the bytes it moved past its last one in its last cycle (``transfer``'s ``moved``)
                flow.done.succeed(max(0.0, -flow.remaining))
        return bool(finished)
