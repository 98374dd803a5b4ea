"""Derived hardware figures, computed from the spec (and the topology graph), never stored.

Everything here is arithmetic on :class:`~sn40l_sim.hardware.spec.SocketSpec` /
:class:`~sn40l_sim.hardware.spec.NodeSpec` fields: the YAML holds per-unit values, these functions
give the totals (peak FLOP/s, on-chip SRAM, each memory tier's capacity and bandwidth, per socket
and per node) and the conversions between seconds and integer RDU cycles. Raw peaks only: the calibrated
efficiencies are applied by the mapper and the engine, not here.

Examples
--------
>>> from sn40l_sim.hardware.loader import load_hardware
>>> node = load_hardware("hw_configs/sn40l.yaml")
>>> round(peak_flops(node.socket) / 1e12, 2)
638.98
>>> pcus(node.socket), pmus(node.socket), sram_bytes(node.socket) / 2**20
(1040, 1040, 520.0)
>>> memory_bytes(node.socket, "hbm") / 2**30, memory_bytes_per_s(node.socket, "hbm") / 1e9
(64.0, 1638.4)
>>> cycles(2e-6, node.socket), seconds(3200, node.socket)
(3200, 2e-06)
"""
from __future__ import annotations

import math
from collections import deque
from typing import Literal, get_args

from sn40l_sim.errors import InputError
from sn40l_sim.hardware.spec import NodeSpec, SocketSpec
from sn40l_sim.hardware.tile_mesh import tile_mesh
from sn40l_sim.hardware.topology import (
    EXACT_BISECTION_MAX,
    bisection_bytes_per_s,
    bisection_links,
    p2p_graph,
)
from sn40l_sim.hardware.units.pcu import gemm_geometry

#: the on-tile networks of a :class:`~sn40l_sim.hardware.spec.TileSpec` (its ``<network>_network`` fields)
TileNetwork = Literal["vector", "scalar", "control"]

#: float noise tolerated when rounding seconds up to whole cycles (in cycles)
_CYCLE_SLACK = 1e-6


def tiles(socket: SocketSpec) -> int:
    """Compute tiles per socket (dies x tiles per die)."""
    return socket.dies * socket.tiles_per_die


def switches_per_tile(socket: SocketSpec) -> int:
    """Switches of one tile's mesh: one at every corner of the PCU/PMU checkerboard.

    >>> from sn40l_sim.hardware.loader import load_hardware
    >>> switches_per_tile(load_hardware("hw_configs/sn40l.yaml").socket)
    567
    """
    return (socket.tile.grid_rows + 1) * (socket.tile.grid_cols + 1)


def config_bytes(socket: SocketSpec, pcus_per_tile: int, pmus_per_tile: int, chip_tiles: int) -> int:
    """Configuration bytes of a dataflow graph using ``pcus_per_tile`` PCUs and ``pmus_per_tile``
    PMUs on each of ``chip_tiles`` tiles, with every switch of those tiles routed.

    >>> from sn40l_sim.hardware.loader import load_hardware
    >>> socket = load_hardware("hw_configs/sn40l.yaml").socket
    >>> config_bytes(socket, 260, 260, 4) == 4 * (260 * 1024 + 260 * 512 + 567 * 256)
    True
    """
    c = socket.configuration
    per_tile = pcus_per_tile * c.pcu_bytes + pmus_per_tile * c.pmu_bytes + switches_per_tile(socket) * c.switch_bytes
    return int(chip_tiles * per_tile)


def config_cycles(socket: SocketSpec, n_bytes: int) -> int:
    """Cycles to load ``n_bytes`` of configuration at the calibrated configuration-load bandwidth."""
    return cycles(n_bytes / socket.calibrated.config_load_bytes_per_s, socket) if n_bytes else 0


def pcus(socket: SocketSpec) -> int:
    """PCUs per socket (tiles x PCUs per tile).

    Examples
    --------
    >>> from sn40l_sim.hardware.loader import load_hardware
    >>> socket = load_hardware("hw_configs/sn40l.yaml").socket
    >>> pcus(socket), tiles(socket), socket.tile.pcus
    (1040, 4, 260)
    """
    return tiles(socket) * socket.tile.pcus


def pmus(socket: SocketSpec) -> int:
    """PMUs per socket."""
    return tiles(socket) * socket.tile.pmus


def agcus(socket: SocketSpec) -> int:
    """AGCUs per socket."""
    return tiles(socket) * socket.tile.agcus


