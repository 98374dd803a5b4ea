"""The pipeline stages of one section of a fused kernel, and the streams between them.

Every operator becomes one compute stage (systolic for GEMMs, SIMD for the rest). Off-chip
traffic becomes one *memory stage* per tier used (HBM, DDR, or any tier of ``SocketSpec.memory``)
that carries every byte of that tier the section reads or writes: weights and KV in the tiers
:class:`~sn40l_sim.mapper.tier_split.TierSplit` assigns them, activations in and out of the kernel (kernels hand activations to
each other through memory, the first tier unless the placement says otherwise), and the
intermediate tensor spilled between sections. One stage per tier, not one per tensor, because the
tensors share the tier's bandwidth.

Streams (producer -> consumer, bytes over the whole section) connect the memory stage to the
operators that read weights, KV or input activations, each operator to the next (its output), and
operators that write KV or output activations back to the memory stage.

Examples
--------
>>> from sn40l_sim.mapper._examples import example_socket, example_decode_kernel
>>> stages, streams = section_stages(example_socket(), example_decode_kernel().operators, 4, TierSplit.all_in("hbm"), 4)
>>> [(s.name, s.resource) for s in stages]
[('hbm', 'hbm'), ('q_proj', 'compute'), ('scores', 'compute'), ('softmax', 'simd'), ('pv', 'compute')]
>>> streams[0].src, streams[0].dst, streams[0].bytes == 16 * 7168 * 2 + 7168 * 1536   # HBM -> q_proj
(0, 1, True)
"""
from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from sn40l_sim.frozen import built
from sn40l_sim.hardware import figures
from sn40l_sim.hardware.spec import SocketSpec
from sn40l_sim.hardware.units.memory import offchip_cycles
from sn40l_sim.ir import Operator
from sn40l_sim.mapper.budget import NO_LIMITS, UnitBudget
from sn40l_sim.mapper.division import StageModel, ideal_cycles, useful_pcus
from sn40l_sim.mapper.halving import clear_halvings
from sn40l_sim.mapper.keys import IdentityMemo, clear_operators_keys, operators_key, tiling_key
from sn40l_sim.mapper.tier_split import Tier, TierSplit
from sn40l_sim.mapper.tiling import OpTiling, gemm_tilings, tile_operator


@dataclass(frozen=True)
class StageWork:
    """One stage's work per data tile, before PCUs and PMUs are given to it.

    Compute stages have a work ``model`` of ``pieces`` pieces per data tile that the allocator
    divides over the stage's PCUs (:mod:`~sn40l_sim.mapper.division`; ``work_cycles`` is that work
    on one PCU with no rounding, a lower bound); memory stages have ``fixed_cycles`` (their tier's
    bandwidth, whatever the allocation, rounded up to whole cycles per data tile for the allocator's
    targets) and ``paced_cycles``, the same unrounded. SRAM traffic is what the stage's PMUs serve
    per data tile.
    """

    name: str
    kind: str
    resource: str
    work_cycles: float = 0.0
    parallelism: int = 0
    buffer_bytes: int = 0
    sram_read_bytes: int = 0
    sram_write_bytes: int = 0
    sram_addresses: int = 0
    fixed_cycles: int = 0
    #: cycles paid once in the pipeline fill (the tier's access latency)
    latency_cycles: int = 0
    #: bytes per tier over the whole section (memory stages only)
    tier_bytes: int = 0
    #: cycles of the whole section's stream, latency excluded, before it is spread over the data
    #: tiles (memory stages only; the same at every tiling)
    stream_cycles: int = 0
    #: ``stream_cycles`` per data tile, unrounded (memory stages only): an off-chip stream does not
    #: pause at data-tile boundaries (the AGCUs keep bursts in flight across them), so a section its
    #: stream bounds takes ``stream_cycles``, not ``n_tiles x fixed_cycles``; at fine tilings the
    #: rounding was up to a third of a tile (DeepSeek-R1's decode FFN: 2.80 cycles charged 3)
    paced_cycles: float = 0.0
    tiling: OpTiling | None = None
    model: StageModel | None = None
    #: pieces of the operator per data tile, on average
    pieces: float = 0.0

    # kept in the instance once asked (a plain attribute read after that): the allocator and the
    # planners ask it of every stage at every step, ~1.8 million times in a cold ``validate``, and a
    # property's call cost more than the comparison; the kind is never changed in place (frozen)
    @cached_property
    def is_memory(self) -> bool:
        """True for the memory-tier stages, which hold no PCUs or PMUs of their own."""
        return self.kind == "memory"


