"""A translation-symmetric direct collective simulated on one member's flows (the quotient network).

On a ring, torus or hypercube whose sockets are all members of a direct collective
(:meth:`~sn40l_sim.engine.collectives._Run.direct`), member ``x``'s transfers are member 0's moved
by the lattice translation ``x`` (:mod:`.peer_order`, dimension-order routes in :mod:`.links`):
the same sizes, set up in the same order, over translated routes of equal links. The translations
act freely on the sockets, so every orbit of links has ``p`` members and every link of an orbit
carries the same flows' translates. The fluid network's state is then the same on every link of an
orbit at every instant, and it suffices to simulate member 0's flows on one channel per orbit of
links (``p -> 0``'s representative), a flow crossing that channel once per link of its route in
the orbit. The network's arithmetic is unchanged: each channel's users are the full network's
users of any link of its orbit, its residual takes the same step the same number of times one
subtraction after the other (:mod:`.fluid_arrays`), every flow gets the rate its translates get,
and every completion falls at the cycle the full network gives. The orbit sums give the totals
back: ``p`` times member 0's transfers and ``p`` times the bytes moved over the representatives.

Member 0's round two of an all-reduce waits for what it receives; by symmetry, the transfer from
member ``x`` to member 0 is member 0's to ``-x`` moved by ``x``, so it completes when member 0's
own transfer to ``-x`` does, and member 0 waits for its own round-one transfers.

:func:`symmetric_routes` checks every precondition from the data (all sockets are members in
order, the table has lattice dimensions, routes, link rates and latencies are translation
invariant, the sizes are); without them :func:`direct_quotient` returns None and the caller runs
the full network. ``tests/engine/test_fluid_quotient.py`` compares the two on a battery.
"""
from __future__ import annotations

import math
from collections import OrderedDict

import numpy as np
import simpy

from sn40l_sim.engine.fluid import FluidNetwork
from sn40l_sim.engine.links import LinkTable, shared_entry
from sn40l_sim.engine.peer_order import peer_order, translations
from sn40l_sim.hardware.units._cycles import ceil_cycles

#: per table signature (the most recent few): member 0's routes as orbit representatives, or None
_ROUTES: OrderedDict[tuple, tuple[dict[int, tuple[tuple[int, int], ...]], np.ndarray] | None] = OrderedDict()
_TABLES = 8


def symmetric_routes(table: LinkTable) -> tuple[dict[int, tuple[tuple[int, int], ...]], np.ndarray] | None:
    """Member 0's route to every socket ``k`` as links ``(0, d)`` standing for their orbits, and
    the translation table ``T[x, k]`` (``x + k`` in the lattice); None unless the table has lattice
    dimensions over all its sockets and its routes, link rates and route latencies are invariant
    under every translation."""
    return shared_entry(_ROUTES, table.signature, lambda: _check(table), _TABLES)


def _check(table: LinkTable) -> tuple[dict[int, tuple[tuple[int, int], ...]], np.ndarray] | None:
    p, dims = table.sockets, table.dims
    if dims is None or math.prod(dims) != p or p < 2:
        return None
    shift = translations(p, dims)
    negate = np.argmax(shift == 0, axis=1).tolist()   # -x: the translation taking x to 0
    rows = shift.tolist()

    def rep(link: tuple[int, int]) -> tuple[int, int]:
        return (0, rows[negate[link[0]]][link[1]])

    for link, rate in table.bytes_per_cycle.items():
        if table.bytes_per_cycle.get(rep(link)) != rate:
            return None
    routes = {k: table.route(0, k) for k in range(1, p)}
    for x in range(1, p):
        row = rows[x]
        for k, links in routes.items():
            moved = tuple((row[a], row[b]) for a, b in links)
            if table.route(x, row[k]) != moved or table.latency_s(x, row[k]) != table.latency_s(0, k):
                return None
    return {k: tuple(rep(link) for link in links) for k, links in routes.items()}, shift


def _invariant(sizes: list[list[int]], shift: np.ndarray) -> bool:
    """Whether ``sizes[x][x + k] == sizes[0][k]`` for every member ``x`` and offset ``k``."""
    return bool((np.take_along_axis(np.asarray(sizes), shift, axis=1) == np.asarray(sizes[0])[None, :]).all())


def direct_quotient(table: LinkTable, setup_cycles: int, sync_latency_s: float, dma_engines: int,
                    members: list[int], sizes: list[list[int]],
                    then: list[list[int]] | None = None) -> tuple[int, int, int, int] | None:
    """The direct collective's ``(cycles, link_bytes, sent_bytes, transfers)`` from member 0's
    flows alone, exactly as the full network gives them; None when it is not translation
    symmetric (then simulate every member).

    Parameters are those of :class:`~sn40l_sim.engine.collectives._Run` and its ``direct``.
    """
    p = len(members)
    found = symmetric_routes(table) if members == list(range(table.sockets)) else None
    if found is None:
        return None
    routes, shift = found
    if not _invariant(sizes, shift) or (then is not None and not _invariant(then, shift)):
        return None
    dims = table.member_dims(members)
    order = peer_order(0, p, dims)
    if any(peer_order(x, p, dims) != [int(shift[x, k]) for k in order] for x in range(1, p)):
        return None
    env = simpy.Environment()
    net = FluidNetwork(env)
    channels = {link: net.channel(f"p2p {link[0]}->{link[1]}", table.bytes_per_cycle[link])
                for link in sorted({link for links in routes.values() for link in links})}
    engines = simpy.Resource(env, dma_engines)
    counts = {"transfers": 0, "sent": 0}

    def send(dst: int, n_bytes: int):
        # _Run.send from member 0, on the orbits' channels
        if n_bytes <= 0 or dst == 0:
            return
        counts["transfers"] += 1
        counts["sent"] += n_bytes
        if setup_cycles:
            with engines.request() as engine:
                yield engine
                yield env.timeout(setup_cycles)
        head = (table.latency_s(0, dst) + sync_latency_s) * table.clock_hz
        yield env.timeout(ceil_cycles(head))
        yield net.transfer(tuple(channels[link] for link in routes[dst]), n_bytes)

    first = [env.process(send(k, sizes[0][k])) for k in order]

    def round_two():
        yield env.all_of(first)
        yield env.all_of([env.process(send(k, then[0][k])) for k in order])

    if then is not None:
        env.process(round_two())
    env.run()
    link_bytes = p * sum(ch.bytes_moved for ch in channels.values())
    return int(env.now), link_bytes, counts["sent"], p * counts["transfers"]
