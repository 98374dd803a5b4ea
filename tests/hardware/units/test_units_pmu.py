"""PMU unit model: port bandwidth, concurrent read/write, address generation, capacity."""
from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from units_reference_socket import reference_socket

from sn40l_sim.hardware.units import (
    pmu_cycles,
    pmu_gather_cycles,
    pmu_port_bytes_per_cycle,
    pmu_random_access_rate,
    pmus_for_buffer,
)

PMU = reference_socket().pmu


def test_port_width_is_banks_times_bank_width():
    assert pmu_port_bytes_per_cycle(PMU) == PMU.banks * PMU.bank_width_bytes


@settings(max_examples=300, deadline=None)
@given(r=st.integers(0, 10**7), w=st.integers(0, 10**7), a=st.integers(0, 10**6))
def test_never_beats_port_or_address_rates(r, w, a):
    cycles = pmu_cycles(PMU, r, w, a)
    port = pmu_port_bytes_per_cycle(PMU)
    assert r <= cycles * port * PMU.read_ports
    assert w <= cycles * port * PMU.write_ports
    assert a <= cycles * PMU.addresses_per_cycle


def test_reads_and_writes_overlap():
    r, w = 1 << 20, 3 << 18
    assert pmu_cycles(PMU, r, w) == max(pmu_cycles(PMU, r, 0), pmu_cycles(PMU, 0, w))


def test_streaming_rate_is_exact_for_whole_rows():
    port = pmu_port_bytes_per_cycle(PMU)
    assert pmu_cycles(PMU, 1000 * port * PMU.read_ports, 0) == 1000


def test_gather_limited_by_address_generation():
    # one BF16 element per address: the address generators, not the banks, set the pace
    n = 4096
    assert pmu_cycles(PMU, 2 * n, 0, addresses=n) == math.ceil(n / PMU.addresses_per_cycle)


@settings(max_examples=200, deadline=None)
@given(size=st.integers(0, 10**9), db=st.booleans())
def test_buffers_fit_in_the_pmus_given(size, db):
    n = pmus_for_buffer(PMU, size, db)
    need = size * (2 if db else 1)
    assert n * PMU.capacity_bytes >= need
    assert (n - 1) * PMU.capacity_bytes < need or n == 0


def test_negative_sizes_rejected():
    with pytest.raises(ValueError):
        pmu_cycles(PMU, -1, 0)


def test_random_access_rate_limits():
    port = pmu_port_bytes_per_cycle(PMU) * PMU.read_ports
    # a full-port row: exactly one access per cycle
    assert pmu_random_access_rate(PMU, port) == 1.0
    for size in (1, 2, 4, 8, 16, 32, 64):
        rate = pmu_random_access_rate(PMU, size)
        assert 1.0 <= rate <= PMU.addresses_per_cycle
        assert rate * size <= port
    # wider accesses cover more banks, so fewer fit in a cycle
    rates = [pmu_random_access_rate(PMU, size) for size in (4, 8, 16, 32, 64)]
    assert rates == sorted(rates, reverse=True)


def test_random_access_rate_closed_form_for_one_bank_accesses():
    groups, slots = PMU.banks, min(PMU.addresses_per_cycle, PMU.banks)
    expected = sum(math.prod((groups - i) / groups for i in range(j)) for j in range(1, slots + 1))
    assert pmu_random_access_rate(PMU, PMU.bank_width_bytes) == pytest.approx(expected)
    assert expected < PMU.addresses_per_cycle    # bank conflicts cost something


def _disjoint_by_enumeration(banks, bank_width, row_bytes, most):
    """P(j rows of a packed table touch no bank twice), every ordered tuple of offsets counted."""
    row = banks * bank_width
    offsets = range(0, row, math.gcd(row_bytes, row))

    def touched(offset):
        first, last = offset // bank_width, (offset + row_bytes - 1) // bank_width
        return frozenset(b % banks for b in range(first, min(last, first + banks - 1) + 1))

    masks = [touched(o) for o in offsets]
    shares = []
    for j in range(1, most + 1):
        disjoint = sum(sum(len(m) for m in t) == len(frozenset().union(*t))
                       for t in itertools.product(masks, repeat=j))
        shares.append(disjoint / len(masks) ** j)
    return shares


@pytest.mark.parametrize("banks, bank_width, row_bytes", [
    (16, 4, 2), (16, 4, 8), (16, 4, 6), (16, 4, 12), (16, 4, 20), (16, 2, 5), (12, 4, 8), (8, 4, 3),
    (16, 4, 40), (32, 4, 6)])
def test_random_access_rate_counts_every_tuple_of_row_offsets(banks, bank_width, row_bytes):
    # the walk over the banks gives what enumerating every ordered tuple of offsets gives
    pmu = PMU.model_copy(update={"banks": banks, "bank_width_bytes": bank_width, "read_ports": 1,
                                 "addresses_per_cycle": 3})
    slots = max(1, min(3, banks * bank_width // row_bytes))
    expected = sum(_disjoint_by_enumeration(banks, bank_width, row_bytes, slots))
    assert pmu_random_access_rate(pmu, row_bytes) == pytest.approx(expected, rel=1e-12)


def test_packed_rows_of_three_banks_overlap_their_neighbours():
    # 12-byte rows on 4-byte banks start at every bank, so two conflict when their starts are
    # within two banks: more often than 32 // 3 = 10 disjoint groups of three banks would
    pmu = PMU.model_copy(update={"banks": 32, "bank_width_bytes": 4, "read_ports": 1, "addresses_per_cycle": 2})
    assert pmu_random_access_rate(pmu, 12) == pytest.approx(1 + 27 / 32)
    assert pmu_random_access_rate(pmu, 12) < 1 + 9 / 10
    # 16-byte rows are aligned to their four banks: eight disjoint groups
    assert pmu_random_access_rate(pmu, 16) == pytest.approx(1 + 7 / 8)


def test_gather_cycles():
    port = pmu_port_bytes_per_cycle(PMU) * PMU.read_ports
    assert pmu_gather_cycles(PMU, 100, 3 * port) == 300
    n = 4096
    assert pmu_gather_cycles(PMU, n, 2) == math.ceil(n / pmu_random_access_rate(PMU, 2))
    assert pmu_gather_cycles(PMU, n, 2) >= n / PMU.addresses_per_cycle


def test_writes_go_at_the_write_ports_rate_not_the_read_ports():
    # 2 read ports and 1 write port of 128 B (32 banks x 4 B): 128 KiB of writes take 1024 cycles,
    # as many reads 512; each side divides by its own port count
    pmu = PMU.model_copy(update={"read_ports": 2, "write_ports": 1})
    assert pmu_cycles(pmu, 0, 128 * 1024) == 1024
    assert pmu_cycles(pmu, 128 * 1024, 0) == 512
