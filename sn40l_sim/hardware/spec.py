"""Validated, immutable hardware specs (the schema of ``hw_configs/*.yaml``).

Field names are a contract read by the mapper and the engine: add fields freely, never rename.
Derived figures (peak FLOP/s, SRAM, bandwidth totals) are computed in :mod:`sn40l_sim.hardware.figures`
from these fields, never stored here. All sizes are bytes, bandwidths bytes/s, times seconds,
latencies on the chip in cycles.
"""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from sn40l_sim.schema import (
    Bytes,
    BytesOrZero,
    BytesPerSecond,
    FlopsPerSecond,
    Fraction,
    Hertz,
    NonNegativeInt,
    PositiveInt,
    Seconds,
    StrictModel,
)

DataType = Literal["bf16", "fp16", "fp32", "int32", "int8", "fp8"]


class NetworkSpec(StrictModel):
    """One on-tile network of the RDN (vector, scalar or control)."""

    link_bytes_per_cycle: PositiveInt
    links_per_direction: PositiveInt
    hop_latency_cycles: PositiveInt


class TileSpec(StrictModel):
    """One compute tile: a checkerboard of PCUs and PMUs with switches between them."""

    grid_rows: PositiveInt
    grid_cols: PositiveInt
    pcus: PositiveInt
    pmus: PositiveInt
    agcus: PositiveInt
    vector_network: NetworkSpec
    scalar_network: NetworkSpec
    control_network: NetworkSpec


class TailStageSpec(StrictModel):
    """The PCU's last stage: transcendentals, casts, stochastic rounding."""

    transcendentals_per_lane_per_cycle: float = Field(gt=0)


class PCUSpec(StrictModel):
    """Pattern compute unit: ``lanes`` x ``stages`` ALUs, systolic or SIMD."""

    lanes: PositiveInt
    stages: PositiveInt
    modes: tuple[Literal["systolic", "simd"], ...]
    #: MACs per lane per stage per cycle for each datatype (BF16 = 1 by definition of the geometry)
    macs_per_lane_stage_per_cycle: dict[DataType, float]
    #: cycles for a value to cross the stage pipeline once (fill, and drain again at the end)
    pipeline_latency_cycles: PositiveInt
    #: cycles of one pass through the cross-lane reduction tree
    reduction_tree_latency_cycles: PositiveInt
    tail_stage: TailStageSpec


class PMUSpec(StrictModel):
    """Pattern memory unit: banked scratchpad with concurrent read and write."""

    capacity_bytes: Bytes
    banks: PositiveInt
    bank_width_bytes: PositiveInt
    read_ports: PositiveInt
    write_ports: PositiveInt
    addresses_per_cycle: PositiveInt


class AGCUSpec(StrictModel):
    """Address generation and coalescing unit: a tile's only path off the tile."""

    burst_bytes: PositiveInt
    bytes_per_cycle: PositiveInt
    max_outstanding_bursts: PositiveInt


class MemoryTierSpec(StrictModel):
    """HBM modules or DDR channels of one socket."""

    units_per_die: PositiveInt
    capacity_bytes_per_unit: Bytes
    bytes_per_s_per_unit: BytesPerSecond
    latency_s: Seconds


class LinkSpec(StrictModel):
    """A point-to-point connection: TLN, die-to-die, or one P2P port."""

    bytes_per_s: BytesPerSecond
    latency_s: Seconds


class P2PSpec(StrictModel):
    """Socket-to-socket ports used for collectives."""

    ports: PositiveInt
    bytes_per_s_per_port: BytesPerSecond
    latency_s: Seconds


class ReservedSpec(StrictModel):
    """Memory the runtime keeps for itself (program binaries, buffers), per socket."""

    hbm_bytes: BytesOrZero = 0.0
    ddr_bytes: BytesOrZero = 0.0


class StatedTotals(StrictModel):
    """Published per-socket totals the loader checks the per-unit values against."""

    pcus: PositiveInt | None = None
    pmus: PositiveInt | None = None
    sram_bytes: Bytes | None = None
    hbm_bytes: Bytes | None = None
    #: peak BF16 FLOP/s; checked within 0.5% (published figures are rounded)
    bf16_flops: FlopsPerSecond | None = None


class CalibratedSpec(StrictModel):
    """The few physical parameters fitted to measurements (DESIGN.md §4), with their bounds.

    ``json_schema_extra`` carries the physical bounds that ``calibrate`` must respect.
    """

    kernel_call_overhead_s: Seconds = Field(json_schema_extra={"bounds": [0.0, 1e-3]})
    hbm_efficiency: Fraction = Field(json_schema_extra={"bounds": [0.3, 1.0]})
    ddr_efficiency: Fraction = Field(json_schema_extra={"bounds": [0.3, 1.0]})
    p2p_efficiency: Fraction = Field(json_schema_extra={"bounds": [0.3, 1.0]})
    transfer_setup_s: Seconds = Field(json_schema_extra={"bounds": [0.0, 50e-6]})
    systolic_efficiency: Fraction = Field(json_schema_extra={"bounds": [0.3, 1.0]})


class SocketSpec(StrictModel):
    """One SN40L (or predecessor) socket."""

    name: str
    clock_hz: Hertz
    dies: PositiveInt
    tiles_per_die: PositiveInt
    tile: TileSpec
    pcu: PCUSpec
    pmu: PMUSpec
    agcu: AGCUSpec
    hbm: MemoryTierSpec | None = None
    ddr: MemoryTierSpec
    tln: LinkSpec
    die_to_die: LinkSpec | None = None
    p2p: P2PSpec
    #: cycles to load a new configuration onto the PCUs/PMUs when a kernel is split into sections
    reconfiguration_cycles: NonNegativeInt
    reserved: ReservedSpec = ReservedSpec()
    stated: StatedTotals = StatedTotals()
    calibrated: CalibratedSpec


class TopologySpec(StrictModel):
    """How the sockets of a node are wired with their P2P ports."""

    kind: Literal["full_mesh", "ring", "torus2d", "hypercube"]
    #: parallel links between two connected sockets
    links_per_pair: PositiveInt = 1


class NodeSpec(StrictModel):
    """A node: ``sockets`` copies of one socket joined by P2P links."""

    name: str
    socket: SocketSpec
    sockets: PositiveInt
    topology: TopologySpec
    host_link: LinkSpec | None = None
