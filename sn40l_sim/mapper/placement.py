"""What the mapper produces and the engine consumes: fused kernels placed on one socket.

Field names are a contract: add, never rename. Cycles are RDU clock cycles.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sn40l_sim.models.kernels import FusedKernel, KernelGraph

Resource = Literal["compute", "simd", "sram", "hbm", "ddr", "mesh", "p2p", "overhead"]


@dataclass(frozen=True)
class StagePlacement:
    """One pipeline stage of a kernel: an operator (or part of one) on some PCUs and PMUs."""

    operator: str
    kind: str
    pcus: int
    pmus: int
    #: tiles of the socket the stage occupies
    tiles: tuple[int, ...]
    #: mesh coordinates (tile, row, col) of the stage's PCUs, for plots
    coords: tuple[tuple[int, int, int], ...]
    cycles_per_tile: int
    bound: Resource


@dataclass(frozen=True)
class PlacedKernel:
    """A fused kernel mapped onto one socket.

    The kernel runs ``sections`` configurations in sequence; each streams ``n_tiles`` data tiles
    through its stages at ``cycles_per_tile`` (the slowest stage, memory included) after a
    ``fill_cycles`` pipeline fill.
    """

    kernel: FusedKernel
    stages: tuple[StagePlacement, ...]
    sections: int
    reconfig_cycles: int
    n_tiles: int
    cycles_per_tile: int
    fill_cycles: int
    #: bytes this socket moves per memory tier and per link class over the whole kernel
    hbm_bytes: int
    ddr_bytes: int
    mesh_bytes: int
    #: lower bounds, each alone: compute at peak, memory at achievable bandwidth
    compute_cycles: int
    memory_cycles: int
    bounding_resource: Resource
    #: predicted cycles of the kernel on its own (tile-level formula), collectives excluded
    cycles: int
    pcus_per_tile: tuple[int, ...]
    pmus_per_tile: tuple[int, ...]
    sram_bytes_per_tile: tuple[int, ...]


@dataclass(frozen=True)
class MemoryPlacement:
    """Bytes per socket in each tier, by use."""

    hbm: dict[str, int]
    ddr: dict[str, int]
    hbm_capacity: int
    ddr_capacity: int


@dataclass(frozen=True)
class PlacedGraph:
    """A kernel graph with every kernel placed, plus where its tensors live."""

    graph: KernelGraph
    kernels: tuple[PlacedKernel, ...]
    memory: MemoryPlacement
