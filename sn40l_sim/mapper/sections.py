"""Splitting a fused kernel that does not fit on the chip at once into sections.

A section is a run of consecutive operators whose stages fit one configuration of the tiles:
at least one PCU per stage on every tile in use and the PMUs holding each stage's smallest piece
double-buffered (the finest tiling). Operators are added to the current section while they fit;
the next one starts a new section. Sections run one after the other with
the next section's configuration loaded between them, and the tensor crossing a boundary goes through
memory (written by one section, read by the next).

Examples
--------
>>> from sn40l_sim.mapper._examples import example_socket, example_decode_kernel
>>> split_sections(example_socket(), example_decode_kernel().operators, 4)
[(0, 4)]
"""
from __future__ import annotations

import math

from sn40l_sim.errors import InfeasibleError
from sn40l_sim.hardware.spec import SocketSpec
from sn40l_sim.hardware.units.pmu import pmus_for_buffer
from sn40l_sim.ir import Operator
from sn40l_sim.mapper.budget import NO_LIMITS, UnitBudget
from sn40l_sim.mapper.tiling import max_pieces, tile_operator


def min_units(socket: SocketSpec, op: Operator, chip_tiles: int) -> tuple[int, int]:
    """``(PCUs, PMUs)`` per tile the operator's stage needs at least: one PCU (none for PMU-only
    work), and PMUs for its finest piece double-buffered.

    >>> from sn40l_sim.mapper._examples import example_socket
    >>> min_units(example_socket(), Operator("x", "elementwise", elements=4096), 4)
    (1, 1)
    """
    finest = tile_operator(socket, op, max_pieces(socket, op), socket.calibrated.systolic_efficiency)
    pcus = 0 if finest.resource == "sram" else 1
    return pcus, max(1, pmus_for_buffer(socket.pmu, math.ceil(finest.buffer_bytes / chip_tiles)))


def output_bytes(socket: SocketSpec, op: Operator) -> int:
    """Bytes of the operator's whole output (what crosses a section boundary after it).

    >>> from sn40l_sim.mapper._examples import example_socket
    >>> output_bytes(example_socket(), Operator("g", "gemm", m=4, k=8, n=16))
    128
    """
    one = tile_operator(socket, op, 1, socket.calibrated.systolic_efficiency)
    return one.out_bytes * one.pieces


def split_sections(socket: SocketSpec, ops: tuple[Operator, ...], chip_tiles: int,
                   kernel_name: str = "", budget: UnitBudget = NO_LIMITS) -> list[tuple[int, int]]:
    """``[(start, stop), ...]`` operator ranges of the sections, in order (within the PCUs and PMUs
    per tile that ``budget`` allows).

    Raises
    ------
    InfeasibleError
        If one operator alone cannot be placed (its smallest piece exceeds a tile's PMUs).
    """
    tile_pcus, tile_pmus = budget.tile_pcus(socket.tile.pcus), budget.tile_pmus(socket.tile.pmus)
    out: list[tuple[int, int]] = []
    start, pcus, pmus = 0, 0, 0
    for i, op in enumerate(ops):
        q, r = min_units(socket, op, chip_tiles)
        if q > tile_pcus or r > tile_pmus:
            need = r * socket.pmu.capacity_bytes
            raise InfeasibleError(
                f"kernel {kernel_name!r}: operator {op.name!r} cannot be placed: its smallest piece needs "
                f"{r} PMUs ({need:.0f} B double-buffered) per tile, a tile has {tile_pmus} "
                f"({tile_pmus * socket.pmu.capacity_bytes:.0f} B)"
                + (f"; expected larger tiles (tile.pmus, pmu.capacity_bytes of socket {socket.name!r}) or a wider "
                   "tensor parallelism" if budget == NO_LIMITS else ""))
        if i > start and (pcus + q > tile_pcus or pmus + r > tile_pmus):
            out.append((start, i))
            start, pcus, pmus = i, 0, 0
        pcus += q
        pmus += r
    out.append((start, len(ops)))
    return out
