"""Cycle models of one pattern compute unit (PCU): systolic GEMM tiles, SIMD work, reductions.

Every parameter comes from the :class:`~sn40l_sim.hardware.spec.PCUSpec`; nothing here knows
SN40L numbers. The examples use the small specs of :mod:`._examples` (32 lanes x 6 stages).

Systolic mapping of a GEMM ``C[M,N] = A[M,K] @ B[K,N]`` (weight-stationary)
--------------------------------------------------------------------------
* **N -> lanes.** Each lane owns one output column; a *block* covers ``lanes`` columns, so N is
  padded to a multiple of ``lanes`` (``n_blocks = ceil(N / lanes)``).
* **K -> stages.** Each stage holds the weights of ``r`` consecutive k values for every lane
  (``r = floor(rate)`` MACs per lane per stage for packed narrow types with ``rate >= 1``), and
  adds its products to the partial sum flowing down the chain. One block covers
  ``k_per_block = stages * r`` values of K, so K is padded to a multiple of that.
  Datatypes slower than one MAC per cycle (``rate < 1``) keep ``k_per_block = stages`` and hold
  each row for ``ceil(1 / rate)`` cycles, in every stage: a row crosses the PCU in
  ``pipeline_latency_cycles + stages x (row_cycles - 1)`` cycles (:func:`gemm_pipeline_cycles`,
  the *pipeline latency* below), which is ``pipeline_latency_cycles`` for the others.
* **M -> time.** Rows of A stream through the block, one per ``row_cycles``; each row's
  partial-sum vector for the previous K block is read back from the output buffer and enters the
  first stage with it (chained accumulation), so C is complete after the last K block.
* **Weights** of the next block are shifted into shadow registers while the current block
  streams, one lanes-wide vector per stage per cycle through the PCU's vector input, so a block
  lasts at least ``stages`` cycles.
* **Accumulation hazard.** Row ``m`` of K block ``j + 1`` needs the partial sum of row ``m`` of
  block ``j``, which re-enters ``pipeline_latency_cycles + accumulate_latency_cycles`` after it
  entered (the second term: the trip to the output buffer and back, 0 when the sums stay in the
  PCU). So consecutive blocks start ``max(M * row_cycles, stages)`` cycles apart when a new
  column block begins and ``max(M * row_cycles, stages, pipeline_latency_cycles +
  accumulate_latency_cycles)`` apart between K blocks; the last block's rows then stream for
  ``M * row_cycles``. The latency terms bind only for small M.
* **Fill and drain.** Weights load stage by stage ahead of the first row's wavefront, so only the
  first weight vector's cycle is exposed; the last row needs ``pipeline_latency_cycles`` to leave.

The calibrated ``systolic_efficiency`` (stalls the model does not see) divides the steady state.

Output-stationary mapping (partial sums stay in the PCU)
--------------------------------------------------------
* **Outputs -> the array.** Stage ``i``, lane ``j`` holds the FP32 accumulator of
  ``C[m0 + i, n0 + j]``: one *output tile* of ``stages`` rows x ``lanes`` columns.
* **K -> time.** Each cycle one lanes-wide row of B enters and moves down the stages, and each
  stage takes its row's value of A (a ``stages``-wide column slice of A, which the PMU's alignment
  crossbar delivers transposed); ``r`` values of K per cycle for packed narrow types, one per
  ``ceil(1 / rate)`` cycles for slow ones. A tile takes ``ceil(K / r) x row_cycles`` cycles.
* **Drain.** The accumulators shift out through the output registers, ``stages`` vectors, while the
  next tile accumulates (as the weight-stationary mapping's weights shift in), so a tile lasts at
  least ``stages`` cycles. Fill: the ``stages``-cycle skew of the wavefront and one pipeline
  latency.

Which one SN40L's compiler uses is not published (docs/reference.md §1 states a systolic mode, not its
dataflow). The weight-stationary mapping with partial sums through a PMU is the one the unit-level
simulation checks; the output-stationary one keeps the accumulators in the PCU at the cost of
re-reading B for every ``stages`` rows of A. The mapper takes the faster of the two per operator
(:mod:`sn40l_sim.mapper.tiling`).
"""
from __future__ import annotations

import math

from sn40l_sim.errors import InputError
from sn40l_sim.hardware.spec import NetworkSpec, PCUSpec, PMUSpec
from sn40l_sim.hardware.units._cycles import ceil_cycles, ceil_div
from sn40l_sim.hardware.units._examples import example_network, example_pcu, example_pmu  # noqa: F401  (docstring examples)
from sn40l_sim.hardware.units.network import mesh_bytes_per_cycle, mesh_latency_cycles
from sn40l_sim.hardware.units.pmu import pmu_port_bytes_per_cycle


