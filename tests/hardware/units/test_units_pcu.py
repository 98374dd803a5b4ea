"""PCU unit model: systolic GEMM, SIMD, reductions; physical invariants and worked numbers."""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from units_reference_socket import reference_socket

from sn40l_sim.errors import InputError
from sn40l_sim.hardware.units import (
    gemm_cycles,
    gemm_geometry,
    gemm_padding_waste,
    output_stationary_cycles,
    pcu_peak_flops_per_cycle,
    reduction_cycles,
    simd_cycles,
    weight_stationary_steady_cycles,
)

PCU = reference_socket().pcu
DTYPES = sorted(PCU.macs_per_lane_stage_per_cycle)
dims = st.integers(min_value=1, max_value=3000)


def test_peak_matches_geometry():
    assert pcu_peak_flops_per_cycle(PCU, "bf16") == 2 * PCU.lanes * PCU.stages * PCU.macs_per_lane_stage_per_cycle["bf16"]


def test_socket_peak_is_the_stated_638_tflops():
    socket = reference_socket()
    pcus = socket.dies * socket.tiles_per_die * socket.tile.pcus
    peak = pcus * pcu_peak_flops_per_cycle(socket.pcu, "bf16") * socket.clock_hz
    assert peak == pytest.approx(638.98e12, rel=1e-3)


@pytest.mark.parametrize("m,k", [(512, 512), (1024, 768), (256, 2048)])
def test_compute_bound_gemm_doubles_with_n(m, k):
    base = gemm_cycles(PCU, m, k, 512)
    assert 1.95 <= gemm_cycles(PCU, m, k, 1024) / base <= 2.0


def test_worked_example_64_cube():
    k_per_block, row_cycles = gemm_geometry(PCU, "bf16")
    blocks = math.ceil(64 / PCU.lanes) * math.ceil(64 / k_per_block)
    # first weight vector + every block streaming its 64 rows + pipeline drain
    expected = 1 + blocks * 64 * row_cycles + PCU.pipeline_latency_cycles
    assert gemm_cycles(PCU, 64, 64, 64) == expected


def test_small_m_blocks_wait_for_weights_and_partial_sums():
    k_blocks = math.ceil(64 / gemm_geometry(PCU, "bf16")[0])
    roundtrip = PCU.pipeline_latency_cycles + 7
    later = max(2, PCU.stages, roundtrip)
    # K blocks start `later` apart; the last one streams its 2 rows
    expected = 1 + (k_blocks - 1) * later + 2 + PCU.pipeline_latency_cycles
    assert gemm_cycles(PCU, 2, 64, PCU.lanes, accumulate_latency_cycles=7) == expected


@settings(max_examples=300, deadline=None)
@given(m=dims, k=dims, n=dims, dtype=st.sampled_from(DTYPES))
def test_gemm_never_beats_peak(m, k, n, dtype):
    cycles = gemm_cycles(PCU, m, k, n, dtype)
    assert 2 * m * k * n <= cycles * pcu_peak_flops_per_cycle(PCU, dtype) + 1e-6


@settings(max_examples=200, deadline=None)
@given(m=dims, k=dims, n=dims)
def test_gemm_monotone_in_every_dimension(m, k, n):
    c = gemm_cycles(PCU, m, k, n)
    assert gemm_cycles(PCU, m + 1, k, n) >= c
    assert gemm_cycles(PCU, m, k + 1, n) >= c
    assert gemm_cycles(PCU, m, k, n + 1) >= c


def test_odd_n_pays_for_a_whole_column_block():
    lanes = PCU.lanes
    m, k = 256, 12 * PCU.stages
    one_block = gemm_cycles(PCU, m, k, lanes)
    assert gemm_cycles(PCU, m, k, lanes + 1) == gemm_cycles(PCU, m, k, 2 * lanes)
    assert gemm_cycles(PCU, m, k, lanes + 1) > 1.9 * one_block
    assert gemm_padding_waste(PCU, m, k, lanes) == 0.0
    assert gemm_padding_waste(PCU, m, k, lanes + 1) == pytest.approx(1 - (lanes + 1) / (2 * lanes))


def test_odd_k_pads_to_the_stage_count():
    k_per_block, _ = gemm_geometry(PCU, "bf16")
    assert gemm_cycles(PCU, 256, k_per_block * 10 + 1, 64) == gemm_cycles(PCU, 256, k_per_block * 11, 64)
    assert gemm_padding_waste(PCU, 256, k_per_block * 10 + 1, 64) > 0


def test_efficiency_slows_steady_state_proportionally():
    fixed = 1 + PCU.pipeline_latency_cycles
    full = gemm_cycles(PCU, 1024, 1024, 1024) - fixed
    for eff in (0.9, 0.5, 0.3):
        slowed = gemm_cycles(PCU, 1024, 1024, 1024, efficiency=eff) - fixed
        assert slowed == pytest.approx(full / eff, abs=1)


def test_small_m_is_bound_by_weight_load_and_accumulation():
    # a GEMV still pays a full block time per (N, K) block: far below peak
    cycles = gemm_cycles(PCU, 1, 4096, 4096)
    achieved = 2 * 4096 * 4096 / cycles
    assert achieved < pcu_peak_flops_per_cycle(PCU) / max(PCU.stages, PCU.pipeline_latency_cycles) * 1.01


