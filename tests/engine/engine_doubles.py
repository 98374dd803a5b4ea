"""Hand-made placed kernels and graphs for the engine tests (stand-ins for the mapper's output)."""
from __future__ import annotations

import math

from sn40l_sim.hardware import figures
from sn40l_sim.hardware.loader import load_hardware
from sn40l_sim.ir import Collective, FusedKernel, KernelGraph, Operator, Shape
from sn40l_sim.mapper.placement import MemoryPlacement, PlacedGraph, PlacedKernel, StagePlacement

NODE16 = "hw_configs/sn40l_node16.yaml"


def node16():
    return load_hardware(NODE16)


def tier_bytes_per_cycle(node, tier: str) -> float:
    s = node.socket
    spec = s.memory[tier]
    return spec.units_per_die * s.dies * spec.bytes_per_s_per_unit * spec.efficiency / s.clock_hz


def hbm_bytes_per_cycle(node) -> float:
    return tier_bytes_per_cycle(node, "hbm")


def ddr_bytes_per_cycle(node) -> float:
    return tier_bytes_per_cycle(node, "ddr")


def placed_kernel(node, name: str, kind: str = "gemm_kernel", *, layer: int | None = 0,
                  n_tiles: int = 64, compute_cycles_per_tile: int = 100, hbm_bytes: int = 0,
                  ddr_bytes: int = 0, tier_bytes: dict[str, int] | None = None, flops: int | None = None,
                  sections: int = 1, fill_cycles: int = 200,
                  config_bytes: int = 0, collectives: tuple[Collective, ...] = (),
                  weight_bytes: int | None = None, kv_read_bytes: int = 0) -> PlacedKernel:
    """A kernel with one compute stage and one stage per memory tier it touches; ``cycles`` by the
    tile-level formula ``sections x (fill + n x slowest stage + configuration load)``, each section
    loading ``config_bytes``.
    ``flops`` defaults to 90% of what the compute stage could do at peak. Bytes per tier come from
    ``hbm_bytes``, ``ddr_bytes`` and ``tier_bytes`` (any tier of the node's socket)."""
    moved = dict.fromkeys(node.socket.memory, 0)
    moved.update({tier: n for tier, n in (("hbm", hbm_bytes), ("ddr", ddr_bytes)) if n})
    moved.update(tier_bytes or {})
    tiles_total = sections * n_tiles
    peak = 1040 * 384
    if flops is None:
        flops = int(0.9 * peak * tiles_total * compute_cycles_per_tile)
    assert flops <= peak * tiles_total * compute_cycles_per_tile, "a compute stage faster than peak"
    stages = [StagePlacement("compute", "gemm", 64, 64, (0,), (), compute_cycles_per_tile, "compute")]
    slowest = compute_cycles_per_tile
    mem_cycles = 0.0
    bound = "compute"
    for tier, n_bytes in moved.items():
        if n_bytes:
            rate = tier_bytes_per_cycle(node, tier)
            per_tile = math.ceil(n_bytes / tiles_total / rate)
            stages.append(StagePlacement(f"load_{tier}", "load", 0, 8, (0,), (), per_tile, tier))
            if per_tile > slowest:
                slowest, bound = per_tile, tier
            mem_cycles += n_bytes / rate
    if weight_bytes is None:
        weight_bytes = sum(moved.values()) - kv_read_bytes
    op = Operator("op", "gemm", flops=flops, weight_bytes=weight_bytes, kv_read_bytes=kv_read_bytes)
    kernel = FusedKernel(name, kind, "decode", (op,), tuple(collectives), layer, 16)
    config = figures.config_cycles(node.socket, config_bytes)
    cycles = sections * (fill_cycles + n_tiles * slowest + config)
    return PlacedKernel(kernel=kernel, stages=tuple(stages), sections=sections,
                        reconfig_cycles=config if sections > 1 else 0, n_tiles=n_tiles, cycles_per_tile=slowest,
                        fill_cycles=fill_cycles, tier_bytes=moved, mesh_bytes=0,
                        compute_cycles=math.ceil(flops / peak), memory_cycles=math.ceil(mem_cycles),
                        bounding_resource=bound,
                        cycles=cycles, pcus_per_tile=(64, 0, 0, 0), pmus_per_tile=(72, 0, 0, 0),
                        sram_bytes_per_tile=(0, 0, 0, 0), overhead_cycles=config,
                        section_config_bytes=(config_bytes,) * sections)


def chain(kernels: list[PlacedKernel], phase: str = "decode") -> PlacedGraph:
    """The kernels one after the other as a placed graph."""
    graph = KernelGraph("test", Shape(phase, 1, 1, 1))
    prev = None
    for pk in kernels:
        graph.add(pk.kernel, after=prev)
        prev = pk.kernel
    memory = MemoryPlacement({}, {}, ())
    return PlacedGraph(graph, tuple(kernels), memory)