def mac_rate(pcu: PCUSpec, dtype: str) -> float:
    """MACs per lane per stage per cycle for ``dtype``.

    Raises
    ------
    InputError
        If the PCU spec gives no rate for ``dtype``.

    Examples
    --------
    >>> mac_rate(example_pcu(), "bf16")
    1.0
    """
    rates = pcu.macs_per_lane_stage_per_cycle
    if dtype not in rates:
        raise InputError(f"no MAC rate for datatype {dtype!r}; the PCU defines {sorted(rates)}",
                         field="pcu.macs_per_lane_stage_per_cycle")
    return float(rates[dtype])


def gemm_geometry(pcu: PCUSpec, dtype: str = "bf16") -> tuple[int, int]:
    """``(k_per_block, row_cycles)`` of the systolic mapping for ``dtype`` (see module docstring).

    Examples
    --------
    >>> gemm_geometry(example_pcu(), "bf16"), gemm_geometry(example_pcu(), "int8")
    ((6, 1), (12, 1))
    >>> gemm_geometry(example_pcu(), "fp32")
    (6, 2)
    """
    rate = mac_rate(pcu, dtype)
    if rate >= 1:
        return pcu.stages * int(math.floor(rate)), 1
    return pcu.stages, int(math.ceil(1.0 / rate - 1e-9))


#: bytes of one partial sum in each datatype a PCU may accumulate in
_ACCUMULATOR_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}


def accumulator_bytes(pcu: PCUSpec) -> int:
    """Bytes of one GEMM partial sum (``pcu.accumulator_dtype``): a partial-sum vector is
    ``lanes`` of them, which is what crosses a PMU port and the mesh between K blocks.

    Examples
    --------
    >>> pcu = example_pcu()
    >>> accumulator_bytes(pcu), accumulator_bytes(pcu.model_copy(update={"accumulator_dtype": "bf16"}))
    (4, 2)
    """
    return _ACCUMULATOR_BYTES[pcu.accumulator_dtype]


def partial_sum_round_trip_cycles(pcu: PCUSpec, pmu: PMUSpec, net: NetworkSpec, hops: int) -> int:
    """Cycles a partial-sum vector spends outside the PCU between two K blocks of a row: ``hops``
    mesh hops to the output PMU and back, each hop taking in the whole vector before passing it on
    (a vector wider than a link pays its extra link cycles at every hop), and the PMU's write port
    and then its read port each moving it in port-wide pieces. On SN40L a vector (32 FP32 sums,
    128 B) fits a link and a port, and the trip is the two ways' hop latency.

    Examples
    --------
    128-byte vectors over 64-byte links and ports: a cycle more at the hop and at the port, each way

    >>> partial_sum_round_trip_cycles(example_pcu(), example_pmu(), example_network(), 1)
    8
    >>> 2 * (2 + 1 + 1)
    8
    """
    vector = pcu.lanes * accumulator_bytes(pcu)
    link_extra = ceil_div(vector, mesh_bytes_per_cycle(net)) - 1
    port_extra = ceil_div(vector, pmu_port_bytes_per_cycle(pmu)) - 1
    return 2 * (mesh_latency_cycles(net, hops) + max(hops, 1) * link_extra + port_extra)


def gemm_pipeline_cycles(pcu: PCUSpec, dtype: str = "bf16") -> int:
    """Cycles a row of a GEMM in ``dtype`` takes to cross the PCU: ``pipeline_latency_cycles``,
    each of the ``stages`` holding a row of a datatype slower than one MAC per cycle for its
    ``row_cycles`` (module docstring) instead of one.

    Examples
    --------
    >>> gemm_pipeline_cycles(example_pcu(), "bf16"), gemm_pipeline_cycles(example_pcu(), "fp32")
    (10, 16)
    """
    _, row_cycles = gemm_geometry(pcu, dtype)
    return pcu.pipeline_latency_cycles + pcu.stages * (row_cycles - 1)



def _no_work(m: int, k: int, n: int, efficiency: float) -> bool:
    """Whether an m x k x n GEMM is empty, after checking its arguments (both dataflows' rule)."""
    if min(m, k, n) < 0:
        raise ValueError(f"GEMM dimensions must be >= 0, got m={m}, k={k}, n={n}")
    if not 0 < efficiency <= 1:
        raise ValueError(f"efficiency must be in (0, 1], got {efficiency!r}")
    return m == 0 or k == 0 or n == 0

