"""What one piece of an operator asks of the PCUs and PMUs of its stage: its work as items, their
cycles, the stage's fill and drain, and its PMU traffic.

The models are built by :func:`sn40l_sim.mapper.tiling.tile_operator` and divided over a stage's
PCUs by :mod:`sn40l_sim.mapper.division`. Every quantity comes from the unit parameters of the
socket (lanes, stages, pipeline latency, reduction-tree latency, tail-stage rate, PMU port width,
link width, hop latency) through :mod:`sn40l_sim.hardware.units`; nothing here is fitted.

* **GEMM, weight-stationary** (:mod:`sn40l_sim.hardware.units.pcu`): an item is one column block
  over the piece's K blocks and rows. An item's rows may be split over ``s_m`` PCUs (each loads the
  same weights; a K block lasts at least ``stages`` cycles and, for few rows, the partial sum's
  round trip: ``accumulate_latency``, a mesh hop each way to the output PMU and its ports,
  :func:`~sn40l_sim.hardware.units.pcu.partial_sum_round_trip_cycles`) or its K blocks over
  ``s_k`` PCUs. A K split leaves ``s_k`` partial-sum sets of ``rows x lanes`` values (FP32 on
  SN40L, ``pcu.accumulator_dtype``) that are
  added pairwise in ``ceil(log2 s_k)`` rounds: each round the partner's vectors cross the mesh
  (to a partner ``2^round`` PCUs away) and go through the receiving PCU's pipeline, one per
  ``psum vector / stream width`` cycles; the ``s_k - 1`` partial sets per item are read twice,
  moved and written once through PMUs.
* **GEMM, output-stationary**: an item is one output tile of ``stages`` rows x ``lanes`` columns
  over the piece's K; a K split works and is paid for as above, with ``stages`` rows.
* **SIMD**: an item is one vector (elementwise) or one row (row-wise kinds). A softmax runs three
  passes over each row (row max through the lane tree; ``exp(x - max)`` in the tail stage with the
  row sum through the tree; normalisation), each on PCUs of its own when the stage has at least
  three, so a row's passes pipeline; with fewer PCUs each PCU runs all three.
* **Gather and scatter** use no PCU: a PMU's address generators read the indexed rows and stream
  them to the next PMU, at the rate random banks allow
  (:func:`~sn40l_sim.hardware.units.pmu.pmu_random_access_rate`).

Per PCU, each stream between it and a PMU is one PMU port and one mesh link (streams are statically
routed), so an item also takes at least ``bytes / min(port, link)`` cycles per stream.

Examples
--------
>>> from sn40l_sim.mapper._examples import example_socket
>>> from sn40l_sim.ir import Operator
>>> socket = example_socket()
>>> work = gemm_work(socket, Operator("g", "gemm", m=64, k=64, n=64), {"count": 1, "m": 64, "k": 64, "n": 64},
...                  "weight_stationary", 1.0, split_k=False)
>>> work.items, work.split(1, 1).item_cycles     # two column blocks of 11 K blocks x 64 rows
(2, 704.0)
>>> s = work.split(1, 4)                         # K over four PCUs: a quarter of the blocks each
>>> s.items, s.item_cycles, s.reduce_cycles       # and three quarters of 64 partial-sum vectors to add
(8, 192.0, 48.0)
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

from sn40l_sim.frozen import built, hashed_once
from sn40l_sim.hardware.spec import SocketSpec
from sn40l_sim.hardware.units.network import mesh_bytes_per_cycle, mesh_latency_cycles
from sn40l_sim.hardware.units.pcu import (
    accumulator_bytes,
    gemm_geometry,
    gemm_pipeline_cycles,
    mac_rate,
    partial_sum_round_trip_cycles,
)
from sn40l_sim.hardware.units.pmu import pmu_port_bytes_per_cycle
from sn40l_sim.ir import ACT_BYTES, DTYPE_BYTES, Operator
from sn40l_sim.mapper.keys import IdentityMemo

_EPS = 1e-9
#: passes of a softmax over each row: row max (lane tree); exp(x - max) in the tail stage with the
#: row sum through the tree; normalisation (a multiply by the reciprocal sum, or a division in the
#: tail stage for transcendentals beyond one per element)
SOFTMAX_PASSES = 3


class Split(NamedTuple):
    """One way of cutting a GEMM piece's items: ``s_m`` x ``s_k`` sub-items per item (a named
    tuple, quick to make: the allocator prices thousands)."""

    s_m: int
    s_k: int
    items: int            # sub-items per piece
    item_cycles: float    # steady cycles of one more sub-item on a PCU (before efficiency)
    offset: float         # the last sub-item's drain minus a full one (<= 0), paid once
    reduce_cycles: float  # cycles of partial-sum adds per sub-item on its PCU
    stream_cycles: float  # cycles of the busiest PCU stream per sub-item
    latency: int          # fill and drain of the stage with this split
    reduce_bytes: float   # partial-sum bytes moved per sub-item (read twice, written once)

    def cycles(self, n: int, share: float, efficiency: float) -> int:
        """Cycles per data tile of ``n`` sub-items back to back in ``share`` of the data tiles."""
        if n <= 0:
            return 0
        # back to back, the next data tile's items follow: the last item's shorter drain (offset)
        # is paid once, in the latency
        compute = math.ceil(share * n * self.item_cycles / efficiency - _EPS)
        return max(compute + math.ceil(share * n * self.reduce_cycles - _EPS),
                   math.ceil(share * n * self.stream_cycles - _EPS))


@hashed_once
@dataclass(frozen=True)
class GemmWork:
    """A GEMM piece as work items (see the module docstring), with the unit parameters it needs.

    Built by :func:`sn40l_sim.mapper.tiling.tile_operator`; ``dataflow`` is
    ``"weight_stationary"`` or ``"output_stationary"``.
    """

    dataflow: str
    count: int
    m: int
    k: int
    n_blocks: int
    k_blocks: int
    k_per_stage: int
    row_cycles: int
    stages: int
    lanes: int
    #: columns of a column block that carry data, ``min(n, lanes)``: a piece narrower than the PCU
    #: reads only its own weights and writes only its own output (idle lanes are masked, not fed
    #: zeros); its FP32 partial sums stay whole vectors, as the unit-level reference moves them
    #: (:mod:`sn40l_sim.reference.unit_level.systolic`)
    width: int
    pipeline_latency: int
    accumulate_latency: int
    efficiency: float
    a_bytes: float
    b_bytes: float
    out_bytes: float
    psum_vector_bytes: int
    stream_bytes_per_cycle: int
    hop_cycles: int
    #: latency of each round of a cross-PCU reduction (partner further away each round)
    reduce_round_cycles: tuple[int, ...]
    #: the piece is one K range of an output that earlier pieces started (its first K block
    #: waits on their partial sums like any later block)
    continues_k: bool = False

    @property
    def items(self) -> int:
        """Whole items of one piece (no split)."""
        if self.dataflow == "output_stationary":
            return self.count * self.n_blocks * math.ceil(self.m / self.stages)
        return self.count * self.n_blocks

    def _max_s_m(self) -> int:
        return 1 if self.dataflow == "output_stationary" else self.m

    def _max_s_k(self) -> int:
        return self.k_blocks if self.dataflow == "weight_stationary" else max(1, math.ceil(self.k / self.stages))

    def split(self, s_m: int, s_k: int) -> Split:
        """The cost model of one split."""
        return _split(self, s_m, s_k)

    def _cost_of(self, s_m: int, s_k: int) -> Split:
        psum = self.psum_vector_bytes
        vec = math.ceil(psum / self.stream_bytes_per_cycle - _EPS)
        rounds = math.ceil(math.log2(s_k) - _EPS) if s_k > 1 else 0
        reduce_latency = sum(self.reduce_round_cycles[:rounds]) + max(0, rounds - len(self.reduce_round_cycles)) * (
            self.reduce_round_cycles[-1] if self.reduce_round_cycles else 0)
        rate = self.stream_bytes_per_cycle
        if self.dataflow == "output_stationary":
            rows = self.stages
            k_part = math.ceil(self.k / s_k)
            item = max(math.ceil(k_part / self.k_per_stage) * self.row_cycles, self.stages)
            offset = 0.0
            out = psum if s_k > 1 else self.width * self.out_bytes
            stream = max(k_part * self.width * self.b_bytes, k_part * self.stages * self.a_bytes, rows * out) / rate
            fixed = self.stages + self.pipeline_latency
            items = self.items * s_k
        else:
            rows = math.ceil(self.m / s_m)
            blocks = math.ceil(self.k_blocks / s_k)
            first = max(rows * self.row_cycles, self.stages)
            later = max(first, self.pipeline_latency + self.accumulate_latency)
            if self.continues_k:
                first = later
            item = (blocks - 1) * later + first
            offset = float(rows * self.row_cycles - first)
            k_per_block = self.k_per_stage * self.stages
            stream = max(blocks * rows * psum, blocks * rows * k_per_block * self.a_bytes,
                         blocks * self.stages * self.width * self.b_bytes) / rate
            fixed = 1 + self.pipeline_latency
            items = self.items * s_m * s_k
        reduce_cycles = rows * vec * (s_k - 1) / s_k if s_k > 1 else 0.0
        reduce_bytes = rows * psum * (s_k - 1) / s_k if s_k > 1 else 0.0
        latency = 2 * self.hop_cycles + fixed + reduce_latency
        return Split(s_m, s_k, items, float(item), offset, reduce_cycles, stream, latency, reduce_bytes)

    def candidates(self, pieces: float, most_pcus: int) -> tuple[Split, ...]:
        """Splits worth trying on up to ``most_pcus`` PCUs: powers of two, not beyond two
        sub-items per PCU."""
        return _candidates(self, pieces, most_pcus)

    def _all_candidates(self, pieces: float, most_pcus: int) -> tuple[Split, ...]:
        base = max(1.0, pieces) * self.items
        out = [self.split(1, 1)]
        s_m = 1
        while s_m <= self._max_s_m():
            s_k = 1
            while s_k <= self._max_s_k():
                if (s_m, s_k) != (1, 1):
                    if base * s_m * s_k > 2 * most_pcus:
                        break
                    out.append(self.split(s_m, s_k))
                s_k *= 2
            s_m *= 2
            if base * s_m > 2 * most_pcus:
                break
        return tuple(out)


# a mapping asks for the same splits of the same pieces many times over (one per bisection step)
@lru_cache(maxsize=65536)
def _split(work: GemmWork, s_m: int, s_k: int) -> Split:
    return work._cost_of(s_m, s_k)


@lru_cache(maxsize=16384)
def _candidates(work: GemmWork, pieces: float, most_pcus: int) -> tuple[Split, ...]:
    return work._all_candidates(pieces, most_pcus)


@hashed_once
@dataclass(frozen=True)
class SimdWork:
    """SIMD work as items (vectors or rows) of one or more passes (see the module docstring)."""

    items: int
    #: steady cycles of one item in each pass (its PCU's compute or its input stream, the larger)
    pass_cycles: tuple[float, ...]
    latency: int


@hashed_once
@dataclass(frozen=True)
class PmuWork:
    """Work done by PMUs alone (gather, scatter): nothing for a PCU."""

    latency: int


StageModel = GemmWork | SimdWork | PmuWork


def stream_bytes_per_cycle(socket: SocketSpec) -> int:
    """Bytes per cycle of one statically routed stream: one PMU port, one mesh link."""
    return min(pmu_port_bytes_per_cycle(socket.pmu), mesh_bytes_per_cycle(socket.tile.vector_network))


def local_hop(socket: SocketSpec) -> int:
    """Head latency between a unit and its neighbour across one switch (a stage's PCU and PMU)."""
    return mesh_latency_cycles(socket.tile.vector_network, 1)


def reduce_rounds(socket: SocketSpec) -> tuple[int, ...]:
    """Latency of each round of a cross-PCU reduction: partners ``2^round`` PCUs apart (PCUs sit
    two cells apart along a row of the checkerboard), then the receiving PCU's pipeline."""
    diameter = socket.tile.grid_rows + socket.tile.grid_cols
    net, pcu = socket.tile.vector_network, socket.pcu
    out, hops = [], 2
    while True:
        out.append(mesh_latency_cycles(net, min(hops, diameter)) + pcu.pipeline_latency_cycles)
        if hops >= diameter:
            return tuple(out)
        hops *= 2


class _GemmUnits(NamedTuple):
    """What every GEMM piece's work reads of a socket for one datatype (:func:`_gemm_units`)."""

    k_per_block: int
    row_cycles: int
    k_per_stage: int
    stages: int
    lanes: int
    pipeline_latency: int
    hop_cycles: int
    stream_bytes_per_cycle: int
    reduce_round_cycles: tuple[int, ...]
    psum_bytes: int
    #: the partial sum's trip to a neighbouring output PMU and back between K blocks
    round_trip_cycles: int


#: each socket's :class:`_GemmUnits` by datatype, by the socket's identity (specs are frozen)
_units_memo: IdentityMemo[_GemmUnits] = IdentityMemo(size=256)


def _gemm_units(socket: SocketSpec, dtype: str) -> _GemmUnits:
    """The socket's PCU geometry, hops, stream width and reduction rounds for ``dtype``, worked out
    once per socket: the mapper builds thousands of GEMM pieces' work on one socket, and these
    took most of the time of building one."""
    def compute() -> _GemmUnits:
        pcu = socket.pcu
        k_per_block, row_cycles = gemm_geometry(pcu, dtype)
        per_stage = k_per_block // pcu.stages if mac_rate(pcu, dtype) >= 1 else 1
        return _GemmUnits(k_per_block, row_cycles, per_stage, pcu.stages, pcu.lanes, gemm_pipeline_cycles(pcu, dtype),
                          local_hop(socket), stream_bytes_per_cycle(socket), reduce_rounds(socket),
                          accumulator_bytes(pcu),
                          partial_sum_round_trip_cycles(pcu, socket.pmu, socket.tile.vector_network, 1))
    return _units_memo.get(socket, (dtype,), compute)


def gemm_work(socket: SocketSpec, op: Operator, piece: dict[str, int], dataflow: str, efficiency: float,
              split_k: bool) -> GemmWork:
    """The work of one GEMM piece (``count``, ``m``, ``k``, ``n``) in ``dataflow``; ``split_k``
    when the piece is one K range of outputs other pieces accumulate into too."""
    u = _gemm_units(socket, op.dtype)
    width = min(piece["n"], u.lanes)
    return built(
        GemmWork, dataflow=dataflow, count=piece["count"], m=piece["m"], k=piece["k"],
        n_blocks=math.ceil(piece["n"] / u.lanes), k_blocks=math.ceil(piece["k"] / u.k_per_block),
        k_per_stage=u.k_per_stage, row_cycles=u.row_cycles, stages=u.stages, lanes=u.lanes, width=width,
        pipeline_latency=u.pipeline_latency,
        # the partial sum's trip to the output PMU and back between K blocks; B reaches the PCU as
        # BF16 whatever it is stored as (weights are widened on the way)
        accumulate_latency=u.round_trip_cycles, efficiency=efficiency, a_bytes=ACT_BYTES,
        b_bytes=ACT_BYTES, out_bytes=u.psum_bytes if split_k else ACT_BYTES,
        psum_vector_bytes=u.lanes * u.psum_bytes, stream_bytes_per_cycle=u.stream_bytes_per_cycle,
        hop_cycles=u.hop_cycles, reduce_round_cycles=u.reduce_round_cycles, continues_k=split_k)


def reduce_len(socket: SocketSpec, op: Operator) -> int:
    """Length of the rows a row-wise SIMD operator reduces: ``op.n``, else one vector as wide as
    the stream feeds (:func:`fed_width`; the PCU's lanes at SN40L's 32)."""
    return op.n if op.n > 0 else fed_width(socket, DTYPE_BYTES.get(op.dtype, ACT_BYTES))


def fed_width(socket: SocketSpec, element_bytes: int) -> int:
    """The narrowest vector a piece is cut to: the PCU's lanes, or as many values as one stream
    (a PMU port, a mesh link) carries a cycle if fewer. A vector wider than the stream takes more
    than a cycle to feed whatever the lanes, so a piece cut to the stream's width loses nothing,
    and the pieces of a PCU wider than its stream are as fine as those of one as wide (at SN40L's
    32 lanes, 32 FP32 partial sums or 64 BF16 values fill the 128-byte port: the lanes bind)."""
    return max(1, min(socket.pcu.lanes, stream_bytes_per_cycle(socket) // element_bytes))


def simd_work(socket: SocketSpec, op: Operator, elements: int, transcendentals: int, size: int) -> SimdWork:
    """Items and per-item cycles of one SIMD piece of ``elements`` (module docstring of
    :mod:`sn40l_sim.mapper.division`)."""
    pcu = socket.pcu
    lanes, lat, tree = pcu.lanes, pcu.pipeline_latency_cycles, pcu.reduction_tree_latency_cycles
    hop = local_hop(socket)
    tail_rate = pcu.tail_stage.transcendentals_per_lane_per_cycle * lanes
    # an item's values pass through the PCU's input stream once; only the lanes that carry data
    # are fed (idle lanes are masked, as a GEMM block narrower than the PCU: GemmWork.width), so a
    # wider PCU never streams more bytes for the same piece
    rate = stream_bytes_per_cycle(socket)
    row_len = reduce_len(socket, op)
    if op.kind in ("softmax", "reduction", "topk"):
        rows_in = max(1, math.ceil(elements / row_len))
        if row_len >= lanes:
            items, per_item = math.ceil(elements / row_len), math.ceil(row_len / lanes)
        else:
            items, per_item = math.ceil(elements / (lanes // row_len * row_len)), 1
        # the piece's values over its items: the last item may hold fewer (a row of op.n = 0 is
        # lanes long, and rows packed in a vector may not fill it)
        row = max(per_item, elements / max(1, items) * size / rate)
        if op.kind == "reduction":
            return SimdWork(items, (row,), 2 * hop + lat + tree)
        if op.kind == "topk":
            # one compare-and-select pass in the ALUs, one pass through the lane tree
            return SimdWork(items, (2 * row,), 2 * hop + lat + tree)
        exp = min(transcendentals, elements) / rows_in / tail_rate
        rest = max(0, transcendentals - elements) / rows_in / tail_rate
        scalar = mesh_latency_cycles(socket.tile.scalar_network, 1)
        # the next pass of a row waits for its max (its sum) to cross the tree and the scalar network
        latency = 2 * hop + SOFTMAX_PASSES * lat + 2 * tree + 2 * (scalar + per_item)
        return SimdWork(items, (row, max(row, exp), max(row, rest)), latency)
    if op.kind in ("elementwise",):
        items = math.ceil(elements / lanes)
        # the piece's values over its vectors: the last vector's idle lanes are not fed either
        passes = max(1.0, elements / max(1, items) * size / rate, transcendentals / max(1, items) / tail_rate)
        return SimdWork(items, (passes,), 2 * hop + lat)
    raise ValueError(f"operator {op.name!r} has unknown kind {op.kind!r}")
