"""The published totals the derived figures must reproduce (docs/reference.md), and physical invariants of
the derived figures."""
from __future__ import annotations

import pytest
from hw_test_helpers import HW

from sn40l_sim.hardware import figures as f
from sn40l_sim.hardware.loader import load_hardware, with_overrides


@pytest.fixture(scope="module")
def sn40l():
    return load_hardware(HW / "sn40l.yaml").socket


@pytest.fixture(scope="module")
def node16():
    return load_hardware(HW / "sn40l_node16.yaml")


def test_sn40l_socket_must_show(sn40l):
    assert (f.pcus(sn40l), f.pmus(sn40l), f.tiles(sn40l)) == (1040, 1040, 4)
    assert f.peak_flops(sn40l) == pytest.approx(638e12, rel=0.005)
    assert f.peak_flops(sn40l) == pytest.approx(1040 * 32 * 6 * 2 * 1.6e9)
    assert f.sram_bytes(sn40l) == 520 * 2**20 == 545_259_520
    assert f.memory_tiers(sn40l) == ("hbm", "ddr")
    assert f.memory_bytes(sn40l, "hbm") == 64 * 2**30
    assert f.memory_bytes_per_s(sn40l, "hbm") == pytest.approx(1.6e12, rel=0.05)
    assert f.memory_bytes_per_s(sn40l, "hbm") == pytest.approx(1638.4e9)
    assert f.memory_bytes(sn40l, "ddr") == pytest.approx(1.5 * 2**40)
    assert f.memory_bytes_per_s(sn40l, "ddr") == pytest.approx(100e9, rel=1e-4)
    assert (f.memory_units(sn40l, "hbm"), f.memory_units(sn40l, "ddr")) == (4, 6)


def test_node16_must_show(node16):
    assert node16.sockets == 16
    assert f.node_peak_flops(node16) == pytest.approx(10.2e15, rel=0.005)
    assert f.node_memory_bytes(node16, "hbm") == 2**40
    assert f.node_memory_bytes_per_s(node16, "hbm") == pytest.approx(25.6e12, rel=0.03)  # HC24's node figure
    assert f.node_memory_bytes_per_s(node16, "ddr") == pytest.approx(1.6e12, rel=1e-4)
    assert f.node_sram_bytes(node16) == 16 * 520 * 2**20


def test_sn10_and_sn30_must_show():
    sn10 = load_hardware(HW / "sn10.yaml").socket
    assert f.pcus(sn10) == f.pmus(sn10) == 640
    assert f.peak_flops(sn10) > 320e12
    assert f.sram_bytes(sn10) == 320 * 2**20
    assert f.memory_tiers(sn10) == ("ddr",)
    assert f.memory_bytes(sn10, "hbm") == f.memory_bytes_per_s(sn10, "hbm") == f.memory_units(sn10, "hbm") == 0
    assert f.memory_bytes(sn10, "ddr") == pytest.approx(1.5 * 2**40)
    sn30 = load_hardware(HW / "sn30.yaml").socket
    assert f.pcus(sn30) == 1280 and f.tiles(sn30) == 8
    assert f.memory_bytes(sn30, "ddr") == 2**40
    assert f.peak_flops(sn30) == pytest.approx(2 * f.peak_flops(sn10))


def test_peak_scales_with_clock_and_datatype(node16):
    slow = with_overrides(node16, {"socket.clock_hz": "0.8 GHz"})
    assert f.peak_flops(slow.socket) == pytest.approx(f.peak_flops(node16.socket) / 2)
    rates = node16.socket.pcu.macs_per_lane_stage_per_cycle
    for dtype, rate in rates.items():
        assert f.peak_flops(node16.socket, dtype) == pytest.approx(rate * f.peak_flops(node16.socket))


def test_unknown_datatype_is_an_input_error(sn40l):
    from sn40l_sim.errors import InputError
    fewer = sn40l.model_copy(update={"pcu": sn40l.pcu.model_copy(update={"macs_per_lane_stage_per_cycle": {"bf16": 1.0}})})
    with pytest.raises(InputError, match="no MAC rate for datatype 'fp8'"):
        f.peak_flops(fewer, "fp8")


def test_cycles_and_seconds_round_trip(sn40l):
    assert f.cycles(1.0, sn40l) == 1_600_000_000
    assert f.cycles(150e-9, sn40l) == 240
    assert f.cycles(0.1e-9, sn40l) == 1  # a partial cycle still takes one
    assert f.cycles(0.0, sn40l) == 0
    for n in (0, 1, 7, 3200, 10**9):
        assert f.cycles(f.seconds(n, sn40l), sn40l) == n
    assert f.cycles_from_seconds is f.cycles and f.seconds_from_cycles is f.seconds


