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
    :class:`~sn40l_sim.engine.collective_schedule.Schedule` take, and keeps the source, destination
    and bytes of every message that moves bytes (an empty one is never set up), as arrays: a
    64-socket ring or direct collective sends 8,064 messages, and a Python tuple for each was most
    of the floor's cost.
    """

    def __init__(self) -> None:
        self._parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def _add(self, src: np.ndarray, dst: np.ndarray, sizes: object) -> None:
        try:
            n_bytes = np.asarray(sizes, dtype=np.int64).ravel()
        except OverflowError:   # beyond 2^63 bytes: Python integers (floor_cycles sums them as such)
            n_bytes = np.asarray(sizes, dtype=object).ravel()
        keep = (n_bytes > 0) & (src != dst)
        self._parts.append((src[keep], dst[keep], n_bytes[keep]))

    def ring(self, order: list[int], sizes: list[list[int]]) -> None:
        """Each member of ``order`` sends ``sizes[i][k]`` bytes to its successor at step ``k``."""
        steps = len(sizes[0]) if sizes else 0
        members = np.asarray(order, dtype=np.int64)
        self._add(np.repeat(members, steps), np.repeat(np.roll(members, -1), steps), sizes)

    def direct(self, members: list[int], sizes: list[list[int]], then: list[list[int]] | None = None) -> None:
        """Member ``i`` sends ``sizes[i][j]`` to member ``j``, then (with ``then``) ``then[j][k]``
        from member ``j`` to member ``k``."""
        p = len(members)
        who = np.asarray(members, dtype=np.int64)
        for rows in (sizes, then or []):
            if len(rows):
                self._add(np.repeat(who, p), np.tile(who, p), rows)

    def doubling(self, members: list[int], sizes: list[int]) -> None:
        """In round ``r`` member ``i`` sends ``sizes[r]`` bytes to member ``i XOR 2^r``."""
        p = len(members)
        who, index = np.asarray(members, dtype=np.int64), np.arange(p)
        for r, n_bytes in enumerate(sizes):
            self._add(who, who[index ^ (1 << r)], [n_bytes] * p)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Sources, destinations and bytes of every message, in the order they were issued."""
        if not self._parts:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, empty
        src, dst, n_bytes = (np.concatenate(column) for column in zip(*self._parts, strict=True))
        return src, dst, n_bytes

    @property
    def sends(self) -> list[tuple[int, int, int]]:
        """``(source, destination, bytes)`` of every message, in the order they were issued."""
        return [(int(s), int(d), int(n)) for s, d, n in zip(*self.arrays(), strict=True)]


