"""Tile-level cycle counts against the cycle-by-cycle unit-level simulation (docs/design.md §3).

Each small kernel runs through :func:`sn40l_sim.reference.unit_level.simulate` (every PCU stage, PMU
port and mesh hop a SimPy process, values computed for real) and through
:func:`sn40l_sim.hardware.units.tile_kernels.tile_level_cycles` (the unit-model formulas); the two
must agree within 5%, on the SN40L socket and on variants of it that move the bottleneck.
"""
from __future__ import annotations

import ast

import numpy as np
import pytest
import simpy
from unit_level_cases import (
    ATTENTIONS,
    GATHERS,
    GEMMS,
    ROOT,
    SOCKET,
    VARIANTS,
    simulated,
    socket_named,
)

import sn40l_sim.hardware.units as units
import sn40l_sim.hardware.units.tile_kernels as tk
from sn40l_sim.hardware.units._examples import example_pcu
from sn40l_sim.hardware.units.network import mesh_latency_cycles
from sn40l_sim.hardware.units.tile_kernels import AttentionKernel, GatherKernel, GemmKernel, tile_level_cycles
from sn40l_sim.reference.unit_level import simulate
from sn40l_sim.reference.unit_level.fabric import Packet
from sn40l_sim.reference.unit_level.simd import SimdPCU, SimdProgram

TOLERANCE = 0.05


def _check(kernel, socket=SOCKET, socket_name=None):
    result = simulated(kernel, socket_name) if socket_name else simulate(kernel, socket)
    socket = socket_named(socket_name) if socket_name else socket
    for name, value in result.outputs.items():
        if name != "expected":
            np.testing.assert_allclose(value, result.outputs["expected"], rtol=1e-9, atol=1e-9)
    predicted = tile_level_cycles(kernel, socket)
    error = (predicted - result.cycles) / result.cycles
    assert abs(error) <= TOLERANCE, f"tile {predicted} vs unit {result.cycles} cycles ({error:+.1%})"
    return result, predicted


@pytest.mark.parametrize("kernel", GEMMS + ATTENTIONS + GATHERS, ids=str)
def test_tile_level_within_5_percent_of_unit_level(kernel):
    _check(kernel, socket_name="base")


@pytest.mark.parametrize("kernel", [AttentionKernel(32, 16, 16, 4, 3), AttentionKernel(48, 24, 16, 4, 2),
                                    AttentionKernel(60, 22, 16, 2, 2), AttentionKernel(16, 16, 16, 2, 3),
                                    AttentionKernel(52, 17, 9, 4, 3)], ids=str)
