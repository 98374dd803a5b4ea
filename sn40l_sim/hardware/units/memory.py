"""Cycle models of off-chip transfers: AGCU bursts to and from a memory tier (HBM, DDR, ...).

A transfer pays the tier's access latency (plus any transfer set-up time) once, then streams at
the achievable bandwidth of the memory units it spreads over (``units_used x
bytes_per_s_per_unit x efficiency``, efficiency being the tier's calibrated ``efficiency``). AGCUs move whole bursts, so the bytes are rounded up to
``agcu.burst_bytes``. When the number of AGCUs carrying the transfer is given, their own limits
also apply: ``bytes_per_cycle`` each, and at most ``max_outstanding_bursts`` in flight each
(Little's law over the access latency).
"""
from __future__ import annotations

from sn40l_sim.hardware.spec import AGCUSpec, MemoryTierSpec
from sn40l_sim.hardware.units._cycles import ceil_cycles, ceil_div
from sn40l_sim.hardware.units._examples import example_agcu, example_hbm  # noqa: F401  (docstrings)


def offchip_bytes_per_cycle(tier: MemoryTierSpec, clock_hz: float, efficiency: float,
                            units_used: int | None = None) -> float:
    """Achievable bytes per RDU cycle from ``units_used`` units of a memory tier.

    Parameters
    ----------
    tier : MemoryTierSpec
        One memory tier of the socket (HBM, DDR, ...).
    clock_hz : float
        RDU clock.
    efficiency : float
        Achievable fraction of the stated bandwidth (calibrated).
    units_used : int, optional
        Memory units (HBM modules, DDR channels) the data is spread over. Default: the units of
        ONE die (``tier.units_per_die``), those local to a tile; pass
        ``socket.dies * tier.units_per_die`` for a transfer spread over the whole socket.

    Examples
    --------
    Two 400 GB/s units per die at 1.6 GHz and 90% efficiency:

    >>> offchip_bytes_per_cycle(example_hbm(), 1.6e9, 0.9)
    450.0
    >>> offchip_bytes_per_cycle(example_hbm(), 1.6e9, 0.9, units_used=4)
    900.0
    """
    if not 0 < efficiency <= 1:
        raise ValueError(f"efficiency must be in (0, 1], got {efficiency!r}")
    units = tier.units_per_die if units_used is None else units_used
    if units <= 0:
        raise ValueError(f"units_used must be positive, got {units_used!r}")
    return units * tier.bytes_per_s_per_unit * efficiency / clock_hz


def offchip_cycles(tier: MemoryTierSpec, agcu: AGCUSpec, clock_hz: float, n_bytes: int,
                   efficiency: float, units_used: int | None = None, setup_s: float = 0.0,
                   agcus: int | None = None, link_bytes_per_cycle: float | None = None) -> int:
    """Cycles to move ``n_bytes`` between a tile and a memory tier.

    Parameters
    ----------
    tier, clock_hz, efficiency, units_used
        As in :func:`offchip_bytes_per_cycle`.
    agcu : AGCUSpec
        Burst size (and, with ``agcus``, per-AGCU bandwidth and outstanding bursts).
    n_bytes : int
        Bytes to move; rounded up to whole bursts.
    setup_s : float
        Set-up time of the transfer (calibrated ``transfer_setup_s``), paid once.
    agcus : int, optional
        AGCUs carrying the transfer. ``None`` leaves the AGCUs out (their aggregate is assumed not
        to bind, which the mapper checks separately).
    link_bytes_per_cycle : float, optional
        Bytes per cycle of the links between those AGCUs and the memory controllers (the TLN ports
        of the tiles in use), where narrower than the rest; ``None`` leaves them out.

    Returns
    -------
    int
        ``ceil((latency + setup) x clock) + ceil(burst-rounded bytes / bytes per cycle)``, 0 for
        no bytes.

    Examples
    --------
    1 MiB from two 400 GB/s units at 90%: 160 cycles of latency, then 1048576 / 450 bytes/cycle:

    >>> offchip_cycles(example_hbm(), example_agcu(), 1.6e9, 2**20, 0.9)
    2491
    >>> 160 + -(-2**20 // 450)
    2491

    Through two AGCUs with 64 bursts of 64 B in flight each over a 160-cycle latency, Little's
    law allows 2 x 64 x 64 / 160 = 51.2 bytes/cycle:

    >>> offchip_cycles(example_hbm(), example_agcu(), 1.6e9, 2**20, 0.9, agcus=2)
    20640
    """
    if n_bytes < 0:
        raise ValueError(f"n_bytes must be >= 0, got {n_bytes}")
    if n_bytes == 0:
        return 0
    latency = ceil_cycles((tier.latency_s + setup_s) * clock_hz)
    moved = ceil_div(ceil_cycles(n_bytes), agcu.burst_bytes) * agcu.burst_bytes
    rate = offchip_bytes_per_cycle(tier, clock_hz, efficiency, units_used)
    if agcus is not None:
        if agcus <= 0:
            raise ValueError(f"agcus must be positive, got {agcus}")
        access_cycles = max(1, ceil_cycles(tier.latency_s * clock_hz))
        in_flight = agcu.max_outstanding_bursts * agcu.burst_bytes / access_cycles
        rate = min(rate, agcus * min(agcu.bytes_per_cycle, in_flight))
    if link_bytes_per_cycle is not None:
        rate = min(rate, link_bytes_per_cycle)
    return latency + ceil_cycles(moved / rate)