def test_usable_memory_subtracts_the_reservation(sn40l):
    for tier, spec in sn40l.memory.items():
        assert spec.reserved_bytes > 0 and f.reserved_bytes(sn40l, tier) == spec.reserved_bytes
        assert f.usable_memory_bytes(sn40l, tier) == f.memory_bytes(sn40l, tier) - spec.reserved_bytes
    # no reservation leaves everything usable
    bare = with_overrides(load_hardware(HW / "sn40l.yaml"), {"socket.memory.hbm.reserved_bytes": 0}).socket
    assert f.usable_memory_bytes(bare, "hbm") == f.memory_bytes(bare, "hbm")
    assert f.usable_memory_bytes(bare, "cxl") == 0.0   # a tier the socket does not have holds nothing


def test_p2p_figures(node16):
    # full mesh of 16 with one 50 GB/s link per pair: 8 x 8 links cross any halving
    assert f.p2p_bisection_bytes_per_s(node16) == pytest.approx(64 * 50e9)
    assert f.p2p_diameter_hops(node16) == 1
    assert f.p2p_bytes_per_s_per_socket(node16) == pytest.approx(15 * 50e9)
    ring = with_overrides(node16, {"topology.kind": "ring"})
    assert f.p2p_bisection_bytes_per_s(ring) == pytest.approx(2 * 50e9)
    assert f.p2p_diameter_hops(ring) == 8
    torus = with_overrides(node16, {"topology.kind": "torus2d", "topology.links_per_pair": 2})
    assert f.p2p_bisection_bytes_per_s(torus) == pytest.approx(8 * 2 * 50e9)  # 4x4 torus: 8 links cut
    assert f.p2p_diameter_hops(torus) == 4
    cube = with_overrides(node16, {"topology.kind": "hypercube"})
    assert f.p2p_bisection_bytes_per_s(cube) == pytest.approx(8 * 50e9)
    assert f.p2p_diameter_hops(cube) == 4
    one = load_hardware(HW / "sn40l.yaml")
    assert f.p2p_bisection_bytes_per_s(one) == 0.0 and f.p2p_diameter_hops(one) == 0


def test_p2p_bisection_is_exact_up_to_20_sockets_inclusive(node16):
    # a torus2d whose longer side is odd has no closed form (4 x 5 and 3 x 7): every halving is
    # tried up to 20 sockets, so a 20-socket one is exact and a 21-socket one a heuristic's bound
    assert f.p2p_bisection_is_exact(with_overrides(node16, {"sockets": 20, "topology.kind": "torus2d"}))
    assert not f.p2p_bisection_is_exact(with_overrides(node16, {"sockets": 21, "topology.kind": "torus2d"}))


def test_tile_mesh_diameter(sn40l):
    # (rows + 1) x (cols + 1) switches: corner to corner is rows + cols hops
    assert f.tile_mesh_diameter_hops(sn40l) == 20 + 26
    assert f.network_bytes_per_s(sn40l, "vector") == pytest.approx(128 * 1.6e9)


def test_network_bandwidth_is_a_checked_choice(sn40l):
    # each network's own link: hw_configs/sn40l.yaml, 128, 4 and 1 bytes a cycle, one link, 1.6 GHz
    got = [f.network_bytes_per_s(sn40l, n) for n in ("vector", "scalar", "control")]
    assert got == pytest.approx([128 * 1.6e9, 4 * 1.6e9, 1 * 1.6e9])
    # a typo names the allowed networks instead of an AttributeError about the tile spec
    with pytest.raises(ValueError, match="network must be one of vector, scalar, control, got 'vectr'"):
        f.network_bytes_per_s(sn40l, "vectr")  # type: ignore[arg-type]


def test_configuration_bytes_count_each_unit_kind_at_its_own_size(sn40l):
    # hw_configs/sn40l.yaml: 1 KiB per PCU, 512 B per PMU, 256 B per switch, and a tile's switches
    # all routed; 40 PCUs and 7 PMUs on each of 2 tiles (unequal counts: a PCU counted as a PMU
    # or the other way round changes the total)
    switches = f.switches_per_tile(sn40l)
    assert f.config_bytes(sn40l, 40, 7, 2) == 2 * (40 * 1024 + 7 * 512 + switches * 256)
    assert f.config_bytes(sn40l, 7, 40, 2) == 2 * (7 * 1024 + 40 * 512 + switches * 256)
    assert f.config_bytes(sn40l, 0, 0, 1) == switches * 256
