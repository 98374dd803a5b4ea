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

from sn40l_sim.engine.links import LinkTable
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
    link_bytes: dict[tuple[int, int], int] = {}
    first_head: dict[int, int] = {}
    for (src, dst), n_bytes in pair_bytes.items():
        for link in table.route(src, dst):
            link_bytes[link] = link_bytes.get(link, 0) + n_bytes
        head = ceil_cycles((table.latency_s(src, dst) + sync_latency_s) * table.clock_hz)
        first_head[src] = min(head, first_head.get(src, head))
    links = max((n / table.bytes_per_cycle[link] for link, n in link_bytes.items()), default=0.0)
    setups = max((math.ceil(sends / dma_engines) * setup_cycles + first_head[src] + 1
                  for src, sends in sends_by.items()), default=0)
    return max(math.floor(links), setups)
