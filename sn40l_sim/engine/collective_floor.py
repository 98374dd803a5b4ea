"""A floor under a collective's cycles, from its transfers alone: what ``auto`` need not simulate.

:class:`~sn40l_sim.engine.collectives.CollectiveModel` with ``algorithm="auto"`` keeps the fastest
algorithm for each collective. Simulating one is cheap when its transfers never share a link (the
event-free schedule) but not when they do: the direct algorithm on a ring or torus of 64 sockets
sends 4,032 messages at once over routes of up to 32 hops, and the fluid network shares out every
link's bandwidth again whenever one of them ends (minutes of CPU for one collective). An
algorithm whose floor already exceeds the cycles of one simulated before it cannot be the fastest,
so it is not simulated; the choice, and so every number, is the one simulating all of them gives.

The floor holds whatever the order of events, because each term is work that nothing overlaps:

* **links** -- every byte a route carries crosses each of its directed links, which move at most
  their ``bytes_per_cycle``: no collective ends before its busiest link has moved its bytes;
* **set-ups** -- a sender's transfers are each set up on one of its ``dma_engines`` for
  ``setup_cycles`` (:meth:`~sn40l_sim.engine.collectives._Run.send`), so its last set-up ends no
  earlier than ``ceil(transfers / engines)`` set-ups, and that transfer then waits for its route's
  latency and the receiver's synchronisation and streams for at least one cycle.

Examples
--------
A direct all-gather of 64 KiB on a ring of 8 sockets: 56 messages of 8 KiB. Each sender sets up
its 7 messages one after the other on its one engine (7 x 1,600 cycles), and the last one waits
for its route's 160 cycles of latency and streams for at least a cycle; the busiest link's bytes
would take fewer cycles than that:

>>> from sn40l_sim.engine.links import LinkTable
>>> table = LinkTable(8, [(i, (i + 1) % 8, 50e9, 1e-7) if i < 7 else (0, 7, 50e9, 1e-7) for i in range(8)],
...                   clock_hz=1.6e9, efficiency=0.8)
>>> sent = Transfers()
>>> sent.direct(list(range(8)), [[0 if i == j else 8192 for j in range(8)] for i in range(8)])
>>> len(sent.sends), floor_cycles(table, sent, setup_cycles=1600, sync_latency_s=0.0, dma_engines=1)
(56, 11361)
"""
from __future__ import annotations

import math
from collections import OrderedDict

import numpy as np

from sn40l_sim.engine.links import LinkTable, shared_entry
from sn40l_sim.hardware.units._cycles import ceil_cycles


class Transfers:
    """The point-to-point messages of one collective, without their timing.

    It takes the calls :class:`~sn40l_sim.engine.collectives._Run` and
    :class:`~sn40l_sim.engine.collective_schedule.Schedule` take, and keeps ``(source,
    destination, bytes)`` for every message that moves bytes (an empty one is never set up).
    """

    def __init__(self) -> None:
        self.sends: list[tuple[int, int, int]] = []

    def _send(self, src: int, dst: int, n_bytes: int) -> None:
        if n_bytes > 0 and src != dst:
            self.sends.append((src, dst, n_bytes))

    def ring(self, order: list[int], sizes: list[list[int]]) -> None:
        """Each member of ``order`` sends ``sizes[i][k]`` bytes to its successor at step ``k``."""
        p = len(order)
        for i in range(p):
            for n_bytes in sizes[i]:
                self._send(order[i], order[(i + 1) % p], n_bytes)

    def direct(self, members: list[int], sizes: list[list[int]], then: list[list[int]] | None = None) -> None:
        """Member ``i`` sends ``sizes[i][j]`` to member ``j``, then (with ``then``) ``then[j][k]``
        from member ``j`` to member ``k``."""
        for rows in (sizes, then or []):
            for i, row in enumerate(rows):
                for j, n_bytes in enumerate(row):
                    self._send(members[i], members[j], n_bytes)

    def doubling(self, members: list[int], sizes: list[int]) -> None:
        """In round ``r`` member ``i`` sends ``sizes[r]`` bytes to member ``i XOR 2^r``."""
        for r, n_bytes in enumerate(sizes):
            for i in range(len(members)):
                self._send(members[i], members[i ^ (1 << r)], n_bytes)