@dataclass(frozen=True)
class Stream:
    """Bytes a producer stage sends a consumer stage over the whole section."""

    src: int
    dst: int
    bytes: int


def memory_stage(socket: SocketSpec, tier: Tier, n_bytes: int, n_tiles: int, chip_tiles: int) -> StageWork:
    """The stage moving ``n_bytes`` between ``chip_tiles`` tiles and one memory tier.

    The tier's access latency is paid once (AGCUs keep enough bursts in flight to hide it while
    streaming); the rest, from :func:`~sn40l_sim.hardware.units.memory.offchip_cycles` at the
    calibrated efficiency over the memory units of the dies in use, through the AGCUs and TLN ports of
    the tiles in use, is spread over the data tiles. Tiles are spread over the dies first, so two or more tiles reach every die's units.
    """
    spec = socket.memory.get(tier)
    if spec is None:
        raise ValueError(f"socket {socket.name!r} has no memory tier {tier!r} (it has {list(socket.memory)})")
    eff = spec.efficiency
    units = min(chip_tiles, socket.dies) * spec.units_per_die
    # the tiles' TLN ports carry the stream too, as the engine's TLN channel does
    # (sn40l_sim/engine/staging.py): where narrower than the AGCUs and the memory, they pace it
    agcus = chip_tiles * socket.tile.agcus
    total = offchip_cycles(spec, socket.agcu, socket.clock_hz, n_bytes, eff, units_used=units, agcus=agcus,
                           link_bytes_per_cycle=agcus * socket.tln.bytes_per_s / socket.clock_hz)
    latency = min(total, figures.cycles(spec.latency_s, socket)) if n_bytes else 0
    return built(StageWork, name=tier, kind="memory", resource=tier, work_cycles=0.0, parallelism=0, buffer_bytes=0,
                 sram_read_bytes=0, sram_write_bytes=0, sram_addresses=0,
                 fixed_cycles=math.ceil((total - latency) / n_tiles), latency_cycles=latency, tier_bytes=n_bytes,
                 stream_cycles=total - latency, paced_cycles=(total - latency) / n_tiles, tiling=None, model=None,
                 pieces=0.0)


def paced_cycles(stage: StageWork, allocated: int) -> float:
    """Cycles per data tile of ``stage`` as the pipeline runs it: a memory stage's stream share,
    unrounded (:attr:`StageWork.paced_cycles`), any other stage's ``allocated`` whole cycles."""
    return stage.paced_cycles if stage.is_memory else allocated


def compute_stage(tiling: OpTiling, n_tiles: int) -> StageWork:
    """The stage of one operator: its work and SRAM traffic per data tile.

    A data tile carries ``pieces / n_tiles`` pieces on average; its buffers hold whole pieces.
    """
    per_tile = tiling.pieces / n_tiles
    held = math.ceil(per_tile)
    reads, writes = tiling.sram_read_bytes, tiling.sram_write_bytes
    return built(StageWork, name=tiling.op.name, kind=tiling.op.kind, resource=tiling.resource,
                 work_cycles=ideal_cycles(tiling.work, per_tile),
                 parallelism=useful_pcus(tiling.parallelism, per_tile) if tiling.parallelism else 0,
                 buffer_bytes=held * tiling.buffer_bytes,
                 sram_read_bytes=math.ceil(reads * per_tile),
                 sram_write_bytes=math.ceil(writes * per_tile),
                 sram_addresses=math.ceil(tiling.addresses * per_tile), fixed_cycles=0, latency_cycles=0,
                 tier_bytes=0, stream_cycles=0, paced_cycles=0.0, tiling=tiling, model=tiling.work, pieces=per_tile)


