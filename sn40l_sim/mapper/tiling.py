"""Cutting one operator of a fused kernel into *pieces*, the data tiles its stage streams.

A fused kernel streams its tensors through its pipeline ``n_tiles`` data tiles at a time. Each
operator is cut into about that many pieces (fewer when its dimensions run out); one piece is what
its stage holds in PMUs at once (double-buffered by the allocator) and computes in one go.

* **GEMM** ``count x (C[m,n] = A[m,k] @ B[k,n])``: halve whichever of ``count, n, m, k`` shrinks
  the piece's buffer ``A + B + C`` most, never below one systolic block (``n`` below the PCU's
  lanes, ``k`` below one K block, ``m`` below the pipeline latency in rows, where a block stops
  getting faster). Splitting ``k`` accumulates partial sums in the output buffer (FlashAttention's
  K/V tiles are the ``n`` split of ``Q K^T`` and the ``k`` split of ``P V``).
* **SIMD kinds** (softmax, elementwise, reduction, topk, gather, scatter): split into whole rows,
  ``reduce_len`` (``op.n``, else the PCU lanes) elements each.

Cycles of a piece on ONE PCU come from :mod:`sn40l_sim.hardware.units.pcu`; the allocator divides
a stage's work over its PCUs. The PMU traffic of a GEMM piece follows the systolic mapping of that
module (N over lanes, K in blocks of ``k_per_block``, rows of A streaming): every row of every
(column block, K block) reads back its FP32 partial-sum vector from the output PMU (except in the
first K block) and writes it again, reads a ``k_per_block`` slice of A, and the weights are read
once; the inputs arriving from the producers are written once. Sizes: GEMM activations are BF16 (2 bytes); the streamed operand B
takes its bytes from the operator's weight or KV bytes when it has them (FP8 weights are 1 byte);
SIMD operands use the operator's datatype.

Examples
--------
>>> from sn40l_sim.hardware.units._examples import example_pcu
>>> from sn40l_sim.ir import Operator
>>> op = Operator("up", "gemm", flops=2 * 64 * 1024 * 4096, m=64, k=1024, n=4096, weight_bytes=1024 * 4096)
>>> t = tile_operator(example_pcu(), op, 8, efficiency=1.0)
>>> t.pieces, (t.count, t.m, t.k, t.n)
(8, (1, 64, 1024, 512))
>>> t.total_cycles == 8 * gemm_cycles(example_pcu(), 64, 1024, 512)
True
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from sn40l_sim.hardware.spec import PCUSpec
from sn40l_sim.hardware.units.pcu import gemm_cycles, gemm_geometry, reduction_cycles, simd_cycles
from sn40l_sim.ir import ACT_BYTES, DTYPE_BYTES, Operator

#: SIMD passes of a softmax: one ALU pass (subtract the max, exp in the tail stage, scale by the
#: reciprocal sum: 3 ops per element) and two trips through the lane tree (row max, row sum)
SOFTMAX_ALU_OPS = 3
SOFTMAX_TREE_PASSES = 2
#: the systolic array accumulates in FP32: a partial-sum vector is lanes x 4 bytes
PSUM_BYTES = DTYPE_BYTES["fp32"]
#: GEMM dimensions in the order ties are broken when choosing which to halve
_GEMM_DIMS = ("count", "n", "m", "k")


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
    total_cycles : int
        Cycles of the whole operator on ONE PCU (all pieces, padding included).
    in_bytes, out_bytes : int
        Bytes entering and leaving the stage per piece (its inputs written into its PMUs; the
        stream to the next stage).
    buffer_bytes : int
        On-chip bytes of one piece (inputs and outputs, before double buffering).
    sram_read_bytes, sram_write_bytes : int
        Bytes the stage's PMUs read and write per piece.
    addresses : int
        Addresses the PMUs generate per piece (indexed rows of a gather or scatter; partial-sum
        and operand rows of a GEMM), 0 for plain streams.
    parallelism : int
        PCUs one piece can be spread over usefully.
    resource : str
        ``"compute"`` for systolic GEMMs, ``"simd"`` otherwise.
    """

    op: Operator
    pieces: int
    count: int
    m: int
    k: int
    n: int
    elements: int
    total_cycles: int
    in_bytes: int
    out_bytes: int
    buffer_bytes: int
    sram_read_bytes: int
    sram_write_bytes: int
    addresses: int
    parallelism: int
    resource: str


