"""Small single-tile kernels, and their cycles composed from the tile-level unit models.

These are the kernels the unit-level simulation (:mod:`sn40l_sim.reference.unit_level`) runs cycle
by cycle; :func:`tile_level_cycles` predicts the same kernels from the formulas of
:mod:`sn40l_sim.hardware.units` alone, and the tests hold the two within 5%.
"""
from __future__ import annotations

from dataclasses import dataclass

from sn40l_sim.hardware.spec import SocketSpec
from sn40l_sim.hardware.units._cycles import ceil_cycles, ceil_div
from sn40l_sim.hardware.units.network import mesh_bytes_per_cycle, mesh_latency_cycles
from sn40l_sim.hardware.units.pcu import (
    accumulator_bytes,
    gemm_cycles,
    gemm_geometry,
    gemm_pipeline_cycles,
    partial_sum_round_trip_cycles,
    reduction_cycles,
    simd_cycles,
)
from sn40l_sim.hardware.units.pmu import pmu_cycles, pmu_gather_cycles


@dataclass(frozen=True)
class GemmKernel:
    """``C[m, n] = A[m, k] @ B[k, n]`` on ``pcus`` PCUs (split by column blocks), operands in PMUs
    ``hops`` mesh hops away from each PCU."""

    m: int
    k: int
    n: int
    pcus: int = 1
    hops: int = 1
    dtype: str = "bf16"

    def __post_init__(self) -> None:
        _check_fields(self, ("m", "k", "n", "pcus"))


@dataclass(frozen=True)
class AttentionKernel:
    """One head: ``softmax(Q K^T) V`` with ``Q[q_len, head_dim]``, ``K, V[kv_len, head_dim]``,
    processed in query tiles of ``q_tile`` rows through a QK^T PCU, three softmax PCUs (row max;
    exp and row sum; normalisation) and a PV PCU, with double-buffered PMUs between them."""

    q_len: int
    kv_len: int
    head_dim: int
    q_tile: int
    hops: int = 1

    def __post_init__(self) -> None:
        _check_fields(self, ("q_len", "kv_len", "head_dim", "q_tile"))
        if self.q_len % self.q_tile:
            raise ValueError(f"AttentionKernel.q_len: expected a multiple of q_tile {self.q_tile}, got {self.q_len}")


@dataclass(frozen=True)
class GatherKernel:
    """``out[i] = table[idx[i]]`` for ``n_indices`` random rows of ``row_elems`` BF16 values,
    read from one PMU and written to another ``hops`` away. ``seed`` draws the indices."""

    table_rows: int
    row_elems: int
    n_indices: int
    hops: int = 1
    seed: int = 0

    def __post_init__(self) -> None:
        _check_fields(self, ("table_rows", "row_elems", "n_indices"), ("seed",))


