"""The system as a networkx graph: sockets, dies, tiles, switch meshes, AGCUs, memories, links.

:func:`build_topology` gives the full graph of a node; :func:`p2p_links` and :func:`p2p_graph`
give only the socket-to-socket links that collectives route over (cheap to build); one tile's
switch mesh is :mod:`~sn40l_sim.hardware.tile_mesh`'s.

Graph conventions
-----------------
Node ids are strings: ``s3.t2.sw.4.7`` is switch (row 4, col 7) of tile 2 of socket 3,
``s3.t2.pcu.0.1`` a PCU, ``s3.t2.agcu5`` an AGCU, ``s3.d1.tln`` the top-level network of die 1,
``s3.d1.hbm0`` an HBM module, ``s3.d1.ddr2`` a DDR channel (one node per unit of every memory
tier, named after the tier and of that ``kind``), ``s3.p2p`` the socket's P2P port
block, ``host`` the host. Every node has ``kind`` and, where it applies, ``socket``, ``die`` and
``tile`` attributes; container nodes (``node``, ``s3``, ``s3.d1``, ``s3.t2``) carry ``kind`` and
``parent`` but no edges, so that paths only follow physical links. Every edge is a physical link
with ``kind``, ``bytes_per_s`` (each direction) and ``latency_s``.

Examples
--------
>>> from sn40l_sim.hardware.loader import load_hardware
>>> node = load_hardware("hw_configs/sn40l_node16.yaml")
>>> len(p2p_links(node)), p2p_links(node)[0]
(120, P2PLink(socket_a=0, socket_b=1, bytes_per_s=50000000000.0, latency_s=9.375e-08))
>>> g = build_topology(node)
>>> g.nodes["s0.t0.pcu.0.0"]["kind"], g.edges["s0.p2p", "s1.p2p"]["bytes_per_s"]
('pcu', 50000000000.0)
"""
from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from sn40l_sim.errors import InputError
from sn40l_sim.hardware.spec import NodeSpec
from sn40l_sim.hardware.tile_mesh import tile_template

if TYPE_CHECKING:
    import networkx as nx

#: the exact bisection enumerates C(n, n/2)/2 halvings; above this many sockets use a heuristic
EXACT_BISECTION_MAX = 20


def torus_dims(sockets: int) -> tuple[int, int]:
    """Rows and columns of the most square 2-D torus with ``sockets`` sockets.

    >>> torus_dims(16), torus_dims(8), torus_dims(7)
    ((4, 4), (2, 4), (1, 7))
    """
    rows = max(d for d in range(1, math.isqrt(sockets) + 1) if sockets % d == 0)
    return rows, sockets // rows


def socket_pairs(sockets: int, kind: str) -> list[tuple[int, int]]:
    """Connected socket pairs ``(a, b)``, ``a < b``, sorted, of a topology.

    Raises
    ------
    InputError
        For a hypercube whose socket count is not a power of two.

    Examples
    --------
    >>> socket_pairs(4, "ring"), socket_pairs(4, "hypercube")
    ([(0, 1), (0, 3), (1, 2), (2, 3)], [(0, 1), (0, 2), (1, 3), (2, 3)])
    """
    pairs: set[tuple[int, int]] = set()
    if kind == "full_mesh":
        pairs.update(itertools.combinations(range(sockets), 2))
    elif kind == "ring":
        pairs.update((i, (i + 1) % sockets) for i in range(sockets))
    elif kind == "torus2d":
        rows, cols = torus_dims(sockets)
        for r, c in itertools.product(range(rows), range(cols)):
            pairs.add((r * cols + c, r * cols + (c + 1) % cols))
            pairs.add((r * cols + c, ((r + 1) % rows) * cols + c))
    elif kind == "hypercube":
        if sockets & (sockets - 1):
            raise InputError(f"a hypercube needs a power-of-two number of sockets, got {sockets}",
                             field="topology.kind")
        dims = sockets.bit_length() - 1
        pairs.update((i, i ^ (1 << k)) for i in range(sockets) for k in range(dims))
    else:
        raise InputError(f"unknown topology {kind!r}", field="topology.kind")
    return sorted({(min(a, b), max(a, b)) for a, b in pairs if a != b})


