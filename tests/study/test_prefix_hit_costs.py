"""A prefix-cache hit costs the suffix's graph over the cached prefix's keys
(serving/prefix_cache.py: prefix_hit_cycles), timed with the real builder, mapper and engine for
experiments/prefix_cache.yaml's Llama-3.1-70B prefill (8K prompts, power-of-two compiled lengths).

Expected, and asserted:

* physically, the suffix's graph over the prefix does less work than the whole prompt (fewer
  queries, the same keys, the same weights streamed), so it costs less; it costs more than the
  suffix's graph alone (its queries also meet the prefix's keys);
* the charge is that graph, exactly where the prefix ends on a compiled length and interpolated
  between compiled lengths otherwise (within 1%);
* a static graph pads the suffix up to a compiled length, and the padded graph over the whole
  prefix can cost more than no hit at all (an 8K graph over 1K cached tokens): the hit reuses only
  the prefix tokens that leave the suffix filling its graph, so it never costs more than a miss,
  and a longer prefix held never costs more than a shorter one.
"""
from __future__ import annotations

from pathlib import Path

import pytest

import sn40l_sim.serving.point as point_module
from sn40l_sim.serving.point import simulate_point
from sn40l_sim.serving.prefix_cache import prefix_hit_cycles
from sn40l_sim.serving.workload import Request
from sn40l_sim.study.assemble import assemble
from sn40l_sim.study.experiment import load_experiment

REPO = Path(__file__).resolve().parents[2]
PROMPT = 8192


@pytest.fixture(scope="module")
def costs():
    asm = assemble(load_experiment(REPO / "experiments/prefix_cache.yaml"))
    setup = asm.setup(asm.points[0])
    timer = asm.step_timer(setup)
    return setup.prefill_lens, lambda rows, earlier=0: int(timer.prefill(rows, earlier=earlier).cycles)


@pytest.mark.parametrize("held", [4096, 6144, 7168])
def test_the_suffix_over_the_prefix_costs_less_than_the_prompt_and_more_than_the_suffix_alone(costs, held):
    _, timed = costs
    suffix = PROMPT - held
    assert timed(suffix) < timed(suffix, held) < timed(PROMPT)


@pytest.mark.parametrize("prompt, held, exact", [(8192, 4096, True), (8192, 6144, False), (5000, 1024, False)])
def test_a_hit_costs_the_suffix_graph_over_the_prefix(costs, prompt, held, exact):
    lens, timed = costs
    cycles, reused = prefix_hit_cycles(timed, lens, prompt, held)
    rows = prompt - reused
    assert rows in lens and reused == (held if prompt - held in lens else prompt - rows)
    graph = timed(rows, reused)
    assert cycles == graph if exact else cycles == pytest.approx(graph, rel=0.01)


def test_a_hit_never_costs_more_than_a_miss_nor_a_longer_prefix_more(costs):
    lens, timed = costs
    full = timed(PROMPT)
    # the suffix padded to the prompt's own graph, over the whole prefix: dearer than no hit
    assert timed(PROMPT, 1024) > full
    charges = [prefix_hit_cycles(timed, lens, PROMPT, held) for held in (0, 1024, 4096, 5000, 6144, 7168, 8000)]
    assert charges[0] == charges[1] == (full, 0)
    cycles = [c for c, _ in charges]
    assert cycles == sorted(cycles, reverse=True) and cycles[-1] < full


def served_setup(asm, entry, monkeypatch):
    """The serving set-up ``run`` gives the serving loop for ``entry``'s point (captured, not served)."""
    captured = {}
    # nothing served: simulate_point reads no log (None, as a steps-only evaluation's)
    monkeypatch.setattr(point_module, "simulate", lambda requests, serving: captured.update(serving=serving))
    point = next(p for p in asm.points if p.entry == entry)
    setup = asm.setup(point)
    simulate_point(setup, lambda slots: [Request(0, 0, PROMPT, 2)], asm.step_timer(setup),
                   asm.memory_placer(setup.model), **asm.prefill_side(setup))
    return captured["serving"]


def test_a_compressing_policys_hit_pays_its_selection_over_the_whole_prompt(monkeypatch):
    """SnapStream's prefill kernels choose the kept tokens from the whole prompt's cache, so a hit
    runs the suffix's graph without them and then them over the whole prompt (as a chunked
    prefill does after its last chunk): the kernels cost what a miss pays for them, and a hit
    saves what it saves with the full cache. A hit's graph used to run them over its own rows:
    a 400-token prompt over 399 held tokens paid none of them (9.29 ms, now 13.05), a 1,096-token
    one over 99 held tokens paid them in a 1,024-row graph, where they cost more than over the
    whole prompt's 2,048 (93.89 ms, now 74.96), and an 8K one over 4K 206.90 ms (now 207.56)."""
    asm = assemble(load_experiment(REPO / "experiments/prefix_cache.yaml"))
    full, snap = served_setup(asm, "full", monkeypatch), served_setup(asm, "snapstream", monkeypatch)
    for prompt, held in ((8192, 4096), (5000, 1024), (1096, 1024), (1096, 99), (400, 399), (8192, 1024)):
        snap_hit, snap_reused = snap.prefix_hit_cycles(prompt, held)
        full_hit, full_reused = full.prefix_hit_cycles(prompt, held)
        assert snap_reused == full_reused
        assert snap.prefill_cycles(prompt) - snap_hit == full.prefill_cycles(prompt) - full_hit
    # the selection is real work: the whole 8K prompt's graph with it costs more than without
    assert snap.prefill_cycles(PROMPT) > full.prefill_cycles(PROMPT)
    assert snap.prefix_hit_cycles(PROMPT, 4096)[0] - full.prefix_hit_cycles(PROMPT, 4096)[0] == \
        snap.prefill_cycles(PROMPT) - full.prefill_cycles(PROMPT)
