"""Cycle models of data movement over networks: RDN mesh hops and point-to-point links.

On the tile's mesh (RDN) a stream pays ``hop_latency_cycles`` per switch hop once (the head of the
stream), then serialises over ``links_per_direction`` links of ``link_bytes_per_cycle`` each.
Off the tile (TLN, die-to-die, socket-to-socket P2P) a link is a bandwidth in bytes/s and a latency
in seconds, converted to cycles of the RDU clock.
"""
from __future__ import annotations

from sn40l_sim.hardware.spec import NetworkSpec
from sn40l_sim.hardware.units._cycles import ceil_cycles, ceil_div
from sn40l_sim.hardware.units._examples import example_network  # noqa: F401  (docstrings)


def mesh_bytes_per_cycle(net: NetworkSpec) -> int:
    """Bytes per cycle a stream can push in one direction between two switches.

    >>> mesh_bytes_per_cycle(example_network())
    64
    """
    return net.link_bytes_per_cycle * net.links_per_direction


def mesh_latency_cycles(net: NetworkSpec, hops: int) -> int:
    """Cycles for the head of a stream to cross ``hops`` switch hops.

    >>> mesh_latency_cycles(example_network(), 3)
    6
    """
    if hops < 0:
        raise ValueError(f"hops must be >= 0, got {hops}")
    return hops * net.hop_latency_cycles


def mesh_cycles(net: NetworkSpec, n_bytes: int, hops: int) -> int:
    """Cycles to stream ``n_bytes`` across ``hops`` switch hops of the mesh.

    Parameters
    ----------
    net : NetworkSpec
        The vector (or scalar/control) network of the tile.
    n_bytes : int
        Bytes in the stream.
    hops : int
        Switch-to-switch hops between producer and consumer (0 for neighbours on one switch).

    Returns
    -------
    int
        ``hops x hop_latency_cycles + ceil(n_bytes / (link_bytes_per_cycle x links))``.

    Examples
    --------
    A 64 x 64 BF16 tile (8 KiB) over 3 hops of a 64 B/cycle, 2-cycle-per-hop network:

    >>> mesh_cycles(example_network(), 64 * 64 * 2, hops=3)
    134
    """
    if n_bytes < 0 or hops < 0:
        raise ValueError(f"n_bytes and hops must be >= 0, got {n_bytes}, {hops}")
    if n_bytes == 0:
        return 0
    return mesh_latency_cycles(net, hops) + ceil_div(ceil_cycles(n_bytes), mesh_bytes_per_cycle(net))


def link_cycles(bytes_per_s: float, latency_s: float, clock_hz: float, n_bytes: int,
                efficiency: float = 1.0, setup_s: float = 0.0) -> int:
    """Cycles to send ``n_bytes`` over a point-to-point link (TLN, die-to-die, P2P).

    Parameters
    ----------
    bytes_per_s : float
        Link bandwidth.
    latency_s : float
        One-way latency of the link.
    clock_hz : float
        RDU clock used to count cycles.
    n_bytes : int
        Bytes to send.
    efficiency : float
        Achievable fraction of the bandwidth (calibrated ``p2p_efficiency`` for P2P).
    setup_s : float
        Per-transfer set-up time (calibrated ``transfer_setup_s``).

    Examples
    --------
    1 MB over a 50 GB/s P2P port with 1 us latency at 1.6 GHz: 1600 + 32000 cycles.

    >>> link_cycles(50e9, 1e-6, 1.6e9, 10**6)
    33600
    >>> link_cycles(50e9, 1e-6, 1.6e9, 10**6, efficiency=0.5)
    65600
    """
    if n_bytes < 0:
        raise ValueError(f"n_bytes must be >= 0, got {n_bytes}")
    if not 0 < efficiency <= 1:
        raise ValueError(f"efficiency must be in (0, 1], got {efficiency!r}")
    if n_bytes == 0:
        return 0
    return (ceil_cycles((latency_s + setup_s) * clock_hz)
            + ceil_cycles(n_bytes * clock_hz / (bytes_per_s * efficiency)))