def test_narrow_types_are_faster_and_wide_types_slower():
    rates = PCU.macs_per_lane_stage_per_cycle
    bf16 = gemm_cycles(PCU, 1024, 1536, 1024, "bf16")
    for dtype, rate in rates.items():
        c = gemm_cycles(PCU, 1024, 1536, 1024, dtype)
        if rate > 1:
            assert c < bf16
        elif rate < 1:
            assert c > bf16


def test_unknown_dtype_is_an_input_error():
    with pytest.raises(InputError, match="macs_per_lane_stage_per_cycle"):
        gemm_cycles(PCU, 8, 8, 8, dtype="fp4")


def test_zero_sized_gemm_costs_nothing():
    assert gemm_cycles(PCU, 0, 64, 64) == 0


@settings(max_examples=200, deadline=None)
@given(elements=st.integers(1, 10**6), ops=st.integers(1, 40), trans=st.integers(0, 10**6))
def test_simd_never_beats_its_peaks(elements, ops, trans):
    cycles = simd_cycles(PCU, elements, ops, trans)
    assert elements * ops <= cycles * PCU.lanes * PCU.stages
    tail_rate = PCU.tail_stage.transcendentals_per_lane_per_cycle * PCU.lanes
    assert trans <= cycles * tail_rate + 1e-9


def test_simd_reaches_lanes_times_stages_when_every_stage_works():
    elements = PCU.lanes * 4096
    cycles = simd_cycles(PCU, elements, ops_per_element=PCU.stages)
    assert elements * PCU.stages / cycles > 0.99 * PCU.lanes * PCU.stages


def test_simd_passes_are_the_ceiling_of_ops_over_stages():
    # 32 lanes x 6 stages, 8-cycle pipeline (hw_configs/sn40l.yaml): 1024 elements are 32 vectors;
    # 6 ops fill one pass, 7 need two, and a pure copy (no op) still streams every vector once
    assert simd_cycles(PCU, 1024, ops_per_element=6) == 32 + 8
    assert simd_cycles(PCU, 1024, ops_per_element=7) == 2 * 32 + 8
    assert simd_cycles(PCU, 1024, ops_per_element=0) == 32 + 8


def test_transcendentals_limited_by_the_tail_stage():
    elements = PCU.lanes * 4096
    tail_rate = PCU.tail_stage.transcendentals_per_lane_per_cycle * PCU.lanes
    alu_only = simd_cycles(PCU, elements)
    heavy = simd_cycles(PCU, elements, transcendentals=8 * elements)
    assert heavy - PCU.pipeline_latency_cycles == math.ceil(8 * elements / tail_rate)
    assert heavy > alu_only


def test_reduction_rate_and_latency():
    lanes = PCU.lanes
    fill = PCU.pipeline_latency_cycles + PCU.reduction_tree_latency_cycles
    assert reduction_cycles(PCU, lanes * 1000, lanes * 10) == 1000 + fill
    # doubling the rows of a long-row reduction doubles the streaming part
    a = reduction_cycles(PCU, 64 * 1024, 1024) - fill
    b = reduction_cycles(PCU, 128 * 1024, 1024) - fill
    assert b == 2 * a


@settings(max_examples=200, deadline=None)
@given(rows=st.integers(1, 5000), reduce_len=st.integers(1, 5000))
def test_reduction_never_beats_one_vector_per_cycle(rows, reduce_len):
    elements = rows * reduce_len
    assert elements <= reduction_cycles(PCU, elements, reduce_len) * PCU.lanes


@settings(max_examples=60, deadline=None)
@given(m=dims, k=dims, n=dims, dtype=st.sampled_from(DTYPES))
def test_output_stationary_never_beats_the_peak(m, k, n, dtype):
    cycles = output_stationary_cycles(PCU, m, k, n, dtype)
    assert 2 * m * k * n / cycles <= pcu_peak_flops_per_cycle(PCU, dtype) * (1 + 1e-9)


def test_the_two_dataflows_cost_the_same_when_nothing_pads():
    # M a multiple of the stages, K of a K block, N of the lanes, M and K long enough for neither
    # the weight loads nor the accumulators' drain to show: both stream one MAC per PE per cycle
    k_per_block, _ = gemm_geometry(PCU, "bf16")
    m, k, n = 64 * PCU.stages, 64 * k_per_block, 4 * PCU.lanes
    steady = weight_stationary_steady_cycles(PCU, m, k // k_per_block, n // PCU.lanes)
    os_steady = output_stationary_cycles(PCU, m, k, n) - PCU.stages - PCU.pipeline_latency_cycles
    assert os_steady == steady == m * k * n // (PCU.lanes * PCU.stages)


def test_few_rows_wait_on_the_partial_sum_in_one_dataflow_only():
    # 2 rows: weight-stationary K blocks wait for each row's partial sum to come back; output-
    # stationary keeps it in the PE and only pads M to the stages
    ws = gemm_cycles(PCU, 2, 4096, PCU.lanes, accumulate_latency_cycles=4)
    os_ = output_stationary_cycles(PCU, 2, 4096, PCU.lanes)
    assert os_ < ws
    assert ws > 4096 / gemm_geometry(PCU, "bf16")[0] * (PCU.pipeline_latency_cycles + 4)
