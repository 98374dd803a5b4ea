"""A memory-bound decoder's windows as the mapper scores them (sn40l_sim/mapper/window_replay.py):
its wait for o_proj's all-reduce is hidden under the stream that runs on, as the engine hides it,
so map's total stays a floor of run's step (docs/validation.md, "Decode all-reduces under the
GEMM")."""
from __future__ import annotations

from pathlib import Path

import pytest

from sn40l_sim.engine.collectives import CollectiveModel
from sn40l_sim.engine.run_graph import EngineOptions, run_graph
from sn40l_sim.hardware.loader import load_hardware
from sn40l_sim.ir import ParallelPlan, Shape
from sn40l_sim.kvcache import make_policy
from sn40l_sim.mapper import map_graph
from sn40l_sim.mapper.window_replay import replay_windows
from sn40l_sim.models.builder import build_graph
from sn40l_sim.models.loader import load_model

ROOT = Path(__file__).resolve().parents[2]
NODE8 = load_hardware(ROOT / "hw_configs" / "sn40l_node8.yaml")


@pytest.mark.parametrize("looping", [False, True])
def test_map_is_a_floor_of_run_for_a_memory_bound_decoder_with_windows(looping):
    # Llama-3.1-70B (4 layers) on 8 sockets, batch 1024, 4K caches: each decoder streams 2 GB of
    # KV a socket, far slower than its compute, and o_proj's all-reduce (264,000 cycles) outlasts
    # its part of the stream at the compute's pace. Scored there, its wait was charged whole
    # (map 136.7 ms against run 127.0 for the 80-layer model); the engine's stream runs on under it
    model = load_model(ROOT / "graphs" / "llama3_1_70b.yaml", {"layers": 4})
    graph = build_graph(model, Shape("decode", 1024, 0, 4096), ParallelPlan(8, 1), make_policy("full", {}))
    collectives = CollectiveModel.from_node(NODE8)
    placed = map_graph(NODE8, graph, looping=looping, collective_cycles=lambda c: collectives.run(c).cycles)
    assert any(c.after for pk in placed.kernels for c in pk.kernel.collectives)
    run = run_graph(NODE8, placed, EngineOptions(kernel_looping=looping), collectives=collectives)
    boundaries = sum(r.launch_cycles + r.barrier_cycles for r in run.records)
    assert sum(pk.call_cycles for pk in placed.kernels) <= run.cycles - boundaries


def test_a_wait_mid_stream_is_hidden_under_the_memory_it_lets_run_on():
    # the same chunks, the window closing mid-way: its collective's 1,500 cycles end before the
    # stream (4,000) could, so the section ends with the stream; where it closes at the end, the
    # collective outlasts the stream instead
    chunks = ((1, 1, 1, 1), (10,) * 4, (1000,) * 4, 100, 0, 0, 100)
    assert replay_windows(*chunks, [(1, 2, 1500, 50)], 0) == (4100, 0)
    assert replay_windows(*chunks, [(3, 4, 1500, 50)], 0) == (4100, 500)
    # a collective longer than the rest of the stream holds the compute past it
    assert replay_windows(*chunks, [(1, 2, 9000, 50)], 0) == (1100 + 9000 + 2 * 100, 0)