def _check_fields(kernel, positive: tuple[str, ...], non_negative: tuple[str, ...] = ()) -> None:
    """Refuse a kernel the simulations cannot run, naming the field: an empty dimension would
    otherwise end in a KeyError deep in the unit level or a silent 0 cycles, and negative hops
    ran there as zero while :func:`mesh_latency_cycles` refuses them (zero hops, two units on one
    switch, is a real layout)."""
    for name, least in [(n, 1) for n in positive] + [(n, 0) for n in ("hops", *non_negative)]:
        value = getattr(kernel, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            what = "a positive integer" if least else "an integer >= 0"
            raise ValueError(f"{type(kernel).__name__}.{name}: expected {what}, got {value!r}")


#: bytes per element of the operands (BF16); partial sums, and the scores a QK^T GEMM leaves in
#: its output PMU, are as wide as the PCU's accumulator (:func:`~sn40l_sim.hardware.units.pcu.accumulator_bytes`)
_BF16 = 2


@dataclass(frozen=True)
class StageTime:
    """One pipeline stage of a kernel: cycles for its first tile, and per further tile."""

    first: int
    period: int


def tile_level_cycles(kernel: GemmKernel | AttentionKernel | GatherKernel, socket: SocketSpec) -> int:
    """Cycles of one small kernel on one tile, composed from the unit models only.

    A kernel is a pipeline of stages handing whole tiles over through double-buffered PMUs; it
    takes the sum of its stages' first-tile times (plus a control token per hand-over) and then
    one period of its slowest stage per further tile, or of the loop a double buffer closes, when
    that is longer (an attention's softmax waits for PV to hand back the buffer of two tiles before). A stage's period is the busiest of its units
    (PCU steady state, PMU ports and address generators, mesh links); its first-tile time adds the
    latencies on its critical path (mesh hops, pipeline fill and drain, reduction tree).

    Examples
    --------
    >>> from sn40l_sim.hardware.loader import load_hardware
    >>> socket = load_hardware("hw_configs/sn40l.yaml").socket
    >>> tile_level_cycles(GemmKernel(m=64, k=64, n=64, pcus=2), socket)
    717
    """
    if isinstance(kernel, GemmKernel):
        stage = _gemm_stage(socket, kernel.m, kernel.k, kernel.n, kernel.pcus, kernel.hops, kernel.dtype)
        return stage.first
    if isinstance(kernel, AttentionKernel):
        tiles = kernel.q_len // kernel.q_tile
        ctrl = mesh_latency_cycles(socket.tile.control_network, kernel.hops)
        softmax = _softmax_stage(socket, kernel)
        pv = _gemm_stage(socket, kernel.q_tile, kernel.kv_len, kernel.head_dim, 1, kernel.hops)
        stages = [_gemm_stage(socket, kernel.q_tile, kernel.head_dim, kernel.kv_len, 1, kernel.hops), softmax, pv]
        # the P buffers are two: the softmax starts a tile's scores once PV has handed back the
        # buffer of the tile two before, so two tiles take at least one softmax, one PV and two
        # control tokens (short tiles a few hops away are paced by that loop, not by a stage)
        handed_back = ceil_div(softmax.first + pv.first + 2 * ctrl, 2)
        return (sum(s.first for s in stages) + ctrl * (len(stages) - 1)
                + (tiles - 1) * max(handed_back, *(s.period for s in stages)))
    if isinstance(kernel, GatherKernel):
        return _gather_cycles(socket, kernel)
    raise TypeError(f"unknown kernel {kernel!r}")


def _gemm_stage(socket: SocketSpec, m: int, k: int, n: int, pcus: int, hops: int,
                dtype: str = "bf16") -> StageTime:
    pcu, pmu, net = socket.pcu, socket.pmu, socket.tile.vector_network
    hop = mesh_latency_cycles(net, hops)
    k_per_block, _ = gemm_geometry(pcu, dtype)
    n_blocks_local = ceil_div(ceil_div(n, pcu.lanes), pcus)
    k_blocks = ceil_div(k, k_per_block)
    # partial sums go to the output PMU and come back: two trips over the mesh
    compute = gemm_cycles(pcu, m, k, n_blocks_local * pcu.lanes, dtype, 1.0,
                          partial_sum_round_trip_cycles(pcu, pmu, net, hops))
    fixed = 1 + gemm_pipeline_cycles(pcu, dtype)
    psum = pcu.lanes * accumulator_bytes(pcu)
    rows = n_blocks_local * k_blocks * m
    busiest = max(
        compute - fixed,
        # output PMU: partial sums read back for every K block but the first, written for all
        pmu_cycles(pmu, (rows - n_blocks_local * m) * psum, rows * psum, 2 * rows - n_blocks_local * m),
        # A PMU: one row slice per row per block, multicast to every PCU
        pmu_cycles(pmu, rows * k_per_block * _BF16, 0, rows),
        # weight PMU: one vector per stage per block
        pmu_cycles(pmu, n_blocks_local * k_blocks * pcu.stages * pcu.lanes * _BF16, 0,
                   n_blocks_local * k_blocks * pcu.stages),
        ceil_cycles(rows * psum / mesh_bytes_per_cycle(net)),
    )
    return StageTime(first=hop + fixed + busiest + hop, period=busiest)


def _softmax_stage(socket: SocketSpec, kernel: AttentionKernel) -> StageTime:
    pcu, pmu = socket.pcu, socket.pmu
    hop = mesh_latency_cycles(socket.tile.vector_network, kernel.hops)
    scalar_hop = mesh_latency_cycles(socket.tile.scalar_network, kernel.hops)
    lat, tree = pcu.pipeline_latency_cycles, pcu.reduction_tree_latency_cycles
    elements = kernel.q_tile * kernel.kv_len
    per_row = ceil_div(kernel.kv_len, pcu.lanes)
    vectors = kernel.q_tile * per_row
    padded = vectors * pcu.lanes
    # S (the accumulator's width) is read twice: once for the row max, once for exp; E written,
    # read, P written
    s_port = pmu_cycles(pmu, 2 * padded * accumulator_bytes(pcu), 0, 2 * vectors)
    p_port = pmu_cycles(pmu, padded * _BF16, 2 * padded * _BF16, 3 * vectors)
    row_max = reduction_cycles(pcu, padded, per_row * pcu.lanes) - lat - tree
    exp_sum = max(simd_cycles(pcu, padded, 1, elements) - lat, row_max)
    normalise = simd_cycles(pcu, padded, 1, elements) - lat
    period = max(s_port, p_port, row_max, exp_sum, normalise)
    # exp cannot start a row before its max has crossed the max PCU, its tree and the scalar net
    first_max = reduction_cycles(pcu, per_row * pcu.lanes, per_row * pcu.lanes) + hop + scalar_hop
    lead = max(s_port, first_max + max(row_max, exp_sum))
    # the last row: exp pipeline and tree, its sum to the normaliser, which streams the row out
    tail = hop + lat + tree + scalar_hop + per_row + lat + hop
    return StageTime(first=lead + tail, period=period)


def _gather_cycles(socket: SocketSpec, kernel: GatherKernel) -> int:
    pmu, net, lanes = socket.pmu, socket.tile.vector_network, socket.pcu.lanes
    row_bytes = kernel.row_elems * _BF16
    total_bytes = kernel.n_indices * row_bytes
    packets = ceil_div(kernel.n_indices * kernel.row_elems, lanes)
    read = pmu_gather_cycles(pmu, kernel.n_indices, row_bytes)
    write = pmu_cycles(pmu, 0, total_bytes, packets)
    link = ceil_cycles(total_bytes / mesh_bytes_per_cycle(net))
    return max(read, write, link) + mesh_latency_cycles(net, kernel.hops)
