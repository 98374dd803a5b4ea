"""A collective on links it never shares, timed without an event loop: a schedule of transfers.

:class:`~sn40l_sim.engine.collectives.CollectiveModel` simulates a collective as SimPy processes
over a :class:`~sn40l_sim.engine.fluid.FluidNetwork` of the node's links. When no two transfers
cross the same directed link at the same time -- the common case on a full mesh, where every pair
of members has its own link and each algorithm sends one message per link per step -- every
transfer runs alone at its link's rate, and the simulation reduces to arithmetic on integer cycles:

- a transfer is set up on one of its sender's DMA engines, first come first served
  (``grant = max(request, earliest free engine)``, the engine busy for the set-up),
- then waits for its route's latency and the receiver's synchronisation (``head`` cycles),
- then streams for :func:`~sn40l_sim.engine.fluid.lone_flow_cycles` of its bytes at its route's
  narrowest link;
- a member's next step starts when both its own send and the message it waits for are done.

:class:`Schedule` mirrors the processes of the event-driven run (``ring``, ``direct``,
``doubling``) step for step, in the order the engine grants DMA engines, and records every
transfer's streaming interval on every link it crosses. If two intervals on one link overlap, or a
transfer's duration lies within float noise of a whole cycle, the schedule is *not* the event
loop's answer (the links would be shared, or the loop's rounding is not knowable in advance):
:meth:`Schedule.result` then says so and the caller simulates. Otherwise the cycles, bytes and
transfer counts are exactly the event loop's: the time of the last completion, with no float
arithmetic beyond each transfer's own duration. On a full mesh with one DMA engine per socket the
direct and ring algorithms are computed as numpy arrays over the members (a step, or a round, at a
time). This takes a 64-socket collective from about a second of SimPy events to milliseconds
(``benchmarks/bench_sockets.py``).

Examples
--------
A ring all-gather of 1 MiB among 4 sockets of a full mesh: each of the 3 steps is one set-up
(1,600 cycles), the route's latency (160) and one 262,144-byte chunk at 25 bytes per cycle
(10,486 cycles):

>>> from sn40l_sim.engine.links import LinkTable
>>> table = LinkTable(4, [(a, b, 50e9, 1e-7) for a in range(4) for b in range(a + 1, 4)],
...                   clock_hz=1.6e9, efficiency=0.8)
>>> plan = Schedule(table, setup_cycles=1600, sync_latency_s=0.0, dma_engines=1)
>>> plan.ring([0, 1, 2, 3], [[2**18] * 3 for _ in range(4)])
>>> plan.result() == (3 * (1600 + 160 + 10486), 3 * 4 * 2**18, 3 * 2**18, 12)
True
"""
from __future__ import annotations

import heapq
from collections import defaultdict

import numpy as np

from sn40l_sim.engine.fluid import lone_flow_cycles, lone_flow_cycles_array
from sn40l_sim.engine.links import Link, LinkTable
from sn40l_sim.engine.peer_order import peer_order, set_up_rank
from sn40l_sim.hardware.units._cycles import ceil_cycles