def macs_per_pcu_cycle(socket: SocketSpec, dtype: str = "bf16") -> float:
    """MACs one PCU completes per cycle in ``dtype`` (lanes x stages x rate).

    Raises
    ------
    InputError
        If the hardware description gives no rate for ``dtype``.
    """
    rates = socket.pcu.macs_per_lane_stage_per_cycle
    if dtype not in rates:
        raise InputError(f"socket {socket.name!r} gives no MAC rate for datatype {dtype!r} "
                         f"(it has {sorted(rates)})", field="pcu.macs_per_lane_stage_per_cycle")
    return socket.pcu.lanes * socket.pcu.stages * rates[dtype]


def mac_rate_problem(socket: SocketSpec, dtype: str) -> str | None:
    """Why the systolic array cannot run ``dtype``'s rate as written, or None. It holds ``floor(rate)``
    values of K per stage from 1 up, and a row ``ceil(1 / rate)`` cycles below
    (:func:`~sn40l_sim.hardware.units.pcu.gemm_geometry`), so 1.5 BF16 MACs ran as 1 while
    :func:`peak_flops`, describe and the rooflines quoted 1.5.

    >>> from sn40l_sim.hardware.loader import load_hardware
    >>> socket = load_hardware("hw_configs/sn40l.yaml").socket
    >>> mac_rate_problem(socket, "int8")
    >>> pcu = socket.pcu.model_copy(update={"macs_per_lane_stage_per_cycle": {"bf16": 1, "fp32": 0.3}})
    >>> mac_rate_problem(socket.model_copy(update={"pcu": pcu}), "fp32")
    'expected a whole number (1, 2, ...) or a unit fraction (0.5, 0.25, ...) of MACs: 0.3 would run as 0.25'
    """
    rate = socket.pcu.macs_per_lane_stage_per_cycle[dtype]
    k_per_block, row_cycles = gemm_geometry(socket.pcu, dtype)
    runs_at = k_per_block / socket.pcu.stages / row_cycles
    if math.isclose(runs_at, rate, rel_tol=1e-9):
        return None
    return f"expected a whole number (1, 2, ...) or a unit fraction (0.5, 0.25, ...) of MACs: {rate:g} would run as {runs_at:g}"


def peak_flops(socket: SocketSpec, dtype: str = "bf16") -> float:
    """Peak FLOP/s of one socket in ``dtype`` (2 FLOPs per MAC, every PCU busy every cycle).

    Examples
    --------
    The published 638 BF16 TFLOPS; INT8 runs two MACs per lane and stage, FP32 a quarter of one:

    >>> from sn40l_sim.hardware.loader import load_hardware
    >>> socket = load_hardware("hw_configs/sn40l.yaml").socket
    >>> [round(peak_flops(socket, dtype) / 1e12, 1) for dtype in ("bf16", "int8", "fp32")]
    [639.0, 1278.0, 159.7]
    """
    return 2.0 * macs_per_pcu_cycle(socket, dtype) * pcus(socket) * socket.clock_hz


def sram_bytes(socket: SocketSpec) -> float:
    """On-chip SRAM of one socket (all PMUs)."""
    return pmus(socket) * socket.pmu.capacity_bytes


def memory_tiers(socket: SocketSpec) -> tuple[str, ...]:
    """Names of the socket's memory tiers, fastest first (the file's order).

    >>> from sn40l_sim.hardware.loader import load_hardware
    >>> memory_tiers(load_hardware("hw_configs/sn40l.yaml").socket), memory_tiers(load_hardware("hw_configs/sn10.yaml").socket)
    (('hbm', 'ddr'), ('ddr',))
    """
    return tuple(socket.memory)


def memory_units(socket: SocketSpec, tier: str) -> int:
    """Modules or channels of ``tier`` per socket (0 when the socket has no such tier)."""
    spec = socket.memory.get(tier)
    return 0 if spec is None else spec.units_per_die * socket.dies


def memory_bytes(socket: SocketSpec, tier: str) -> float:
    """Capacity of ``tier`` on one socket (0 when the socket has no such tier)."""
    spec = socket.memory.get(tier)
    return 0.0 if spec is None else memory_units(socket, tier) * spec.capacity_bytes_per_unit


def memory_bytes_per_s(socket: SocketSpec, tier: str) -> float:
    """Peak bandwidth of ``tier`` on one socket (0 when the socket has no such tier)."""
    spec = socket.memory.get(tier)
    return 0.0 if spec is None else memory_units(socket, tier) * spec.bytes_per_s_per_unit


def reserved_bytes(socket: SocketSpec, tier: str) -> float:
    """Bytes of ``tier`` the runtime keeps for itself (0 when the socket has no such tier)."""
    spec = socket.memory.get(tier)
    return 0.0 if spec is None else spec.reserved_bytes


