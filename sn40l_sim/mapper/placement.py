"""What the mapper produces and the engine consumes: fused kernels placed on one socket.

Field names are a contract: add, never rename. Cycles are RDU clock cycles.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sn40l_sim.ir import FusedKernel, KernelGraph

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
    #: mesh coordinates (tile, row, col) of the stage's PMUs, for plots
    pmu_coords: tuple[tuple[int, int, int], ...] = ()
    #: section of the kernel the stage belongs to (0 unless the kernel is split)
    section: int = 0
    #: on-chip bytes of the stage's buffers per tile in use, double-buffered
    buffer_bytes_per_tile: int = 0
    #: for streams (``kind == "stream"``, operator ``"producer->consumer"``): bytes and mesh hops
    stream_bytes: int = 0
    hops: int = 0


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
    #: the calibrated kernel-call overhead included in ``cycles`` (the engine may add its own
    #: instead: it reads the parts, not ``cycles``)
    overhead_cycles: int = 0
    #: compute tiles of the socket the kernel runs on
    chip_tiles: int = 0


@dataclass(frozen=True)
class MemoryPlacement:
    """Bytes per socket in each tier, by use."""

    hbm: dict[str, int]
    ddr: dict[str, int]
    hbm_capacity: int
    ddr_capacity: int

    def tiers(self):
        """The fraction of weights and of KV held in DDR, as a
        :class:`~sn40l_sim.mapper.stages.TierSplit` for the mapper."""
        from sn40l_sim.mapper.memory import tiers_of

        return tiers_of(self)


@dataclass(frozen=True)
class PlacedGraph:
    """A kernel graph with every kernel placed, plus where its tensors live."""

    graph: KernelGraph
    kernels: tuple[PlacedKernel, ...]
    memory: MemoryPlacement
