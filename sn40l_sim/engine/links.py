"""The node's socket-to-socket links as directed bandwidth channels, with routes between sockets.

Each undirected P2P connection of the node topology (from
:func:`sn40l_sim.hardware.topology.p2p_links`) becomes two directed links, one per direction, each
a :class:`~sn40l_sim.engine.fluid.Channel` of ``bytes_per_s x p2p_efficiency / clock_hz`` bytes
per cycle (all parallel ports of a pair striped together). Sockets that are not neighbours talk
over the shortest path in hops. On a ring, a torus or a hypercube (a table with ``dims``) that is
dimension-order routing (:func:`sn40l_sim.hardware.topology.dimension_order_path`), whose routes
are translations of each other; otherwise a breadth-first path whose ties break towards lower
socket numbers. Either way routes are deterministic.

Examples
--------
A 4-socket ring of 50 GB/s links at 1.6 GHz and 80% efficiency:

>>> links = LinkTable(4, [(0, 1, 50e9, 1e-7), (1, 2, 50e9, 1e-7), (2, 3, 50e9, 1e-7),
...                       (0, 3, 50e9, 1e-7)], clock_hz=1.6e9, efficiency=0.8)
>>> links.bytes_per_cycle[(0, 1)], links.route(0, 2), links.latency_s(0, 2)
(25.0, ((0, 1), (1, 2)), 2e-07)
>>> links.ring_order(range(4))
[0, 1, 2, 3]
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from typing import TypeVar

from sn40l_sim.errors import InfeasibleError
from sn40l_sim.hardware.spec import NodeSpec
from sn40l_sim.hardware.topology import dimension_order_path, lattice_dims, p2p_links

Link = tuple[int, int]
_V = TypeVar("_V")

#: routes shared by every table of the same neighbours (a calibration or a sweep builds a table for
#: each of its nodes, most of them of one topology), for this many topologies
_SHARED_TOPOLOGIES = 32
_routes: OrderedDict[tuple, dict[Link, tuple[Link, ...]]] = OrderedDict()


def shared_entry(store: OrderedDict, key: Hashable, make: Callable[[], _V], size: int) -> _V:
    """``store[key]``, made by ``make()`` when absent; beyond ``size`` entries the least recently
    used are dropped. For memos shared by every object of one signature in the process (the link
    tables and collective models that a sweep or a fit builds for each of its nodes).

    >>> store = OrderedDict()
    >>> a, b = shared_entry(store, "a", dict, 2), shared_entry(store, "b", dict, 2)
    >>> shared_entry(store, "a", dict, 2) is a       # "a" is now the most recently used
    True
    >>> c = shared_entry(store, "c", dict, 2)        # so "b" is the one dropped
    >>> list(store)
    ['a', 'c']
    """
    if key in store:
        store.move_to_end(key)
    else:
        store[key] = make()
        while len(store) > size:
            store.popitem(last=False)
    return store[key]


class LinkTable:
    """Directed P2P links of a node and the routes over them.

    Parameters
    ----------
    sockets : int
        Sockets in the node (numbered 0 .. sockets-1).
    links : iterable of (a, b, bytes_per_s, latency_s)
        Undirected connections (:class:`~sn40l_sim.hardware.topology.P2PLink` s or plain tuples);
        ``bytes_per_s`` is per direction.
    clock_hz : float
        RDU clock, to express bandwidths in bytes per cycle.
    efficiency : float
        Achievable fraction of each link's bandwidth (calibrated ``p2p_efficiency``).
    dims : tuple of int, optional
        The ring dimensions the links form (:func:`~sn40l_sim.hardware.topology.lattice_dims`),
        to route in dimension order; None routes breadth first.
    """

    def __init__(self, sockets: int, links: Iterable[tuple[int, int, float, float]],
                 clock_hz: float, efficiency: float = 1.0, dims: tuple[int, ...] | None = None) -> None:
        self.sockets = sockets
        self.dims = dims
        self.clock_hz = clock_hz
        self.bytes_per_cycle: dict[Link, float] = {}
        self._latency_s: dict[Link, float] = {}
        near: dict[int, set[int]] = {s: set() for s in range(sockets)}
        for a, b, bytes_per_s, latency_s in sorted(links):
            for u, v in ((a, b), (b, a)):
                self.bytes_per_cycle[(u, v)] = bytes_per_s * efficiency / clock_hz
                self._latency_s[(u, v)] = latency_s
                near.setdefault(u, set()).add(v)
        # neighbours in ascending order make breadth-first routes deterministic
        self._near: dict[int, tuple[int, ...]] = {s: tuple(sorted(near[s])) for s in sorted(near)}
        # a route depends on the neighbours and the routing alone
        self._routes = shared_entry(_routes, (dims, tuple(self._near.items())), dict, _SHARED_TOPOLOGIES)
        #: each route's latency, summed once (every message of a collective, its floor and its
        #: schedule ask for it)
        self._route_latency_s: dict[tuple[int, int], float] = {}
        #: everything a collective's cost depends on, for memos shared between equal tables
        self.signature = (sockets, clock_hz, dims, tuple(sorted((link, bw, self._latency_s[link])
                                                          for link, bw in self.bytes_per_cycle.items())))

    @classmethod
    def from_node(cls, node: NodeSpec) -> LinkTable:
        """The links of a :class:`~sn40l_sim.hardware.spec.NodeSpec` (via the hardware topology)."""
        return cls(node.sockets, p2p_links(node), node.socket.clock_hz,
                   node.socket.calibrated.p2p_efficiency, lattice_dims(node.sockets, node.topology.kind))

    def route(self, src: int, dst: int) -> tuple[Link, ...]:
        """Directed links from socket ``src`` to socket ``dst`` (empty for ``src == dst``)."""
        got = self._routes.get((src, dst))
        if got is None:
            got = self._routes[(src, dst)] = self._route(src, dst)
        return got

    def _route(self, src: int, dst: int) -> tuple[Link, ...]:
        if src == dst:
            return ()
        if self.dims is not None:
            hops: list[int] | None = dimension_order_path(self.dims, src, dst)
        else:
            hops = shortest_path(self._near, src, dst)
        if hops is None:
            raise InfeasibleError(f"no P2P path from socket {src} to socket {dst} in the node topology",
                                  field="topology")
        return tuple(zip(hops[:-1], hops[1:], strict=True))

    def member_dims(self, members: list[int]) -> tuple[int, ...] | None:
        """The ring dimensions a collective over ``members`` may shift in
        (:func:`~sn40l_sim.engine.peer_order.peer_order`): the table's, when the members are all its
        sockets in order; else None."""
        return self.dims if members == list(range(self.sockets)) else None

    def has_link(self, a: int, b: int) -> bool:
        """Whether sockets ``a`` and ``b`` are neighbours."""
        return b in self._near.get(a, ())

    def latency_s(self, src: int, dst: int) -> float:
        """Sum of link latencies along the route from ``src`` to ``dst``."""
        got = self._route_latency_s.get((src, dst))
        if got is None:
            got = self._route_latency_s[src, dst] = sum(self._latency_s[link] for link in self.route(src, dst))
        return got

    def ring_order(self, members: Iterable[int]) -> list[int]:
        """An order of ``members`` for ring algorithms, following physical links where it can.

        A depth-first search (lowest socket first, bounded effort) for a cycle through all members
        over direct links; if none is found, a greedy walk that jumps to the nearest unvisited
        member (in hops) when no neighbour is left. On a full mesh or a ring this is
        ``0, 1, 2, ...``; on a hypercube a Gray code.
        """
        todo = sorted(set(members))
        if len(todo) <= 2:
            return todo
        cycle = self._hamiltonian_cycle(todo)
        if cycle is not None:
            return cycle
        order = [todo.pop(0)]
        while todo:
            here = order[-1]
            near = [m for m in todo if self.has_link(here, m)]
            nxt = near[0] if near else min(todo, key=lambda m: (len(self.route(here, m)), m))
            order.append(nxt)
            todo.remove(nxt)
        return order

    def _hamiltonian_cycle(self, members: list[int], budget: int = 20_000) -> list[int] | None:
        wanted = set(members)
        start = members[0]
        path, seen = [start], {start}
        steps = 0

        def extend() -> bool:
            nonlocal steps
            steps += 1
            if steps > budget:
                return False
            here = path[-1]
            if len(path) == len(members):
                return self.has_link(here, start)
            for nxt in self._near[here]:
                if nxt in wanted and nxt not in seen:
                    path.append(nxt)
                    seen.add(nxt)
                    if extend():
                        return True
                    path.pop()
                    seen.discard(nxt)
            return False

        return list(path) if extend() else None


def shortest_path(near: dict[int, tuple[int, ...]], source: int, target: int) -> list[int] | None:
    """A path of fewest hops from ``source`` to ``target`` over the adjacency ``near``, or None.

    Breadth first from both ends at once, expanding the smaller fringe, neighbours in the order
    ``near`` lists them: networkx's ``shortest_path`` (``bidirectional_shortest_path``) step for
    step, so that ties between paths of equal length break as they did when routes came from it.

    >>> ring = {0: (1, 3), 1: (0, 2), 2: (1, 3), 3: (0, 2)}
    >>> shortest_path(ring, 0, 2), shortest_path(ring, 3, 3), shortest_path({0: (), 1: ()}, 0, 1)
    ([0, 1, 2], [3], None)
    """
    if source not in near or target not in near:
        return None
    pred: dict[int, int | None] = {source: None}
    succ: dict[int, int | None] = {target: None}
    meet: int | None = source if source == target else None
    forward, reverse = [source], [target]
    while meet is None and forward and reverse:
        if len(forward) <= len(reverse):
            level, forward = forward, []
            for v in level:
                for w in near[v]:
                    if w not in pred:
                        forward.append(w)
                        pred[w] = v
                    if w in succ:
                        meet = w
                        break
                if meet is not None:
                    break
        else:
            level, reverse = reverse, []
            for v in level:
                for w in near[v]:
                    if w not in succ:
                        succ[w] = v
                        reverse.append(w)
                    if w in pred:
                        meet = w
                        break
                if meet is not None:
                    break
    if meet is None:
        return None
    path: list[int] = []
    node: int | None = meet
    while node is not None:
        path.append(node)
        node = pred[node]
    path.reverse()
    node = succ[path[-1]]
    while node is not None:
        path.append(node)
        node = succ[node]
    return path
