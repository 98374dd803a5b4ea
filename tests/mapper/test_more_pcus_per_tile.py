"""A tile with more PCUs (same 260 PMUs, a wider grid) and why Llama-3.1-70B's 8K prefill gets
slower on it (docs/validation.md, "More PCUs per tile, slower").

Two costs grow with the units present rather than the units a kernel needs. The default spending
(``execution.idle_units: spend``, sn40l_sim/mapper/spending.py) gives a stage every PCU that
shortens it by a cycle, so on a 300-PCU tile the QKV and attention kernels take all 300 and load
their configuration, while their other cycles do not fall. And a load writes every switch of the
kernel's tiles (:func:`sn40l_sim.hardware.figures.config_bytes`): a 20 x 28 or 20 x 30 grid has 42
or 84 more switches than the shipped 20 x 26, whatever the kernel uses. Priced spending, which
weighs a unit against its configuration, leaves only the second: each kernel is slower on the
bigger tile by at most its extra switches' configuration and a wider mesh's head latencies.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from sn40l_sim.hardware import figures
from sn40l_sim.hardware.loader import load_hardware, with_overrides
from sn40l_sim.hardware.spec import SocketSpec
from sn40l_sim.hardware.units.network import mesh_latency_cycles
from sn40l_sim.ir import ParallelPlan, Shape
from sn40l_sim.mapper.kernel import LONE_CALL, map_kernel
from sn40l_sim.models.builder import build_graph
from sn40l_sim.models.loader import load_model

ROOT = Path(__file__).resolve().parents[2]
#: the kernels whose calls rose on the bigger tiles with the default spending
RISING = ("L00.qkv", "L00.attention", "L00.o_proj")


def _socket(pcus_per_tile: int) -> SocketSpec:
    """The shipped socket with ``pcus_per_tile`` PCUs a tile on a checkerboard 20 rows high (the
    published totals dropped: the socket is hypothetical)."""
    node = load_hardware(ROOT / "hw_configs" / "sn40l_node16.yaml")
    return with_overrides(node, {"socket.tile.pcus": pcus_per_tile, "socket.tile.grid_cols": pcus_per_tile // 10,
                                 "socket.stated": None}).socket


@pytest.fixture(scope="module")
def kernels():
    """Llama-3.1-70B's first layer kernels of an 8K prefill, tensor-parallel over 16 sockets."""
    model = load_model(ROOT / "graphs" / "llama3_1_70b.yaml")
    graph = build_graph(model, Shape("prefill", 1, 8192, 8192, 0, context_len=8192), ParallelPlan(16))
    return {k.name: k.signature() for k in graph.kernels() if k.name in RISING}


@pytest.mark.parametrize("pcus_per_tile", [280, 300])
def test_priced_a_bigger_tile_costs_no_more_than_its_extra_switches(kernels, pcus_per_tile):
    small, big = _socket(260), _socket(pcus_per_tile)
    extra_switches = figures.switches_per_tile(big) - figures.switches_per_tile(small)
    wider_hops = figures.tile_mesh_diameter_hops(big) - figures.tile_mesh_diameter_hops(small)
    assert (extra_switches, wider_hops) == ((42, 2) if pcus_per_tile == 280 else (84, 4))
    priced = replace(LONE_CALL, priced=True)
    for name, kernel in kernels.items():
        before, after = map_kernel(small, kernel, loop=priced), map_kernel(big, kernel, loop=priced)
        switches = figures.config_cycles(big, extra_switches * big.configuration.switch_bytes * before.chip_tiles)
        # every stage's head may cross the diameter's extra hops once in the pipeline fill
        latency = len(before.stages) * mesh_latency_cycles(big.tile.vector_network, wider_hops)
        assert after.cycles <= before.cycles + switches + latency, (name, before.cycles, after.cycles, switches)


def test_spent_the_extra_pcus_shorten_nothing_but_cost_their_configuration(kernels):
    small, big = _socket(260), _socket(300)
    for name in ("L00.qkv", "L00.attention"):
        before, after = map_kernel(small, kernels[name]), map_kernel(big, kernels[name])
        assert set(after.pcus_per_tile) == {big.tile.pcus}                       # every PCU of each tile
        assert after.cycles > before.cycles
        # the rise is configuration: the rest of the call does not lengthen
        assert after.cycles - after.overhead_cycles <= before.cycles - before.overhead_cycles, name