def floor_cycles(table: LinkTable, transfers: Transfers, setup_cycles: int, sync_latency_s: float,
                 dma_engines: int) -> int:
    """Cycles no timing of ``transfers`` on ``table`` goes below (see the module docstring)."""
    src, dst, n_bytes = transfers.arrays()
    if not len(src):
        return 0
    p = table.sockets
    # the messages between two sockets share a route and its latency: each pair's walked once (a
    # ring's member sends its successor 2(p - 1) messages); pairs in ascending order, by source
    key = src * p + dst
    order = np.argsort(key, kind="stable")
    key = key[order]
    first = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    pairs = key[first]
    paths = shared_entry(_PATHS, table.signature, lambda: _Paths(table), _TABLES)
    if n_bytes.dtype == object or float(n_bytes.sum(dtype=np.float64)) >= _EXACT_SUM / 2:
        # (half the bound: the float total only estimates the integer one)
        ends = np.r_[first[1:], len(key)].tolist()
        by_pair = n_bytes[order].tolist()
        links = paths.busiest_link_cycles(table, {divmod(k, p): sum(by_pair[a:b]) for k, a, b
                                                  in zip(pairs.tolist(), first.tolist(), ends, strict=True)})
    else:
        links = paths.busiest_pairs_cycles(table, pairs, np.add.reduceat(n_bytes[order], first))
    heads = paths.head_cycles(table, sync_latency_s, pairs)
    # each source's pairs are consecutive: its smallest head, and its number of messages
    sources, first_of = np.unique(pairs // p, return_index=True)
    first_head = np.minimum.reduceat(heads, first_of)
    sends = np.bincount(src, minlength=p)[sources]
    setups = int(((sends + dma_engines - 1) // dma_engines * setup_cycles + first_head + 1).max())
    return max(math.floor(links), setups)


#: per table signature (the most recent few): its links' indices and rates, and routes as indices
_PATHS: OrderedDict[tuple, _Paths] = OrderedDict()
_TABLES = 8
#: link byte counts are summed in float64, exact while the collective's bytes stay below this (an
#: integer sum of doubles is exact while every partial sum is, and a link carries each pair's
#: bytes at most once); from half of it on, in Python integers
_EXACT_SUM = 2**53
#: the concatenated routes of this many recent sets of pairs (a direct collective's 4,032 pairs
#: recur at every size)
_ROUTE_SETS = 8


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
        #: by synchronisation latency: each pair's (``src * sockets + dst``) latency and
        #: synchronisation in whole cycles, -1 until asked for
        self.heads: dict[float, np.ndarray] = {}
        self.route_sets: OrderedDict[bytes, tuple[np.ndarray, np.ndarray]] = OrderedDict()

    def route(self, table: LinkTable, pair: tuple[int, int]) -> np.ndarray:
        """The indices of the links ``pair``'s route crosses."""
        got = self.routes.get(pair)
        if got is None:
            got = self.routes[pair] = np.array([self.index[link] for link in table.route(*pair)], dtype=np.intp)
        return got

    def head_cycles(self, table: LinkTable, sync_latency_s: float, pairs: np.ndarray) -> np.ndarray:
        """Each pair's route latency and synchronisation in whole cycles (pairs as ``src * sockets + dst``)."""
        p = table.sockets
        heads = self.heads.get(sync_latency_s)
        if heads is None:
            heads = self.heads[sync_latency_s] = np.full(p * p, -1, dtype=np.int64)
        got = heads[pairs]
        for key in pairs[got < 0].tolist():
            heads[key] = ceil_cycles((table.latency_s(*divmod(key, p)) + sync_latency_s) * table.clock_hz)
        return heads[pairs]

    def busiest_pairs_cycles(self, table: LinkTable, pairs: np.ndarray, pair_bytes: np.ndarray) -> float:
        """:meth:`busiest_link_cycles` of ``pair_bytes`` (int64, summing below 2^53) over ``pairs``
        (``src * sockets + dst``, ascending)."""
        tag = pairs.tobytes()
        got = self.route_sets.get(tag)
        if got is None:
            p = table.sockets
            routes = [self.route(table, divmod(key, p)) for key in pairs.tolist()]
            got = (np.concatenate(routes), np.array([len(r) for r in routes], dtype=np.intp))
            shared_entry(self.route_sets, tag, lambda: got, _ROUTE_SETS)
        else:
            self.route_sets.move_to_end(tag)
        links, hops = got
        moved = np.bincount(links, weights=np.repeat(pair_bytes.astype(np.float64), hops), minlength=len(self.rate))
        # each link's bytes over its rate, as the integer divided by the float gives it; every
        # partial sum of the integers is below 2^53, so exact in doubles
        return float((moved / self.rate).max())

    def busiest_link_cycles(self, table: LinkTable, pair_bytes: dict[tuple[int, int], int]) -> float:
        """The most cycles a link needs to move what ``pair_bytes`` routes over it, summed in
        Python integers (sums from 2^53 bytes on)."""
        link_bytes: dict[tuple[int, int], int] = {}
        for pair, n_bytes in pair_bytes.items():
            for link in table.route(*pair):
                link_bytes[link] = link_bytes.get(link, 0) + n_bytes
        return max((n / table.bytes_per_cycle[link] for link, n in link_bytes.items()), default=0.0)
