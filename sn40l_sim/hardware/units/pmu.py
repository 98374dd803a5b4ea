"""Cycle and capacity models of one pattern memory unit (PMU), from its :class:`PMUSpec`.

A PMU is a banked scratchpad. Each port moves one row across all banks per cycle
(``banks x bank_width_bytes`` bytes); read and write ports work concurrently, so reads and
writes overlap and the busier side sets the time. The address generators produce
``addresses_per_cycle`` addresses per cycle, which limits indexed (gather/scatter) access:
a linear stream needs one address per row, an indexed access one per element or row fetched.
"""
from __future__ import annotations

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
    """Expected accesses per cycle when each access goes to a random aligned row (a gather).

    An access of ``access_bytes`` covers ``c = ceil(access_bytes / bank_width_bytes)`` banks; rows
    aligned to their size make ``G = banks // c`` disjoint bank groups, each equally likely. The
    address generators issue accesses in order, up to ``S = min(addresses_per_cycle, G, port
    bytes // access_bytes)`` per cycle, and stop at the first one whose group is already busy
    that cycle (it goes first in the next). Each cycle thus starts afresh and issues ``j``
    accesses with probability that the first ``j`` groups differ:
    ``E = sum_{j=1..S} prod_{i<j} (G - i) / G``.

    Examples
    --------
    BF16 elements (one bank each) from 16 banks at 4 addresses per cycle:

    >>> round(pmu_random_access_rate(example_pmu(), 2), 4)
    3.4243
    >>> pmu_random_access_rate(example_pmu(), 64)       # a full port row: one per cycle
    1.0
    """
    if access_bytes <= 0:
        raise ValueError(f"access_bytes must be positive, got {access_bytes}")
    port = pmu_port_bytes_per_cycle(pmu) * pmu.read_ports
    covered = max(1, ceil_div(int(access_bytes), pmu.bank_width_bytes))
    groups = max(1, pmu.banks // covered)
    slots = max(1, min(pmu.addresses_per_cycle, groups, port // max(1, int(access_bytes))))
    expected, all_distinct = 0.0, 1.0
    for j in range(slots):
        all_distinct *= (groups - j) / groups
        expected += all_distinct
    return expected


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
