"""The mapper's physics of small and large stages: whole work items, the cost of a split K, the
fill and drain of every stage, and the dataflow that keeps large GEMMs compute-bound.

The mapper against the cycle-by-cycle unit level is in tests/reference/test_mapper_vs_unit_level.py;
here the GEMM stage is held to the tile-level formula on larger shapes than the unit level can run.
"""
from __future__ import annotations

import math
from dataclasses import replace

import pytest

from sn40l_sim.hardware.units.network import mesh_latency_cycles
from sn40l_sim.hardware.units.tile_kernels import GemmKernel, tile_level_cycles
from sn40l_sim.ir import FusedKernel, Operator
from sn40l_sim.mapper import map_kernel
from sn40l_sim.mapper._examples import example_gemm_kernel
from sn40l_sim.mapper.budget import OUTPUT_STATIONARY, WEIGHT_STATIONARY, UnitBudget
from sn40l_sim.mapper.division import stage_division
from sn40l_sim.mapper.tiling import tile_operator


def _unit_efficiency(socket):
    return socket.model_copy(update={"calibrated": socket.calibrated.model_copy(update={"systolic_efficiency": 1.0})})


def _on_chip_gemm(m: int, k: int, n: int) -> FusedKernel:
    return FusedKernel("g", "gemm", "prefill", (Operator("g", "gemm", flops=2 * m * k * n, m=m, k=k, n=n),))


def _streamed(pk) -> int:
    return pk.cycles - pk.overhead_cycles


@pytest.mark.parametrize("m,k,n,pcus", [(64, 64, 64, 2), (256, 512, 1024, 4), (128, 576, 4096, 8),
                                        (512, 128, 256, 8), (16, 7168, 1536, 12), (1024, 1024, 1024, 16)])
def test_gemm_on_its_pcus_matches_the_tile_level_formula(socket, m, k, n, pcus):
    # column blocks divide evenly over the PCUs, as in the tile-level kernel
    assert math.ceil(n / socket.pcu.lanes) % pcus == 0
    budget = UnitBudget(chip_tiles=1, stage_pcus=(("g", pcus),), dataflows=(WEIGHT_STATIONARY,), n_tiles=1)
    mapped = _streamed(map_kernel(_unit_efficiency(socket), _on_chip_gemm(m, k, n), budget=budget))
    assert abs(mapped / tile_level_cycles(GemmKernel(m, k, n, pcus=pcus), socket) - 1) < 0.02


def test_a_small_gemm_on_the_whole_socket_pays_its_fill_and_its_reduction(socket):
    pcu, hop = socket.pcu, mesh_latency_cycles(socket.tile.vector_network, 1)
    pk = map_kernel(socket, _on_chip_gemm(64, 64, 64))
    # a weight block loads in `stages` cycles; operands cross a hop in and out; the pipeline drains
    floor = hop + 1 + pcu.stages + pcu.pipeline_latency_cycles + hop
    assert _streamed(pk) >= floor and pk.fill_cycles >= floor - pcu.stages
    # spread over more PCUs than it has column blocks, it splits K and sums partials over the mesh
    stage = next(s for s in pk.stages if s.kind == "gemm")
    assert stage.pcus > 8
    two = _streamed(map_kernel(socket, _on_chip_gemm(64, 64, 64), budget=UnitBudget(stage_pcus=(("g", 2),), chip_tiles=1)))
    # faster than on its two column blocks' PCUs, but at less than half the speed-up its PCUs promise
    assert _streamed(pk) < two < _streamed(pk) * stage.pcus / 2 / 2


