"""A translation-symmetric direct collective simulated on one member's flows (the quotient network),
or on one member's of each orbit of the translations that leave it invariant.

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

When the bytes do not split evenly (an all-reduce of 507,888 bytes among 64: chunks of 7,935 and
7,936 bytes, repeating every 4 members), the sizes are invariant under a subgroup ``H`` of the
translations only (here those by multiples of 4). ``H`` still acts freely, so the argument holds
orbit by orbit: every socket is ``r + h`` for one least member ``r`` of its orbit and one ``h`` in
``H``, and the flows of the members ``r`` (one per orbit) on one channel per ``H``-orbit of links
give the full network's times (4 members' flows instead of 64); the transfer from ``y = r' + h`` to
``r`` is ``r'``'s to ``r - h`` moved by ``h``. :func:`_symmetry` finds the largest such ``H``
among the products of a subgroup of each ring.

:func:`symmetric_routes` checks every precondition from the data (all sockets are members in
order, the table has lattice dimensions, routes, link rates and latencies are translation
invariant, and :func:`_symmetry` that some translation other than the identity leaves the sizes
invariant); without them :func:`direct_quotient` returns None and the caller runs the full
network. ``tests/engine/test_fluid_quotient.py`` compares the two on a battery.
"""
from __future__ import annotations

import itertools
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


def _symmetry(rounds: list[list[list[int]]], shift: np.ndarray, dims: tuple[int, ...]) -> list[int] | None:
    """The largest group of translations (as the sockets ``0 + h``) that leaves every round's sizes
    invariant (``sizes[x + h][y + h] == sizes[x][y]``), among the products of a subgroup of each
    ring of ``dims``; None when only the identity does."""
    grids = [np.asarray(sizes) for sizes in rounds]
    places = np.cumprod((1, *dims[:-1])).tolist()
    steps = [[d for d in range(1, size + 1) if size % d == 0] for size in dims]
    # fewest members to simulate first: the most translations
    for strides in sorted(itertools.product(*steps), key=math.prod):
        generators = [stride * place for stride, place, size in zip(strides, places, dims, strict=True) if stride < size]
        if all((grid[np.ix_(shift[:, g], shift[:, g])] == grid).all() for g in generators for grid in grids):
            group = {0}
            for g in generators:
                group = _closure(group, g, shift)
            return sorted(group) if len(group) > 1 else None
    return None


def _closure(group: set[int], g: int, shift: np.ndarray) -> set[int]:
    """``group`` with the translation ``g`` and its multiples added to each element."""
    out, frontier = set(group), list(group)
    while frontier:
        moved = int(shift[frontier.pop(), g])
        if moved not in out:
            out.add(moved)
            frontier.append(moved)
    return out


def direct_quotient(table: LinkTable, setup_cycles: int, sync_latency_s: float, dma_engines: int,
                    members: list[int], sizes: list[list[int]],
                    then: list[list[int]] | None = None) -> tuple[int, int, int, int] | None:
    """The direct collective's ``(cycles, link_bytes, sent_bytes, transfers)`` from the flows of
    one member of each orbit of a group of translations, exactly as the full network gives them;
    None when no translation but the identity leaves it invariant (then simulate every member).

    Parameters are those of :class:`~sn40l_sim.engine.collectives._Run` and its ``direct``.
    """
    p = len(members)
    found = symmetric_routes(table) if members == list(range(table.sockets)) else None
    if found is None:
        return None
    _, shift = found
    dims = table.member_dims(members)
    group = _symmetry([sizes] + ([then] if then is not None else []), shift, dims)
    if group is None:
        return None
    order = peer_order(0, p, dims)
    if any(peer_order(x, p, dims) != [int(shift[x, k]) for k in order] for x in range(1, p)):
        return None
    # every socket x as r + h: r the least socket of its orbit, h in the group
    rep, moved = [-1] * p, [0] * p
    for x in range(p):
        if rep[x] < 0:
            for h in group:
                rep[int(shift[x, h])], moved[int(shift[x, h])] = x, h
    reps = sorted(set(rep))
    negate = np.argmax(shift == 0, axis=1).tolist()   # -h: the translation taking h to 0

    def orbit(link: tuple[int, int]) -> tuple[int, int]:
        return rep[link[0]], int(shift[link[1], negate[moved[link[0]]]])   # the link moved by -h

    routes = {(r, k): tuple(orbit(link) for link in table.route(r, k)) for r in reps for k in range(p) if k != r}
    env = simpy.Environment()
    net = FluidNetwork(env)
    channels = {link: net.channel(f"p2p {link[0]}->{link[1]}", table.bytes_per_cycle[link])
                for link in sorted({link for links in routes.values() for link in links})}
    engines = {r: simpy.Resource(env, dma_engines) for r in reps}
    counts = {"transfers": 0, "sent": 0}

    def send(src: int, dst: int, n_bytes: int):
        # _Run.send from a representative member, on the orbits' channels
        if n_bytes <= 0 or dst == src:
            return
        counts["transfers"] += 1
        counts["sent"] += n_bytes if src == 0 else 0
        if setup_cycles:
            with engines[src].request() as engine:
                yield engine
                yield env.timeout(setup_cycles)
        head = (table.latency_s(src, dst) + sync_latency_s) * table.clock_hz
        yield env.timeout(ceil_cycles(head))
        yield net.transfer(tuple(channels[link] for link in routes[src, dst]), n_bytes)

    first = {(r, k): env.process(send(r, k, sizes[r][k])) for r in reps for k in peer_order(r, p, dims)}

    def round_two(r: int):
        # from y = r' + h: the translate by h of r''s transfer to r - h, which ends when that one does
        yield env.all_of([first[rep[y], int(shift[r, negate[moved[y]]])] for y in range(p) if y != r])
        yield env.all_of([env.process(send(r, k, then[r][k])) for k in peer_order(r, p, dims)])

    if then is not None:
        for r in reps:
            env.process(round_two(r))
    env.run()
    size = len(group)
    return int(env.now), size * sum(ch.bytes_moved for ch in channels.values()), counts["sent"], size * counts["transfers"]
