"""A chain of kernels run unit by unit, each distinct kernel simulated once
(``engine/units.py``), gives what one event loop over the whole graph gives: the same records,
busy cycles, bytes and end, on random chains of hand-made kernels (repeated kernels, loops,
collectives overlapped or not, configurations, sections, two tiers) and on mapped DeepSeek and
Llama graphs."""
from __future__ import annotations

import random
from dataclasses import replace

import pytest
from engine_doubles import chain, node16, placed_kernel

import sn40l_sim.engine.units as units
from sn40l_sim.engine.run_graph import EngineOptions, run_graph
from sn40l_sim.hardware.loader import load_hardware
from sn40l_sim.ir import Collective, KernelGraph, ParallelPlan, Shape
from sn40l_sim.kvcache import make_policy
from sn40l_sim.mapper.placement import MemoryPlacement, PlacedGraph
from sn40l_sim.models.loader import load_model
from sn40l_sim.study.assemble import step_timer

NODE = node16()


def _both_ways(node, placed, options, monkeypatch):
    """The graph's run unit by unit and through one event loop, and the units' own runs."""
    alone = []
    real = units._run_alone
    with monkeypatch.context() as patch:
        patch.setattr(units, "_run_alone", lambda *a: alone.append(real(*a)) or alone[-1])
        fast = run_graph(node, placed, options)
    with monkeypatch.context() as patch:
        patch.setattr(units, "REUSE_UNITS", False)
        slow = run_graph(node, placed, options)
    return fast, slow, alone


def _random_kernel(rng: random.Random, name: str):
    colls = tuple(Collective(rng.choice(("all_reduce", "all_gather", "all_to_all")), rng.choice((2**12, 2**18, 2**24)),
                             16, overlapped=rng.random() < 0.5) for _ in range(rng.choice((0, 1, 1, 2))))
    return placed_kernel(NODE, name, rng.choice(("a", "b")), n_tiles=rng.choice((1, 7, 64, 999)),
                         compute_cycles_per_tile=rng.choice((0, 5, 100)),
                         hbm_bytes=rng.choice((0, 10**5, 10**7, 3 * 10**7 + 1)), ddr_bytes=rng.choice((0, 0, 10**5)),
                         sections=rng.choice((1, 1, 3)), fill_cycles=rng.choice((0, 200)),
                         config_bytes=rng.choice((0, 10**6)), collectives=colls)


def _random_chain(rng: random.Random) -> list:
    """Kernels drawn from a small pool, relabelled per layer (the same placed stages, as the
    mapper's memo gives the layers of a model), runs of one kernel making loops."""
    pool = [_random_kernel(rng, f"p{j}") for j in range(rng.randint(1, 3))]
    out, layer = [], 0
    while len(out) < 14:
        pk = rng.choice(pool)
        for _ in range(rng.choice((1, 1, 2, 3, 7))):
            out.append(replace(pk, kernel=replace(pk.kernel, name=f"L{layer}.{pk.kernel.name}", layer=layer)))
            layer += 1
    return out


def test_random_chains_run_unit_by_unit_equal_one_event_loop(monkeypatch):
    rng = random.Random(11)
    repeated = looped = periodic = 0
    for _ in range(40):
        options = EngineOptions(chunks_per_section=rng.choice((1, 3, 8)), kernel_boundaries=rng.random() < 0.8,
                                kernel_looping=rng.random() < 0.7, stage_collectives=rng.random() < 0.7)
        placed = chain(_random_chain(rng))
        fast, slow, alone = _both_ways(NODE, placed, options, monkeypatch)
        assert fast == slow
        assert alone, "the chain was not run unit by unit"
        repeated += len(placed.kernels) > sum(len(run.records) for run in alone)
        looped += any(len(run.records) > 1 for run in alone)
        for loop in fast.loops:
            kernel = placed.kernels[loop.first].kernel
            whole = any(len(run.records) == loop.iterations and run.records[0][0].name == kernel.name
                        for run in alone)
            # a loop of six or more iterations without overlapped collectives is simulated as
            # loops of two and three iterations (engine/units.py, _run_loop), never whole
            if loop.iterations >= 6 and not any(c.overlapped for c in kernel.collectives):
                assert not whole
                periodic += 1
    # the cases cover chains whose repeated kernels were simulated once, loops, and loops repeated
    assert repeated > 10 and looped > 10 and periodic > 10


def test_a_graph_that_is_not_a_chain_runs_through_one_event_loop(monkeypatch):
    a, b = placed_kernel(NODE, "a", hbm_bytes=10**6), placed_kernel(NODE, "b", layer=1, hbm_bytes=10**6)
    c = placed_kernel(NODE, "c", layer=2, hbm_bytes=10**6)
    graph = KernelGraph("test", Shape("decode", 1, 1, 1))
    graph.add(a.kernel)
    graph.add(b.kernel)            # independent of a: the two may share the socket's channels
    graph.add(c.kernel, after=a.kernel)
    placed = PlacedGraph(graph, (a, b, c), MemoryPlacement({}, {}, ()))
    fast, slow, alone = _both_ways(NODE, placed, EngineOptions(), monkeypatch)
    assert fast == slow and alone == []


@pytest.mark.parametrize("options", [EngineOptions(), EngineOptions(kernel_looping=False, chunks_per_section=3)],
                         ids=["default", "unlooped"])
def test_mapped_graphs_run_unit_by_unit_equal_one_event_loop(options, monkeypatch):
    node = load_hardware("hw_configs/sn40l_node16.yaml")
    deepseek = step_timer(node, load_model("graphs/deepseek_r1.yaml"), make_policy("snapstream", {"budget": 32768}),
                          ParallelPlan(tp=16), ParallelPlan(tp=16, attention_dp=16))
    llama = step_timer(load_hardware("hw_configs/sn40l_node8.yaml"), load_model("graphs/llama3_1_8b.yaml"),
                       make_policy("full", {}), ParallelPlan(tp=8), ParallelPlan(tp=8))
    for timer, shape in ((deepseek, Shape("decode", 64, 0, 32768)), (deepseek, Shape("prefill", 1, 16384, 0)),
                         (llama, Shape("decode", 1, 0, 2048))):
        fast, slow, alone = _both_ways(timer.node, timer.placed(shape), options, monkeypatch)
        assert fast == slow
        assert len(alone) < len(fast.records) / 3   # each distinct kernel (or loop) simulated once