def gemm_cycles(pcu: PCUSpec, m: int, k: int, n: int, dtype: str = "bf16",
                efficiency: float = 1.0, accumulate_latency_cycles: int = 0) -> int:
    """Cycles for ONE PCU in systolic mode to compute an ``m x k x n`` GEMM tile.

    Parameters
    ----------
    pcu : PCUSpec
        The PCU (lanes, stages, MAC rates, pipeline latency).
    m, k, n : int
        Tile dimensions: ``C[m, n] = A[m, k] @ B[k, n]``.
    dtype : str
        Operand datatype, a key of ``pcu.macs_per_lane_stage_per_cycle``.
    efficiency : float
        Achieved fraction of the modelled steady state (calibrated ``systolic_efficiency``).
    accumulate_latency_cycles : int
        Cycles a partial sum spends outside the PCU pipeline between K blocks (mesh hops to the
        output PMU and back); 0 when partial sums stay in the PCU.

    Returns
    -------
    int
        Cycles from the first weight vector's arrival to the last output leaving the pipeline.

    Examples
    --------
    A 64 x 64 x 64 tile on 32 lanes x 6 stages: 2 column blocks x 11 K blocks (K padded to 66),
    64 rows each, plus the first weight vector's cycle and a 10-cycle pipeline drain:

    >>> pcu = example_pcu()
    >>> gemm_cycles(pcu, 64, 64, 64)
    1419
    >>> 1 + 2 * 11 * 64 + 10
    1419
    >>> gemm_cycles(pcu, 64, 64, 128)   # N doubled: twice the column blocks
    2827

    With 4 rows, K blocks start 14 cycles apart (the partial sum's round trip, 10 + 4 cycles):

    >>> gemm_cycles(pcu, 4, 64, 32, accumulate_latency_cycles=4)
    155
    >>> 1 + (10 * 14 + 4) + 10
    155
    """
    if _no_work(m, k, n, efficiency):
        return 0
    k_per_block, _ = gemm_geometry(pcu, dtype)
    steady = weight_stationary_steady_cycles(pcu, m, ceil_div(k, k_per_block), ceil_div(n, pcu.lanes), dtype,
                                             accumulate_latency_cycles)
    return 1 + ceil_cycles(steady / efficiency) + gemm_pipeline_cycles(pcu, dtype)


def weight_stationary_steady_cycles(pcu: PCUSpec, rows: int, k_blocks: int, col_blocks: int,
                                    dtype: str = "bf16", accumulate_latency_cycles: int = 0) -> int:
    """Steady-state cycles of ``col_blocks`` column blocks of ``k_blocks`` K blocks and ``rows`` rows
    each, one after the other on ONE PCU (weight-stationary): :func:`gemm_cycles` without its first
    weight vector, its pipeline drain and the efficiency.

    Examples
    --------
    >>> pcu = example_pcu()
    >>> weight_stationary_steady_cycles(pcu, 64, 11, 2)       # 2 x 11 blocks of 64 rows
    1408
    >>> weight_stationary_steady_cycles(pcu, 4, 11, 1, accumulate_latency_cycles=4)   # 10 x 14 + 4
    144
    """
    if min(rows, k_blocks, col_blocks) <= 0:
        return 0
    _, row_cycles = gemm_geometry(pcu, dtype)
    first = max(rows * row_cycles, pcu.stages)
    later = max(first, gemm_pipeline_cycles(pcu, dtype) + accumulate_latency_cycles)
    return col_blocks * (k_blocks - 1) * later + (col_blocks - 1) * first + rows * row_cycles


def output_stationary_tile_cycles(pcu: PCUSpec, k: int, dtype: str = "bf16") -> int:
    """Cycles one output tile (``stages`` rows x ``lanes`` columns) of the output-stationary
    mapping occupies the PCU: K streamed in, at least ``stages`` to shift the accumulators out.

    Examples
    --------
    >>> output_stationary_tile_cycles(example_pcu(), 64), output_stationary_tile_cycles(example_pcu(), 64, "int8")
    (64, 32)
    >>> output_stationary_tile_cycles(example_pcu(), 4), output_stationary_tile_cycles(example_pcu(), 64, "fp32")
    (6, 128)
    """
    if k <= 0:
        return 0
    k_per_block, row_cycles = gemm_geometry(pcu, dtype)
    per_stage = k_per_block // pcu.stages
    return max(ceil_div(k, per_stage) * row_cycles, pcu.stages)


def output_stationary_cycles(pcu: PCUSpec, m: int, k: int, n: int, dtype: str = "bf16",
                             efficiency: float = 1.0) -> int:
    """Cycles for ONE PCU to compute an ``m x k x n`` GEMM output-stationary (module docstring).

    Examples
    --------
    64 x 64 x 64 on 32 lanes x 6 stages: 11 row groups x 2 column blocks, 64 cycles each, after a
    6-cycle skew and before a 10-cycle drain (the weight-stationary mapping needs 1419):

    >>> output_stationary_cycles(example_pcu(), 64, 64, 64)
    1424
    >>> 6 + 11 * 2 * 64 + 10
    1424
    """
    if _no_work(m, k, n, efficiency):
        return 0
    tiles = ceil_div(m, pcu.stages) * ceil_div(n, pcu.lanes)
    steady = tiles * output_stationary_tile_cycles(pcu, k, dtype)
    return pcu.stages + ceil_cycles(steady / efficiency) + gemm_pipeline_cycles(pcu, dtype)