class Schedule:
    """Times of every transfer of one collective on links that are never shared.

    Parameters
    ----------
    table : LinkTable
        The node's directed links and routes.
    setup_cycles : int
        DMA set-up of each transfer (0: no set-up and no engine queue).
    sync_latency_s : float
        The receiver's synchronisation latency, added to the route's latency before rounding up
        to whole cycles, as the event-driven run does.
    dma_engines : int
        Transfers a socket sets up at once.
    pairs, durations : dict, optional
        Memos of each pair's head cycles, rate and links (and of a member list's arrays of them),
        and of each ``(bytes, rate)``'s cycles, to share between the collectives of one model
        (same table and latencies).
    """

    def __init__(self, table: LinkTable, setup_cycles: int, sync_latency_s: float, dma_engines: int,
                 pairs: dict | None = None, durations: dict | None = None) -> None:
        self.table = table
        self.setup_cycles = setup_cycles
        self.sync_latency_s = sync_latency_s
        self.dma_engines = dma_engines
        self.end = 0
        self.link_bytes = 0
        self.sent_by_0 = 0
        self.transfers = 0
        self.exact = True
        self._overlap = False
        self._engines: dict[int, list[int]] = {}
        self._busy: dict[Link, list[tuple[int, int]]] = defaultdict(list)
        self._pair: dict[tuple, tuple | None] = {} if pairs is None else pairs
        self._duration: dict[tuple[int, float], int | None] = {} if durations is None else durations

    def _route(self, src: int, dst: int) -> tuple[int, float, tuple[Link, ...]]:
        """Head cycles, rate and links from ``src`` to ``dst`` (memoised per pair)."""
        pair = (src, dst)
        if pair not in self._pair:
            table = self.table
            links = table.route(src, dst)
            head = ceil_cycles((table.latency_s(src, dst) + self.sync_latency_s) * table.clock_hz)
            rate = min(table.bytes_per_cycle[link] for link in links)
            self._pair[pair] = (head, rate, links)
        return self._pair[pair]

    def send(self, src: int, dst: int, n_bytes: int, ready: int) -> int:
        """One point-to-point transfer requested at cycle ``ready``; the cycle it completes."""
        if n_bytes <= 0 or src == dst or self._overlap:
            # once two transfers are known to share a link the result is discarded (the caller
            # simulates), and the rest of the walk need not be timed
            return ready
        self.transfers += 1
        if src == 0:
            self.sent_by_0 += n_bytes
        start = ready
        if self.setup_cycles:
            engines = self._engines.get(src)
            if engines is None:
                engines = self._engines[src] = [0] * self.dma_engines
            # first come first served with equal set-up times: the earliest free engine
            start = max(ready, heapq.heappop(engines)) + self.setup_cycles
            heapq.heappush(engines, start)
        route = self._pair.get((src, dst))
        if route is None:
            route = self._route(src, dst)
        head, rate, links = route
        start += head
        cycles = self._duration.get((n_bytes, rate), 0)
        if not cycles:
            cycles = self._duration[(n_bytes, rate)] = lone_flow_cycles(n_bytes, rate)
            if cycles is None:
                self.exact = False   # the result will be discarded; any duration lets the walk go on
                cycles = 1
        finish = start + cycles
        busy = self._busy
        for link in links:
            on = busy[link]
            # the link's latest transfer still streaming: contended (the multi-hop routes of a
            # direct collective on a ring, found at once rather than after its thousands of sends)
            if on and start < on[-1][1] and on[-1][0] < finish:
                self._overlap = True
            on.append((start, finish))
        self.link_bytes += n_bytes * len(links)
        if finish > self.end:
            self.end = finish
        return finish

    def ring(self, order: list[int], sizes: list[list[int]]) -> None:
        """Members of ``order`` send ``sizes[i][k]`` bytes to their successor at step ``k`` once they
        have received the previous step's message (as ``_Run.ring``)."""
        if self._ring_arrays(order, sizes):
            return
        p = len(order)
        done = [0] * p            # when member i's own previous send completed
        arrived = [0] * p         # when member i received the previous step's message
        for k in range(len(sizes[0])):
            finished = [self.send(order[i], order[(i + 1) % p], sizes[i][k],
                                  max(done[i], arrived[i]) if k else 0) for i in range(p)]
            done = finished
            arrived = [finished[(i - 1) % p] for i in range(p)]

    def _ring_arrays(self, order: list[int], sizes: list[list[int]]) -> bool:
        """:meth:`ring` as array arithmetic, one step at a time for all members, when each member's
        successor is a neighbour (False if not). A member has one transfer at a time, so its DMA
        engine is always free when it asks, and each member's link carries only its own sends."""
        p = len(order)
        if self._busy or self.transfers:
            return False
        head = np.zeros(p, dtype=np.int64)
        rate = np.ones(p)
        for i in range(p):
            h, r, links = self._pair.get((order[i], order[(i + 1) % p])) or self._route(order[i], order[(i + 1) % p])
            if len(links) != 1:
                return False
            head[i], rate[i] = h, r
        n_bytes = np.asarray(sizes, dtype=np.int64)          # member x step
        sends = n_bytes > 0
        cycles, known = lone_flow_cycles_array(n_bytes, rate[:, None])
        if not known[sends].all():
            self.exact = False
        # each step's time from ready to done, per member (0 without a send): set-up, head, bytes
        took = np.where(sends, head[:, None] + self.setup_cycles + cycles, 0).T.tolist()
        # a step's finishes never fall below the previous step's (a member is ready no earlier
        # than its own last finish), so the last step's latest finish is the collective's end;
        # Python integers, since a step is a handful of operations on p numbers
        ready = [0] * p
        finish = ready
        for step in took:
            finish = [r + t for r, t in zip(ready, step, strict=True)]
            # own send done, predecessor's arrived
            ready = [max(a, b) for a, b in zip(finish, finish[-1:] + finish[:-1], strict=True)]
        self.end = max(self.end, max(finish))
        self.transfers += int(sends.sum())
        self.link_bytes += int(n_bytes[sends].sum())
        if 0 in order:
            self.sent_by_0 += int(n_bytes[order.index(0)][sends[order.index(0)]].sum())
        return True

    def direct(self, members: list[int], sizes: list[list[int]], then: list[list[int]] | None = None) -> None:
        """Member ``i`` sends ``sizes[i][j]`` to member ``j`` at once; with ``then``, each member
        sends ``then[j][k]`` to every ``k`` once all its incoming bytes have arrived (as ``_Run.direct``:
        the first round's set-ups are all queued before any of the second's)."""
        if self._direct_arrays(members, sizes, then):
            return
        p, dims = len(members), self.table.member_dims(members)
        received, peers = [0] * p, [peer_order(i, p, dims) for i in range(p)]
        # every member's k-th transfer, then every member's (k+1)-th (each member's still in its
        # own order, which is all its engines see): transfers that start together are walked one
        # after the other, so two crossing one link are found at once, not after thousands of sends
        for k in range(p - 1):
            if self._overlap:
                return   # the result is discarded: the rest need not be walked
            for i in range(p):
                j = peers[i][k]
                received[j] = max(received[j], self.send(members[i], members[j], sizes[i][j], 0))
        for k in range(p - 1 if then is not None else 0):
            if self._overlap:
                return
            for j in range(p):
                self.send(members[j], members[peers[j][k]], then[j][peers[j][k]], received[j])

    def _direct_arrays(self, members: list[int], sizes: list[list[int]], then: list[list[int]] | None) -> bool:
        """:meth:`direct` as array arithmetic when every pair of members has a link of its own and
        each socket has one DMA engine (the full mesh of an SN40L node); False if not.

        A sender's transfers of a round are set up in turn (:func:`.peer_order.peer_order`), one
        ``setup`` apart: the ``m``-th one with bytes starts streaming at ``(m + 1) * setup + head``. The second round's queue starts
        when the member has received everything and its first round's set-ups are done. Each link
        carries only its pair's two transfers, which must not overlap.
        """
        p = len(members)
        if self.dma_engines != 1 or self._busy or self.transfers:
            return False
        key = ("direct", tuple(members))      # the pairs' arrays, built once per model
        if key not in self._pair:
            head = np.zeros((p, p), dtype=np.int64)
            rate = np.ones((p, p))
            one_hop = True
            for i, src in enumerate(members):
                for j, dst in enumerate(members):
                    if i != j:
                        h, r, links = self._pair.get((src, dst)) or self._route(src, dst)
                        one_hop = one_hop and len(links) == 1
                        head[i, j], rate[i, j] = h, r
            self._pair[key] = (head, rate) if one_hop else None
        if self._pair[key] is None:
            return False
        head, rate = self._pair[key]
        setup = self.setup_cycles
        off_diagonal = ~np.eye(p, dtype=bool)
        rank = set_up_rank(p, self.table.member_dims(members))
        by_rank = np.argsort(rank, axis=1)       # row i: its members in set-up order (i itself first)
        rounds = [np.asarray(sizes, dtype=np.int64)] + ([np.asarray(then, dtype=np.int64)] if then is not None else [])
        queued = np.zeros(p, dtype=np.int64)     # when each member's set-ups of earlier rounds are done
        ready = np.zeros(p, dtype=np.int64)      # when each member may start this round
        intervals = []
        for n_bytes in rounds:
            sends = (n_bytes > 0) & off_diagonal
            # 1 for a member's first transfer with bytes, ... (counted in set-up order)
            order = np.take_along_axis(np.cumsum(np.take_along_axis(sends, by_rank, axis=1), axis=1), rank, axis=1)
            begin = np.maximum(ready, queued)[:, None] if setup else ready[:, None]
            start = begin + order * setup + head
            cycles, known = lone_flow_cycles_array(n_bytes, rate)
            if not known[sends].all():
                self.exact = False
            finish = np.where(sends, start + cycles, ready[:, None])
            intervals.append((sends, start, finish))
            queued = begin[:, 0] + sends.sum(axis=1) * setup
            ready = finish.max(axis=0)           # a receiver has everything of this round
            self.transfers += int(sends.sum())
            self.link_bytes += int(n_bytes[sends].sum())
            if 0 in members:
                self.sent_by_0 += int(n_bytes[members.index(0)][sends[members.index(0)]].sum())
            self.end = max(self.end, int(finish.max()))
        if len(intervals) == 2:
            (first, start1, finish1), (second, start2, finish2) = intervals
            both = first & second
            if ((start2 < finish1) & (start1 < finish2) & both).any():
                self._overlap = True
        return True

    def doubling(self, members: list[int], sizes: list[int]) -> None:
        """Recursive doubling: in round ``r`` member ``i`` sends ``sizes[r]`` to member ``i XOR 2^r``
        once both are ready for the round, and goes on once it has received its partner's (as
        ``_Run.doubling``)."""
        p = len(members)
        ready = [0] * p
        for r, n_bytes in enumerate(sizes):
            finished = [self.send(members[i], members[i ^ (1 << r)], n_bytes, max(ready[i], ready[i ^ (1 << r)]))
                        for i in range(p)]
            ready = [max(finished[i], finished[i ^ (1 << r)]) for i in range(p)]

    def contended(self) -> bool:
        """Whether two transfers stream over one link at once (their half-open intervals overlap)."""
        if self._overlap:
            return True
        for intervals in self._busy.values():
            if len(intervals) > 1:
                intervals.sort()
                last_end = intervals[0][1]
                for start, end in intervals[1:]:
                    if start < last_end:
                        return True
                    last_end = max(last_end, end)
        return False

    def result(self) -> tuple[int, int, int, int] | None:
        """``(cycles, link_bytes, sent_by_0, transfers)`` as the event-driven run would count them,
        or ``None`` when the schedule cannot vouch for them (shared links, or a duration at a
        rounding boundary)."""
        if not self.exact or self.contended():
            return None
        return self.end, self.link_bytes, self.sent_by_0, self.transfers
