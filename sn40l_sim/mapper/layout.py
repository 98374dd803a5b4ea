"""Placing stages on the tile meshes and routing the streams between them.

A tile is a checkerboard of PCUs and PMUs (PCUs on the cells with ``row + col`` even, the layout
of :mod:`sn40l_sim.hardware.topology`); AGCUs sit on the switches of the top and bottom edges,
half on each, evenly spaced. Stages take contiguous runs of PCUs and of PMUs in snake order (row
0 left to right, row 1 right to left, ...), in pipeline order, so consecutive stages are
neighbours. Every tile in use gets the same layout.

A stream between two stages travels the Manhattan distance between their centroids (from the
AGCUs, on average, for a memory stage); its hop latency goes into the pipeline fill. The ports at
either end are limited where they are modelled (a PMU's write port in the PMU model, an AGCU's in
the off-chip model). The mesh as a whole is one more per-data-tile constraint: every stream
occupies ``bytes x hops`` link-cycles' worth of the tile's vector-network links (both directions
of every switch-to-switch link of :func:`~sn40l_sim.hardware.tile_mesh.tile_switch_graph`), and
the share of one link is serialised by :func:`~sn40l_sim.hardware.units.network.mesh_cycles`.
Fused kernels are DAGs whose edges the kernel contract does not carry, so a stage's input is taken
to come from the stage before it (which is also why stages are placed in that order); an
aggregate constraint is not thrown off by that the way a per-path one would be.

Examples
--------
>>> from sn40l_sim.mapper._examples import example_socket
>>> socket = example_socket()
>>> pcu_cells(socket)[:3], pmu_cells(socket)[:3]
([(0, 0), (0, 2), (0, 4)], [(0, 1), (0, 3), (0, 5)])
>>> pcu_cells(socket)[13]          # row 1 runs right to left
(1, 25)
>>> len(agcu_spots(socket)), agcu_spots(socket)[0]
(16, (0, 1))
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from itertools import chain

from sn40l_sim.hardware.spec import SocketSpec
from sn40l_sim.hardware.tile_mesh import agcu_switches, tile_mesh
from sn40l_sim.hardware.units.network import mesh_cycles, mesh_latency_cycles
from sn40l_sim.mapper.allocate import Allocation
from sn40l_sim.mapper.stages import StageWork, Stream

Cell = tuple[int, int]


@lru_cache(maxsize=16)
def _cells(rows: int, cols: int, pcus: int, pmus: int) -> tuple[tuple[Cell, ...], tuple[Cell, ...]]:
    left = {0: pcus, 1: pmus}
    out: dict[int, list[Cell]] = {0: [], 1: []}
    for r in range(rows):
        for c in (range(cols) if r % 2 == 0 else range(cols - 1, -1, -1)):
            kind = (r + c) % 2
            if left[kind]:
                left[kind] -= 1
                out[kind].append((r, c))
    return tuple(out[0]), tuple(out[1])


def pcu_cells(socket: SocketSpec) -> list[Cell]:
    """``(row, col)`` of a tile's PCUs in snake order."""
    t = socket.tile
    return list(_cells(t.grid_rows, t.grid_cols, t.pcus, t.pmus)[0])


def pmu_cells(socket: SocketSpec) -> list[Cell]:
    """``(row, col)`` of a tile's PMUs in snake order."""
    t = socket.tile
    return list(_cells(t.grid_rows, t.grid_cols, t.pcus, t.pmus)[1])


#: per tile geometry (grid, PCUs, PMUs): where each cell sits in its snake order (PCUs 0, PMUs 1),
#: and per tile index the ``(tile, row, col)`` of both orders; placing a kernel slices them
_tiled: dict[tuple[int, int, int, int], tuple[dict[Cell, tuple[int, int]], list[tuple[list, list]]]] = {}


def tiled_coords(socket: SocketSpec, cells: tuple[Cell, ...], tiles: int) -> tuple[tuple[int, int, int], ...]:
    """``(tile, row, col)`` of ``cells`` on each of the first ``tiles`` tiles, tile by tile: the
    coordinates of a stage's units, ``cells`` being a run of :func:`pcu_cells` or
    :func:`pmu_cells` as :func:`place_stages` gives them (sliced from tables built once per tile
    geometry; any other cells are listed one by one).

    >>> from sn40l_sim.mapper._examples import example_socket
    >>> socket = example_socket()
    >>> cells = tuple(pcu_cells(socket)[3:5])
    >>> tiled_coords(socket, cells, 2) == tuple((i, r, c) for i in range(2) for r, c in cells)
    True
    """
    if not cells:
        return ()
    t = socket.tile
    key = (t.grid_rows, t.grid_cols, t.pcus, t.pmus)
    orders = _cells(*key)
    if key not in _tiled:
        _tiled[key] = ({cell: (kind, i) for kind, order in enumerate(orders) for i, cell in enumerate(order)}, [])
    where, rows = _tiled[key]
    kind, first = where.get(cells[0], (0, -1))
    stop = first + len(cells)
    if first < 0 or orders[kind][first:stop] != cells:
        return tuple((i, r, c) for i in range(tiles) for r, c in cells)
    while len(rows) < tiles:
        tile = len(rows)
        rows.append(tuple([(tile, r, c) for r, c in order] for order in orders))
    return tuple(chain.from_iterable(rows[i][kind][first:stop] for i in range(tiles)))


