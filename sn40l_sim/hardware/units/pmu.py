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