#: compute stages by (the tiling's identity, data tiles): a tiling's stage is asked for by the part
#: floor, the whole section and the tile choices' retries, and one object per stage lets the stage
#: floors be memoised by identity (:mod:`.tiling_floor`)
_stage_memo: IdentityMemo[StageWork] = IdentityMemo()


def _stage(tiling: OpTiling, n_tiles: int, socket_key: str) -> StageWork:
    """:func:`compute_stage` through the memo when ``socket_key`` is given (the tiling is then a
    memoised one, :func:`_tiling`)."""
    if not socket_key:
        return compute_stage(tiling, n_tiles)
    return _stage_memo.get(tiling, (n_tiles,), lambda: compute_stage(tiling, n_tiles))


#: memory stages by (socket key, tier, bytes, data tiles, tiles in use): a kernel's part floors and
#: whole sections ask for the same ones at each tiling (three asks in five of a cold validate's)
_memory_memo: dict[tuple, StageWork] = {}


def _memory_stage(socket: SocketSpec, tier: Tier, n_bytes: int, n_tiles: int, chip_tiles: int,
                  socket_key: str) -> StageWork:
    """:func:`memory_stage` through the memo when ``socket_key`` (the socket as the mapper sees
    it, which holds every field the stage reads) is given."""
    if not socket_key:
        return memory_stage(socket, tier, n_bytes, n_tiles, chip_tiles)
    key = (socket_key, tier, n_bytes, n_tiles, chip_tiles)
    got = _memory_memo.get(key)
    if got is None:
        if len(_memory_memo) >= _TILING_MEMO_SIZE:
            _memory_memo.clear()
        got = _memory_memo[key] = memory_stage(socket, tier, n_bytes, n_tiles, chip_tiles)
    return got


#: operator tilings by (the socket as tilings read it, operator, data tiles, efficiency for a GEMM,
#: what of the budget a GEMM's tiling reads); cleared when full
_TILING_MEMO_SIZE = 50_000
_tiling_memo: dict[tuple, OpTiling] = {}
#: the socket as tilings read it (:func:`~.keys.tiling_key`) by the socket as the mapper sees it: a
#: calibration pass moving a memory tier's efficiency tiles as the one before it, so the operator
#: tilings and their stage objects (and through them the stage floors, by identity) are shared
_tiling_keys: dict[str, str] = {}
_TILING_KEYS_SIZE = 256


def _tiled_as(socket: SocketSpec, socket_key: str) -> str:
    """:func:`~.keys.tiling_key` of ``socket``, found by its ``socket_key``."""
    got = _tiling_keys.get(socket_key)
    if got is None:
        if len(_tiling_keys) >= _TILING_KEYS_SIZE:
            _tiling_keys.clear()
        # interned: the sockets that tile alike then share one key object, compared by identity
        got = _tiling_keys[socket_key] = sys.intern(tiling_key(socket))
    return got


def _tiling(socket: SocketSpec, op: Operator, n_tiles: int, efficiency: float, budget: UnitBudget,
            socket_key: str) -> OpTiling:
    """:func:`~sn40l_sim.mapper.tiling.tile_operator` through the memo when ``socket_key`` (the
    socket as the mapper sees it) is given: a kernel's tile choices and its one-dataflow retries
    tile the same operators at the same data tiles again."""
    if not socket_key:
        return tile_operator(socket, op, n_tiles, efficiency, budget)
    # only a GEMM's tiling reads the budget (its dataflows and cuts) and the systolic efficiency
    gemm = op.kind == "gemm"
    tiled_as = _tiled_as(socket, socket_key)
    key = (tiled_as, op, n_tiles, efficiency if gemm else None,
           (budget.dataflows, budget.gemm_cuts, budget.gemm_piece) if gemm else None)
    got = _tiling_memo.get(key)
    if got is None:
        if len(_tiling_memo) >= _TILING_MEMO_SIZE:
            _tiling_memo.clear()
        if not gemm:
            got = _tiling_memo[key] = tile_operator(socket, op, n_tiles, efficiency, budget)
            return got
        # every dataflow's tiling is the tiling under that dataflow alone, which the kernel
        # mapper's one-dataflow retries ask for next
        options = gemm_tilings(socket, op, n_tiles, efficiency, budget)
        got = _tiling_memo[key] = min(options, key=lambda o: (o[0], o[1]))[2]
        for _, _, tiling in options:
            _tiling_memo.setdefault((tiled_as, op, n_tiles, efficiency,
                                     ((tiling.dataflow,), budget.gemm_cuts, budget.gemm_piece)),
                                    tiling)
    return got


