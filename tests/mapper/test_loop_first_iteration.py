"""A looped kernel is scored at the mean of its iterations as the engine runs them, the first being
the loop's call: no gate, its pipeline filled before its stream starts (sn40l_sim/mapper/window_replay.py,
``looped_window_cycles``; docs/validation.md, "Invariants over random configurations").

Llama-3.1-8B's looped decoder at batch 4 with 2K caches on the 8-socket node, its P2P ports at
100 GB/s: 256 data tiles (a fill of 1,579 cycles) and 1,024 (1,113) stream an iteration alike, and
replaying the first iteration as a later one hid the fill under a stream running ahead. The two
tied, the one of fewer data tiles won, and the engine ran it 466 cycles longer: the step at 100 GB/s
was slower than at the file's 50 (1.4313 -> 1.4316 ms).
"""
from __future__ import annotations

from pathlib import Path

import pytest
from mapper_checks import loop_windows_end

from sn40l_sim.engine.run_graph import run_graph
from sn40l_sim.hardware.loader import load_hardware, with_overrides
from sn40l_sim.ir import ParallelPlan, Shape
from sn40l_sim.kvcache import make_policy
from sn40l_sim.models.loader import load_model
from sn40l_sim.study.assemble import step_timer

ROOT = Path(__file__).resolve().parents[2]
NODE8 = load_hardware(ROOT / "hw_configs" / "sn40l_node8.yaml")
SHAPE = Shape("decode", 4, 0, 2048, context_len=2048)


def _node(p2p: str | None):
    return NODE8 if p2p is None else with_overrides(NODE8, {"socket.p2p.bytes_per_s_per_port": p2p})


def _decode(p2p: str | None):
    """The 8B's decode step at batch 4 with 2K caches (P2P ports at ``p2p``, None: the file's) and
    its placed graph."""
    model = load_model(ROOT / "graphs" / "llama3_1_8b.yaml")
    timer = step_timer(_node(p2p), model, make_policy("full", {}), ParallelPlan(tp=8),
                       ParallelPlan(tp=8, attention_dp=8), context_len=2048)
    return timer.decode_step(4, 2048), timer.placed(SHAPE)


@pytest.fixture(scope="module")
def steps():
    return {p2p: _decode(p2p) for p2p in (None, "100 GB/s")}


@pytest.mark.parametrize("p2p", [None, "100 GB/s"])
def test_the_looped_decoders_score_is_the_engines_loop_first_iteration_included(steps, p2p):
    placed = steps[p2p][1]
    run = run_graph(_node(p2p), placed)
    (loop,) = run.loops
    records = run.records[loop.first:loop.stop]
    first = records[0]
    assert first.config_resident and first.fill_cycles   # the call fills its pipeline before its stream
    # the loop from its call's boundary (launch, barrier) on to its last iteration's windows' end
    # (tests/mapper/test_window_loop_mean.py)
    begun = first.start + first.launch_cycles + first.barrier_cycles
    engine = loop_windows_end(records[-1]) - begun
    scored = sum(pk.call_cycles for pk in placed.kernels[loop.first:loop.stop])
    assert abs(scored - engine) <= len(records), (scored, engine)


def test_twice_as_fast_links_do_not_slow_the_looped_decode(steps):
    assert steps["100 GB/s"][0].seconds <= steps[None][0].seconds