def lattice_dims(sockets: int, kind: str) -> tuple[int, ...] | None:
    """The ring dimensions of a topology, least significant digit of the socket number first, or
    None for a topology that is not a torus of rings (the full mesh).

    Socket ``s`` sits at the mixed-radix digits of ``s`` in these dimensions: a ring of ``p`` is
    ``(p,)``, a ``rows x cols`` torus ``(cols, rows)`` (socket ``r * cols + c``), a hypercube of
    ``2**d`` a torus of ``d`` dimensions of two (bit ``k`` is coordinate ``k``). Dimensions of one
    are left out. Routes follow the dimensions in this order (:func:`dimension_order_path`).

    >>> lattice_dims(8, "ring"), lattice_dims(8, "torus2d"), lattice_dims(8, "hypercube")
    ((8,), (4, 2), (2, 2, 2))
    >>> lattice_dims(7, "torus2d"), lattice_dims(16, "full_mesh")
    ((7,), None)
    """
    if kind == "ring":
        dims: tuple[int, ...] = (sockets,)
    elif kind == "torus2d":
        rows, cols = torus_dims(sockets)
        dims = (cols, rows)
    elif kind == "hypercube":
        socket_pairs(sockets, kind)   # the power-of-two check
        dims = (2,) * (sockets.bit_length() - 1)
    else:
        return None
    return tuple(d for d in dims if d > 1)


