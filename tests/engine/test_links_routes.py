"""Routes and graph figures computed without networkx equal networkx's own, on every node of
hw_configs/ and on random graphs (ties between equal-length routes break the same way)."""
from __future__ import annotations

import random
from pathlib import Path

import networkx as nx
import pytest

from sn40l_sim.engine.links import LinkTable, shortest_path
from sn40l_sim.hardware import figures
from sn40l_sim.hardware.loader import load_hardware
from sn40l_sim.hardware.tile_mesh import tile_mesh, tile_switch_graph
from sn40l_sim.hardware.topology import p2p_links

NODES = sorted(str(p) for p in Path("hw_configs").glob("*.yaml"))


def _nx_route(graph: nx.Graph, a: int, b: int) -> list[int] | None:
    try:
        return nx.shortest_path(graph, a, b)
    except (nx.NetworkXNoPath, nx.NodeNotFound):
        return None


def _sorted_graph(edges: list[tuple[int, int]], nodes: int) -> nx.Graph:
    """The graph LinkTable used to route over: nodes and edges added in sorted order."""
    loose = nx.Graph()
    loose.add_nodes_from(range(nodes))
    loose.add_edges_from(edges)
    graph = nx.Graph()
    graph.add_nodes_from(sorted(loose.nodes))
    graph.add_edges_from(sorted(tuple(sorted(e)) for e in loose.edges))
    return graph


@pytest.mark.parametrize("path", NODES)
def test_routes_equal_networkx_on_every_node(path):
    node = load_hardware(path)
    links = p2p_links(node)
    table = LinkTable(node.sockets, links, node.socket.clock_hz)
    graph = _sorted_graph([(a, b) for a, b, _, _ in links], node.sockets)
    for a in range(node.sockets):
        for b in range(node.sockets):
            want = _nx_route(graph, a, b)
            assert a == b or table.route(a, b) == tuple(zip(want[:-1], want[1:], strict=True))
    assert figures.tile_mesh_diameter_hops(node.socket) == nx.diameter(tile_switch_graph(node.socket))


def test_shortest_path_equals_networkx_on_random_graphs():
    rng = random.Random(7)
    for _ in range(60):
        n = rng.randint(2, 24)
        edges = [(a, b) for a in range(n) for b in range(a + 1, n) if rng.random() < rng.choice((0.1, 0.2, 0.5))]
        graph = _sorted_graph(edges, n)
        near = {v: tuple(graph.adj[v]) for v in graph}
        for a in range(n):
            for b in range(n):
                assert shortest_path(near, a, b) == _nx_route(graph, a, b)


def test_tile_mesh_is_the_switch_graph():
    socket = load_hardware("hw_configs/sn40l.yaml").socket
    graph, mesh = tile_switch_graph(socket), tile_mesh(socket)
    assert list(mesh) == list(graph)
    assert all(mesh[n] == list(graph.adj[n]) for n in graph)
