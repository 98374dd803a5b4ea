"""Cycle-by-cycle building blocks of the unit-level simulation: packets, wires, per-cycle
budgets, mesh hops and PMUs (banks, read and write ports, address generators).

Time is the SimPy clock in RDU cycles. Every parameter comes from the socket spec; none of the
tile-level formulas of :mod:`sn40l_sim.hardware.units` is used here.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import simpy

from sn40l_sim.hardware.spec import NetworkSpec, PMUSpec


@dataclass(slots=True)
class Packet:
    """One vector (or scalar) moving between units: a tag, its payload and its size in bytes."""

    tag: Any
    data: Any
    nbytes: int


class Wire:
    """A FIFO connection with a fixed latency and bounded buffering (backpressure).

    Items put at cycle ``t`` can be taken at ``t + latency``. The buffer holds the items in
    flight plus ``depth`` waiting ones, so a full wire stalls its producer.

    Examples
    --------
    >>> env = simpy.Environment()
    >>> w = Wire(env, latency=3)
    >>> def producer():
    ...     yield w.put("x")
    >>> got = []
    >>> def consumer():
    ...     got.append((yield from w.get()))
    ...     got.append(env.now)
    >>> _ = env.process(producer()); _ = env.process(consumer()); env.run()
    >>> got
    ['x', 3]
    """

    def __init__(self, env: simpy.Environment, latency: int = 0, depth: int = 2) -> None:
        self.env = env
        self.latency = latency
        self.store = simpy.Store(env, capacity=latency + depth)

    def put(self, item: Any) -> simpy.events.Event:
        return self.store.put((self.env.now + self.latency, item))

    def get(self) -> Iterator[Any]:
        ready, item = yield self.store.get()
        if ready > self.env.now:
            yield self.env.timeout(ready - self.env.now)
        return item


class CycleBudget:
    """A per-cycle allowance (bytes of a port or link, addresses of a generator).

    :meth:`take` spends ``amount`` in the current cycle if it fits, else waits for the next
    cycles; an amount above the per-cycle allowance spans consecutive cycles.

    Examples
    --------
    >>> env = simpy.Environment()
    >>> link = CycleBudget(env, 128)
    >>> done = []
    >>> def send(n):
    ...     yield from link.take(n)
    ...     done.append((n, env.now))
    >>> for n in (64, 64, 64, 300):
    ...     _ = env.process(send(n))
    >>> env.run(); done
    [(64, 0), (64, 0), (64, 1), (300, 3)]
    """

    def __init__(self, env: simpy.Environment, per_cycle: float) -> None:
        self.env = env
        self.per_cycle = per_cycle
        self.cycle = -1
        self.used = 0.0
        #: cycles in which anything was spent
        self.busy_cycles = 0

    def _refresh(self) -> None:
        if self.cycle != self.env.now:
            self.cycle = self.env.now
            self.used = 0.0

    def available(self) -> float:
        self._refresh()
        return self.per_cycle - self.used

    def spend(self, amount: float) -> None:
        self._refresh()
        if self.used == 0 and amount > 0:
            self.busy_cycles += 1
        self.used += amount

    def take(self, amount: float) -> Iterator[simpy.events.Event]:
        remaining = amount
        while remaining > 0:
            avail = self.available()
            if avail > 0:
                step = min(avail, remaining)
                self.spend(step)
                remaining -= step
            if remaining > 0:
                yield self.env.timeout(1)


def mesh_path(env: simpy.Environment, net: NetworkSpec, hops: int) -> tuple[Wire, Wire]:
    """A route of ``hops`` switch hops: returns ``(inbound, outbound)`` wires.

    Each hop is a SimPy process that serialises packets over ``link_bytes_per_cycle x
    links_per_direction`` bytes per cycle onto a wire of ``hop_latency_cycles`` latency. Zero
    hops (two units on one switch) still pass one link, without latency. Hops store and forward
    whole packets, so a packet wider than a link pays its extra serialisation cycles per hop
    (the SN40L vector packets fit a link, so there this never happens).

    Examples
    --------
    >>> from sn40l_sim.hardware.units._examples import example_network   # 64 B/cycle, 2 cycles/hop
    >>> env = simpy.Environment()
    >>> inbound, outbound = mesh_path(env, example_network(), hops=3)
    >>> arrivals = []
    >>> def send():
    ...     for i in range(4):
    ...         yield inbound.put(Packet(i, None, 128))     # two cycles of link each
    >>> def receive():
    ...     for _ in range(4):
    ...         yield from outbound.get()
    ...         arrivals.append(env.now)
    >>> _ = env.process(send()); _ = env.process(receive()); env.run()
    >>> arrivals    # 3 hops x (2 latency + 1 extra cycle to take in the packet's second half)
    [9, 11, 13, 15]
    """
    inbound = Wire(env, latency=0)
    current = inbound
    latency = net.hop_latency_cycles if hops > 0 else 0
    for _ in range(max(hops, 1)):
        nxt = Wire(env, latency=latency)
        budget = CycleBudget(env, net.link_bytes_per_cycle * net.links_per_direction)
        env.process(_hop(current, nxt, budget))
        current = nxt
    return inbound, current


def forward(src: Wire, dst: Wire) -> Iterator[simpy.events.Event]:
    """Process: move everything from ``src`` to ``dst`` as it arrives (a zero-cost connection).

    >>> env = simpy.Environment()
    >>> a, b = Wire(env, latency=2), Wire(env)
    >>> _ = env.process(forward(a, b)); _ = env.process((lambda: (yield a.put("x")))())
    >>> env.run(); b.store.items
    [(2, 'x')]
    """
    while True:
        item = yield from src.get()
        yield dst.put(item)


def signal_after(env: simpy.Environment, event: simpy.events.Event, delay: int) -> None:
    """Succeed ``event`` ``delay`` cycles from now (a control token crossing the control network).

    >>> env = simpy.Environment()
    >>> done = env.event()
    >>> signal_after(env, done, 4); env.run(); env.now, done.triggered
    (4, True)
    """
    def _later():
        if delay:
            yield env.timeout(delay)
        event.succeed()
    env.process(_later())


def _hop(inbound: Wire, out: Wire, budget: CycleBudget) -> Iterator[simpy.events.Event]:
    while True:
        pkt = yield from inbound.get()
        yield from budget.take(pkt.nbytes)
        yield out.put(pkt)


class PMU:
    """A banked scratchpad with concurrent read and write ports and shared address generators.

    Data are stored by key (with a byte address for the bank map); each key has a ready event
    set when it is written, so reads wait for their data (read-after-write). Per cycle a read
    port moves ``banks x bank_width_bytes`` bytes, the generators issue ``addresses_per_cycle``
    addresses over both ports, and two reads (or two writes) in one cycle may not touch the
    same bank: the later one waits for the next cycle.

    Examples
    --------
    Three 4-byte reads in one cycle, the third to the bank of the first, on 16 banks x 4 B:

    >>> from sn40l_sim.hardware.units._examples import example_pmu
    >>> env = simpy.Environment()
    >>> pmu = PMU(env, example_pmu())
    >>> issued = []
    >>> def reads():
    ...     for address in (0, 4, 64):
    ...         yield from pmu.access("read", address, 4)
    ...         issued.append(env.now)
    >>> _ = env.process(reads()); env.run()
    >>> issued
    [0, 0, 1]
    """

    def __init__(self, env: simpy.Environment, spec: PMUSpec, name: str = "pmu") -> None:
        self.env = env
        self.spec = spec
        self.name = name
        row = spec.banks * spec.bank_width_bytes
        self.ports = {"read": CycleBudget(env, row * spec.read_ports),
                      "write": CycleBudget(env, row * spec.write_ports)}
        self.addresses = CycleBudget(env, spec.addresses_per_cycle)
        self._banks_used: dict[str, tuple[int, set[int]]] = {"read": (-1, set()), "write": (-1, set())}
        self.data: dict[Any, Any] = {}
        self._ready: dict[Any, simpy.events.Event] = {}

    def banks_of(self, address: int, nbytes: int) -> set[int]:
        """Banks touched by an access of ``nbytes`` at byte ``address``.

        >>> from sn40l_sim.hardware.units._examples import example_pmu   # 16 banks x 4 B
        >>> pmu = PMU(simpy.Environment(), example_pmu())
        >>> sorted(pmu.banks_of(8, 12)), len(pmu.banks_of(0, 256))
        ([2, 3, 4], 16)
        """
        w, n = self.spec.bank_width_bytes, self.spec.banks
        first, last = address // w, (address + max(nbytes, 1) - 1) // w
        if last - first + 1 >= n:
            return set(range(n))
        return {b % n for b in range(first, last + 1)}

    def ready(self, key: Any) -> simpy.events.Event:
        """The event that fires when ``key`` has been written."""
        if key not in self._ready:
            self._ready[key] = self.env.event()
        return self._ready[key]

    def store(self, key: Any, value: Any) -> None:
        """Make ``value`` readable under ``key`` (after its write was paid, or as preloaded input)."""
        self.data[key] = value
        ev = self.ready(key)
        if not ev.triggered:
            ev.succeed()

    def access(self, kind: str, address: int, nbytes: int) -> Iterator[simpy.events.Event]:
        """Wait for a cycle where one ``kind`` access fits (address, banks, port bytes), spend it.

        An access wider than the port occupies the port for consecutive cycles.
        """
        banks = self.banks_of(address, nbytes)
        port = self.ports[kind]
        while True:
            cycle, used = self._banks_used[kind]
            if cycle != self.env.now:
                used = set()
                self._banks_used[kind] = (self.env.now, used)
            fits_port = port.available() >= min(nbytes, port.per_cycle)
            if self.addresses.available() >= 1 and fits_port and not (banks & used):
                self.addresses.spend(1)
                used |= banks
                yield from port.take(nbytes)
                return
            yield self.env.timeout(1)

    def reader(self, requests: Iterable[tuple[Any, int, int, Callable[[Any], Packet]]],
               outs: list[Wire], start: simpy.events.Event | None = None
               ) -> Iterator[simpy.events.Event]:
        """Process: serve ``(key, address, nbytes, make_packet)`` reads in order into every wire
        of ``outs`` (a multicast), after ``start`` if given.

        Each read waits for its key to be written, then for a cycle with room for it, and hands
        the stored value to ``make_packet``. ``key`` None reads nothing (a packet made on the fly).
        """
        if start is not None:
            yield start
        for key, address, nbytes, make in requests:
            if key is not None:
                ready = self.ready(key)
                if not ready.triggered:
                    yield ready
                yield from self.access("read", address, nbytes)
                pkt = make(self.data[key])
            else:
                pkt = make(None)
            for wire in outs:
                yield wire.put(pkt)
