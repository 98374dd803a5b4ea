"""Validated, immutable hardware specs (the schema of ``hw_configs/*.yaml``).

Field names are a contract read by the mapper and the engine: add fields freely, never rename.
Derived figures (peak FLOP/s, SRAM, bandwidth totals) are computed in :mod:`sn40l_sim.hardware.figures`
from these fields, never stored here. All sizes are bytes, bandwidths bytes/s, times seconds,
latencies on the chip in cycles.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Field

from sn40l_sim.schema import (
    Bytes,
    BytesOrZero,
    BytesPerSecond,
    DerivedName,
    FlopsPerSecond,
    Fraction,
    Hertz,
    Latency,
    MemoryUnitBytes,
    Name,
    PositiveInt,
    Range,
    RatePerCycle,
    Seconds,
    StrictInt,
    StrictModel,
)

DataType = Literal["bf16", "fp16", "fp32", "int32", "int8", "fp8"]
#: datatypes a PCU may keep its GEMM partial sums in (the accumulator a K block's products add to)
AccumulatorType = Literal["fp32", "bf16", "fp16"]


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

    transcendentals_per_lane_per_cycle: RatePerCycle


#: How wide a PCU the model is checked on: 1 to 4,096 lanes, 128 times SN40L's 32 (DFModel's
#: geometry, docs/reference.md). The mapper feeds a PCU through one stream, a PMU port and a mesh
#: link (128 B a cycle: 32 FP32 partial sums, 64 BF16 values), so lanes past the stream's width
#: compute no faster, and a wider PCU is about as fast as a narrower one up to this bound:
#: DeepSeek-R1's decode step 78.4 ms at 128 lanes and 78.4 ms at 4,096, Llama-3.1-8B's 4K prefill
#: on 8 sockets 38.5 and 39.1 ms. Past it the mapper's plans leave the range they were checked on
#: (at 2**31 - 1 lanes, accepted until then, the 8B prefill took 877,288 s before a piece narrower
#: than the PCU stopped streaming its idle lanes).
#: docs/validation.md, "Sensitivity to each hardware field", has the ladders.
PCU_LANES = Range("positive PCU lane count", 1, 4096, "1", "4096 (128 x SN40L's 32)")
#: How deep a PCU the model is checked on: 1 to 1,024 stages. A K block (``stages`` rows of
#: weights, the ``stages`` cycles they take to load) is the mapper's smallest piece of a GEMM's K
#: and M, so a deeper PCU coarsens every tiling: at 4,096 stages a K block is all of
#: Llama-3.1-8B's hidden size, its 4K prefill's kernels run 4 to 32 data tiles over all 4 tiles and
#: reload their configuration every call (57.5 ms against 24.2 ms at 96 stages and 25.9 at 1,024),
#: and DeepSeek-R1's decode step is 91.0 ms against 49.0 at 1,024.
PCU_STAGES = Range("positive PCU stage count", 1, 1024, "1", "1024")
PCULanes = Annotated[StrictInt, AfterValidator(PCU_LANES)]
PCUStages = Annotated[StrictInt, AfterValidator(PCU_STAGES)]


class PCUSpec(StrictModel):
    """Pattern compute unit: ``lanes`` x ``stages`` ALUs, systolic or SIMD."""

    lanes: PCULanes
    stages: PCUStages
    modes: tuple[Literal["systolic", "simd"], ...]
    #: MACs per lane per stage per cycle for each datatype (BF16 = 1 by definition of the geometry)
    macs_per_lane_stage_per_cycle: dict[DataType, RatePerCycle]
    #: cycles for a value to cross the stage pipeline once (fill, and drain again at the end)
    pipeline_latency_cycles: PositiveInt
    #: cycles of one pass through the cross-lane reduction tree
    reduction_tree_latency_cycles: PositiveInt
    tail_stage: TailStageSpec
    #: datatype of a GEMM's partial sums: what a K block's products add to, what travels to the
    #: output PMU and back between K blocks and across PCUs when K is split
    #: (:func:`~sn40l_sim.hardware.units.pcu.accumulator_bytes`)
    accumulator_dtype: AccumulatorType


class PMUSpec(StrictModel):
    """Pattern memory unit: banked scratchpad with concurrent read and write."""

    capacity_bytes: Bytes
    banks: PositiveInt
    bank_width_bytes: PositiveInt
    read_ports: PositiveInt
    write_ports: PositiveInt
    addresses_per_cycle: PositiveInt
    #: share of the socket's SRAM a loop iteration may stream into ahead of its compute
    #: (:func:`~sn40l_sim.mapper.read_ahead.read_ahead_bytes`; the rest holds what the running compute reads)
    read_ahead_share: Fraction
    #: share of a tile's SRAM the waiting score rows of a decode attention may take before a cache is
    #: cut into chunks whose partials are merged (:mod:`sn40l_sim.mapper.attention`; the rest holds the streams)
    score_share: Fraction


class AGCUSpec(StrictModel):
    """Address generation and coalescing unit: a tile's only path off the tile."""

    burst_bytes: PositiveInt
    bytes_per_cycle: PositiveInt
    max_outstanding_bursts: PositiveInt


