"""Mesh hops and point-to-point links."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from units_reference_socket import reference_socket

from sn40l_sim.hardware.units import link_cycles, mesh_bytes_per_cycle, mesh_cycles, mesh_latency_cycles

SOCKET = reference_socket()
NET = SOCKET.tile.vector_network


def test_hops_add_latency_linearly():
    n = 1 << 16
    base = mesh_cycles(NET, n, 0)
    for hops in (1, 5, 20):
        assert mesh_cycles(NET, n, hops) - base == hops * NET.hop_latency_cycles


def test_serialisation_over_link_width():
    width = mesh_bytes_per_cycle(NET)
    assert mesh_cycles(NET, 1000 * width, 0) == 1000
    assert mesh_cycles(NET, 1000 * width + 1, 0) == 1001


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 10**8), hops=st.integers(0, 50))
def test_mesh_never_beats_link_bandwidth(n, hops):
    assert n <= mesh_cycles(NET, n, hops) * mesh_bytes_per_cycle(NET)


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 10**10), eff=st.floats(0.3, 1.0))
def test_p2p_never_beats_its_bandwidth(n, eff):
    p2p = SOCKET.p2p
    cycles = link_cycles(p2p.bytes_per_s_per_port, p2p.latency_s, SOCKET.clock_hz, n, eff)
    assert n / (cycles / SOCKET.clock_hz) <= p2p.bytes_per_s_per_port * eff * (1 + 1e-9)


def test_link_latency_and_efficiency():
    p2p = SOCKET.p2p
    clock = SOCKET.clock_hz
    n = 1 << 26
    lat = link_cycles(p2p.bytes_per_s_per_port, p2p.latency_s, clock, 1, 1.0) - 1
    full = link_cycles(p2p.bytes_per_s_per_port, p2p.latency_s, clock, n) - lat
    half = link_cycles(p2p.bytes_per_s_per_port, p2p.latency_s, clock, n, efficiency=0.5) - lat
    assert half == pytest.approx(2 * full, abs=1)
    assert full == pytest.approx(n * clock / p2p.bytes_per_s_per_port, abs=1)


def test_tln_transfer():
    tln = SOCKET.tln
    cycles = link_cycles(tln.bytes_per_s, tln.latency_s, SOCKET.clock_hz, 1 << 20)
    assert cycles == pytest.approx((tln.latency_s + (1 << 20) / tln.bytes_per_s) * SOCKET.clock_hz, abs=2)


def test_mesh_latency_is_the_head_of_a_stream():
    assert mesh_latency_cycles(NET, 4) == 4 * NET.hop_latency_cycles
    assert mesh_cycles(NET, 1, 4) == mesh_latency_cycles(NET, 4) + 1