def usable_memory_bytes(socket: SocketSpec, tier: str) -> float:
    """Capacity of ``tier`` left after the runtime's reservation.

    Examples
    --------
    >>> from sn40l_sim.hardware.loader import load_hardware
    >>> socket = load_hardware("hw_configs/sn40l.yaml").socket
    >>> [memory_bytes(socket, "hbm") / 2**30, reserved_bytes(socket, "hbm") / 2**30, usable_memory_bytes(socket, "hbm") / 2**30]
    [64.0, 8.0, 56.0]
    >>> usable_memory_bytes(socket, "sram")     # a tier the socket does not have
    0.0
    """
    return memory_bytes(socket, tier) - reserved_bytes(socket, tier)


def node_peak_flops(node: NodeSpec, dtype: str = "bf16") -> float:
    """Peak FLOP/s of the whole node.

    Examples
    --------
    >>> from sn40l_sim.hardware.loader import load_hardware
    >>> node = load_hardware("hw_configs/sn40l_node16.yaml")
    >>> node.sockets, round(node_peak_flops(node) / 1e15, 2)    # PFLOP/s in BF16
    (16, 10.22)
    """
    return node.sockets * peak_flops(node.socket, dtype)


def node_sram_bytes(node: NodeSpec) -> float:
    """On-chip SRAM of the whole node."""
    return node.sockets * sram_bytes(node.socket)


def node_memory_bytes(node: NodeSpec, tier: str) -> float:
    """Capacity of ``tier`` over the whole node."""
    return node.sockets * memory_bytes(node.socket, tier)


def node_memory_bytes_per_s(node: NodeSpec, tier: str) -> float:
    """Peak bandwidth of ``tier`` over the whole node.

    Examples
    --------
    >>> from sn40l_sim.hardware.loader import load_hardware
    >>> node = load_hardware("hw_configs/sn40l_node16.yaml")
    >>> node_memory_bytes_per_s(node, "hbm") / 1e12, node_memory_bytes(node, "ddr") / 2**40  # TB/s, TiB
    (26.2144, 24.0)
    """
    return node.sockets * memory_bytes_per_s(node.socket, tier)


def cycles(seconds_: float, socket: SocketSpec) -> int:
    """Whole RDU cycles covering ``seconds_`` (rounded up, ignoring float noise).

    >>> from types import SimpleNamespace
    >>> cycles(150e-9, SimpleNamespace(clock_hz=1.6e9)), cycles(1e-9, SimpleNamespace(clock_hz=1.6e9))
    (240, 2)
    """
    return max(0, math.ceil(seconds_ * socket.clock_hz - _CYCLE_SLACK))


def seconds(cycles_: int | float, socket: SocketSpec) -> float:
    """Seconds taken by ``cycles_`` RDU cycles."""
    return cycles_ / socket.clock_hz


#: descriptive aliases
cycles_from_seconds = cycles
seconds_from_cycles = seconds


def bytes_per_cycle(bytes_per_s: float, socket: SocketSpec) -> float:
    """A bandwidth in bytes per RDU cycle.

    Examples
    --------
    One socket's HBM moves 1,024 bytes in each 1.6 GHz cycle:

    >>> from sn40l_sim.hardware.loader import load_hardware
    >>> socket = load_hardware("hw_configs/sn40l.yaml").socket
    >>> bytes_per_cycle(memory_bytes_per_s(socket, "hbm"), socket)
    1024.0
    """
    return bytes_per_s / socket.clock_hz


def network_bytes_per_s(socket: SocketSpec, network: TileNetwork = "vector") -> float:
    """Bandwidth of one switch-to-switch hop of a tile network, per direction.

    ``network`` is ``"vector"``, ``"scalar"`` or ``"control"`` (the tile's ``<network>_network``
    field); another name is a ValueError naming these (callers pass a constant, never user input).

    Examples
    --------
    >>> from sn40l_sim.hardware.loader import load_hardware
    >>> socket = load_hardware("hw_configs/sn40l.yaml").socket
    >>> network_bytes_per_s(socket) / 1e9, network_bytes_per_s(socket, "scalar") / 1e9    # GB/s
    (204.8, 6.4)
    """
    if network not in get_args(TileNetwork):
        raise ValueError(f"network must be one of {', '.join(get_args(TileNetwork))}, got {network!r}")
    spec = getattr(socket.tile, f"{network}_network")
    return spec.link_bytes_per_cycle * spec.links_per_direction * socket.clock_hz