def test_short_query_tiles_a_few_hops_away_wait_for_the_p_buffer_to_come_back(kernel):
    # with two P buffers the softmax starts a tile once PV has handed back the buffer of the tile
    # two before: short tiles are paced by that loop, not by their slowest stage. Composed from the
    # stages' periods alone they were 12-27% fast; with the loop no longer fast beyond the 5% of the
    # chosen kernels, and closer (the loop's latencies overlap a little in the unit level: 6-11% slow)
    unit = simulate(kernel, SOCKET).cycles
    stages = [tk._gemm_stage(SOCKET, kernel.q_tile, kernel.head_dim, kernel.kv_len, 1, kernel.hops),
              tk._softmax_stage(SOCKET, kernel),
              tk._gemm_stage(SOCKET, kernel.q_tile, kernel.kv_len, kernel.head_dim, 1, kernel.hops)]
    by_stages = (sum(s.first for s in stages) + 2 * mesh_latency_cycles(SOCKET.tile.control_network, kernel.hops)
                 + (kernel.q_len // kernel.q_tile - 1) * max(s.period for s in stages))
    predicted = tile_level_cycles(kernel, SOCKET)
    assert predicted >= (1 - TOLERANCE) * unit
    assert abs(predicted - unit) < abs(by_stages - unit)


@pytest.mark.slow
@pytest.mark.parametrize("kernel", [GemmKernel(128, 128, 128, 4), GemmKernel(256, 256, 256, 8),
                                    AttentionKernel(64, 128, 64, 32)], ids=str)
def test_larger_shapes_agree(kernel):
    _check(kernel)


@pytest.mark.parametrize("name,changes,kernels", VARIANTS, ids=[v[0] for v in VARIANTS])
def test_agreement_holds_when_the_bottleneck_moves(name, changes, kernels):
    for kernel in kernels:
        _check(kernel, socket_name=name)


def test_narrow_pmu_ports_really_slow_the_gemm_in_both_models():
    kernel = GemmKernel(64, 64, 64, 2)
    base, base_tile = _check(kernel, socket_name="base")
    narrow, narrow_tile = _check(kernel, socket_name="narrow_pmu_ports")
    assert narrow.cycles == pytest.approx(2 * base.cycles, rel=0.02)
    assert narrow_tile == pytest.approx(2 * base_tile, rel=0.02)


def test_bf16_partial_sums_undo_the_narrow_ports_in_both_models():
    # the partial-sum vector (32 lanes x 2 B) fits one cycle of a 64 B port again, so the GEMM the
    # narrow ports slowed twofold runs as on the 128 B ports; the weights and A slices were BF16
    kernel = GemmKernel(64, 64, 64, 2)
    base, base_tile = _check(kernel, socket_name="base")
    bf16, bf16_tile = _check(kernel, socket_name="narrow_bf16_sums")
    assert bf16.cycles == pytest.approx(base.cycles, rel=0.02)
    assert bf16_tile == pytest.approx(base_tile, rel=0.02)


def test_compute_bound_gemm_doubles_with_n_in_the_unit_level_sim():
    one = simulate(GemmKernel(32, 60, 64, 1), SOCKET).cycles
    two = simulate(GemmKernel(32, 60, 128, 1), SOCKET).cycles
    assert 1.9 <= two / one <= 2.0


def test_unit_level_never_beats_the_pcu_peak():
    kernel = GemmKernel(64, 64, 64, 2)
    result = simulate(kernel, SOCKET)
    macs_per_cycle = kernel.m * kernel.k * kernel.n / result.cycles
    assert macs_per_cycle <= kernel.pcus * SOCKET.pcu.lanes * SOCKET.pcu.stages
    for unit, busy in result.busy_cycles.items():
        assert busy <= result.cycles, unit


def test_gather_never_beats_the_address_generators():
    kernel = GatherKernel(4096, 1, 2048)
    result = simulate(kernel, SOCKET)
    assert result.busy_cycles["table.read"] * SOCKET.pmu.addresses_per_cycle >= kernel.n_indices
    # random banks cost real cycles over the conflict-free address rate
    assert result.busy_cycles["table.read"] > kernel.n_indices / SOCKET.pmu.addresses_per_cycle * 1.03


def test_softmax_reads_of_fp32_scores_share_one_pmu_port():
    kernel = AttentionKernel(32, 64, 16, 8)
    result = simulate(kernel, SOCKET)
    assert result.busy_cycles["softmax_max"] == result.busy_cycles["softmax_exp"]
    assert result.busy_cycles["S.read"] > result.busy_cycles["softmax_max"]


def test_unit_level_does_not_use_the_tile_level_formulas():
    forbidden = set(units.__all__) | {"tile_level_cycles", "ceil_cycles", "ceil_div"}
    package = ROOT / "sn40l_sim" / "reference" / "unit_level"
    paths = sorted(package.glob("*.py"))
    assert paths, package
    for path in paths:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("sn40l_sim.hardware.units"):
                assert node.module == "sn40l_sim.hardware.units.tile_kernels", (path.name, node.module)
                used = {a.name for a in node.names}
                assert not used & forbidden, (path.name, used & forbidden)
            if isinstance(node, ast.Name):
                assert node.id not in forbidden, (path.name, node.id)


def test_deterministic():
    kernel = AttentionKernel(16, 32, 16, 8)
    assert simulate(kernel, SOCKET).cycles == simulate(kernel, SOCKET).cycles


def test_the_tail_stage_takes_the_ceiling_of_a_partial_vectors_transcendentals():
    # example PCU: 6 stages, 10-cycle pipeline, tail at 0.5 x 32 lanes = 16 exp per cycle. A vector
    # with n valid lanes spends ceil(n / 16) cycles in the tail instead of one: 16 lanes leave after
    # the 10-cycle pipeline, 17 (a second tail cycle for the 17th) after 11
    def leaves_at(valid):
        env = simpy.Environment()
        unit = SimdPCU(env, example_pcu(), SimdProgram(tail=lambda x, s: np.exp(x), transcendentals=1),
                       rows=[0], vectors_per_row=1, out_bytes=64)
        done = []

        def feed():
            yield unit.inp.put(Packet((0, 0), (np.zeros(32), valid), 64))

        def collect():
            yield from unit.vector_out.get()
            done.append(env.now)

        env.process(feed())
        env.process(collect())
        env.run()
        return done[0]

    assert [leaves_at(n) for n in (1, 16, 17, 32)] == [10, 10, 11, 11]