class MemoryTierSpec(StrictModel):
    """One off-chip memory tier of a socket: HBM modules, DDR channels, a CXL or host tier.

    A socket lists its tiers under ``memory:`` fastest first; that order is the default placement
    order (:func:`sn40l_sim.mapper.memory.place_memory`). Nothing in the code names a tier: a new
    tier is one YAML entry.

    The YAML's readable quantities (``16 GiB``, ``409.6 GB/s``, ``120 ns``) are held in base units:
    bytes, bytes/s, seconds. Per-socket totals are :mod:`sn40l_sim.hardware.figures`'.

    Examples
    --------
    >>> from sn40l_sim.hardware.loader import load_hardware
    >>> memory = load_hardware("hw_configs/sn40l.yaml").socket.memory
    >>> list(memory), memory["hbm"].units_per_die, memory["hbm"].capacity_bytes_per_unit / 2**30
    (['hbm', 'ddr'], 2, 16.0)
    >>> memory["hbm"].bytes_per_s_per_unit, memory["hbm"].latency_s
    (409600000000.0, 1.2e-07)
    """

    #: modules or channels per die (addresses interleave over all of them)
    units_per_die: PositiveInt
    capacity_bytes_per_unit: MemoryUnitBytes
    bytes_per_s_per_unit: BytesPerSecond
    latency_s: Latency
    #: achievable fraction of the peak bandwidth, fitted to measurements (docs/design.md §4)
    efficiency: Fraction = Field(json_schema_extra={"bounds": [0.3, 1.0]})
    #: bytes of this tier the runtime keeps for itself (program binaries, buffers)
    reserved_bytes: BytesOrZero = 0.0


#: a tier name is a key of results (``memory.<tier>.kv``), a channel label and a dotted-path part
TIER_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
#: names a tier cannot take: the other resources a stage, a kernel or the engine's busy time names
RESERVED_TIER_NAMES = frozenset({"compute", "simd", "sram", "mesh", "p2p", "overhead", "tln", "fill",
                                 "memory", "kernel", "setup", "stream", "collective"})


def _memory_tiers(value: Any) -> Any:
    """Drop tiers set to ``null`` (how an overlay removes a tier of its base) and check names."""
    if value is None:
        raise ValueError("expected at least one memory tier (e.g. memory: {ddr: {...}})")
    if not isinstance(value, dict):
        return value
    for name in value:
        if not isinstance(name, str) or not TIER_NAME.match(name):
            raise ValueError(f"tier name {name!r} must be lower case letters, digits and '_', "
                             "starting with a letter")
        if name in RESERVED_TIER_NAMES:
            raise ValueError(f"tier name {name!r} is taken by another resource; choose another "
                             f"(reserved: {', '.join(sorted(RESERVED_TIER_NAMES))})")
    tiers = {name: tier for name, tier in value.items() if tier is not None}
    if not tiers:
        raise ValueError("expected at least one memory tier (e.g. memory: {ddr: {...}})")
    return tiers


MemoryTiers = Annotated[dict[str, MemoryTierSpec], BeforeValidator(_memory_tiers)]


class LinkSpec(StrictModel):
    """A point-to-point connection: TLN, die-to-die, or one P2P port."""

    bytes_per_s: BytesPerSecond
    latency_s: Latency


class P2PSpec(StrictModel):
    """Socket-to-socket ports used for collectives."""

    ports: PositiveInt
    bytes_per_s_per_port: BytesPerSecond
    latency_s: Latency
    #: DMA engines issuing the socket's P2P transfers: each transfer's set-up (calibrated
    #: ``transfer_setup_s``) occupies one, so the set-ups of many transfers queue. Required, as every
    #: count of units is: a default here was a machine figure without a provenance note
    dma_engines: PositiveInt


class ConfigurationSpec(StrictModel):
    """Configuration bits of a static dataflow graph: what loading a kernel onto the units writes.

    A kernel's configuration is the sum over the units it uses (PCUs, PMUs) and the switches of
    the tiles it occupies; it is loaded at the bandwidth ``calibrated.config_load_bytes_per_s``
    whenever the kernel differs from the configuration resident on the socket, and between the
    sections of a kernel too big for the chip.
    """

    pcu_bytes: Bytes
    pmu_bytes: Bytes
    switch_bytes: Bytes