def test_a_split_k_costs_partial_sums_moved_and_added(socket):
    t = tile_operator(socket, Operator("g", "gemm", m=64, k=64, n=64), 1, 1.0,
                      UnitBudget(dataflows=(WEIGHT_STATIONARY,)))
    whole, split = stage_division(t.work, 1.0, 2), stage_division(t.work, 1.0, 22)
    assert whole.split == (1, 1) and whole.mesh_bytes == 0
    s_m, s_k = split.split
    assert s_k > 1
    # s_k - 1 partial sets of rows x lanes FP32 per output block cross the mesh, read twice, written once
    moved = 2 * (s_k - 1) * math.ceil(64 / s_m) * s_m * socket.pcu.lanes * 4
    assert split.mesh_bytes == pytest.approx(moved) and split.sram_read_bytes == pytest.approx(2 * moved)
    assert split.latency_cycles > whole.latency_cycles
    # 11x the PCUs, far less than 11x faster: blocks of fewer rows and the reduction
    assert whole.cycles / 11 * 1.5 < split.cycles < whole.cycles


def test_work_divides_in_whole_items(socket):
    # three column blocks on two PCUs: the busier PCU takes two
    t = tile_operator(socket, Operator("g", "gemm", m=64, k=60, n=96), 1, 1.0, UnitBudget(dataflows=(WEIGHT_STATIONARY,)))
    one, two = stage_division(t.work, 1.0, 1).cycles, stage_division(t.work, 1.0, 2, most_pcus=2)
    assert two.split == (1, 1) and two.cycles == pytest.approx(one * 2 / 3, abs=1)


def test_large_gemms_keep_their_accumulators_in_the_pcu_and_are_compute_bound(socket):
    big = example_gemm_kernel(8192, 7168, 2048)
    # a piece of it on one PCU and one PMU: the partial sums keep the PMU as busy as the PCU
    assert tile_operator(socket, big.operators[0], 32, 1.0).dataflow == OUTPUT_STATIONARY
    pk = map_kernel(socket, big)
    assert pk.bounding_resource == "compute"
    # with a quarter of the tile's PMUs taken by other work, partial sums through PMU ports bind
    rest = UnitBudget(pmus_per_tile=socket.tile.pmus * 3 // 4)
    ws = map_kernel(socket, big, budget=replace(rest, dataflows=(WEIGHT_STATIONARY,)))
    os_ = map_kernel(socket, big, budget=replace(rest, dataflows=(OUTPUT_STATIONARY,)))
    assert ws.bounding_resource == "sram" and os_.bounding_resource == "compute"
    assert _streamed(ws) > 1.2 * _streamed(os_)


def _twice_the_pcus(socket):
    tile = socket.tile
    return socket.model_copy(update={"tile": tile.model_copy(update={"pcus": 2 * tile.pcus, "grid_rows": 2 * tile.grid_rows})})


@pytest.mark.parametrize("m,k,n", [(8192, 7168, 2048), (16384, 7168, 4096)])
def test_twice_the_pcus_per_tile_speed_up_a_compute_bound_prefill_gemm(socket, m, k, n):
    kernel = example_gemm_kernel(m, k, n)
    base, doubled = map_kernel(socket, kernel), map_kernel(_twice_the_pcus(socket), kernel)
    speedup = _streamed(base) / _streamed(doubled)
    # HBM and the PMUs (as many as before) take some of it back; the PCUs alone would give 2x
    assert 1.5 <= speedup <= 2.0, f"x{speedup:.2f}"


@pytest.mark.parametrize("dtype, size", [("bf16", 2), ("fp32", 4)])
def test_a_softmax_reads_its_scores_twice_and_its_exponentials_once(socket, dtype, size):
    # one piece of 4,096 scores: written into the PMUs and read for the row maximum and again for
    # exp(x - max); the BF16 exponentials written, read for the sum and the probabilities written
    scores = 4096
    t = tile_operator(socket, Operator("s", "softmax", elements=scores, transcendentals=scores, dtype=dtype), 1, 1.0)
    assert (t.pieces, t.in_bytes) == (1, scores * size)
    assert t.sram_read_bytes == 2 * scores * size + scores * 2
    assert t.sram_write_bytes == scores * size + 2 * scores * 2
