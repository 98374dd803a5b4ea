"""The engine's fast paths give what its events give: a stream accounted alone
(FluidNetwork.transfer_alone) ends when, and books what, the same transfer run through the
network's events does, and whole graphs run with and without the fast path (a section's chunks
accounted alone) are equal."""
from __future__ import annotations

import math
import random

import pytest
import simpy

import sn40l_sim.engine.kernel_process as kernel_process
from sn40l_sim.engine.fluid import FluidNetwork
from sn40l_sim.engine.run_graph import EngineOptions, run_graph
from sn40l_sim.hardware.loader import load_hardware
from sn40l_sim.ir import ParallelPlan, Shape
from sn40l_sim.kvcache import make_policy
from sn40l_sim.models.loader import load_model
from sn40l_sim.study.assemble import step_timer


def _through_events(n_bytes: int, capacities: tuple[float, ...], cap: float, start: int):
    env = simpy.Environment()
    net = FluidNetwork(env)
    path = tuple(net.channel(f"c{i}", c) for i, c in enumerate(capacities))
    ended = []

    def user():
        yield env.timeout(start)
        yield net.transfer(path, n_bytes, cap)
        ended.append(env.now - start)

    env.process(user())
    env.run()
    return ended[0], [(ch.bytes_moved, ch.busy_cycles) for ch in path], net


def test_a_stream_accounted_alone_ends_and_books_as_through_the_events():
    rng = random.Random(3)
    cases = [(1000, (10.0,), math.inf), (1001, (10.0, 64.0), math.inf), (5, (10.0,), math.inf),
             (4096, (16.0, 8.0), 2.0), (7 * 10**9, (1024.0, 2048.0), 1000.0 / 3)]
    cases += [(rng.randint(1, 10**10), tuple(rng.choice((1.0, 3.0, 64.0, 1638.4 / 1.6, 1e3 / 7))
                                            for _ in range(rng.randint(1, 2))),
               rng.choice((math.inf, 0.7, 100.0, 1e3 / 3))) for _ in range(300)]
    for n_bytes, capacities, cap in cases:
        want, books, events_net = _through_events(n_bytes, capacities, cap, start=37)
        env = simpy.Environment()
        env.run(until=37)
        net = FluidNetwork(env)
        path = tuple(net.channel(f"c{i}", c) for i, c in enumerate(capacities))
        assert net.transfer_alone(path, n_bytes, cap) == want, (n_bytes, capacities, cap)
        assert [(ch.bytes_moved, ch.busy_cycles) for ch in path] == books
        assert (net._generation, net._last) == (events_net._generation, events_net._last)


def test_a_stream_is_not_accounted_alone_beside_another():
    env = simpy.Environment()
    net = FluidNetwork(env)
    hbm = net.channel("hbm", 10.0)
    net.transfer((hbm,), 100)
    assert net.transfer_alone((hbm,), 100) is None


@pytest.fixture(scope="module")
def graphs():
    node = load_hardware("hw_configs/sn40l_node16.yaml")
    model = load_model("graphs/deepseek_r1.yaml")
    prefill, decode = ParallelPlan(tp=16), ParallelPlan(tp=16, attention_dp=16)
    full = step_timer(node, model, make_policy("full", {}), prefill, decode)
    snap = step_timer(node, model, make_policy("snapstream", {"budget": 32768}), prefill, decode)
    return node, [snap.placed(Shape("decode", 64, 0, 32768)), snap.placed(Shape("prefill", 1, 16384, 0)),
                  full.placed(Shape("decode", 4, 0, 4096, drafts=2))]


OPTIONS = [EngineOptions(), EngineOptions(kernel_looping=False, stage_collectives=False, chunks_per_section=3)]


@pytest.mark.parametrize("options", OPTIONS, ids=["default", "unlooped-unstaged"])
def test_graphs_run_with_the_fast_path_equal_graphs_run_through_the_events(graphs, options, monkeypatch):
    node, placed = graphs
    sections = []
    real = kernel_process._lone_section
    with monkeypatch.context() as patch:
        patch.setattr(kernel_process, "_lone_section", lambda *a: sections.append(real(*a)) or sections[-1])
        fast = [run_graph(node, p, options) for p in placed]
    # most sections were accounted alone, the others (beside collectives) went through the events
    assert sum(c is not None for c in sections) > len(sections) / 2 > sum(c is None for c in sections) > 0
    monkeypatch.setattr(kernel_process, "_streams_alone", lambda res: False)
    assert [run_graph(node, p, options) for p in placed] == fast