def operator_tiling(socket: SocketSpec, op: Operator, n_tiles: int, budget: UnitBudget = NO_LIMITS,
                    socket_key: str = "") -> OpTiling:
    """The tiling :func:`section_stages` gives ``op`` at ``n_tiles`` data tiles under ``budget``
    (memoised under ``socket_key`` as there)."""
    return _tiling(socket, op, n_tiles, socket.calibrated.systolic_efficiency, budget, socket_key)


def clear_tiling_memo() -> None:
    """Forget every memoised operator tiling (GEMM halvings and sections' traffic too)."""
    _tiling_memo.clear()
    _tiling_keys.clear()
    clear_operators_keys()
    _stage_memo.clear()
    _memory_memo.clear()
    _traffic_memo.clear()
    clear_halvings()


def section_stages(socket: SocketSpec, ops: tuple[Operator, ...] | list[Operator], n_tiles: int,
                   tiers: TierSplit, chip_tiles: int, spill_in_bytes: int = 0,
                   spill_out_bytes: int = 0, budget: UnitBudget = NO_LIMITS, socket_key: str = ""
                   ) -> tuple[list[StageWork], list[Stream]]:
    """Stages (memory stages first, then one per operator in order) and streams of a section.

    Parameters
    ----------
    socket : SocketSpec
    ops : sequence of Operator
        The operators of this section, in pipeline order.
    n_tiles : int
        Data tiles the section streams.
    tiers : TierSplit
        Tier of weights, KV and activations.
    chip_tiles : int
        Compute tiles of the socket the section runs on.
    spill_in_bytes, spill_out_bytes : int
        Intermediate tensor read from (written to) memory at the section's start (end) when the
        kernel is split into sections.
    budget : UnitBudget
        The GEMM dataflows and cuts the tiling may choose from.
    socket_key : str
        The socket as the mapper sees it (:func:`~sn40l_sim.mapper.keys.socket_key`): when
        given, operator tilings are memoised under it.
    """
    eff = socket.calibrated.systolic_efficiency
    tilings = [_tiling(socket, op, n_tiles, eff, budget, socket_key) for op in ops]
    # memory stages in the socket's tier order (fastest first), whatever the placement order
    totals, traffic = _section_traffic(socket, tuple(ops), tiers, spill_in_bytes, spill_out_bytes)
    stages: list[StageWork] = []
    index: dict[Tier, int] = {}
    for tier, total in totals:
        if total:
            index[tier] = len(stages)
            stages.append(_memory_stage(socket, tier, total, n_tiles, chip_tiles, socket_key))
    first = len(stages)
    stages += [_stage(t, n_tiles, socket_key) for t in tilings]
    streams: list[Stream] = []
    for i, (reads, writes) in enumerate(traffic):
        me = first + i
        streams += [Stream(index[tier], me, n) for tier, n in reads]
        streams += [Stream(first + p, me, tilings[p].out_bytes * tilings[p].pieces) for p in producers(ops, i)]
        streams += [Stream(me, index[tier], n) for tier, n in writes]
    return stages, streams


def producers(ops: Sequence[Operator], i: int) -> list[int]:
    """Indices of the operators among ``ops`` (one section's) whose outputs ``ops[i]`` reads on
    chip: those its :attr:`~sn40l_sim.ir.Operator.producers` name (one in an earlier section is read
    from the spill, not from a stage of this one), or the operator just before it when it names none.

    >>> from sn40l_sim.ir import Operator
    >>> ops = [Operator("norm", "elementwise"), Operator("q", "gemm", producers=("norm",)),
    ...        Operator("kv", "gemm", producers=("norm",)), Operator("out", "elementwise")]
    >>> [producers(ops, i) for i in range(4)]
    [[], [0], [0], [2]]
    """
    named = ops[i].producers
    if named is None:
        return [i - 1] if i > 0 else []
    at = {op.name: j for j, op in enumerate(ops[:i])}
    return sorted({at[name] for name in named if name in at})


