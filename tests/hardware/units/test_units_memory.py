"""Off-chip transfer model: latency + burst-rounded bytes over the achievable bandwidth."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from units_reference_socket import reference_socket

from sn40l_sim.hardware.units import offchip_bytes_per_cycle, offchip_cycles

SOCKET = reference_socket()
TIERS = list(SOCKET.memory.values())


def _latency(tier, setup_s=0.0):
    return round((tier.latency_s + setup_s) * SOCKET.clock_hz + 0.4999999)


@pytest.mark.parametrize("tier", TIERS, ids=list(SOCKET.memory))
def test_cycles_track_bytes_over_bandwidth(tier):
    eff = tier.efficiency
    units = SOCKET.dies * tier.units_per_die
    bw = units * tier.bytes_per_s_per_unit * eff
    for n in (1 << 24, 1 << 28):
        cycles = offchip_cycles(tier, SOCKET.agcu, SOCKET.clock_hz, n, eff, units_used=units)
        assert cycles == pytest.approx((n / bw + tier.latency_s) * SOCKET.clock_hz, rel=1e-3)
    small = offchip_cycles(tier, SOCKET.agcu, SOCKET.clock_hz, 1 << 24, eff, units_used=units)
    big = offchip_cycles(tier, SOCKET.agcu, SOCKET.clock_hz, 1 << 25, eff, units_used=units)
    assert big - _latency(tier) == pytest.approx(2 * (small - _latency(tier)), abs=1)


@settings(max_examples=300, deadline=None)
@given(n=st.integers(1, 10**10), eff=st.floats(0.3, 1.0), units=st.integers(1, 8),
       tier=st.sampled_from(TIERS))
def test_never_beats_peak_bandwidth(n, eff, units, tier):
    cycles = offchip_cycles(tier, SOCKET.agcu, SOCKET.clock_hz, n, eff, units_used=units)
    seconds = cycles / SOCKET.clock_hz
    assert n / seconds <= units * tier.bytes_per_s_per_unit * eff * (1 + 1e-9)


def test_efficiency_slows_streaming_proportionally():
    tier = TIERS[0]
    n = 1 << 28
    lat = _latency(tier)
    full = offchip_cycles(tier, SOCKET.agcu, SOCKET.clock_hz, n, 1.0) - lat
    for eff in (0.8, 0.5):
        assert offchip_cycles(tier, SOCKET.agcu, SOCKET.clock_hz, n, eff) - lat == pytest.approx(full / eff, abs=1)


def test_one_byte_costs_a_whole_burst():
    tier = TIERS[0]
    rate = offchip_bytes_per_cycle(tier, SOCKET.clock_hz, 1.0)
    one = offchip_cycles(tier, SOCKET.agcu, SOCKET.clock_hz, 1, 1.0)
    assert one == offchip_cycles(tier, SOCKET.agcu, SOCKET.clock_hz, SOCKET.agcu.burst_bytes, 1.0)
    assert one == _latency(tier) + -(-SOCKET.agcu.burst_bytes // rate)
    # where a burst takes more than a cycle the rounding shows: one DDR channel (16.67 GB/s, 10.4
    # bytes a cycle at 1.6 GHz) moves one byte as a 64-byte burst in ceil(64 / 10.4) = 7 cycles
    ddr = SOCKET.memory["ddr"]
    assert offchip_cycles(ddr, SOCKET.agcu, SOCKET.clock_hz, 1, 1.0, units_used=1) == _latency(ddr) + 7


def test_setup_time_added_once():
    tier = TIERS[0]
    setup = SOCKET.calibrated.transfer_setup_s
    a = offchip_cycles(tier, SOCKET.agcu, SOCKET.clock_hz, 1 << 20, 1.0)
    b = offchip_cycles(tier, SOCKET.agcu, SOCKET.clock_hz, 1 << 20, 1.0, setup_s=setup)
    assert b - a == pytest.approx(setup * SOCKET.clock_hz, abs=1)


def test_agcus_cap_the_rate():
    tier = TIERS[0]
    agcu = SOCKET.agcu
    n = 1 << 26
    few = offchip_cycles(tier, agcu, SOCKET.clock_hz, n, 1.0, agcus=1)
    assert n / few <= agcu.bytes_per_cycle * (1 + 1e-9)
    assert offchip_cycles(tier, agcu, SOCKET.clock_hz, n, 1.0, agcus=10**6) == \
        offchip_cycles(tier, agcu, SOCKET.clock_hz, n, 1.0)


def test_default_units_are_one_die():
    tier = TIERS[0]
    assert offchip_bytes_per_cycle(tier, SOCKET.clock_hz, 1.0) == \
        offchip_bytes_per_cycle(tier, SOCKET.clock_hz, 1.0, units_used=tier.units_per_die)
