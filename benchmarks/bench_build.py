"""Speed goals of the static parts: building the 16-socket topology graph (goal: well under a
second) and mapping the DeepSeek TP16 decode graph (goal: a few seconds). Timings, not tests.

    python benchmarks/bench_build.py
"""
from __future__ import annotations

import time
from pathlib import Path

from sn40l_sim.hardware.loader import load_hardware
from sn40l_sim.hardware.topology import build_topology
from sn40l_sim.ir import ParallelPlan, Shape
from sn40l_sim.kvcache import make_policy
from sn40l_sim.mapper import map_graph
from sn40l_sim.mapper.graph import clear_memo
from sn40l_sim.models.builder import build_graph
from sn40l_sim.models.loader import load_model

ROOT = Path(__file__).resolve().parent.parent


def best_of(repeats: int, fn, *args) -> float:
    """Best wall time of ``repeats`` calls, in seconds."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    node = load_hardware(ROOT / "hw_configs" / "sn40l_node16.yaml")
    print(f"build_topology(16 sockets): {best_of(3, build_topology, node):.3f} s (goal < 1 s)")
    model = load_model(ROOT / "graphs" / "deepseek_r1.yaml")
    graph = build_graph(model, Shape("decode", 16, 131072, 131072), ParallelPlan(16, 16), make_policy("full", {}))

    def map_cold():
        clear_memo()
        map_graph(node, graph)

    print(f"map DeepSeek TP16 decode graph: {best_of(3, map_cold):.3f} s (goal: a few seconds)")


if __name__ == "__main__":
    main()