def gemm_padding_waste(pcu: PCUSpec, m: int, k: int, n: int, dtype: str = "bf16") -> float:
    """Fraction of the systolic array's MAC slots wasted on padding for an ``m x k x n`` tile.

    Counts only the N and K padding of the mapping (M streams, so it pads nothing).

    Examples
    --------
    >>> pcu = example_pcu()
    >>> gemm_padding_waste(pcu, 64, 66, 64)
    0.0
    >>> gemm_padding_waste(pcu, 64, 64, 33)   # 33 columns use 2 blocks of 32, K 64 -> 66
    0.5
    """
    if min(m, k, n) <= 0:
        return 0.0
    k_per_block, _ = gemm_geometry(pcu, dtype)
    padded = ceil_div(n, pcu.lanes) * pcu.lanes * ceil_div(k, k_per_block) * k_per_block
    return 1.0 - (n * k) / padded


def simd_cycles(pcu: PCUSpec, elements: int, ops_per_element: int = 1,
                transcendentals: int = 0) -> int:
    """Cycles for ONE PCU in SIMD mode to apply ``ops_per_element`` ops to ``elements`` values.

    Elements enter ``lanes`` at a time, one vector per cycle; each stage applies one op, so a
    vector needs ``ceil(ops_per_element / stages)`` passes through the pipeline (the array
    delivers ``lanes x stages`` ops/cycle only when every stage has work). Transcendentals
    (exp, rsqrt, ...) run in the tail stage at ``tail_stage.transcendentals_per_lane_per_cycle x
    lanes`` per cycle, concurrently with the ALU stages; the slower of the two sets the pace.
    One pipeline latency is paid for fill and drain.

    Examples
    --------
    >>> pcu = example_pcu()
    >>> simd_cycles(pcu, 1024)                      # 32 vectors + 10-cycle pipeline
    42
    >>> simd_cycles(pcu, 1024, ops_per_element=12)  # two passes per vector
    74
    >>> simd_cycles(pcu, 1024, transcendentals=1024)   # tail stage at 0.5 per lane per cycle
    74
    """
    if elements < 0 or ops_per_element < 0 or transcendentals < 0:
        raise ValueError("elements, ops_per_element and transcendentals must be >= 0")
    vectors = ceil_div(elements, pcu.lanes)
    alu = vectors * max(1, ceil_div(ops_per_element, pcu.stages)) if elements else 0
    tail_rate = pcu.tail_stage.transcendentals_per_lane_per_cycle * pcu.lanes
    tail = ceil_cycles(transcendentals / tail_rate)
    steady = max(alu, tail)
    return steady + pcu.pipeline_latency_cycles if steady else 0


def reduction_cycles(pcu: PCUSpec, elements: int, reduce_len: int) -> int:
    """Cycles to reduce ``elements`` values in rows of ``reduce_len`` through the cross-lane tree.

    One lanes-wide vector enters the PCU per cycle, crosses its stage pipeline and then the tree,
    which sits after the last stage. A row longer than ``lanes`` takes
    ``ceil(reduce_len / lanes)`` vectors whose tree outputs accumulate in a register; shorter
    rows are packed ``floor(lanes / reduce_len)`` to a vector (segmented tree). Fill and drain:
    one ``pipeline_latency_cycles`` plus one ``reduction_tree_latency_cycles``.

    Examples
    --------
    >>> pcu = example_pcu()
    >>> reduction_cycles(pcu, 64 * 128, 128)   # 64 rows x 4 vectors + 10-cycle pipeline + 5-cycle tree
    271
    >>> reduction_cycles(pcu, 64 * 8, 8)       # 4 rows per vector: 16 vectors
    31
    """
    if elements < 0 or reduce_len <= 0:
        raise ValueError(f"need elements >= 0 and reduce_len > 0, got {elements}, {reduce_len}")
    if elements == 0:
        return 0
    rows = ceil_div(elements, reduce_len)
    if reduce_len >= pcu.lanes:
        vectors = rows * ceil_div(reduce_len, pcu.lanes)
    else:
        vectors = ceil_div(rows, pcu.lanes // reduce_len)
    return vectors + pcu.pipeline_latency_cycles + pcu.reduction_tree_latency_cycles


def pcu_peak_flops_per_cycle(pcu: PCUSpec, dtype: str = "bf16") -> float:
    """Peak FLOP per cycle of one PCU: 2 (multiply + add) x lanes x stages x MAC rate.

    Examples
    --------
    >>> pcu_peak_flops_per_cycle(example_pcu(), "bf16")
    384.0
    """
    return 2.0 * pcu.lanes * pcu.stages * mac_rate(pcu, dtype)
