"""A call whose overlapped collectives name no operator (prefill's, token-sliced) is scored with
their last data tile's shares as the engine runs them (``Windows`` in sn40l_sim/engine/windows.py):
a collective that ends before the stream does sends all of its share after the stream's end, behind
whatever still holds the links; one that ends later, what of it its time past that end has not
covered (``shares_after`` in sn40l_sim/mapper/shares.py).

They were charged only past the whole plan's time beyond its tiles, which counted the stream their
staging held back, and every collective's time past the stream, as covering them. DeepSeek-R1's
prefill on 16 sockets (the main experiment): at 1K the memory-bound MoE kernel was scored 26,530
cycles (1.72%) short of the engine's call (1,517,974 against 1,544,504), at 8K the output
projection and FFN 26,940 (1.09%) short, its first all-reduce's share waiting for the second
(docs/validation.md, "The last tile's share of a prefill collective").
"""
from __future__ import annotations

from pathlib import Path

import pytest

from sn40l_sim.engine.run_graph import run_graph
from sn40l_sim.mapper.shares import shares_after
from sn40l_sim.serving.step_costs import _prefill_shape
from sn40l_sim.study.assemble import assemble
from sn40l_sim.study.experiment import load_experiment

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def timer():
    asm = assemble(load_experiment(ROOT / "experiments" / "deepseek_tp16.yaml"))
    return asm.step_timer(asm.setup(asm.points[0]))


@pytest.mark.parametrize("prompt_len", [1024, 8192])
def test_a_prefill_calls_score_is_the_engines_call(timer, prompt_len):
    placed = timer.placed(_prefill_shape(prompt_len, timer.prefill_drafts, 0, timer.context_len))
    run = run_graph(timer.node, placed, timer.engine)
    shared = 0
    for pk, rec in zip(placed.kernels, run.records, strict=True):
        shared += any(c.overlapped and not c.after for c in pk.kernel.collectives)
        # the call from its boundary (launch, barrier) on, its configuration load (if any) included
        engine = rec.end - rec.start - rec.launch_cycles - rec.barrier_cycles
        assert abs(pk.call_cycles - engine) <= 8, (prompt_len, pk.kernel.name, pk.call_cycles, engine)
    assert shared >= 62   # a decoder layer's output projection, and each MoE layer's kernel


def test_a_share_waits_behind_the_collectives_still_on_the_links():
    # two collectives of 100 cycles from when they start; shares of 10 each
    assert shares_after(((100, 10), (100, 10)), stream=300) == 20   # both end before the stream
    assert shares_after(((100, 10), (100, 10)), stream=150) == 10   # the second outlasts it by 50
    assert shares_after(((100, 10), (100, 10)), stream=195) == 15   # ... by 5: half its share left
    assert shares_after(((100, 10), (100, 10)), stream=50) == 0     # both outlast it
