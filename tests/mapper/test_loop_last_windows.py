"""A looped decoder is scored with its last iteration's windows' time past its tiles: the kernel
after the loop waits for it (sn40l_sim/mapper/window_replay.py, ``looped_window_cycles``;
docs/validation.md, "A loop's last windows").

Llama-3.1-405B at batch 1 on 16 sockets with 1,039-token caches (``experiments/per_user_speed.yaml``
at 16 new tokens, as ``scripts/faster_machine.py`` runs it): each layer's decoder closes the window
of its FFN's all-reduce (32 KiB) at its last data tile, and that window's last share, its bytes over
the window's tiles, takes the links after the tiles: 8 bytes at 16,384 data tiles (14,057 cycles),
15 at 8,192 (15,352). Each iteration's is hidden in the next one's gate, the last one's is not. Left
out of the score, the two tilings tied within a cycle an iteration, and at 200 GB/s per P2P port the
mapper took 8,192 data tiles, by 0.7 cycles an iteration, and the step took 1,268 cycles (0.8 us)
longer than at 100 GB/s, where it took 16,384.
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
from sn40l_sim.mapper.kernel import LoopContext, map_kernel
from sn40l_sim.models.loader import load_model
from sn40l_sim.study.assemble import step_timer

ROOT = Path(__file__).resolve().parents[2]
NODE16 = load_hardware(ROOT / "hw_configs" / "sn40l_node16.yaml")
CACHE = 1039
SHAPE = Shape("decode", 1, 0, CACHE, context_len=CACHE)


def _node(p2p: str):
    return with_overrides(NODE16, {"socket.p2p.bytes_per_s_per_port": p2p})


def _timer(p2p: str):
    model = load_model(ROOT / "graphs" / "llama3_1_405b.yaml")
    return step_timer(_node(p2p), model, make_policy("full", {}), ParallelPlan(tp=16), ParallelPlan(tp=16),
                      context_len=CACHE)


@pytest.fixture(scope="module")
def fast():
    """The step at 200 GB/s per port: its node, placed graph and engine run."""
    node = _node("200 GB/s")
    placed = _timer("200 GB/s").placed(SHAPE)
    return node, placed, run_graph(node, placed)


def _with_decoder_at(node, placed, n_tiles: int):
    """``placed`` with its looped decoder mapped at ``n_tiles`` data tiles in the loop's context, and
    the engine's run of it."""
    loop, kernel, windows = looped_decoder_windows(node, placed)
    tiers = placed.memory.tiers()
    # every collective of the decoder overlaps its stream: the loop's gate is its windows' alone
    assert windows and all(c.overlapped and c.after for c in kernel.collectives)
    context = LoopContext(loop.iterations, 0, True, windows=windows, resident=True)
    mapped = map_kernel(node.socket, kernel, tiers, UnitBudget(n_tiles=n_tiles), loop=context)
    kernels = list(placed.kernels)
    kernels[loop.first:loop.stop] = [copied(mapped, kernel=pk.kernel) for pk in kernels[loop.first:loop.stop]]
    return run_graph(node, replace(placed, kernels=tuple(kernels))), loop


def test_the_decoder_plan_chosen_runs_the_step_no_longer_than_the_tiling_it_tied_with(fast):
    node, placed, run = fast
    (loop,) = run.loops
    chosen = placed.kernels[loop.first].n_tiles
    for n_tiles in (8192, 16384):
        other, _ = _with_decoder_at(node, placed, n_tiles)
        assert run.cycles <= other.cycles, (chosen, n_tiles, run.cycles, other.cycles)


def test_the_last_iterations_windows_are_in_the_score_and_map_stays_a_floor(fast):
    node, placed, run = fast
    (loop,) = run.loops
    records = run.records[loop.first:loop.stop]
    last = records[-1]
    # the last iteration's windows end well after its tiles: the share takes the links then
    assert loop_windows_end(last) - last.stream_end > 10_000
    first = records[0]
    begun = first.start + first.launch_cycles + first.barrier_cycles + first.config_cycles
    engine = loop_windows_end(last) - begun
    scored = sum(pk.call_cycles for pk in placed.kernels[loop.first:loop.stop])
    # each call its mean rounded down: at most a cycle a call short of the engine's loop
    assert engine - len(records) < scored <= engine, (scored, engine)
    boundaries = sum(r.launch_cycles + r.barrier_cycles for r in run.records)
    assert sum(pk.call_cycles for pk in placed.kernels) <= run.cycles - boundaries


def test_twice_as_fast_links_do_not_slow_the_405b_batch_1_step(fast):
    # each iteration's two all-reduces stage their bytes through HBM across a chunk's end of the
    # decoder's stream, split between the two chunks by the staging's pace: while each chunk's
    # stream lost what was left of its last cycle, an iteration took 420,721 cycles at 200 GB/s
    # against 420,720 at 100 (docs/validation.md, "A loop's last windows")
    slow = _timer("100 GB/s").decode_step(1, CACHE)
    assert fast[2].cycles <= slow.cycles, (slow.cycles, fast[2].cycles)


def test_the_405b_batch_1_step_falls_as_the_links_speed_up_from_50_gb_s():
    # from 75 to 100 GB/s it rose by 84 cycles while each chunk's stream lost its last cycle's rest
    steps = [_timer(rate).decode_step(1, CACHE).cycles for rate in ("50 GB/s", "75 GB/s", "100 GB/s", "200 GB/s")]
    assert steps == sorted(steps, reverse=True), steps