def some_stages(socket: SocketSpec, ops: tuple[Operator, ...] | list[Operator], chosen: tuple[int, ...],
                n_tiles: int, tiers: TierSplit, chip_tiles: int, spill_in_bytes: int = 0, spill_out_bytes: int = 0,
                budget: UnitBudget = NO_LIMITS, socket_key: str = "") -> list[StageWork]:
    """The memory stages of the section ``ops`` and the compute stages of the operators at the
    ``chosen`` indices only, as :func:`section_stages` gives them: a part of the section's stages
    that is quick to build (a GEMM's tiling is most of the work)."""
    eff = socket.calibrated.systolic_efficiency
    totals, _ = _section_traffic(socket, tuple(ops), tiers, spill_in_bytes, spill_out_bytes)
    stages = [_memory_stage(socket, tier, total, n_tiles, chip_tiles, socket_key) for tier, total in totals if total]
    return stages + [_stage(_tiling(socket, ops[i], n_tiles, eff, budget, socket_key), n_tiles, socket_key)
                     for i in chosen]


#: bytes per tier, ``(tier, bytes)`` pairs in the socket's tier order
TierBytes = tuple[tuple[Tier, int], ...]
#: a section's traffic: its bytes per tier, and each operator's (reads, writes) of the tiers
SectionTraffic = tuple[TierBytes, tuple[tuple[TierBytes, TierBytes], ...]]
#: sections' traffic by (the socket's tiers, operators, tier split, spills); cleared when full
_TRAFFIC_MEMO_SIZE = 20_000
_traffic_memo: dict[tuple, SectionTraffic] = {}


def _section_traffic(socket: SocketSpec, ops: tuple[Operator, ...], tiers: TierSplit, spill_in_bytes: int,
                     spill_out_bytes: int) -> SectionTraffic:
    """A section's bytes to and from each of the socket's tiers, in the socket's order, and each
    operator's reads and writes of the tiers it touches: the same at every tiling and tile choice,
    so the kernel mapper's plans of one section work them out once."""
    key = (tuple(socket.memory), operators_key(ops), tiers, spill_in_bytes, spill_out_bytes)
    got = _traffic_memo.get(key)
    if got is not None:
        return got
    bytes_by_tier: dict[Tier, list[int]] = {tier: [] for tier in socket.memory}
    for i, op in enumerate(ops):
        spill = (spill_in_bytes if i == 0 else 0) + (spill_out_bytes if i == len(ops) - 1 else 0)
        for tier, b in tiers.split(op, spill).items():
            if tier not in bytes_by_tier:
                raise ValueError(f"socket {socket.name!r} has no memory tier {tier!r} (it has {list(socket.memory)})")
            bytes_by_tier[tier].append(b)
    traffic = []
    for i, op in enumerate(ops):
        reads = _tier_reads(tiers, op, spill_in_bytes if i == 0 else 0)
        writes = _tier_writes(tiers, op, spill_out_bytes if i == len(ops) - 1 else 0)
        traffic.append((tuple((tier, reads[tier]) for tier in bytes_by_tier if reads.get(tier)),
                        tuple((tier, writes[tier]) for tier in bytes_by_tier if writes.get(tier))))
    if len(_traffic_memo) >= _TRAFFIC_MEMO_SIZE:
        _traffic_memo.clear()
    got = _traffic_memo[key] = (tuple((tier, sum(b)) for tier, b in bytes_by_tier.items()), tuple(traffic))
    return got


def _tier_reads(tiers: TierSplit, op: Operator, spill_in: int) -> dict[Tier, int]:
    return tiers.split_bytes(op.weight_bytes, op.kv_read_bytes, op.kv_offload_read_bytes, op.act_in_bytes + spill_in)


def _tier_writes(tiers: TierSplit, op: Operator, spill_out: int) -> dict[Tier, int]:
    return tiers.split_bytes(0, op.kv_write_bytes, op.kv_offload_write_bytes, op.act_out_bytes + spill_out)
