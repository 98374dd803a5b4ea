"""The reload of one prefill graph run right after another (sn40l_sim/serving/prefill_pairs.py):
exactly the engine's cycles of the second graph with the pair's residency less its steady cycles, on
Llama-3.1-70B's prefill graphs on the 16-socket node (experiments/chunked_prefill.yaml), and what
``PrefillGraphs`` gives the serving loop for chunks, whole prompts and prefix hits' suffixes."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

import sn40l_sim.engine.run_graph as run_graph_module
from sn40l_sim.engine.run_graph import run_graph
from sn40l_sim.mapper import residency
from sn40l_sim.serving.loop import simulate
from sn40l_sim.serving.prefill_graphs import PrefillGraphs
from sn40l_sim.serving.prefill_pairs import GraphPairs, call_records
from sn40l_sim.serving.setup import PrefillRun, ServingSetup
from sn40l_sim.serving.workload import Request
from sn40l_sim.study.assemble import assemble

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def timer():
    asm = assemble(str(ROOT / "experiments" / "chunked_prefill.yaml"))
    return asm.step_timer(asm.setup(asm.points[0]))


def _engine_reload(timer, monkeypatch, before: tuple[int, int], after: tuple[int, int]) -> int:
    """The engine's cycles of ``after``'s graph run right after ``before``'s (the pair's first pass
    of the residency replay) less its steady cycles."""
    first, second = timer.prefill_placed(before[0], earlier=before[1]), timer.prefill_placed(after[0], earlier=after[1])
    pairs = GraphPairs(timer.node.socket)
    a, b = (pairs.profile(call_records(timer.node.socket, timer.engine.kernel_boundaries, placed.kernels))
            for placed in (first, second))
    assert b == pairs.profile(timer.prefill_calls(after[0], earlier=after[1]))
    found = residency.loaded_after(a.calls, b.calls, pairs.capacity, max(a.tiles, b.tiles))
    steady = run_graph(timer.node, second, timer.engine, timer._collectives).cycles
    with monkeypatch.context() as patch:
        patch.setattr(run_graph_module, "call_residency", lambda socket, kernels: (found, ((),) * len(kernels)))
        cold = run_graph(timer.node, second, timer.engine, timer._collectives).cycles
    assert pairs.reload_after(a, b) == cold - steady
    return cold - steady


@pytest.mark.parametrize("before, after, reload", [
    ((1024, 0), (1024, 1024), 167_479),     # a 1K chunk after its prompt's first: its attention kernel
    ((8192, 0), (1024, 0), 732_227),        # a 1K prompt after an 8K one (841,427 after a decode step)
    ((4096, 0), (512, 0), 751_156),         # a 512-token prompt after a 4K one: the units the 4K graph took
                                            # (860,356 after a decode step, which took every unit)
    ((1024, 0), (8192, 0), 0),              # an 8K prompt's kernels reload at every layer anyway
])
def test_a_pairs_reload_is_the_engines_cycles_after_the_first_less_the_steady_state(timer, monkeypatch, before,
                                                                                     after, reload):
    # (docs/architecture.md, serving: "A co-located node that switches graphs"; the figures measured
    # pair by pair when nothing was charged)
    assert _engine_reload(timer, monkeypatch, before, after) == reload
    # at most what the same graph loads after a decode step, which took every unit
    assert reload <= timer.prefill(after[0], earlier=after[1]).switch_load_cycles


def test_prefill_graphs_charge_each_pair_of_timed_graphs_read_where_their_cycles_are(timer):
    s = SimpleNamespace(prefill_lens=(512, 1024, 2048, 4096, 8192), prefill_node=None, prefill_chunk=1024,
                        prompt_len=8192)
    graphs = PrefillGraphs(s, timer.node.socket.clock_hz, timer, lambda n, e=0: None)
    pair = graphs.serving_fields()["prefill_pair_switch_cycles"]
    # a chunk after the chunk before it, a whole prompt after another compiled length
    assert pair(PrefillRun(1024, 0, True), PrefillRun(1024, 1024, True)) == 167_479
    assert pair(PrefillRun(8192), PrefillRun(1000)) == 732_227
    # the same compiled graph: nothing; each ordered pair of timed graphs replayed once
    assert pair(PrefillRun(1000), PrefillRun(1024)) == 0
    assert pair(PrefillRun(4096), PrefillRun(500)) == 751_156 and len(graphs.pairs) == 3
    # a prefix hit's suffix of 512 rows after cached tokens between two compiled lengths reads the
    # graphs at those counts of earlier tokens (prefix_cache.suffix_cycles), so does its reload:
    # linear between. Where two neighbours reload alike (their attention kernels mapped to the same
    # footprint and bytes) linear is trivially right, so some pair of neighbours must differ.
    points = (512, 1024, 2048, 4096, 8192)
    reloads = {e: graphs._pair((False, 1024, 0), (False, 512, e)) for e in points}
    assert len(set(reloads.values())) > 1
    for below, above in zip(points, points[1:], strict=False):
        cached = below + 3 * (above - below) // 8
        expected = (reloads[below] * (above - cached) + reloads[above] * (cached - below)) / (above - below)
        assert abs(pair(PrefillRun(1024), PrefillRun(512, cached, True, True)) - expected) <= 1


def test_a_chunked_serves_graph_switch_time_holds_the_chunk_after_chunk_reloads(timer):
    # one 8K prompt in 1K chunks, nothing decoding: its chunks run back to back, each after the one
    # before it, and the node's graph_switch busy time is the sum of those pairs' reloads (it was 0)
    s = SimpleNamespace(prefill_lens=(512, 1024, 2048, 4096, 8192), prefill_node=None, prefill_chunk=1024,
                        prompt_len=8192)
    graphs = PrefillGraphs(s, timer.node.socket.clock_hz, timer, lambda n, e=0: None)
    setup = ServingSetup(mode="colocated", prefill_nodes=0, decode_nodes=1, slots=1, decode_step_cycles=1000,
                         transfer_cycles=lambda p: 0, cache_tokens=lambda p, g: p + g, kv_bytes_per_token=1,
                         slot_cache_tokens=8192, prefill_chunk=1024, **graphs.serving_fields())
    log = simulate([Request(0, 0, 8192, 1)], setup)
    pairs = [graphs._pair((False, 1024, e - 1024), (False, 1024, e)) for e in range(1024, 8192, 1024)]
    assert log.busy["graph_switch"] == [sum(pairs)] and min(pairs) > 100_000


def test_a_prompt_timed_without_the_policys_kernels_on_request_reads_the_costs_given():
    # point.py times the served prompts without the KV policy's kernels from costs it hands to
    # PrefillGraphs.of (prefill_policy_slowdown, served) when none were given at construction: the
    # graph's key says bare by those costs, not by the construction's
    def costs(per_token):
        return SimpleNamespace(prefill=lambda n, memory=None, earlier=0: SimpleNamespace(
            cycles=per_token * n, switch_load_cycles=0))

    s = SimpleNamespace(prefill_lens=(1024,), prefill_node=None, prefill_chunk=None, prompt_len=1024)
    graphs = PrefillGraphs(s, 1.6e9, costs(3), lambda n, e=0: None)
    assert graphs.of(1000)[0] == 3072 and graphs.of(1000, bare=True, free=costs(2))[0] == 2048
    assert graphs.pair_switch(PrefillRun(1000), PrefillRun(1000, 24, True)) == 0   # stand-ins: no kernels