class StatedTotals(StrictModel):
    """Published per-socket totals the loader checks the per-unit values against."""

    pcus: PositiveInt | None = None
    pmus: PositiveInt | None = None
    sram_bytes: Bytes | None = None
    #: tier -> stated capacity per socket; 0 states that the socket has no such tier
    memory_bytes: dict[str, BytesOrZero | None] = Field(default_factory=dict)
    #: peak BF16 FLOP/s; checked within 0.5% (published figures are rounded)
    bf16_flops: FlopsPerSecond | None = None


def _no_stated_totals(value: Any) -> Any:
    """``stated: null`` (how an overlay describing a hypothetical socket drops its base's
    published totals) states nothing."""
    return {} if value is None else value


#: the published totals, or none at all (``stated: null``)
Stated = Annotated[StatedTotals, BeforeValidator(_no_stated_totals)]


class CalibratedSpec(StrictModel):
    """The few physical parameters fitted to measurements (docs/design.md §4), with their bounds.

    ``json_schema_extra`` carries the physical bounds that ``calibrate`` must respect. The memory
    tiers' efficiencies are calibrated too; they live with their tier
    (:attr:`MemoryTierSpec.efficiency`), see :func:`calibrated_parameters`.
    """

    #: bandwidth at which a kernel's configuration is written into the units (kernel switches,
    #: sections of a kernel too big for the chip)
    config_load_bytes_per_s: BytesPerSecond = Field(json_schema_extra={"bounds": [1e9, 1.6e12]})
    #: latency of one synchronisation message between sockets beyond the wire (a flag written and
    #: seen): each round of the barrier at a kernel boundary, and each step of a collective
    sync_latency_s: Seconds = Field(json_schema_extra={"bounds": [0.0, 50e-6]})
    p2p_efficiency: Fraction = Field(json_schema_extra={"bounds": [0.3, 1.0]})
    transfer_setup_s: Seconds = Field(json_schema_extra={"bounds": [0.0, 50e-6]})
    systolic_efficiency: Fraction = Field(json_schema_extra={"bounds": [0.3, 1.0]})


class SocketSpec(StrictModel):
    """One SN40L (or predecessor) socket."""

    name: Name
    clock_hz: Hertz
    dies: PositiveInt
    tiles_per_die: PositiveInt
    tile: TileSpec
    pcu: PCUSpec
    pmu: PMUSpec
    agcu: AGCUSpec
    #: off-chip memory tiers, fastest first (the default placement order)
    memory: MemoryTiers
    tln: LinkSpec
    die_to_die: LinkSpec | None = None
    p2p: P2PSpec
    configuration: ConfigurationSpec
    stated: Stated = StatedTotals()
    calibrated: CalibratedSpec


class TopologySpec(StrictModel):
    """How the sockets of a node are wired with their P2P ports."""

    kind: Literal["full_mesh", "ring", "torus2d", "hypercube"]
    #: parallel links between two connected sockets
    links_per_pair: PositiveInt = 1


class NodeSpec(StrictModel):
    """A node: ``sockets`` copies of one socket joined by P2P links."""

    name: DerivedName
    socket: SocketSpec
    sockets: PositiveInt
    topology: TopologySpec
    host_link: LinkSpec | None = None


@dataclass(frozen=True)
class CalibratedParameter:
    """One calibrated value of a socket: its dotted path under the socket, value and bounds."""

    path: str
    value: float
    low: float
    high: float


def calibrated_parameters(socket: SocketSpec) -> dict[str, CalibratedParameter]:
    """Every calibrated value of ``socket`` by dotted path under the socket: the ``calibrated:``
    block in schema order, then each memory tier's ``efficiency`` in tier order. Bounds come from
    the schema (``json_schema_extra``).

    >>> from sn40l_sim.hardware.loader import load_hardware
    >>> params = calibrated_parameters(load_hardware("hw_configs/sn40l.yaml").socket)
    >>> list(params)[0], [p for p in params if p.startswith("memory.")]
    ('calibrated.config_load_bytes_per_s', ['memory.hbm.efficiency', 'memory.ddr.efficiency'])
    >>> params["memory.hbm.efficiency"].low, params["memory.hbm.efficiency"].high
    (0.3, 1.0)
    """
    out: dict[str, CalibratedParameter] = {}

    def add(path: str, model: StrictModel, name: str) -> None:
        extra = type(model).model_fields[name].json_schema_extra or {}
        low, high = extra.get("bounds", (float("-inf"), float("inf")))  # type: ignore[union-attr]
        out[path] = CalibratedParameter(path, float(getattr(model, name)), float(low), float(high))

    for name in CalibratedSpec.model_fields:
        add(f"calibrated.{name}", socket.calibrated, name)
    for tier, spec in socket.memory.items():
        add(f"memory.{tier}.efficiency", spec, "efficiency")
    return out