def tile_operator(pcu: PCUSpec, op: Operator, target_pieces: int, efficiency: float) -> OpTiling:
    """Cut ``op`` into about ``target_pieces`` pieces and cost them on one PCU.

    Parameters
    ----------
    pcu : PCUSpec
    op : Operator
    target_pieces : int
        Data tiles the kernel streams; the operator is cut into at most about that many pieces.
    efficiency : float
        Calibrated ``systolic_efficiency`` for GEMMs (SIMD work is not scaled).

    Returns
    -------
    OpTiling
    """
    if target_pieces < 1:
        raise ValueError(f"target_pieces must be >= 1, got {target_pieces}")
    if op.kind == "gemm":
        return _tile_gemm(pcu, op, target_pieces, efficiency)
    return _tile_simd(pcu, op, target_pieces)


def max_pieces(pcu: PCUSpec, op: Operator) -> int:
    """The most pieces ``op`` can be cut into (every dimension at its minimum piece).

    >>> from sn40l_sim.hardware.units._examples import example_pcu
    >>> max_pieces(example_pcu(), Operator("x", "elementwise", elements=32 * 100))
    100
    """
    if op.kind == "gemm":
        dims, minimum = _gemm_limits(pcu, op)
        return math.prod(math.ceil(dims[d] / minimum[d]) for d in _GEMM_DIMS)
    rows, _ = _simd_rows(pcu, op)
    return rows


def _b_element_bytes(op: Operator) -> float:
    streamed = op.weight_bytes + op.kv_read_bytes
    if streamed:
        return streamed / (op.count * op.k * op.n)
    return float(ACT_BYTES)


def _gemm_limits(pcu: PCUSpec, op: Operator) -> tuple[dict[str, int], dict[str, int]]:
    if min(op.m, op.k, op.n, op.count) <= 0:
        raise ValueError(f"GEMM operator {op.name!r} needs positive m, k, n and count "
                         f"(got m={op.m}, k={op.k}, n={op.n}, count={op.count})")
    k_per_block, _ = gemm_geometry(pcu, op.dtype)
    dims = {"count": op.count, "m": op.m, "k": op.k, "n": op.n}
    minimum = {"count": 1, "m": min(op.m, pcu.pipeline_latency_cycles),
               "k": min(op.k, k_per_block), "n": min(op.n, pcu.lanes)}
    return dims, minimum


def _gemm_buffer(piece: dict[str, int], b_bytes: float) -> float:
    c, m, k, n = piece["count"], piece["m"], piece["k"], piece["n"]
    return c * (m * k * ACT_BYTES + k * n * b_bytes + m * n * ACT_BYTES)


