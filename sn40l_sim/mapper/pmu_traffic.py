"""PMU traffic of one GEMM piece in each dataflow: the bytes its PMUs read and write and the
addresses they generate (the weight-stationary and output-stationary mappings of
:mod:`sn40l_sim.mapper.work`, priced by :func:`sn40l_sim.mapper.tiling.tile_operator` to choose
between them)."""
from __future__ import annotations

import math
from dataclasses import dataclass

from sn40l_sim.hardware.spec import PCUSpec
from sn40l_sim.hardware.units.pcu import accumulator_bytes, gemm_geometry
from sn40l_sim.ir import ACT_BYTES, Operator


@dataclass(frozen=True)
class Traffic:
    """Bytes a piece's PMUs read and write, and the addresses they generate."""

    reads: int
    writes: int
    addresses: int


def ws_traffic(pcu: PCUSpec, op: Operator, piece: dict[str, int], b_piece: int, a_piece: int,
               split_k: bool) -> Traffic:
    """PMU traffic of a weight-stationary piece: every row of every (column block, K block) reads
    back its partial-sum vector (``pcu.accumulator_dtype``) (except in the first K block of the output) and writes it
    again, reads a ``k_per_block`` slice of A; the weights are read once; the inputs arriving from
    the producers (``a_piece``, ``b_piece`` bytes) are written once."""
    c, m, k, n = piece["count"], piece["m"], piece["k"], piece["n"]
    k_per_block, _ = gemm_geometry(pcu, op.dtype)
    n_blocks, k_blocks = math.ceil(n / pcu.lanes), math.ceil(k / k_per_block)
    width = min(n, pcu.lanes)   # a block's columns that carry data (GemmWork.width)
    rows = c * n_blocks * k_blocks * m
    first = c * n_blocks * m
    psum = pcu.lanes * accumulator_bytes(pcu)
    # a k split accumulates into the same output: the partial sums of earlier k pieces come back
    psum_reads = rows - (0 if split_k else first)
    weights = c * n_blocks * k_blocks * pcu.stages * width * ACT_BYTES
    reads = psum_reads * psum + rows * k_per_block * ACT_BYTES + weights
    writes = rows * psum + a_piece + b_piece
    addresses = psum_reads + rows + rows + c * n_blocks * k_blocks * pcu.stages
    return Traffic(reads, writes, addresses)


def os_traffic(pcu: PCUSpec, piece: dict[str, int], b_piece: int, a_piece: int, split_k: bool) -> Traffic:
    """PMU traffic of an output-stationary piece: B once per ``stages`` rows of A, A once per
    column block, one B row and one A column slice addressed per K step, the output written once
    (partial sums, reloaded, when other pieces share its K range); inputs written once."""
    c, m, k, n = piece["count"], piece["m"], piece["k"], piece["n"]
    n_blocks, groups = math.ceil(n / pcu.lanes), math.ceil(m / pcu.stages)
    width = min(n, pcu.lanes)   # a block's columns that carry data (GemmWork.width)
    tiles = c * n_blocks * groups
    # B once per row group, A once per column block (a column slice of `stages` rows per k); both
    # are read as BF16, as the weight-stationary mapping reads its weights
    reads = tiles * k * (width + pcu.stages) * ACT_BYTES
    out = tiles * pcu.stages * width * (accumulator_bytes(pcu) if split_k else ACT_BYTES)
    if split_k:
        # a k split reloads each tile's accumulators (all but the first k piece, on average)
        reads += tiles * pcu.stages * width * accumulator_bytes(pcu)
    return Traffic(reads, out + a_piece + b_piece, 2 * tiles * k + (tiles * pcu.stages if split_k else 0))
