"""Cycle and capacity models of one pattern memory unit (PMU), from its :class:`PMUSpec`.

A PMU is a banked scratchpad. Each port moves one row across all banks per cycle
(``banks x bank_width_bytes`` bytes); read and write ports work concurrently, so reads and
writes overlap and the busier side sets the time. The address generators produce
``addresses_per_cycle`` addresses per cycle, which limits indexed (gather/scatter) access:
a linear stream needs one address per row, an indexed access one per element or row fetched.
"""
from __future__ import annotations

import functools
import math

from sn40l_sim.hardware.spec import PMUSpec
from sn40l_sim.hardware.units._cycles import ceil_cycles, ceil_div
from sn40l_sim.hardware.units._examples import example_pmu  # noqa: F401  (docstring examples)


def pmu_port_bytes_per_cycle(pmu: PMUSpec) -> int:
    """Bytes one PMU port moves per cycle: a row across all banks.

    Examples
    --------
    >>> pmu_port_bytes_per_cycle(example_pmu())
    64
    """
    return pmu.banks * pmu.bank_width_bytes


def pmu_cycles(pmu: PMUSpec, read_bytes: int, write_bytes: int, addresses: int = 0) -> int:
    """Cycles one PMU needs to serve ``read_bytes`` of reads and ``write_bytes`` of writes.

    Parameters
    ----------
    pmu : PMUSpec
        Banks, bank width, ports and address generation rate.
    read_bytes, write_bytes : int
        Bytes read and written; reads and writes use separate ports and overlap.
    addresses : int
        Addresses the access needs generated (0 for linear streams, whose one address per row
        never binds; the number of indexed elements or rows for a gather or scatter).

    Returns
    -------
    int
        ``max(read cycles, write cycles, address cycles)``; no latency (the PMU's pipeline is
        counted in the consumer's fill).

    Examples
    --------
    16 banks x 4 bytes per port, one read and one write port, 4 addresses per cycle:

    >>> pmu = example_pmu()
    >>> pmu_cycles(pmu, read_bytes=8192, write_bytes=4096)      # reads bind: 8192 / 64
    128
    >>> pmu_cycles(pmu, read_bytes=1024, write_bytes=0, addresses=512)   # gather of 512 BF16
    128
    """
    if read_bytes < 0 or write_bytes < 0 or addresses < 0:
        raise ValueError("read_bytes, write_bytes and addresses must be >= 0")
    row = pmu_port_bytes_per_cycle(pmu)
    read = ceil_div(ceil_cycles(read_bytes), row * pmu.read_ports)
    write = ceil_div(ceil_cycles(write_bytes), row * pmu.write_ports)
    addr = ceil_div(ceil_cycles(addresses), pmu.addresses_per_cycle)
    return max(read, write, addr)


def pmus_for_buffer(pmu: PMUSpec, buffer_bytes: int, double_buffered: bool = True) -> int:
    """PMUs needed to hold a buffer of ``buffer_bytes`` (twice that when double-buffered).

    Examples
    --------
    >>> pmu = example_pmu()                          # 512 KiB each
    >>> pmus_for_buffer(pmu, 300 * 1024)             # 600 KiB double-buffered
    2
    >>> pmus_for_buffer(pmu, 300 * 1024, double_buffered=False)
    1
    >>> pmus_for_buffer(pmu, 0)
    0
    """
    if buffer_bytes < 0:
        raise ValueError(f"buffer_bytes must be >= 0, got {buffer_bytes}")
    total = buffer_bytes * (2 if double_buffered else 1)
    return ceil_cycles(total / pmu.capacity_bytes)