def tile_mesh_diameter_hops(socket: SocketSpec) -> int:
    """Switch hops across a tile's mesh, corner to corner, from the tile graph.

    >>> from sn40l_sim.hardware.loader import load_hardware
    >>> tile_mesh_diameter_hops(load_hardware("hw_configs/sn40l.yaml").socket)
    46
    """
    key = (socket.tile.grid_rows, socket.tile.grid_cols)
    if key not in _mesh_diameters:
        mesh = tile_mesh(socket)
        # double sweep: exact on grids, and the mesh is a grid
        start = next(iter(mesh))
        far = max(_hops_from(mesh, start).items(), key=lambda kv: (kv[1], kv[0]))[0]
        _mesh_diameters[key] = max(_hops_from(mesh, far).values())
    return _mesh_diameters[key]


#: the mesh's diameter by (grid rows, grid columns), the only inputs of its switches and links
#: (every node and calibration pass of ``validate`` and ``calibrate`` asks again)
_mesh_diameters: dict[tuple[int, int], int] = {}


def _hops_from(adjacency: dict[str, list[str]], start: str) -> dict[str, int]:
    """Hops from ``start`` to every node it reaches (breadth first).

    >>> _hops_from({"a": ["b"], "b": ["a", "c"], "c": ["b"]}, "a")
    {'a': 0, 'b': 1, 'c': 2}
    """
    hops = {start: 0}
    todo = deque([start])
    while todo:
        here = todo.popleft()
        for near in adjacency[here]:
            if near not in hops:
                hops[near] = hops[here] + 1
                todo.append(near)
    return hops


def p2p_diameter_hops(node: NodeSpec) -> int:
    """Socket-to-socket hops between the farthest two sockets of the node (0 for one socket).

    Examples
    --------
    >>> from sn40l_sim.hardware.loader import load_hardware, with_overrides
    >>> node16 = load_hardware("hw_configs/sn40l_node16.yaml")
    >>> ring16 = with_overrides(node16, {"topology.kind": "ring"})
    >>> p2p_diameter_hops(node16), p2p_diameter_hops(ring16), p2p_diameter_hops(load_hardware("hw_configs/sn40l.yaml"))
    (1, 8, 0)
    """
    import networkx as nx  # a large import, needed by this figure only

    graph = p2p_graph(node)
    return nx.diameter(graph) if graph.number_of_nodes() > 1 else 0


def p2p_bisection_bytes_per_s(node: NodeSpec) -> float:
    """P2P bisection bandwidth of the node (one direction).

    Exact for the full mesh, rings, hypercubes and tori with an even side at any size (their
    closed forms, :func:`~sn40l_sim.hardware.topology.bisection_links`) and for any topology up to
    20 sockets (every balanced halving of the socket graph); otherwise the best cut networkx's
    Kernighan-Lin heuristic finds, an upper bound (:func:`p2p_bisection_is_exact` tells which).

    >>> from sn40l_sim.hardware.loader import load_hardware, with_overrides
    >>> ring64 = with_overrides(load_hardware("hw_configs/sn40l_node16.yaml"),
    ...                         {"sockets": 64, "topology.kind": "ring"})
    >>> p2p_bisection_bytes_per_s(ring64) / 1e9   # two 50 GB/s links, wherever the ring is cut
    100.0
    """
    links = bisection_links(node.sockets, node.topology.kind)
    if links is not None:
        return links * node.topology.links_per_pair * node.socket.p2p.bytes_per_s_per_port
    return bisection_bytes_per_s(p2p_graph(node))


def p2p_bisection_is_exact(node: NodeSpec) -> bool:
    """Whether :func:`p2p_bisection_bytes_per_s` is the minimum cut rather than a heuristic's bound."""
    return bisection_links(node.sockets, node.topology.kind) is not None or node.sockets <= EXACT_BISECTION_MAX


def p2p_bytes_per_s_per_socket(node: NodeSpec) -> float:
    """Peak P2P bandwidth one socket can drive over its connected links (one direction).

    Examples
    --------
    A 16-socket full mesh: 15 peers, one 50 GB/s link to each:

    >>> from sn40l_sim.hardware.loader import load_hardware
    >>> node = load_hardware("hw_configs/sn40l_node16.yaml")
    >>> p2p_bytes_per_s_per_socket(node) / 1e9, node.socket.p2p.bytes_per_s_per_port / 1e9
    (750.0, 50.0)
    """
    graph = p2p_graph(node)
    if graph.number_of_edges() == 0:
        return 0.0
    return max(sum(d["bytes_per_s"] for _, _, d in graph.edges(n, data=True)) for n in graph)
