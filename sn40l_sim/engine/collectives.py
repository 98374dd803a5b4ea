"""Collectives built from P2P link transfers: ring, direct and tree algorithms, simulated on the links.

A collective among ``group`` sockets (sockets ``0 .. group-1`` of the node) is simulated in its
own SimPy environment on the directed links of the node (:class:`~sn40l_sim.engine.links.LinkTable`),
with every member's transfers, so links shared by several routes (multi-hop topologies, ring
orders that are not physical rings) share their bandwidth. A transfer is set up by one of the
sending socket's DMA engines (``p2p.dma_engines``; calibrated ``transfer_setup_s`` each, so the
set-ups of many small transfers queue), crosses its route (the links' latency), is noticed by the
receiver (calibrated ``sync_latency_s``: a flag written and seen, which is what makes each step of a
small collective latency-bound), and streams at its max-min fair share of the links it crosses.

Algorithms (``S`` = :attr:`Collective.bytes`, ``p`` = group, chunks are ``S/p`` split exactly):

- ``ring``: members in :meth:`LinkTable.ring_order`; each step every member sends one chunk to
  its successor once it has received the previous step's chunk. All-reduce is ``2(p-1)`` steps
  (reduce-scatter then all-gather), all-gather and reduce-scatter ``p-1``; all-to-all forwards
  ``p-k`` per-destination blocks at step ``k`` (store and forward).
- ``direct``: every member sends to every other member at once (all-reduce: a direct
  reduce-scatter, then, once a member holds its reduced chunk, a direct all-gather of it); member
  ``i`` sets up its messages to ``i+1, i+2, ...`` (mod ``p``) in turn, the pairwise exchange that
  avoids an incast (:mod:`.peer_order`).
- ``tree``: recursive doubling (halving for reduce-scatter) when the group is a power of two:
  ``log2(p)`` rounds, in round ``r`` each member exchanging with the member ``2^r`` away the
  whole vector (all-reduce), what it has gathered so far (all-gather) or half of what is left
  (reduce-scatter). Fewest steps, most bytes: the choice for small messages. Not for all-to-all.
  Each round is a rendezvous: a pair's messages go out once both members have reached the round
  (each round a send-receive with its partner, whose large messages wait for the receive to be
  posted, as MPI's rendezvous protocol does). A pair that finished a round early and started the
  next at once took a share of links that a slower pair still needed for the round before, so one
  faster link could slow the collective (a 16 MiB reduce-scatter on a 16-socket ring, 34.7% with
  one link doubled; ``tests/engine/test_faster_link.py``).

A socket's collectives use the same links, so the engine runs them one at a time; with idle links
a collective always costs the same, which is why :class:`CollectiveModel` memoises them. When no
link is ever crossed by two transfers at once (a full mesh, where each step sends one message per
link), every transfer runs alone and the model times the collective with
:class:`~sn40l_sim.engine.collective_schedule.Schedule` -- the same steps as integer arithmetic,
giving the event loop's cycles exactly -- and otherwise with the exact shortcuts of
:mod:`.fluid_quotient` and :mod:`.collective_doubling` where they apply, or the event loop.

Examples
--------
All-reduce of 16 MiB over 16 fully connected sockets, 50 GB/s links at 80%, 1 us set-up with one
DMA engine, 93.75 ns latency, no synchronisation latency: the direct algorithm needs 2 rounds, the
ring 30; for 16 KiB, the 4 rounds of the tree win.

>>> from sn40l_sim.ir import Collective
>>> table = LinkTable(16, [(a, b, 50e9, 93.75e-9) for a in range(16) for b in range(a + 1, 16)],
...                   clock_hz=1.6e9, efficiency=0.8)
>>> model = CollectiveModel(table, setup_s=1e-6)
>>> big = Collective("all_reduce", 16 * 2**20, 16)
>>> ring, direct = model.simulate(big, "ring"), model.simulate(big, "direct")
>>> ring.cycles > direct.cycles, model.run(big).algorithm
(True, 'direct')
>>> ring.link_bytes == direct.link_bytes == 2 * 15 * 16 * 2**20
True
>>> model.run(Collective("all_reduce", 16 * 1024, 16)).algorithm
'tree'
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Literal

import simpy

from sn40l_sim.engine.boundary import BoundaryModel
from sn40l_sim.engine.collective_doubling import doubling_in_step
from sn40l_sim.engine.collective_floor import Transfers, floor_cycles
from sn40l_sim.engine.collective_schedule import Schedule
from sn40l_sim.engine.collective_sizes import direct_sizes, ring_sizes, split_bytes, tree_sizes
from sn40l_sim.engine.fluid import FluidNetwork
from sn40l_sim.engine.fluid_quotient import direct_quotient
from sn40l_sim.engine.links import LinkTable, shared_entry
from sn40l_sim.engine.peer_order import peer_order
from sn40l_sim.errors import InfeasibleError, InputError
from sn40l_sim.hardware.spec import NodeSpec
from sn40l_sim.hardware.units._cycles import ceil_cycles
from sn40l_sim.ir import Collective

Algorithm = Literal["ring", "direct", "tree"]
ALGORITHMS: tuple[Algorithm, ...] = ("direct", "ring", "tree")
#: the order ``auto`` tries them in: the direct algorithm, dearest to simulate on shared links, last
AUTO_ORDER: tuple[Algorithm, ...] = ("tree", "ring", "direct")

#: collective costs shared by every model of equal links and calibration in the process (the step
#: timers of an experiment's points, a sweep's or a fit's repeated nodes), for this many of them:
#: the memos of costs, of floors, and of the schedule's (and doubling's) pairs and durations
_SHARED_MEMOS = 32
_shared: OrderedDict[tuple, tuple[dict[tuple, CollectiveResult], dict[tuple, int], dict, dict]] = OrderedDict()


@dataclass(frozen=True)
class CollectiveResult:
    """What one collective costs on idle links.

    Attributes
    ----------
    cycles : int
        From the first transfer's start to the last member holding its result.
    link_bytes : int
        Bytes summed over every directed link they crossed (a 2-hop transfer counts twice).
    sent_bytes : int
        Bytes socket 0 injected into the network.
    transfers : int
        Point-to-point transfers issued by all members.
    """

    kind: str
    algorithm: Algorithm
    n_bytes: int
    group: int
    cycles: int
    link_bytes: int
    sent_bytes: int
    transfers: int


class _Run:
    """One simulated collective: an environment, the link channels and the transfer helper."""

    def __init__(self, table: LinkTable, setup_s: float, sync_latency_s: float = 0.0, dma_engines: int = 1) -> None:
        self.env = simpy.Environment()
        self.net = FluidNetwork(self.env)
        self.table = table
        self.setup_cycles = ceil_cycles(setup_s * table.clock_hz)
        self.sync_latency_s = sync_latency_s
        self.dma_engines = dma_engines
        self.dma: dict[int, simpy.Resource] = {}
        self.channels = {link: self.net.channel(f"p2p {link[0]}->{link[1]}", bw)
                         for link, bw in sorted(table.bytes_per_cycle.items())}
        self.sent_by_0 = 0
        self.transfers = 0

    def send(self, src: int, dst: int, n_bytes: int):
        """Process: one point-to-point transfer (set-up and route latency, then the bytes)."""
        if n_bytes <= 0 or src == dst:
            return
        self.transfers += 1
        if src == 0:
            self.sent_by_0 += n_bytes
        if self.setup_cycles:
            engines = self.dma.setdefault(src, simpy.Resource(self.env, self.dma_engines))
            with engines.request() as engine:
                yield engine
                yield self.env.timeout(self.setup_cycles)
        head = (self.table.latency_s(src, dst) + self.sync_latency_s) * self.table.clock_hz
        yield self.env.timeout(ceil_cycles(head))
        path = tuple(self.channels[link] for link in self.table.route(src, dst))
        yield self.net.transfer(path, n_bytes)

    def ring(self, order: list[int], sizes: list[list[int]]) -> None:
        """Members of ``order`` send ``sizes[i][k]`` bytes to their successor at step ``k``."""
        p = len(order)
        steps = len(sizes[0])
        arrived = [[self.env.event() for _ in range(steps)] for _ in range(p)]

        def member(i: int):
            succ = (i + 1) % p
            for k in range(steps):
                if k:
                    yield arrived[i][k - 1]
                yield self.env.process(self.send(order[i], order[succ], sizes[i][k]))
                arrived[succ][k].succeed()

        for i in range(p):
            self.env.process(member(i))

    def direct(self, members: list[int], sizes: list[list[int]],
               then: list[list[int]] | None = None) -> None:
        """Member ``i`` sends ``sizes[i][j]`` to member ``j`` (all at once, set up in
        :func:`~sn40l_sim.engine.peer_order.peer_order`); with ``then``, each member sends
        ``then[j][k]`` to every ``k`` once all its incoming bytes have arrived."""
        p, dims = len(members), self.table.member_dims(members)
        received = [[] for _ in range(p)]

        def round_two(j: int):
            yield self.env.all_of(received[j])
            yield self.env.all_of([self.env.process(self.send(members[j], members[k], then[j][k]))
                                   for k in peer_order(j, p, dims)])

        for i in range(p):
            for j in peer_order(i, p, dims):   # shifted, not ascending: no incast (peer_order.py)
                received[j].append(self.env.process(self.send(members[i], members[j], sizes[i][j])))
        if then is not None:
            for j in range(p):
                self.env.process(round_two(j))

    def doubling(self, members: list[int], sizes: list[int]) -> None:
        """Recursive doubling: in round ``r`` member ``i`` sends ``sizes[r]`` bytes to member
        ``i XOR 2^r`` once that partner has reached round ``r`` too (a rendezvous), and goes on
        once it has received its partner's."""
        rounds = len(sizes)
        arrived = [[self.env.event() for _ in range(rounds)] for _ in members]
        entered = [[self.env.event() for _ in range(rounds)] for _ in members]

        def member(i: int):
            for r in range(rounds):
                partner = i ^ (1 << r)
                entered[i][r].succeed()
                yield entered[partner][r]   # rendezvous: the partner has reached this round
                yield self.env.process(self.send(members[i], members[partner], sizes[r]))
                arrived[partner][r].succeed()
                yield arrived[i][r]

        for i in range(len(members)):
            self.env.process(member(i))