def pmu_random_access_rate(pmu: PMUSpec, access_bytes: int) -> float:
    """Expected accesses per cycle when each access reads a random row of a packed table (a gather).

    The table is stored row after row (row ``r`` at byte ``r * access_bytes``), so a row's start
    falls on one of ``R = port row / gcd(access_bytes, port row)`` byte offsets within the banks'
    row, each equally likely, and covers the banks from the one holding its first byte to the one
    holding its last, wrapping. The address generators issue accesses in order, up to ``S =
    min(addresses_per_cycle, port bytes // access_bytes)`` per cycle, and stop at the first one
    that touches a bank already read that cycle (it goes first in the next). Each cycle thus starts
    afresh and issues ``j`` accesses with the probability that the first ``j`` touch no bank twice:
    ``E = sum_{j=1..S} P(j rows pairwise disjoint)``, counted exactly over the ``R`` offsets
    (:func:`_disjoint_row_tuples`). Rows of a power-of-two number of banks fall on ``banks // c``
    disjoint bank groups, and ``P`` is ``prod_{i<j} (G - i) / G``; rows of 3 banks' width overlap
    their neighbours' and conflict more often than ``banks // 3`` disjoint groups would.

    Examples
    --------
    BF16 elements (one bank each) from 16 banks at 4 addresses per cycle:

    >>> round(pmu_random_access_rate(example_pmu(), 2), 4)
    3.4243
    >>> pmu_random_access_rate(example_pmu(), 64)       # a full port row: one per cycle
    1.0

    Rows of 16 bytes fall on four disjoint groups of four banks (1 + 3/4 + 3/4 * 2/4 + ...); rows
    of 12 bytes start at any of the 16 banks and overlap their neighbours', so they conflict more
    often than five disjoint groups of three banks would (2.472):

    >>> pmu_random_access_rate(example_pmu(), 16)
    2.21875
    >>> round(pmu_random_access_rate(example_pmu(), 12), 4)
    2.02
    """
    if access_bytes <= 0:
        raise ValueError(f"access_bytes must be positive, got {access_bytes}")
    port = pmu_port_bytes_per_cycle(pmu) * pmu.read_ports
    slots = max(1, min(pmu.addresses_per_cycle, port // max(1, int(access_bytes))))
    disjoint = _disjoint_row_tuples(pmu.banks, pmu.bank_width_bytes, max(1, int(access_bytes)), slots)
    return sum(disjoint)


@functools.cache
def _disjoint_row_tuples(banks: int, bank_width_bytes: int, row_bytes: int, most: int) -> tuple[float, ...]:
    """``P(j random rows of a packed table touch no bank twice)`` for ``j = 1 .. most``.

    Walks the banks once per way a row may wrap from the last bank to the first, keeping the
    number of banks the current row still covers and the rows placed; a set of ``j`` disjoint rows
    is counted once and ordered ``j!`` ways, over the ``R ** j`` equally likely offset tuples.

    >>> _disjoint_row_tuples(16, 4, 8, 3)      # 8 groups of two banks: 1, 7/8, 7/8 * 6/8
    (1.0, 0.875, 0.65625)
    """
    row = banks * bank_width_bytes
    offsets = range(0, row, math.gcd(row_bytes, row))
    starts: dict[int, list[int]] = {}   # first bank -> the widths (in banks) of the rows starting there
    for offset in offsets:
        first, last = offset // bank_width_bytes, (offset + row_bytes - 1) // bank_width_bytes
        starts.setdefault(first, []).append(last - first + 1)
    widest = max(w for widths in starts.values() for w in widths)
    if widest >= banks:   # every row touches every bank: one a cycle
        return (1.0,) + (0.0,) * (most - 1)
    sets = [0] * (most + 1)
    for wrapped in range(widest):   # banks 0 .. wrapped-1 covered by a row started near the end
        # (banks still covered after this one, rows placed) -> ways
        ways = {(wrapped, 0): 1}
        for bank in range(banks):
            after: dict[tuple[int, int], int] = {}
            for (covered, placed), n in ways.items():
                if covered:
                    after[(covered - 1, placed)] = after.get((covered - 1, placed), 0) + n
                    continue
                after[(0, placed)] = after.get((0, placed), 0) + n
                if placed < most:
                    for width in starts.get(bank, ()):
                        key = (width - 1, placed + 1)
                        after[key] = after.get(key, 0) + n
            ways = after
        for (covered, placed), n in ways.items():
            if covered == wrapped:
                sets[placed] += n
    return tuple(math.factorial(j) * sets[j] / len(offsets) ** j for j in range(1, most + 1))


def pmu_gather_cycles(pmu: PMUSpec, rows: int, row_bytes: int) -> int:
    """Cycles for one PMU to read ``rows`` randomly indexed rows of ``row_bytes`` each.

    A row wider than the read port takes ``ceil(row_bytes / port bytes)`` full-port accesses;
    narrower rows go at :func:`pmu_random_access_rate`.

    Examples
    --------
    >>> pmu_gather_cycles(example_pmu(), 1024, 2)     # 1024 / 3.42 accesses per cycle
    300
    >>> pmu_gather_cycles(example_pmu(), 1024, 256)   # 4 port rows each
    4096
    """
    if rows < 0 or row_bytes <= 0:
        raise ValueError(f"need rows >= 0 and row_bytes > 0, got {rows}, {row_bytes}")
    port = pmu_port_bytes_per_cycle(pmu) * pmu.read_ports
    if row_bytes >= port:
        return rows * ceil_div(int(row_bytes), port)
    return ceil_cycles(rows / pmu_random_access_rate(pmu, row_bytes))