def dimension_order_path(dims: tuple[int, ...], source: int, target: int) -> list[int]:
    """Sockets from ``source`` to ``target`` on the torus of rings ``dims`` (:func:`lattice_dims`),
    by dimension-order routing.

    The route corrects one coordinate after the other, in the order of ``dims`` (columns, then
    rows, of a 2-D torus), each the shortest way round its ring and, when both ways are equally
    long (the opposite socket of an even ring), towards increasing coordinates. This is the
    standard deterministic routing of tori and hypercubes (Dally and Towles, "Principles and
    Practices of Interconnection Networks", 2004, section 8.4, dimension-order routing; e-cube
    routing on hypercubes; the tori of Blue Gene and TPU pods route this way). Its routes are
    translation-invariant: the route from ``a + x`` to ``b + x`` (coordinate-wise) is the route
    from ``a`` to ``b`` moved by ``x``, so a collective whose members all do the same relative
    transfers loads every link alike.

    >>> dimension_order_path((4,), 0, 2), dimension_order_path((4,), 3, 1), dimension_order_path((4,), 1, 0)
    ([0, 1, 2], [3, 0, 1], [1, 0])
    >>> dimension_order_path((4, 2), 1, 7)   # columns first (1 -> 3), then rows (3 -> 7)
    [1, 2, 3, 7]
    """
    path = [source]
    here, place = source, 1
    for size in dims:
        digit = (here // place) % size
        offset = ((target // place) % size - digit) % size
        step = 1 if offset <= size // 2 else -1   # the shorter way round; a tie goes up
        for _ in range(offset if step == 1 else size - offset):
            nxt = (digit + step) % size
            here += (nxt - digit) * place
            digit = nxt
            path.append(here)
        place *= size
    return path


def ports_needed(sockets: int, kind: str, links_per_pair: int) -> int:
    """P2P ports the busiest socket needs for this topology.

    In closed form, the degree of the topology's busiest socket: enumerating the pairs of a full
    mesh of 100,000 sockets (``--set hardware.sockets=100000``) to count them took 23 GB and the
    machine's OOM killer, where the answer is 99,999 ports. Each ring of a torus (or dimension of a
    hypercube) adds two neighbours, one on a ring of two, none on a ring of one.

    >>> ports_needed(16, "full_mesh", 1), ports_needed(16, "torus2d", 1), ports_needed(1, "ring", 2)
    (15, 4, 0)
    >>> ports_needed(8, "hypercube", 2), ports_needed(2, "ring", 1), ports_needed(100_000, "full_mesh", 1)
    (6, 1, 99999)
    """
    if kind == "full_mesh":
        degree = sockets - 1
    elif kind in ("ring", "torus2d", "hypercube"):
        dims = lattice_dims(sockets, kind) or ()   # the hypercube's power-of-two check
        degree = sum(2 if size > 2 else 1 for size in dims)
    else:
        raise InputError(f"unknown topology {kind!r}", field="topology.kind")
    return max(degree, 0) * links_per_pair


def _ring_cut_links(size: int) -> int:
    """Links a halving of one ring of ``size`` cuts at the least: two, or one on a ring of two
    (whose two directions are one pair of sockets)."""
    return 0 if size < 2 else 1 if size == 2 else 2


def bisection_links(sockets: int, kind: str) -> int | None:
    """Pairs of sockets a minimum balanced halving of the topology separates, where it is known in
    closed form; None where it is not (a 2-D torus whose longer side is odd).

    Each is the classical bisection width of its family (Dally and Towles, cited at
    :func:`dimension_order_path`): a full mesh of ``n`` cuts ``floor(n/2) *
    ceil(n/2)`` pairs, a ring two, a hypercube ``n/2``, a ``rows x cols`` torus with an even side
    ``k`` twice the other side, halving across ``k`` (once where ``k`` is 2, a side of two being
    one pair). Above 20 sockets these replace :func:`bisection_bytes_per_s`'s heuristic, whose cuts
    are 1.5 to 4 times too wide on rings and hypercubes of 32 and 64 sockets.

    >>> bisection_links(64, "ring"), bisection_links(64, "hypercube"), bisection_links(32, "torus2d")
    (2, 32, 8)
    >>> bisection_links(16, "full_mesh"), bisection_links(35, "torus2d")
    (64, None)
    """
    if kind == "full_mesh":
        return (sockets // 2) * (sockets - sockets // 2)
    dims = lattice_dims(sockets, kind)
    if dims is None or not dims:
        return 0 if sockets < 2 else None
    if kind == "hypercube":
        return sockets // 2
    if len(dims) == 1:
        return _ring_cut_links(dims[0])
    if max(dims) % 2:
        return None
    return min(_ring_cut_links(size) * (sockets // size) for size in dims if size % 2 == 0)


class P2PLink(NamedTuple):
    """One socket-to-socket connection of a node (a tuple: ``a, b, bytes_per_s, latency_s = link``)."""

    socket_a: int
    #: the higher-numbered end (``socket_a < socket_b``)
    socket_b: int
    #: per direction, all ``links_per_pair`` parallel ports of the pair together
    bytes_per_s: float
    latency_s: float


def p2p_links(node: NodeSpec) -> list[P2PLink]:
    """Socket-to-socket links, one :class:`P2PLink` per connected pair, sorted.

    Examples
    --------
    The 8-socket node is a full mesh, 28 pairs; as a ring, each socket links to its two neighbours:

    >>> from sn40l_sim.hardware.loader import load_hardware, with_overrides
    >>> node8 = load_hardware("hw_configs/sn40l_node8.yaml")
    >>> len(p2p_links(node8)), p2p_links(node8)[0]        # 50 GB/s, 93.75 ns
    (28, P2PLink(socket_a=0, socket_b=1, bytes_per_s=50000000000.0, latency_s=9.375e-08))
    >>> [(a, b) for a, b, _, _ in p2p_links(with_overrides(node8, {"topology.kind": "ring"}))]
    [(0, 1), (0, 7), (1, 2), (2, 3), (3, 4), (4, 5), (5, 6), (6, 7)]
    """
    per_pair = node.topology.links_per_pair * node.socket.p2p.bytes_per_s_per_port
    return [P2PLink(a, b, per_pair, node.socket.p2p.latency_s)
            for a, b in socket_pairs(node.sockets, node.topology.kind)]


def p2p_graph(node: NodeSpec) -> nx.Graph:
    """Socket-level graph: nodes are socket indices, edges carry ``bytes_per_s``, ``latency_s``, ``links``.

    Examples
    --------
    >>> from sn40l_sim.hardware.loader import load_hardware, with_overrides
    >>> ring = p2p_graph(with_overrides(load_hardware("hw_configs/sn40l_node8.yaml"), {"topology.kind": "ring"}))
    >>> ring.number_of_edges(), sorted(ring.neighbors(0)), ring.edges[0, 1]["bytes_per_s"] / 1e9
    (8, [1, 7], 50.0)
    """
    import networkx as nx  # a large import: only the figures of ``describe`` and the topology need it

    graph = nx.Graph(name=node.name)
    graph.add_nodes_from(range(node.sockets))
    for link in p2p_links(node):
        graph.add_edge(link.socket_a, link.socket_b, bytes_per_s=link.bytes_per_s, latency_s=link.latency_s,
                       links=node.topology.links_per_pair)
    return graph


def bisection_bytes_per_s(graph: nx.Graph, weight: str = "bytes_per_s") -> float:
    """Smallest total ``weight`` of edges cut by splitting the nodes into two halves.

    Exact up to 20 nodes; above that networkx's Kernighan-Lin bisection (an upper bound).

    >>> import networkx as nx
    >>> bisection_bytes_per_s(nx.cycle_graph(8)), bisection_bytes_per_s(nx.complete_graph(4))
    (2.0, 4.0)
    """
    import networkx as nx  # a large import, needed by the hardware figures only

    nodes = sorted(graph)
    n = len(nodes)
    if n < 2:
        return 0.0
    if n > EXACT_BISECTION_MAX:
        a, b = nx.algorithms.community.kernighan_lin_bisection(graph, weight=weight, seed=0)
        return float(nx.cut_size(graph, a, b, weight=weight))
    w = nx.to_numpy_array(graph, nodelist=nodes, weight=weight, nonedge=0.0)
    # one side of size n // 2; for even n only the sides holding node 0, so each split counts once;
    # built as arrays (row by row in Python took ~2 s for the halvings of 17 to 20 nodes)
    first, size = (0, n // 2) if n % 2 else (1, n // 2 - 1)
    picks = itertools.chain.from_iterable(itertools.combinations(range(first, n), size))
    count = math.comb(n - first, size)
    members = np.fromiter(picks, dtype=np.intp, count=count * size).reshape(count, size)
    side = np.zeros((count, n))
    side[np.arange(count)[:, None], members] = 1.0
    if not n % 2:
        side[:, 0] = 1.0
    cut = ((side @ w) * (1.0 - side)).sum(axis=1)
    return float(cut.min())


def _stamp_tile(graph: nx.Graph, prefix: str, nodes: list, edges: list, where: dict) -> None:
    """Copy the tile template into ``graph`` under ``prefix``.

    Writes networkx's own node and adjacency dicts directly (the layout ``add_edges_from`` builds:
    one data dict shared by both directions), which is about three times faster than going
    through ``add_nodes_from``/``add_edges_from`` for 3000 links per tile.
    """
    node_store, adj = graph._node, graph._adj
    for name, attrs in nodes:
        node_store[prefix + name] = {**attrs, **where}
        adj[prefix + name] = {}
    for u, v, attrs in edges:
        pu, pv = prefix + u, prefix + v
        adj[pu][pv] = adj[pv][pu] = attrs.copy()


def build_topology(node: NodeSpec) -> nx.Graph:
    """The whole node as one graph (see the module docstring for ids and attributes).

    The tile is built once as a template and stamped out per tile with a prefix, which keeps the
    16-socket SN40L node (about 70 thousand vertices, 200 thousand links) well under a second.
    """
    import networkx as nx  # a large import, needed for the whole node's graph only

    socket = node.socket
    graph = nx.Graph(name=node.name, sockets=node.sockets)
    tile_nodes, tile_edges = tile_template(socket)
    tln = {"kind": "tln", "bytes_per_s": socket.tln.bytes_per_s, "latency_s": socket.tln.latency_s}
    graph.add_node("node", kind="node", name=node.name)
    for s in range(node.sockets):
        sp = f"s{s}"
        graph.add_node(sp, kind="socket", parent="node", socket=s)
        for d in range(socket.dies):
            die = f"{sp}.d{d}"
            graph.add_node(die, kind="die", parent=sp, socket=s, die=d)
            graph.add_node(f"{die}.tln", kind="tln", parent=die, socket=s, die=d)
            for t in range(d * socket.tiles_per_die, (d + 1) * socket.tiles_per_die):
                tp = f"{sp}.t{t}."
                where = {"socket": s, "die": d, "tile": t, "parent": tp[:-1]}
                graph.add_node(tp[:-1], kind="tile", parent=die, socket=s, die=d, tile=t)
                _stamp_tile(graph, tp, tile_nodes, tile_edges, where)
                graph.add_edges_from((f"{tp}agcu{i}", f"{die}.tln", tln) for i in range(socket.tile.agcus))
            for tier, spec in socket.memory.items():
                for i in range(spec.units_per_die):
                    graph.add_node(f"{die}.{tier}{i}", kind=tier, parent=die, socket=s, die=d,
                                   capacity_bytes=spec.capacity_bytes_per_unit)
                    graph.add_edge(f"{die}.{tier}{i}", f"{die}.tln", kind=tier,
                                   bytes_per_s=spec.bytes_per_s_per_unit, latency_s=spec.latency_s)
            if d > 0:  # dies in a chain (SN40L and SN30 have two)
                graph.add_edge(f"{sp}.d{d - 1}.tln", f"{die}.tln", kind="die_to_die",
                               bytes_per_s=socket.die_to_die.bytes_per_s, latency_s=socket.die_to_die.latency_s)
        graph.add_node(f"{sp}.p2p", kind="p2p", parent=sp, socket=s, ports=socket.p2p.ports)
        for d in range(socket.dies):
            graph.add_edge(f"{sp}.p2p", f"{sp}.d{d}.tln", kind="tln", latency_s=socket.tln.latency_s,
                           bytes_per_s=socket.p2p.ports * socket.p2p.bytes_per_s_per_port)
        if node.host_link is not None:
            graph.add_edge("host", f"{sp}.d0.tln", kind="host", bytes_per_s=node.host_link.bytes_per_s,
                           latency_s=node.host_link.latency_s)
    if node.host_link is not None:
        graph.nodes["host"].update(kind="host", parent="node")
    for link in p2p_links(node):
        graph.add_edge(f"s{link.socket_a}.p2p", f"s{link.socket_b}.p2p", kind="p2p", bytes_per_s=link.bytes_per_s,
                       latency_s=link.latency_s, links=node.topology.links_per_pair)
    return graph