def agcu_spots(socket: SocketSpec) -> list[Cell]:
    """Switch ``(row, col)`` of each AGCU: half along the top edge, half along the bottom (the
    layout rule of :func:`sn40l_sim.hardware.tile_mesh.agcu_switches`, so placement and the topology
    graph agree)."""
    return agcu_switches(socket)


@dataclass(frozen=True)
class StageCells:
    """Cells one stage occupies on each tile in use."""

    pcus: tuple[Cell, ...]
    pmus: tuple[Cell, ...]

    def centroid(self) -> tuple[float, float]:
        """Mean ``(row, col)`` of the stage's units (0, 0 for a stage without any)."""
        cells = self.pcus + self.pmus
        if not cells:
            return 0.0, 0.0
        return sum(c[0] for c in cells) / len(cells), sum(c[1] for c in cells) / len(cells)


@dataclass(frozen=True)
class RoutedStream:
    """A stream with its route: hops and the latency of its head over them."""

    src: int
    dst: int
    bytes: int
    hops: int
    latency_cycles: int


_channels: dict[tuple[int, int], int] = {}


def mesh_channels(socket: SocketSpec) -> int:
    """Directed switch-to-switch links of one tile's mesh (each carries a vector network link).

    >>> from sn40l_sim.mapper._examples import example_socket
    >>> mesh_channels(example_socket())     # 21 x 27 switches: 2 x (21 x 26 + 20 x 27)
    2172
    """
    key = (socket.tile.grid_rows, socket.tile.grid_cols)
    if key not in _channels:
        _channels[key] = sum(len(near) for near in tile_mesh(socket).values())
    return _channels[key]


def mesh_cycles_per_tile(socket: SocketSpec, streams: list[RoutedStream], n_tiles: int, chip_tiles: int,
                         extra_byte_hops: float = 0.0) -> int:
    """Cycles per data tile the streams' byte-hops (and ``extra_byte_hops`` per data tile, over all
    tiles in use: partial sums of split reductions) take on one tile's mesh links."""
    byte_hops = sum(s.bytes * s.hops for s in streams) + extra_byte_hops * n_tiles
    per_link = math.ceil(byte_hops / (n_tiles * chip_tiles * mesh_channels(socket)))
    return mesh_cycles(socket.tile.vector_network, per_link, 0)


def place_stages(socket: SocketSpec, stages: list[StageWork], alloc: Allocation) -> list[StageCells]:
    """Cells of each stage (same on every tile in use), in pipeline order along the snake.

    Memory stages hold no units; they reach the mesh through the AGCUs.
    """
    pcu_order, pmu_order = pcu_cells(socket), pmu_cells(socket)
    next_pcu = next_pmu = 0
    out = []
    for stage, q, r in zip(stages, alloc.pcus, alloc.pmus, strict=True):
        if stage.is_memory:
            out.append(StageCells((), ()))
            continue
        out.append(StageCells(tuple(pcu_order[next_pcu:next_pcu + q]), tuple(pmu_order[next_pmu:next_pmu + r])))
        next_pcu += q
        next_pmu += r
    return out


def _agcu_hops(socket: SocketSpec, to: tuple[float, float], spots: list[Cell] | None = None) -> int:
    spots = agcu_spots(socket) if spots is None else spots
    # a unit at cell (r, c) touches switches r..r+1, c..c+1: measure to the cell's centre
    dist = [abs(r - (to[0] + 0.5)) + abs(c - (to[1] + 0.5)) for r, c in spots]
    return round(sum(dist) / len(dist))


def route_streams(socket: SocketSpec, stages: list[StageWork], cells: list[StageCells],
                  streams: list[Stream]) -> list[RoutedStream]:
    """Hops and head latency of every stream."""
    net = socket.tile.vector_network
    spots = agcu_spots(socket)
    # each stage's centroid once, however many streams it has (a stage spans hundreds of cells)
    centroids: dict[int, tuple[float, float]] = {}

    def centroid(i: int) -> tuple[float, float]:
        if i not in centroids:
            centroids[i] = cells[i].centroid()
        return centroids[i]

    out = []
    for s in streams:
        src, dst = stages[s.src], stages[s.dst]
        if src.is_memory:
            hops = _agcu_hops(socket, centroid(s.dst), spots)
        elif dst.is_memory:
            hops = _agcu_hops(socket, centroid(s.src), spots)
        else:
            a, b = centroid(s.src), centroid(s.dst)
            hops = round(abs(a[0] - b[0]) + abs(a[1] - b[1]))
        latency = mesh_latency_cycles(net, hops) if s.bytes else 0
        out.append(RoutedStream(s.src, s.dst, s.bytes, hops, latency))
    return out
