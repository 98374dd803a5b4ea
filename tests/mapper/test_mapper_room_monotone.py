"""More room is never slower: a kernel mapped within more PCUs and PMUs per tile, its configuration
free (resident), has a best plan no worse than within less, since every plan of the smaller room
fits the larger one (docs/validation.md, "Why the shares cannot be pruned by a bound")."""
from __future__ import annotations

from pathlib import Path

from sn40l_sim.hardware.loader import load_hardware
from sn40l_sim.ir import ParallelPlan, Shape
from sn40l_sim.kvcache import make_policy
from sn40l_sim.mapper import map_kernel
from sn40l_sim.mapper.budget import UnitBudget
from sn40l_sim.mapper.kernel_cost import LoopContext
from sn40l_sim.models.builder import build_graph
from sn40l_sim.models.loader import load_model

ROOT = Path(__file__).resolve().parents[2]


def test_deepseek_decode_mla_is_no_slower_in_more_room():
    """DeepSeek-R1's decode MLA spent 4 idle PCUs on its softmax at 136 PCUs a tile (1,561 cycles a
    data tile) but, offered 8 at 140, gave 7 of them to the QK^T GEMM, which is not the bottleneck
    (5,185 -> 4,609), leaving the softmax 3 PCUs (3,121): a fill 987 cycles longer. The spare units
    now go where they save most per unit when that takes no more units and shortens the chain."""
    node = load_hardware(ROOT / "hw_configs" / "sn40l_node16.yaml")
    graph = build_graph(load_model(ROOT / "graphs" / "deepseek_r1.yaml"),
                        Shape("decode", 1, 131072, 133122, 2, context_len=133122), ParallelPlan(16, 16),
                        make_policy("full", {}))
    mla = next(k for k in graph.kernels() if k.name == "L00.mla").signature()
    cycles = {}
    for units in range(132, 180, 2):
        pk = map_kernel(node.socket, mla, budget=UnitBudget(pcus_per_tile=units, pmus_per_tile=units),
                        loop=LoopContext(resident=True))
        cycles[units] = pk.cycles - pk.overhead_cycles
    rooms = sorted(cycles)
    worse = [(a, cycles[a], b, cycles[b]) for a, b in zip(rooms, rooms[1:], strict=False) if cycles[b] > cycles[a]]
    assert not worse
    # and the room still matters: the largest room is faster than the smallest
    assert cycles[rooms[-1]] < cycles[rooms[0]]
