"""A looped decoder's stream shares the activations' tier with its all-reduces' staging, in the
mapper's replay (sn40l_sim/mapper/window_replay.py) as in the engine (docs/validation.md, "Faster
links or HBM, a slower step").

Llama-3.1-8B at batch 1 on 16 sockets: each all-reduce writes the 32 KB it receives to HBM while it
holds the links, 33 cycles of the channel the decoder's weight stream runs at. The replay left that
out: at 200 GB/s per P2P port it scored the decoder at 2 data tiles 29,333 cycles an iteration,
whose second chunk then arrived 61 cycles after its compute was done in the engine and cost a whole
tile more (29,657); at 128 data tiles it scored 29,346 (the engine 29,449), so the mapper took the
coarse plan and the step at 200 GB/s (0.6853 ms) was slower than at 100 (0.6801).

The score is the loop's mean iteration, its first a call, its last one's windows' time past its
tiles spread over the loop (``loop_windows_end``), and is checked against the engine's mean
with the decoder mapped at 2 and 4 data tiles (the step's own 16 at the refit's values: a window of
5 data tiles there, whose share the score times at 8's, 36 cycles short of the engine's, once).
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from mapper_checks import loop_windows_end, looped_decoder_windows

from sn40l_sim.engine.run_graph import run_graph
from sn40l_sim.frozen import copied
from sn40l_sim.hardware.loader import load_hardware, with_overrides
from sn40l_sim.ir import ParallelPlan, Shape
from sn40l_sim.kvcache import make_policy
from sn40l_sim.mapper.budget import UnitBudget
from sn40l_sim.mapper.kernel import LoopContext, best_plan, map_kernel
from sn40l_sim.mapper.window_replay import Replay, StagedStream, replay_stream, replay_windows, shared_arrival
from sn40l_sim.models.loader import load_model
from sn40l_sim.study.assemble import step_timer

ROOT = Path(__file__).resolve().parents[2]
NODE16 = load_hardware(ROOT / "hw_configs" / "sn40l_node16.yaml")
SHAPE = Shape("decode", 1, 0, 1040, context_len=1040)


def _decode(p2p: str):
    """Llama-3.1-8B's batch-1 decode step at ``p2p`` per port: the step and the looped decoder's
    plan and engine records."""
    node = with_overrides(NODE16, {"socket.p2p.bytes_per_s_per_port": p2p})
    model = load_model(ROOT / "graphs" / "llama3_1_8b.yaml")
    timer = step_timer(node, model, make_policy("full", {}), ParallelPlan(tp=16), ParallelPlan(tp=16),
                       context_len=1040)
    step = timer.decode_step(1, 1040)
    return step, timer.placed(SHAPE)


@pytest.fixture(scope="module")
def steps():
    return {p2p: _decode(p2p) for p2p in ("100 GB/s", "200 GB/s")}


def test_faster_links_no_longer_slow_the_batch_1_step(steps):
    assert steps["200 GB/s"][0].seconds <= steps["100 GB/s"][0].seconds


@pytest.mark.parametrize("n_tiles", [2, 4])
def test_the_looped_decoders_score_is_the_engines_mean_iteration_with_staging(steps, n_tiles):
    # the decoder mapped at ``n_tiles`` data tiles in the step's loop context and run so: the score
    # is the loop's mean iteration (tests/mapper/test_window_loop_mean.py), the first a call
    node = with_overrides(NODE16, {"socket.p2p.bytes_per_s_per_port": "200 GB/s"})
    placed = steps["200 GB/s"][1]
    loop, kernel, windows = looped_decoder_windows(node, placed)
    tiers = placed.memory.tiers()
    assert all(w.staged_bytes for w in windows) and not any(not c.overlapped for c in kernel.collectives)
    context = LoopContext(loop.iterations, 0, True, windows=windows, resident=True)
    budget = UnitBudget(n_tiles=n_tiles)
    plan = best_plan(node.socket, kernel.signature(), tiers, budget, loop=context)
    mapped = map_kernel(node.socket, kernel, tiers, budget, loop=context)
    kernels = list(placed.kernels)
    kernels[loop.first:loop.stop] = [copied(mapped, kernel=pk.kernel) for pk in kernels[loop.first:loop.stop]]
    records = run_graph(node, replace(placed, kernels=tuple(kernels))).records[loop.first:loop.stop]
    assert any(c.staged_bytes for r in records for c in r.collectives)
    # from the call's boundary and configuration load on, the first iteration being the call (its
    # fill exposed, no gate: tests/mapper/test_loop_first_iteration.py)
    first = records[0]
    begun = first.start + first.launch_cycles + first.barrier_cycles + first.config_cycles
    assert plan.objective[0] == (loop_windows_end(records[-1]) - begun) / len(records)


def test_a_staging_collective_delays_the_chunk_it_overlaps_by_its_bytes():
    # 1,000 bytes at 10 a cycle; a collective staging 5 a cycle over [20, 60) leaves the stream 5:
    # 200 bytes fewer by 60, 20 cycles later than alone
    assert shared_arrival(0, 1000, 10, 10, [(20, 60, 5)]) == 120
    # a stream below the path's capacity by at least the staging's pace is not slowed
    assert shared_arrival(0, 1000, 5, 10, [(20, 60, 5)]) == 200
    # two chunks of one data tile, 100 cycles of stream and 10 of compute each; the window over the
    # first opens with the stream, and its collective stages 250 bytes over its 100 cycles: the
    # first chunk streams at 7.5 a cycle meanwhile (750 bytes by 100, the rest by 125), and the
    # second, started then, arrives at 225 and is computed by 235, against 210 alone
    chunks = ((1, 1), (1000, 1000), (100, 100), 10, 0, 0, 10**9)
    window = [(0, 1, 100.0, 0.0, 250.0)]
    assert replay_windows(*chunks, window, 0) == (210.0, 0.0)
    staged = StagedStream((1000, 1000), 10.0, 10.0, (0, 0))
    assert replay_stream(*chunks, window, 0, staged) == Replay(235.0, 0.0, ())
    # the previous iteration's collective, still staging for 100 cycles after this one starts
    assert replay_stream(*chunks, [(0, 1, 1.0, 0.0, 0.0)], 0, staged, [(-50.0, 100.0, 2.5)]).end == 235.0