def _tile_gemm(pcu: PCUSpec, op: Operator, target: int, efficiency: float) -> OpTiling:
    dims, minimum = _gemm_limits(pcu, op)
    b_bytes = _b_element_bytes(op)
    piece = dict(dims)

    def splits(p: dict[str, int]) -> dict[str, int]:
        return {d: math.ceil(dims[d] / p[d]) for d in _GEMM_DIMS}

    while math.prod(splits(piece).values()) < target:
        best: tuple[float, dict[str, int]] | None = None
        for d in _GEMM_DIMS:
            half = math.ceil(piece[d] / 2)
            if half < minimum[d] or half == piece[d]:
                continue
            trial = {**piece, d: half}
            size = _gemm_buffer(trial, b_bytes)
            if best is None or size < best[0]:
                best = (size, trial)
        if best is None:
            break
        piece = best[1]
    s = splits(piece)
    pieces = math.prod(s.values())
    c, m, k, n = piece["count"], piece["m"], piece["k"], piece["n"]
    one = gemm_cycles(pcu, m, k, n, op.dtype, efficiency)
    # independent GEMMs are counted exactly; m, n, k splits pad their last piece
    total = op.count * s["m"] * s["n"] * s["k"] * one
    a_piece = c * m * k * ACT_BYTES
    b_piece = math.ceil(c * k * n * b_bytes)
    c_piece = c * m * n * ACT_BYTES
    k_per_block, _ = gemm_geometry(pcu, op.dtype)
    n_blocks, k_blocks = math.ceil(n / pcu.lanes), math.ceil(k / k_per_block)
    rows = c * n_blocks * k_blocks * m
    first = c * n_blocks * m
    psum = pcu.lanes * PSUM_BYTES
    # a k split accumulates into the same output: the partial sums of earlier k pieces come back
    psum_reads = rows - (first if s["k"] == 1 else 0)
    weights = c * n_blocks * k_blocks * pcu.stages * pcu.lanes * ACT_BYTES
    reads = psum_reads * psum + rows * k_per_block * ACT_BYTES + weights
    writes = rows * psum + a_piece + b_piece
    addresses = psum_reads + rows + rows + c * n_blocks * k_blocks * pcu.stages
    parallel = c * n_blocks * k_blocks * max(1, m // pcu.pipeline_latency_cycles)
    return OpTiling(op=op, pieces=pieces, count=c, m=m, k=k, n=n, elements=c * m * n,
                    total_cycles=total, in_bytes=a_piece + b_piece, out_bytes=c_piece,
                    buffer_bytes=a_piece + b_piece + c_piece, sram_read_bytes=reads,
                    sram_write_bytes=writes, addresses=addresses, parallelism=parallel,
                    resource="compute")


def _reduce_len(pcu: PCUSpec, op: Operator) -> int:
    return op.n if op.n > 0 else pcu.lanes


def _simd_rows(pcu: PCUSpec, op: Operator) -> tuple[int, int]:
    """``(rows, row_len)``: whole rows for row-wise kinds, lanes-wide vectors otherwise."""
    row = _reduce_len(pcu, op) if op.kind in ("softmax", "reduction", "topk") else pcu.lanes
    return max(1, math.ceil(op.elements / row)), row


def _simd_piece_cycles(pcu: PCUSpec, op: Operator, elements: int, transcendentals: int) -> int:
    reduce_len = _reduce_len(pcu, op)
    if op.kind == "softmax":
        return (simd_cycles(pcu, elements, SOFTMAX_ALU_OPS, transcendentals)
                + SOFTMAX_TREE_PASSES * reduction_cycles(pcu, elements, reduce_len))
    if op.kind == "reduction":
        return reduction_cycles(pcu, elements, reduce_len)
    if op.kind == "topk":
        # one compare-and-select pass in the ALUs, one pass through the lane tree
        return simd_cycles(pcu, elements, 1) + reduction_cycles(pcu, elements, reduce_len)
    if op.kind in ("elementwise", "gather", "scatter"):
        return simd_cycles(pcu, elements, 1, transcendentals)
    raise ValueError(f"operator {op.name!r} has unknown kind {op.kind!r}")


def _tile_simd(pcu: PCUSpec, op: Operator, target: int) -> OpTiling:
    if op.elements < 0:
        raise ValueError(f"operator {op.name!r} has negative elements")
    rows, row_len = _simd_rows(pcu, op)
    pieces = min(target, rows)
    rows_per_piece = math.ceil(rows / pieces)
    pieces = math.ceil(rows / rows_per_piece)
    elements = min(op.elements, rows_per_piece * row_len)
    trans = math.ceil(op.transcendentals * elements / op.elements) if op.elements else 0
    one = _simd_piece_cycles(pcu, op, elements, trans)
    size = DTYPE_BYTES.get(op.dtype, ACT_BYTES)
    reduces = op.kind in ("reduction", "topk")
    out_elements = math.ceil(elements / row_len) if reduces else elements
    in_bytes, out_bytes = elements * size, out_elements * size
    indexed = op.kind in ("gather", "scatter")
    # an indexed access needs one address per row it fetches; rows are op.k wide when given
    addresses = math.ceil(elements / (op.k if op.k > 0 else pcu.lanes)) if indexed else 0
    return OpTiling(op=op, pieces=pieces, count=1, m=rows_per_piece, k=row_len, n=0,
                    elements=elements, total_cycles=pieces * one, in_bytes=in_bytes,
                    out_bytes=out_bytes, buffer_bytes=in_bytes + out_bytes, sram_read_bytes=in_bytes,
                    sram_write_bytes=in_bytes, addresses=addresses, parallelism=max(1, math.ceil(elements / pcu.lanes)),
                    resource="simd")