class CollectiveModel:
    """Cost of collectives on a node's links, memoised per (kind, bytes, group, algorithm).

    Parameters
    ----------
    table : LinkTable
        The node's directed links.
    setup_s : float
        Set-up time of every point-to-point transfer on one of the sender's DMA engines
        (calibrated ``transfer_setup_s``).
    algorithm : {"auto", "ring", "direct", "tree"}
        ``auto`` simulates each that applies and keeps the fastest for each call.
    sync_latency_s : float
        Time for a receiver to notice an arrival (calibrated ``sync_latency_s``).
    dma_engines : int
        Transfers a socket sets up at once (``p2p.dma_engines``).
    boundary : BoundaryModel, optional
        The node's kernel-boundary costs (built by :meth:`from_node`, on the same links).
    schedule : bool
        Time collectives whose links are never shared without the event loop (same cycles);
        ``False`` always simulates (for tests that compare the two).
    quotient : bool
        Simulate a translation-symmetric direct collective on member 0's flows alone
        (:mod:`.fluid_quotient`), and time recursive doubling whose members keep in step round by
        round (:mod:`.collective_doubling`), same cycles; ``False`` always simulates every member.

    Attributes
    ----------
    scheduled, simulated : int
        Collectives this model timed by the schedule and otherwise (the event loop, the quotient
        network, doubling in step; one already costed by an equal model in the process is neither).
    """

    def __init__(self, table: LinkTable, setup_s: float, algorithm: str = "auto", *, sync_latency_s: float = 0.0,
                 dma_engines: int = 1, boundary: BoundaryModel | None = None, schedule: bool = True,
                 quotient: bool = True) -> None:
        if algorithm not in ("auto",) + ALGORITHMS:
            raise InputError(f"unknown collective algorithm {algorithm!r}; expected auto, ring, direct or tree",
                             field="collective_algorithm")
        self.table = table
        self.setup_s = setup_s
        self.sync_latency_s = sync_latency_s
        self.dma_engines = dma_engines
        self.algorithm = algorithm
        self.boundary = boundary
        self.schedule = schedule
        self.quotient = quotient
        self.scheduled = 0
        self.simulated = 0
        self._memo, self._floors, self._pairs, self._durations = shared_entry(
            _shared, (table.signature, setup_s, sync_latency_s, dma_engines, schedule, quotient),
            lambda: ({}, {}, {}, {}), _SHARED_MEMOS)

    @classmethod
    def from_node(cls, node: NodeSpec, algorithm: str = "auto") -> CollectiveModel:
        """The collective model of a :class:`~sn40l_sim.hardware.spec.NodeSpec`, with its boundary costs."""
        table = LinkTable.from_node(node)
        cal = node.socket.calibrated
        return cls(table, cal.transfer_setup_s, algorithm, sync_latency_s=cal.sync_latency_s,
                   dma_engines=node.socket.p2p.dma_engines, boundary=BoundaryModel.from_node(node, table))

    def run(self, coll: Collective) -> CollectiveResult:
        """The collective with the configured algorithm (the faster one for ``auto``).

        ``auto`` simulates the algorithms that apply in the order of :data:`AUTO_ORDER` and skips
        one whose floor (:mod:`.collective_floor`) exceeds the fastest so far: it could not be
        chosen, and on links it shares it is the dearest to simulate. Among members one hop apart
        (a full mesh) no transfer shares a link, so each algorithm is timed by the event-free
        schedule, which costs less than its floor (half as much on the main experiment's node),
        and none is skipped: one slower than the fastest so far is not chosen either way."""
        if self.algorithm != "auto":
            return self.simulate(coll, self.algorithm)
        key = (coll.kind, int(coll.bytes), coll.group, "auto")   # the choice, kept: a graph asks at every call
        if key not in self._memo:
            self._memo[key] = self._fastest(coll)
        return self._memo[key]

    def excess_cycles(self, coll: Collective, budget: int) -> int:
        """``max(0, run(coll).cycles - budget)``: by how many cycles the collective outlasts
        ``budget``. ``auto`` stops its search once an algorithm it would simulate anyway fits in
        ``budget`` (the fastest fits then too): an engine window's last share usually ends long
        before its collective does, and the share's odd byte count makes the direct algorithm
        asymmetric, dear to simulate on shared links (:mod:`.fluid_quotient`)."""
        key = (coll.kind, int(coll.bytes), coll.group, "auto")
        if self.algorithm != "auto" or key in self._memo:
            return max(0, self.run(coll).cycles - budget)
        best = self._fastest(coll, budget)
        if best.cycles <= budget:
            return 0
        self._memo[key] = best   # the search ran to its end: this is the fastest
        return best.cycles - budget

    def _fastest(self, coll: Collective, enough: int | None = None) -> CollectiveResult:
        """The fastest algorithm's result, or, given ``enough``, the first one found within it."""
        best: CollectiveResult | None = None
        floored = not (self.schedule and self._one_hop(coll.group))
        for algorithm in AUTO_ORDER:
            if not self.applies(coll, algorithm):
                continue
            if best is not None and floored and self.floor(coll, algorithm) > best.cycles:
                continue
            result = self.simulate(coll, algorithm)
            if best is None or (result.cycles, result.algorithm) < (best.cycles, best.algorithm):
                best = result
            if enough is not None and best.cycles <= enough:
                break
        assert best is not None   # the ring and direct algorithms apply to every collective
        return best

    def floor(self, coll: Collective, algorithm: Algorithm) -> int:
        """Cycles ``algorithm`` cannot run ``coll`` below (:func:`.collective_floor.floor_cycles`)."""
        if coll.group < 2 or coll.bytes <= 0:
            return 0
        key = (coll.kind, int(coll.bytes), coll.group, algorithm)
        if key not in self._floors:
            sent = Transfers()
            self._issue(sent, coll.kind, int(coll.bytes), coll.group, algorithm)
            self._floors[key] = floor_cycles(self.table, sent, ceil_cycles(self.setup_s * self.table.clock_hz),
                                             self.sync_latency_s, self.dma_engines)
        return self._floors[key]

    def _one_hop(self, group: int) -> bool:
        """Whether the first ``group`` sockets, the members of every algorithm, are each one link
        from every other (memoised with the schedule's pairs)."""
        key = ("one hop", group)
        if key not in self._pairs:
            route = self.table.route
            self._pairs[key] = group <= self.table.sockets and all(
                len(route(a, b)) == 1 for a in range(group) for b in range(group) if a != b)
        return self._pairs[key]

    @staticmethod
    def applies(coll: Collective, algorithm: Algorithm) -> bool:
        """Whether ``algorithm`` can run ``coll`` (the tree needs a power-of-two group and no
        all-to-all)."""
        if algorithm != "tree":
            return True
        p = coll.group
        return coll.kind != "all_to_all" and p > 1 and p & (p - 1) == 0

    def simulate(self, coll: Collective, algorithm: Algorithm) -> CollectiveResult:
        """Simulate ``coll`` with ``algorithm`` on idle links (memoised)."""
        key = (coll.kind, int(coll.bytes), coll.group, algorithm)
        if key not in self._memo:
            self._memo[key] = self._simulate(coll.kind, int(coll.bytes), coll.group, algorithm)
        return self._memo[key]

    def _simulate(self, kind: str, n_bytes: int, group: int, algorithm: Algorithm) -> CollectiveResult:
        if group > self.table.sockets:
            raise InfeasibleError(f"a {kind} among {group} sockets needs {group} sockets, the node has "
                                  f"{self.table.sockets}", field="group")
        if group < 2 or n_bytes <= 0:
            return CollectiveResult(kind, algorithm, n_bytes, group, 0, 0, 0, 0)
        setup, members = ceil_cycles(self.setup_s * self.table.clock_hz), list(range(group))
        if self.schedule:
            plan = Schedule(self.table, setup, self.sync_latency_s, self.dma_engines, self._pairs, self._durations)
            self._issue(plan, kind, n_bytes, group, algorithm)
            timed = plan.result()
            if timed is not None:
                self.scheduled += 1
                return CollectiveResult(kind, algorithm, n_bytes, group, *timed)
        self.simulated += 1
        timed = None
        if self.quotient and algorithm == "direct":
            timed = direct_quotient(self.table, setup, self.sync_latency_s, self.dma_engines, members,
                                    *direct_sizes(kind, split_bytes(n_bytes, group), n_bytes, group))
        elif self.quotient and algorithm == "tree":
            timed = doubling_in_step(self.table, setup, self.sync_latency_s, members, tree_sizes(kind, n_bytes, group),
                                     self._pairs)
        if timed is not None:
            return CollectiveResult(kind, algorithm, n_bytes, group, *timed)
        run = _Run(self.table, self.setup_s, self.sync_latency_s, self.dma_engines)
        self._issue(run, kind, n_bytes, group, algorithm)
        run.env.run()
        return CollectiveResult(kind, algorithm, n_bytes, group, int(run.env.now),
                                sum(ch.bytes_moved for ch in run.channels.values()),
                                run.sent_by_0, run.transfers)

    def _issue(self, run: _Run | Schedule | Transfers, kind: str, n_bytes: int, p: int, algorithm: Algorithm) -> None:
        """Every member's transfers of the collective, on the event loop or on the schedule."""
        members = list(range(p)) if algorithm != "ring" else self.table.ring_order(range(p))
        chunk = split_bytes(n_bytes, p)
        if algorithm == "ring":
            run.ring(members, ring_sizes(kind, chunk, n_bytes, p))
        elif algorithm == "tree":
            run.doubling(members, tree_sizes(kind, n_bytes, p))
        else:
            sizes, then = direct_sizes(kind, chunk, n_bytes, p)
            run.direct(members, sizes, then)

