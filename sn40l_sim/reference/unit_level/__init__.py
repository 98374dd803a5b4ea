"""Unit-level fidelity: one small kernel on one tile, cycle by cycle (docs/design.md §3).

Every PCU stage, PMU port and mesh hop is a SimPy process passing vector-sized packets through
bounded wires, with the parameters of the socket spec (lanes, stages, pipeline latency, reduction
tree, tail stage, PMU banks, ports and address generators, hop latency and link width). It does
not use the tile-level formulas of :mod:`sn40l_sim.hardware.units`; the two are compared in
``tests/reference/test_unit_level.py`` on the kernels of :mod:`sn40l_sim.hardware.units.tile_kernels`.
It is slow by design (about 10^5 events per second): keep shapes small.
"""
from __future__ import annotations

from sn40l_sim.hardware.spec import SocketSpec
from sn40l_sim.hardware.units.tile_kernels import AttentionKernel, GatherKernel, GemmKernel
from sn40l_sim.reference.unit_level.attention import simulate_attention
from sn40l_sim.reference.unit_level.gather import simulate_gather
from sn40l_sim.reference.unit_level.gemm import UnitLevelResult, simulate_gemm


def simulate(kernel: GemmKernel | AttentionKernel | GatherKernel, socket: SocketSpec) -> UnitLevelResult:
    """Run one small kernel cycle by cycle on ``socket``'s units.

    Examples
    --------
    >>> from sn40l_sim.hardware.loader import load_hardware
    >>> socket = load_hardware("hw_configs/sn40l.yaml").socket
    >>> simulate(GemmKernel(m=16, k=12, n=32), socket).cycles > 2 * 16
    True
    """
    if isinstance(kernel, GemmKernel):
        return simulate_gemm(kernel, socket)
    if isinstance(kernel, AttentionKernel):
        return simulate_attention(kernel, socket)
    if isinstance(kernel, GatherKernel):
        return simulate_gather(kernel, socket)
    raise TypeError(f"unknown kernel {kernel!r}")


__all__ = ["UnitLevelResult", "simulate", "simulate_attention", "simulate_gather", "simulate_gemm"]
