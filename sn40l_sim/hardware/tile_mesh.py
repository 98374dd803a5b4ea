"""One tile's switch mesh: where its PCUs, PMUs and AGCUs sit, and the links between its switches
(the template :func:`~sn40l_sim.hardware.topology.build_topology` stamps out per tile; the mapper's
layout and the figures read the mesh alone, without a graph object).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from sn40l_sim.hardware.spec import SocketSpec

if TYPE_CHECKING:
    import networkx as nx


def _unit_cells(socket: SocketSpec) -> list[tuple[str, int, int]]:
    """``(kind, row, col)`` of every PCU and PMU of a tile: a checkerboard, PCUs on even cells."""
    tile = socket.tile
    left = {"pcu": tile.pcus, "pmu": tile.pmus}
    cells = []
    for r in range(tile.grid_rows):
        for c in range(tile.grid_cols):
            kind = "pcu" if (r + c) % 2 == 0 else "pmu"
            if left[kind]:
                left[kind] -= 1
                cells.append((kind, r, c))
    return cells


def agcu_switches(socket: SocketSpec) -> list[tuple[int, int]]:
    """The edge switch each AGCU attaches to: half along the top row, half along the bottom."""
    tile = socket.tile
    top = (tile.agcus + 1) // 2
    spots = []
    for count, row in ((top, 0), (tile.agcus - top, tile.grid_rows)):
        spots += [(row, (2 * i + 1) * (tile.grid_cols + 1) // (2 * count)) for i in range(count)]
    return spots


def tile_template(socket: SocketSpec) -> tuple[list, list]:
    """Node and edge lists of one tile with ids relative to the tile (``sw.r.c``, ``pcu.r.c``, ``agcu3``)."""
    clock, tile = socket.clock_hz, socket.tile
    vec, sca, ctl = tile.vector_network, tile.scalar_network, tile.control_network
    mesh = {"kind": "mesh", "bytes_per_s": vec.link_bytes_per_cycle * vec.links_per_direction * clock,
            "latency_s": vec.hop_latency_cycles / clock,
            "scalar_bytes_per_s": sca.link_bytes_per_cycle * sca.links_per_direction * clock,
            "control_bytes_per_s": ctl.link_bytes_per_cycle * ctl.links_per_direction * clock}
    port = {"kind": "unit_port", "bytes_per_s": vec.link_bytes_per_cycle * clock, "latency_s": vec.hop_latency_cycles / clock}
    agcu_port = {"kind": "agcu_port", "bytes_per_s": socket.agcu.bytes_per_cycle * clock,
                 "latency_s": vec.hop_latency_cycles / clock}
    nodes, edges = [], []
    for r in range(tile.grid_rows + 1):
        for c in range(tile.grid_cols + 1):
            nodes.append((f"sw.{r}.{c}", {"kind": "switch", "row": r, "col": c}))
            if c < tile.grid_cols:
                edges.append((f"sw.{r}.{c}", f"sw.{r}.{c + 1}", mesh))
            if r < tile.grid_rows:
                edges.append((f"sw.{r}.{c}", f"sw.{r + 1}.{c}", mesh))
    for kind, r, c in _unit_cells(socket):
        unit = f"{kind}.{r}.{c}"
        nodes.append((unit, {"kind": kind, "row": r, "col": c}))
        edges += [(unit, f"sw.{r + dr}.{c + dc}", port) for dr in (0, 1) for dc in (0, 1)]
    for i, (r, c) in enumerate(agcu_switches(socket)):
        nodes.append((f"agcu{i}", {"kind": "agcu", "row": r, "col": c}))
        edges.append((f"agcu{i}", f"sw.{r}.{c}", agcu_port))
    return nodes, edges


def tile_switch_graph(socket: SocketSpec) -> nx.Graph:
    """The switch mesh of one tile alone (ids ``sw.r.c``), e.g. for hop counts."""
    import networkx as nx  # a large import; the mapper and the engine use :func:`tile_mesh` instead

    nodes, edges = tile_template(socket)
    graph = nx.Graph()
    graph.add_nodes_from(n for n in nodes if n[1]["kind"] == "switch")
    graph.add_edges_from(e for e in edges if e[2]["kind"] == "mesh")
    return graph


def tile_mesh(socket: SocketSpec) -> dict[str, list[str]]:
    """The switch mesh of one tile as adjacency lists (switch id -> neighbouring switch ids, in
    the order :func:`tile_switch_graph` has them), without building a graph object.

    >>> from sn40l_sim.mapper._examples import example_socket
    >>> socket = example_socket()
    >>> mesh = tile_mesh(socket)
    >>> len(mesh), mesh["sw.0.0"], sum(map(len, mesh.values())) // 2 == tile_switch_graph(socket).number_of_edges()
    (567, ['sw.0.1', 'sw.1.0'], True)
    """
    nodes, edges = tile_template(socket)
    adjacency: dict[str, dict[str, None]] = {n: {} for n, attrs in nodes if attrs["kind"] == "switch"}
    for u, v, attrs in edges:
        if attrs["kind"] == "mesh":
            adjacency[u][v] = adjacency[v][u] = None
    return {n: list(near) for n, near in adjacency.items()}
