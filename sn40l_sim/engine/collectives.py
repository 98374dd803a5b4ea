"""Collectives built from P2P link transfers: ring and direct algorithms, simulated on the links.

A collective among ``group`` sockets (sockets ``0 .. group-1`` of the node) is simulated in its
own SimPy environment on the directed links of the node (:class:`~sn40l_sim.engine.links.LinkTable`),
with every member's transfers, so links shared by several routes (multi-hop topologies, ring
orders that are not physical rings) share their bandwidth. Each transfer pays a set-up time
(calibrated ``transfer_setup_s``) and the latency of its route once, then streams at its
max-min fair share of the links it crosses.

Algorithms (``S`` = :attr:`Collective.bytes`, ``p`` = group, chunks are ``S/p`` split exactly):

- ``ring``: members in :meth:`LinkTable.ring_order`; each step every member sends one chunk to
  its successor once it has received the previous step's chunk. All-reduce is ``2(p-1)`` steps
  (reduce-scatter then all-gather), all-gather and reduce-scatter ``p-1``; all-to-all forwards
  ``p-k`` per-destination blocks at step ``k`` (store and forward).
- ``direct``: every member sends to every other member at once (all-reduce: a direct
  reduce-scatter, then, once a member holds its reduced chunk, a direct all-gather of it).

A socket's collectives use the same links, so the engine runs them one at a time; with idle links
a collective always costs the same, which is why :class:`CollectiveModel` memoises them.

Examples
--------
All-reduce of 16 MiB over 16 fully connected sockets, 50 GB/s links at 80%, 1 us set-up, 93.75 ns
latency (the default SN40L node): the direct algorithm needs 2 rounds, the ring 30.

>>> from sn40l_sim.ir import Collective
>>> table = LinkTable(16, [(a, b, 50e9, 93.75e-9) for a in range(16) for b in range(a + 1, 16)],
...                   clock_hz=1.6e9, efficiency=0.8)
>>> model = CollectiveModel(table, setup_s=1e-6)
>>> ring = model.simulate(Collective("all_reduce", 16 * 2**20, 16), "ring")
>>> direct = model.simulate(Collective("all_reduce", 16 * 2**20, 16), "direct")
>>> ring.cycles, direct.cycles, model.run(Collective("all_reduce", 16 * 2**20, 16)).algorithm
(1310820, 87388, 'direct')
>>> ring.link_bytes == direct.link_bytes == 2 * 15 * 16 * 2**20
True
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import simpy

from sn40l_sim.engine.fluid import FluidNetwork
from sn40l_sim.engine.links import LinkTable
from sn40l_sim.errors import InfeasibleError, InputError
from sn40l_sim.ir import Collective

Algorithm = Literal["ring", "direct"]
ALGORITHMS: tuple[Algorithm, ...] = ("direct", "ring")


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


def split_bytes(total: int, parts: int) -> list[int]:
    """``total`` bytes in ``parts`` integer chunks that differ by at most one byte.

    >>> split_bytes(10, 4), sum(split_bytes(10, 4))
    ([2, 3, 2, 3], 10)
    """
    return [total * (j + 1) // parts - total * j // parts for j in range(parts)]


class _Run:
    """One simulated collective: an environment, the link channels and the transfer helper."""

    def __init__(self, table: LinkTable, setup_s: float) -> None:
        self.env = simpy.Environment()
        self.net = FluidNetwork(self.env)
        self.table = table
        self.setup_s = setup_s
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
        head = (self.setup_s + self.table.latency_s(src, dst)) * self.table.clock_hz
        yield self.env.timeout(max(0, math.ceil(head - 1e-6)))   # whole cycles, float noise forgiven
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
        """Member ``i`` sends ``sizes[i][j]`` to member ``j`` (all at once); with ``then``, each
        member sends ``then[j][k]`` to every ``k`` once all its incoming bytes have arrived."""
        p = len(members)
        received = [[] for _ in range(p)]

        def round_two(j: int):
            yield self.env.all_of(received[j])
            yield self.env.all_of([self.env.process(self.send(members[j], members[k], then[j][k]))
                                   for k in range(p) if k != j])

        for i in range(p):
            for j in range(p):
                if i != j:
                    received[j].append(self.env.process(self.send(members[i], members[j], sizes[i][j])))
        if then is not None:
            for j in range(p):
                self.env.process(round_two(j))


class CollectiveModel:
    """Cost of collectives on a node's links, memoised per (kind, bytes, group, algorithm).

    Parameters
    ----------
    table : LinkTable
        The node's directed links.
    setup_s : float
        Set-up time paid by every point-to-point transfer (calibrated ``transfer_setup_s``).
    algorithm : {"auto", "ring", "direct"}
        ``auto`` simulates both and keeps the faster for each call.
    """

    def __init__(self, table: LinkTable, setup_s: float, algorithm: str = "auto") -> None:
        if algorithm not in ("auto",) + ALGORITHMS:
            raise InputError(f"unknown collective algorithm {algorithm!r}; expected auto, ring or direct",
                             field="collective_algorithm")
        self.table = table
        self.setup_s = setup_s
        self.algorithm = algorithm
        self._memo: dict[tuple, CollectiveResult] = {}

    @classmethod
    def from_node(cls, node, algorithm: str = "auto") -> CollectiveModel:
        """The collective model of a :class:`~sn40l_sim.hardware.spec.NodeSpec`."""
        return cls(LinkTable.from_node(node), node.socket.calibrated.transfer_setup_s, algorithm)

    def run(self, coll: Collective) -> CollectiveResult:
        """The collective with the configured algorithm (the faster one for ``auto``)."""
        choices = ALGORITHMS if self.algorithm == "auto" else (self.algorithm,)
        results = [self.simulate(coll, a) for a in choices]
        return min(results, key=lambda r: (r.cycles, r.algorithm))

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
        run = _Run(self.table, self.setup_s)
        p = group
        if p > 1 and n_bytes > 0:
            members = list(range(p)) if algorithm == "direct" else self.table.ring_order(range(p))
            chunk = split_bytes(n_bytes, p)
            if algorithm == "ring":
                run.ring(members, _ring_sizes(kind, chunk, n_bytes, p))
            else:
                sizes, then = _direct_sizes(kind, chunk, n_bytes, p)
                run.direct(members, sizes, then)
            run.env.run()
        return CollectiveResult(kind, algorithm, n_bytes, group, int(run.env.now),
                                sum(ch.bytes_moved for ch in run.channels.values()),
                                run.sent_by_0, run.transfers)


def _ring_sizes(kind: str, chunk: list[int], n_bytes: int, p: int) -> list[list[int]]:
    """Bytes member ``i`` (in ring position) sends at each step."""
    if kind == "all_to_all":
        block = split_bytes(n_bytes, p - 1)   # per-destination blocks of what a member sends
        # at step k a member forwards the blocks still travelling: those for distances k+1 .. p-1
        return [[sum(block[k:]) for k in range(p - 1)] for _ in range(p)]
    # reduce-scatter step k: member i sends chunk (i - k) mod p; all-gather continues the rotation
    steps = {"all_reduce": 2 * (p - 1), "reduce_scatter": p - 1, "all_gather": p - 1}[kind]
    return [[chunk[(i - k) % p] for k in range(steps)] for i in range(p)]


def _direct_sizes(kind: str, chunk: list[int], n_bytes: int, p: int):
    """Bytes member ``i`` sends to member ``j`` in the first round, and in the second (or None)."""
    if kind == "all_to_all":
        block = split_bytes(n_bytes, p - 1)
        return [[0 if i == j else block[(j - i) % p - 1] for j in range(p)] for i in range(p)], None
    scatter = [[0 if i == j else chunk[j] for j in range(p)] for i in range(p)]
    gather = [[0 if i == j else chunk[i] for j in range(p)] for i in range(p)]
    if kind == "reduce_scatter":
        return scatter, None
    if kind == "all_gather":
        return gather, None
    return scatter, gather