def floor_cycles(table: LinkTable, transfers: Transfers, setup_cycles: int, sync_latency_s: float,
                 dma_engines: int) -> int:
    """Cycles no timing of ``transfers`` on ``table`` goes below (see the module docstring)."""
    # the messages between two sockets share a route and its latency: each pair's walked once (a
    # ring's member sends its successor 2(p - 1) messages)
    pair_bytes: dict[tuple[int, int], int] = {}
    sends_by: dict[int, int] = {}
    for src, dst, n_bytes in transfers.sends:
        pair_bytes[src, dst] = pair_bytes.get((src, dst), 0) + n_bytes
        sends_by[src] = sends_by.get(src, 0) + 1
    paths = shared_entry(_PATHS, table.signature, lambda: _Paths(table), _TABLES)
    links = paths.busiest_link_cycles(table, pair_bytes)
    heads = paths.heads.setdefault(sync_latency_s, {})
    first_head: dict[int, int] = {}
    for pair in pair_bytes:
        head = heads.get(pair)
        if head is None:
            head = heads[pair] = ceil_cycles((table.latency_s(*pair) + sync_latency_s) * table.clock_hz)
        src = pair[0]
        first_head[src] = min(head, first_head.get(src, head))
    setups = max((math.ceil(sends / dma_engines) * setup_cycles + first_head[src] + 1
                  for src, sends in sends_by.items()), default=0)
    return max(math.floor(links), setups)


#: per table signature (the most recent few): its links' indices and rates, and routes as indices
_PATHS: OrderedDict[tuple, _Paths] = OrderedDict()
_TABLES = 8
#: link byte counts are summed in float64, exact below this (an integer sum of doubles is exact
#: while every partial sum is); above it, in Python integers
_EXACT_SUM = 2**53


class _Paths:
    """A table's links in a fixed order with their rates, each route asked for as their indices and
    each pair's head (latency and synchronisation) in cycles, so that a collective's bytes per link
    are one ``bincount`` over its pairs' routes (the direct algorithm's 4,032 routes of up to 32
    hops on a 64-socket ring were walked link by link, a fifth of the ring's main experiment)."""

    def __init__(self, table: LinkTable) -> None:
        order = sorted(table.bytes_per_cycle)
        self.index = {link: i for i, link in enumerate(order)}
        self.rate = np.array([table.bytes_per_cycle[link] for link in order], dtype=np.float64)
        self.routes: dict[tuple[int, int], np.ndarray] = {}
        #: by synchronisation latency: each pair's latency and synchronisation in whole cycles
        self.heads: dict[float, dict[tuple[int, int], int]] = {}

    def route(self, table: LinkTable, pair: tuple[int, int]) -> np.ndarray:
        """The indices of the links ``pair``'s route crosses."""
        got = self.routes.get(pair)
        if got is None:
            got = self.routes[pair] = np.array([self.index[link] for link in table.route(*pair)], dtype=np.intp)
        return got

    def busiest_link_cycles(self, table: LinkTable, pair_bytes: dict[tuple[int, int], int]) -> float:
        """The most cycles a link needs to move what ``pair_bytes`` routes over it (0 for none)."""
        routes = [self.route(table, pair) for pair in pair_bytes]
        hops = [len(r) for r in routes]
        if not pair_bytes or sum(n * h for n, h in zip(pair_bytes.values(), hops, strict=True)) >= _EXACT_SUM:
            link_bytes: dict[tuple[int, int], int] = {}
            for pair, n_bytes in pair_bytes.items():
                for link in table.route(*pair):
                    link_bytes[link] = link_bytes.get(link, 0) + n_bytes
            return max((n / table.bytes_per_cycle[link] for link, n in link_bytes.items()), default=0.0)
        weights = np.repeat(np.fromiter(pair_bytes.values(), dtype=np.float64, count=len(hops)), hops)
        moved = np.bincount(np.concatenate(routes), weights=weights, minlength=len(self.rate))
        # each link's bytes over its rate, as the integer divided by the float gives it
        return float((moved / self.rate).max())
