"""Cutting one operator of a fused kernel into *pieces*, the data tiles its stage streams, and
describing a piece's work and PMU traffic.

A fused kernel streams its tensors through its pipeline ``n_tiles`` data tiles at a time. Each
operator is cut into about that many pieces (fewer when its dimensions run out); one piece is what
its stage holds in PMUs at once (double-buffered by the allocator) and computes in one go.

* **GEMM** ``count x (C[m,n] = A[m,k] @ B[k,n])``: halve whichever of ``count, n, m, k`` shrinks
  the piece's buffer ``A + B + C`` most, never below one systolic block (``n`` below the PCU's
  lanes, or below the partial sums, ``pcu.accumulator_dtype``, one stream feeds a cycle if fewer,
  :func:`~sn40l_sim.mapper.work.fed_width`; ``k`` below one K block, ``m`` below the PCU's stages
  in rows, where a block stops getting faster: its weights take ``stages`` cycles to load); where
  halvings tie, each is
  followed and the cheapest piece taken (:mod:`~sn40l_sim.mapper.halving`). Splitting ``k``
  accumulates partial sums in the output buffer (FlashAttention's K/V tiles are the ``n`` split
  of ``Q K^T`` and the ``k`` split of ``P V``).
* **SIMD kinds** (softmax, elementwise, reduction, topk, gather, scatter): split into whole rows,
  ``reduce_len`` (``op.n``, else one vector as wide as the stream feeds) elements each.

A piece's work is a :mod:`~sn40l_sim.mapper.work` model (items, their cycles on one PCU from
:mod:`sn40l_sim.hardware.units.pcu`, the stage's fill and drain); the allocator divides it over the
stage's PCUs (:mod:`~sn40l_sim.mapper.division`). A GEMM is mapped in one of the two dataflows of :mod:`sn40l_sim.hardware.units.pcu`:

* **weight-stationary**: every row of every (column block, K block) reads back its FP32
  partial-sum vector from the output PMU (except in the first K block) and writes it again, reads
  a ``k_per_block`` slice of A, and the weights are read once; the partial sum's round trip (a mesh
  hop to the PMU and one back) sits between consecutive K blocks of a row.
* **output-stationary**: the accumulators stay in the PCU; B is re-read for every ``stages`` rows
  of A and A for every column block, and the output is written once.

Both are assumptions: SN40L's PCU is stated to run as a systolic array (docs/reference.md §1, Hot Chips
2024), not which dataflow, and no public source says that partial sums round-trip through PMUs.
So the mapper takes, per operator, the dataflow that occupies its units for fewer cycles: PCU
cycles plus PMU cycles of a piece on one of each (all stages draw on both pools, and a tile has as
many PMUs as PCUs), ties to weight-stationary, the mapping the unit-level simulation checks; the
kernel mapper also tries every GEMM in one dataflow (:func:`~sn40l_sim.mapper.kernel.best_plan`).
Under these models output-stationary nearly always wins: its PMU traffic per MAC is about a third
of the partial sums' (B and A slices in, nothing out but the result), its compute is the same up
to padding (M to ``stages`` instead of K to ``k_per_block``), and GEMMs with fewer rows than the
pipeline latency lose nothing to the partial sum's round trip. Weight-stationary wins where K is
shorter than ``stages`` or padding favours it, and whenever a budget asks for it. A :class:`~sn40l_sim.mapper.budget.UnitBudget` can
restrict the choice.

The inputs arriving from the producers are written once. Sizes: GEMM activations are BF16
(2 bytes); the streamed operand B takes its bytes from the operator's weight or KV bytes when it
has them (FP8 weights are 1 byte); SIMD operands use the operator's datatype.

Examples
--------
>>> from sn40l_sim.mapper._examples import example_socket
>>> from sn40l_sim.ir import Operator
>>> socket = example_socket()
>>> op = Operator("up", "gemm", flops=2 * 64 * 1024 * 4096, m=64, k=1024, n=4096, weight_bytes=1024 * 4096)
>>> t = tile_operator(socket, op, 8, efficiency=1.0)
>>> t.pieces, (t.count, t.m, t.k, t.n), t.dataflow
(8, (1, 64, 1024, 512), 'output_stationary')
>>> ws = tile_operator(socket, op, 8, 1.0, UnitBudget(dataflows=("weight_stationary",)))
>>> ws.dataflow, (t.sram_read_bytes + t.sram_write_bytes) / (ws.sram_read_bytes + ws.sram_write_bytes) < 0.6
('weight_stationary', True)
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from sn40l_sim.frozen import built
from sn40l_sim.hardware.spec import SocketSpec
from sn40l_sim.hardware.units.pcu import accumulator_bytes, gemm_geometry
from sn40l_sim.hardware.units.pmu import pmu_cycles, pmu_port_bytes_per_cycle, pmu_random_access_rate
from sn40l_sim.ir import ACT_BYTES, DTYPE_BYTES, Operator
from sn40l_sim.mapper.budget import FINEST_PIECE, NO_LIMITS, OUTPUT_STATIONARY, WEIGHT_STATIONARY, UnitBudget
from sn40l_sim.mapper.division import stage_division
from sn40l_sim.mapper.halving import GEMM_DIMS, tied_pieces
from sn40l_sim.mapper.pmu_traffic import os_traffic, ws_traffic
from sn40l_sim.mapper.work import (
    GemmWork,
    PmuWork,
    StageModel,
    fed_width,
    gemm_work,
    local_hop,
    reduce_len,
    simd_work,
)


@dataclass(frozen=True)
class OpTiling:
    """One operator cut into ``pieces`` equal pieces.

    Attributes
    ----------
    op : Operator
    pieces : int
        Pieces the operator is cut into.
    count, m, k, n : int
        GEMM dimensions of one piece (``count`` independent GEMMs); for SIMD kinds ``m`` is the
        rows of a piece and ``k`` the row length.
    elements : int
        Elements of one piece (SIMD kinds; ``count * m * n`` outputs for a GEMM).
    in_bytes, out_bytes : int
        Bytes entering and leaving the stage per piece (its inputs written into its PMUs; the
        stream to the next stage).
    buffer_bytes : int
        On-chip bytes of one piece (inputs and outputs, before double buffering).
    sram_read_bytes, sram_write_bytes : int
        Bytes the stage's PMUs read and write per piece.
    addresses : int
        Addresses the PMUs generate per piece (indexed rows of a gather or scatter, counted at the
        rate random banks allow; partial-sum and operand rows of a GEMM), 0 for plain streams.
    parallelism : int
        PCUs one piece can be spread over usefully.
    resource : str
        ``"compute"`` for systolic GEMMs, ``"simd"`` for SIMD work, ``"sram"`` for PMU-only work.
    work : GemmWork, SimdWork or PmuWork
        The piece's work as items (:mod:`sn40l_sim.mapper.division`).
    """

    op: Operator
    pieces: int
    count: int
    m: int
    k: int
    n: int
    elements: int
    in_bytes: int
    out_bytes: int
    buffer_bytes: int
    sram_read_bytes: int
    sram_write_bytes: int
    addresses: int
    parallelism: int
    resource: str
    work: StageModel

    @property
    def dataflow(self) -> str:
        """The GEMM dataflow (empty for other kinds)."""
        return self.work.dataflow if isinstance(self.work, GemmWork) else ""


def tile_operator(socket: SocketSpec, op: Operator, target_pieces: int, efficiency: float,
                  budget: UnitBudget = NO_LIMITS) -> OpTiling:
    """Cut ``op`` into about ``target_pieces`` pieces and describe their work.

    Parameters
    ----------
    socket : SocketSpec
        Its PCU, PMU and tile networks.
    op : Operator
    target_pieces : int
        Data tiles the kernel streams; the operator is cut into at most about that many pieces.
    efficiency : float
        Calibrated ``systolic_efficiency`` for GEMMs (SIMD work is not scaled).
    budget : UnitBudget
        The GEMM dataflows to choose from (module docstring) and the dimensions a GEMM's pieces
        may cut.

    Returns
    -------
    OpTiling
    """
    if target_pieces < 1:
        raise ValueError(f"target_pieces must be >= 1, got {target_pieces}")
    if op.kind == "gemm":
        return _tile_gemm(socket, op, target_pieces, efficiency, budget)
    return _tile_simd(socket, op, target_pieces)


def max_pieces(socket: SocketSpec, op: Operator) -> int:
    """The most pieces ``op`` can be cut into (every dimension at its minimum piece).

    >>> from sn40l_sim.mapper._examples import example_socket
    >>> max_pieces(example_socket(), Operator("x", "elementwise", elements=32 * 100))
    100
    """
    if op.kind == "gemm":
        dims, minimum = _gemm_limits(socket, op)
        return math.prod(math.ceil(dims[d] / minimum[d]) for d in GEMM_DIMS)
    rows, _ = _simd_rows(socket, op)
    return rows



def _b_element_bytes(op: Operator) -> float:
    streamed = op.weight_bytes + op.kv_read_bytes
    if streamed:
        return streamed / (op.count * op.k * op.n)
    return float(ACT_BYTES)


def _gemm_limits(socket: SocketSpec, op: Operator) -> tuple[dict[str, int], dict[str, int]]:
    pcu = socket.pcu
    if min(op.m, op.k, op.n, op.count) <= 0:
        raise ValueError(f"GEMM operator {op.name!r} needs positive m, k, n and count "
                         f"(got m={op.m}, k={op.k}, n={op.n}, count={op.count})")
    k_per_block, _ = gemm_geometry(pcu, op.dtype)
    dims = {"count": op.count, "m": op.m, "k": op.k, "n": op.n}
    minimum = {"count": 1, "m": min(op.m, pcu.stages),
               "k": min(op.k, k_per_block), "n": min(op.n, fed_width(socket, accumulator_bytes(pcu)))}
    return dims, minimum


def _tile_gemm(socket: SocketSpec, op: Operator, target: int, efficiency: float,
               budget: UnitBudget) -> OpTiling:
    return min(gemm_tilings(socket, op, target, efficiency, budget), key=lambda o: (o[0], o[1]))[2]


def gemm_tilings(socket: SocketSpec, op: Operator, target: int, efficiency: float,
                 budget: UnitBudget = NO_LIMITS) -> list[tuple[int, bool, OpTiling]]:
    """GEMM ``op`` cut for ``target`` pieces in each dataflow ``budget`` allows, as ``(cost, not
    weight-stationary, tiling)``: :func:`tile_operator` takes the least, and each tiling is the one
    it gives under a budget of that dataflow alone (of the pieces equally small halvings reach,
    :func:`~sn40l_sim.mapper.halving.tied_pieces`, the least costly in that dataflow, the first on
    ties; under ``budget.gemm_piece`` :data:`~.budget.FINEST_PIECE` the one of most whole items,
    the least costly of those), so a caller memoising tilings keeps them all.

    The cost judges a piece on one PCU, where its work divides without remainder; a stage spreads
    a piece's whole items over its PCUs, and of two equally small pieces the one cut along K into
    more row groups (more items) spreads more evenly. Llama-3.1-8B's K projection at 1,024 rows
    (``k = 4096, n = 128``) in 32 pieces: ``256 x 512`` is the cheaper on one PCU (half the
    partial sums reloaded), 172 output-stationary items; ``512 x 256`` has 344 of half the
    cycles, nine rounds on 39 PCUs against five rounds of twice the length. The kernel mapper
    plans both (:func:`~sn40l_sim.mapper.kernel.best_plan`); at 1,025 rows no halving ties and
    the pieces are ``513 x 256``.

    >>> from sn40l_sim.mapper._examples import example_socket
    >>> op = Operator("k", "gemm", m=1024, k=4096, n=128, weight_bytes=4096 * 128 * 2)
    >>> cheap = gemm_tilings(example_socket(), op, 32, 1.0, UnitBudget(dataflows=(OUTPUT_STATIONARY,)))[0][2]
    >>> fine = gemm_tilings(example_socket(), op, 32, 1.0, UnitBudget(dataflows=(OUTPUT_STATIONARY,),
    ...                                                               gemm_piece=FINEST_PIECE))[0][2]
    >>> (cheap.m, cheap.k, cheap.work.items), (fine.m, fine.k, fine.work.items)
    ((256, 512, 172), (512, 256, 344))
    """
    dims, minimum = _gemm_limits(socket, op)
    b_bytes = _b_element_bytes(op)
    pieces = tied_pieces(dims, minimum, b_bytes, target, budget.gemm_cuts)
    finest = budget.gemm_piece == FINEST_PIECE
    options = []
    for dataflow in budget.dataflows:
        tied = [_gemm_option(socket, op, dims, piece, b_bytes, dataflow, efficiency) for piece in pieces]
        options.append(min(tied, key=lambda o: (-o[2].work.items, o[0]) if finest else o[0]))
    return options


def _gemm_option(socket: SocketSpec, op: Operator, dims: dict[str, int], piece: dict[str, int], b_bytes: float,
                 dataflow: str, efficiency: float) -> tuple[int, bool, OpTiling]:
    """``(cost, not weight-stationary, tiling)`` of ``op`` cut in ``piece`` pieces in ``dataflow``."""
    pcu = socket.pcu
    s = {d: math.ceil(dims[d] / piece[d]) for d in GEMM_DIMS}
    pieces = math.prod(s.values())
    c, m, k, n = piece["count"], piece["m"], piece["k"], piece["n"]
    a_piece = c * m * k * ACT_BYTES
    b_piece = math.ceil(c * k * n * b_bytes)
    c_piece = c * m * n * ACT_BYTES
    split_k = s["k"] > 1
    work = gemm_work(socket, op, piece, dataflow, efficiency, split_k)
    traffic = (os_traffic(pcu, piece, b_piece, a_piece, split_k) if dataflow == OUTPUT_STATIONARY
               else ws_traffic(pcu, op, piece, b_piece, a_piece, split_k))
    one = stage_division(work, 1.0, 1)
    # PCU-cycles plus PMU-cycles: every stage draws on both pools, equally large on a tile; of all
    # the pieces (tied pieces may differ in number)
    cost = pieces * (one.cycles + pmu_cycles(socket.pmu, traffic.reads, traffic.writes, traffic.addresses))
    sub_items = work.items * (work.m if work.dataflow == WEIGHT_STATIONARY else 1) * max(1, work.k_blocks)
    tiling = built(OpTiling, op=op, pieces=pieces, count=c, m=m, k=k, n=n, elements=c * m * n,
                   in_bytes=a_piece + b_piece, out_bytes=c_piece,
                   buffer_bytes=a_piece + b_piece + c_piece, sram_read_bytes=traffic.reads,
                   sram_write_bytes=traffic.writes, addresses=traffic.addresses, parallelism=sub_items,
                   resource="compute", work=work)
    return cost, dataflow != WEIGHT_STATIONARY, tiling


def _simd_rows(socket: SocketSpec, op: Operator) -> tuple[int, int]:
    """``(rows, row_len)``: whole rows for row-wise kinds, vectors as wide as the stream feeds
    otherwise (:func:`fed_width`)."""
    size = DTYPE_BYTES.get(op.dtype, ACT_BYTES)
    row = reduce_len(socket, op) if op.kind in ("softmax", "reduction", "topk") else fed_width(socket, size)
    return max(1, math.ceil(op.elements / row)), row


def _tile_simd(socket: SocketSpec, op: Operator, target: int) -> OpTiling:
    pcu = socket.pcu
    if op.elements < 0:
        raise ValueError(f"operator {op.name!r} has negative elements")
    rows, row_len = _simd_rows(socket, op)
    pieces = min(target, rows)
    rows_per_piece = math.ceil(rows / pieces)
    pieces = math.ceil(rows / rows_per_piece)
    elements = min(op.elements, rows_per_piece * row_len)
    trans = math.ceil(op.transcendentals * elements / op.elements) if op.elements else 0
    size = DTYPE_BYTES.get(op.dtype, ACT_BYTES)
    reduces = op.kind in ("reduction", "topk")
    out_elements = math.ceil(elements / row_len) if reduces else elements
    in_bytes, out_bytes = elements * size, out_elements * size
    reads, writes, addresses = in_bytes, in_bytes, 0
    resource = "simd"
    work: StageModel
    if op.kind in ("gather", "scatter"):
        # PMU to PMU through the address generators: one address per row (op.k wide when given),
        # issued at the rate random banks allow
        width = op.k if op.k > 0 else pcu.lanes
        indexed = math.ceil(elements / width)
        if width * size < pmu_port_bytes_per_cycle(socket.pmu):
            rate = pmu_random_access_rate(socket.pmu, width * size)
            addresses = math.ceil(indexed * socket.pmu.addresses_per_cycle / rate)
        elif op.k > 0:
            # a row the operator names, wider than the port, takes whole port cycles, one access
            # each: a 200-byte row on a 128-byte port takes two, not the 1.56 its bytes alone would
            # (:func:`~sn40l_sim.hardware.units.pmu.pmu_gather_cycles`)
            port = pmu_port_bytes_per_cycle(socket.pmu) * socket.pmu.read_ports
            addresses = indexed * math.ceil(width * size / port) * socket.pmu.addresses_per_cycle
        else:
            # lanes-wide pieces of rows the operator does not name: their bytes bind
            addresses = indexed
        work, resource = PmuWork(local_hop(socket)), "sram"
    else:
        work = simd_work(socket, op, elements, trans, size)
        if op.kind == "softmax":
            # the scores are read twice (row max; exp), exp(x - max) written and read, P written
            reads, writes = 2 * in_bytes + elements * ACT_BYTES, in_bytes + 2 * elements * ACT_BYTES
    return built(OpTiling, op=op, pieces=pieces, count=1, m=rows_per_piece, k=row_len, n=0,
                 elements=elements, in_bytes=in_bytes,
                 out_bytes=out_bytes, buffer_bytes=in_bytes + out_bytes, sram_read_bytes=reads,
                 sram_write_bytes=writes, addresses=addresses,
                 parallelism=0 if isinstance(work, PmuWork) else work.items * len(work.pass_cycles),
                 resource=resource, work=work)
