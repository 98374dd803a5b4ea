"""A stage's PMU cycles for a given number of PMUs, and the fewest PMUs serving a division within a
target: the PMU side of :mod:`.allocate`.

Each PMU serves an equal share of the stage's reads, writes and addresses
(:func:`~sn40l_sim.hardware.units.pmu.pmu_cycles`); its read and write streams also cross one mesh
link each. :class:`PmuRates` holds what these read of a socket, and a memo of the shares asked for.
"""
from __future__ import annotations

import math
from collections.abc import Callable

from sn40l_sim.hardware.spec import PMUSpec, SocketSpec
from sn40l_sim.hardware.units._cycles import ceil_div
from sn40l_sim.hardware.units.network import mesh_bytes_per_cycle
from sn40l_sim.hardware.units.pmu import pmu_cycles, pmu_port_bytes_per_cycle
from sn40l_sim.mapper.division import Division
from sn40l_sim.mapper.stages import StageWork


class PmuRates:
    """What a stage's PMU cycles read of a socket (its PMU and the mesh link each PMU stream
    crosses), and the cycles of the shares asked for so far: the bisections ask for the same
    shares again and again. One per distinct PMU and link (:func:`pmu_rates`)."""

    __slots__ = ("pmu", "link", "read_cap", "write_cap", "memo")

    def __init__(self, pmu: PMUSpec, link: int) -> None:
        self.pmu = pmu
        self.link = link
        port = pmu_port_bytes_per_cycle(pmu)
        self.read_cap = min(link, port * pmu.read_ports)
        self.write_cap = min(link, port * pmu.write_ports)
        self.memo: dict[tuple[int, int, int], int] = {}


_rates_by_unit: dict[tuple, PmuRates] = {}


def pmu_rates(socket: SocketSpec) -> PmuRates:
    """The socket's :class:`PmuRates`, shared by every socket with the same PMU and mesh link."""
    pmu, link = socket.pmu, mesh_bytes_per_cycle(socket.tile.vector_network)
    key = (pmu.banks, pmu.bank_width_bytes, pmu.read_ports, pmu.write_ports, pmu.addresses_per_cycle, link)
    got = _rates_by_unit.get(key)
    if got is None:
        got = _rates_by_unit[key] = PmuRates(pmu, link)
    return got


def sram_cycles(rates: PmuRates, stage: StageWork, pmus: int, chip_tiles: int,
                division: Division | None = None) -> int:
    """Cycles per data tile of the busiest of ``pmus`` PMUs per tile (on each of ``chip_tiles``
    tiles) serving ``stage``'s reads, writes and addresses, and what ``division`` adds (a split
    K's partial sums); 0 without PMUs."""
    if pmus == 0:
        return 0
    share = pmus * chip_tiles
    if division is None:
        reads = math.ceil(stage.sram_read_bytes / share)
        writes = math.ceil(stage.sram_write_bytes / share)
    else:
        reads = math.ceil((stage.sram_read_bytes + division.sram_read_bytes) / share)
        writes = math.ceil((stage.sram_write_bytes + division.sram_write_bytes) / share)
    addresses = math.ceil(stage.sram_addresses / share)
    # pmu_share_cycles' memo looked up here first: the allocator's searches ask for shares again
    got = rates.memo.get((reads, writes, addresses))
    return got if got is not None else pmu_share_cycles(rates, reads, writes, addresses)


def pmu_share_cycles(rates: PmuRates, reads: int, writes: int, addresses: int) -> int:
    """One PMU's cycles for its share of a stage's traffic; its reads leave, and its writes arrive,
    over one mesh link (memoised in ``rates``)."""
    key = (reads, writes, addresses)
    got = rates.memo.get(key)
    if got is None:
        streams = max(ceil_div(reads, rates.read_cap), ceil_div(writes, rates.write_cap))
        got = max(streams, pmu_cycles(rates.pmu, reads, writes, addresses))
        if len(rates.memo) > 200_000:
            rates.memo.clear()
        rates.memo[key] = got
    return got


def fewest_pmus(rates: PmuRates, stage: StageWork, chip_tiles: int, division: Division, target: int,
                 lo: int, hi: int) -> int:
    """The fewest PMUs in ``lo .. hi`` serving ``division`` within ``target`` cycles (``hi`` does).

    A stage's PMU cycles do not grow with its PMUs (each serves a smaller share), so the answer
    is where they cross the target, whichever way it is searched for: first next to an estimate
    (the busiest of the reads, writes and addresses over the rates one PMU serves them at), and
    by bisection if a few steps from it do not settle it. The estimate only saves steps."""
    # sram_cycles with this division, its sums taken once: the bisection asks a dozen times
    read_bytes = stage.sram_read_bytes + division.sram_read_bytes
    write_bytes = stage.sram_write_bytes + division.sram_write_bytes
    addresses, memo, ceil = stage.sram_addresses, rates.memo, math.ceil

    def fits(pmus: int) -> bool:
        if pmus == 0:
            return target >= 0
        share = pmus * chip_tiles
        key = (ceil(read_bytes / share), ceil(write_bytes / share), ceil(addresses / share))
        got = memo.get(key)
        return (got if got is not None else pmu_share_cycles(rates, *key)) <= target

    busiest = max((stage.sram_read_bytes + division.sram_read_bytes) / rates.read_cap,
                  (stage.sram_write_bytes + division.sram_write_bytes) / rates.write_cap,
                  stage.sram_addresses / rates.pmu.addresses_per_cycle)
    guess = min(hi, max(lo, math.ceil(busiest / (chip_tiles * target)))) if target > 0 else hi
    for _ in range(3):
        if fits(guess):
            if guess == lo or not fits(guess - 1):
                return guess
            hi = guess = guess - 1          # fits: the answer is at most guess - 1
        else:
            lo = guess = guess + 1          # the answer is above the guess
    return least_fitting(lo, hi, fits)


def least_fitting(lo: int, hi: int, fits: Callable[[int], bool]) -> int:
    """The least value in ``[lo, hi]`` for which ``fits`` holds, ``fits`` holding from some value
    on and at ``hi`` (bisection).

    >>> least_fitting(0, 100, lambda n: n * n >= 50)
    8
    """
    while lo < hi:
        mid = (lo + hi) // 2
        if fits(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo
