"""A faster clock never makes a memory-bound kernel slower in seconds (docs/validation.md, "A faster
machine is not always faster in the simulator", the fourth case).

A memory stage's cycles per data tile used to be rounded up to whole cycles, in the mapper's
estimate and in the engine's cap on the stream alike. An off-chip stream does not pause at
data-tile boundaries, so at fine tilings the rounding was an artifact: DeepSeek-R1's all-expert
decode FFN streamed 2,707 bytes of weights per data tile at 262,144 tiles, 2.80 cycles charged 3.
How much a tiling lost moved with the clock, so the tiling the mapper picked, and the kernel's time
in seconds, jumped about as the clock rose (584, 563 and 593 µs at 1.6, 2.0 and 2.4 GHz); the
weight stream in seconds does not depend on the clock. A memory stream now paces a data tile at
its unrounded share (:attr:`sn40l_sim.mapper.stages.StageWork.paced_cycles`).
"""
from __future__ import annotations

from pathlib import Path

from sn40l_sim.hardware.loader import load_hardware, with_overrides
from sn40l_sim.ir import ParallelPlan, Shape
from sn40l_sim.kvcache import make_policy
from sn40l_sim.mapper.kernel import map_kernel
from sn40l_sim.models.builder import build_graph
from sn40l_sim.models.loader import load_model

ROOT = Path(__file__).resolve().parents[2]


def test_a_memory_bound_kernel_does_not_slow_down_as_the_clock_gets_faster():
    node16 = load_hardware(ROOT / "hw_configs" / "sn40l_node16.yaml")
    model = load_model(ROOT / "graphs" / "deepseek_r1.yaml")
    # batch 1, 8K prompt, two MTP drafts, every expert streamed: the main experiment's FFN at batch 1
    shape = Shape("decode", 1, 8192, 10242, 2, context_len=10242)
    graph = build_graph(model, shape, ParallelPlan(16, 16), make_policy("full", {}), expert_loading="all")
    ffn = next(k for k in graph.kernels() if k.name == "L10.ffn").signature()
    seconds = []
    for clock in ("1.6 GHz", "2.0 GHz", "2.4 GHz"):
        socket = with_overrides(node16, {"socket.clock_hz": clock}).socket
        placed = map_kernel(socket, ffn)
        seconds.append(placed.cycles / socket.clock_hz)
    assert seconds == sorted(seconds, reverse=True), seconds
