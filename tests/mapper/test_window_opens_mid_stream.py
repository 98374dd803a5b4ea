"""A call whose window opens inside its stream and closes at its end is scored as the engine runs it:
its stream ahead of its compute (sn40l_sim/engine/kernel_process.py cuts the chunks where a window
opens or closes and runs them ahead, ``_stream_ahead``), replayed chunk by chunk
(sn40l_sim/mapper/window_replay.py), not only where a window closes mid-way
(sn40l_sim/mapper/windows.py, ``streams_ahead``).

DeepSeek-R1's decode (``experiments/deepseek_tp16.yaml``, batch 16 with 4K caches, not looped): its
FFN's all-reduce carries its last operators' output (``dense_down``, ``combine``), and its first
three layers' MLA kernel's the ``o_proj`` output near its end. Their calls were scored by the
stream's pace from its first tile, their collectives starting one data tile's pace after their
window opens: 15 cycles a call short of the engine's for the MoE FFN, 122 for the dense one and 70
for those MLA calls.
"""
from __future__ import annotations

from pathlib import Path

from sn40l_sim.engine.run_graph import run_graph
from sn40l_sim.ir import Shape
from sn40l_sim.study.assemble import assemble
from sn40l_sim.study.experiment import load_experiment

ROOT = Path(__file__).resolve().parents[2]


def test_deepseeks_windowed_calls_are_scored_as_the_engine_runs_them():
    asm = assemble(load_experiment(ROOT / "experiments" / "deepseek_tp16.yaml"))
    timer = asm.step_timer(asm.setup(asm.points[0]))
    placed = timer.placed(Shape("decode", 16, 0, 4096))
    run = run_graph(asm.node, placed, timer.engine)
    assert not run.loops
    calls = [(pk, rec) for pk, rec in zip(placed.kernels, run.records, strict=True)
             if any(c.overlapped and c.after for c in pk.kernel.collectives)]
    assert {pk.kernel.kind for pk, _ in calls} == {"mla", "ffn"}
    for pk, rec in calls:
        # the call from its boundary (launch, barrier) on, its configuration load (if any) included
        engine = rec.end - rec.start - rec.launch_cycles - rec.barrier_cycles
        assert abs(pk.call_cycles - engine) <= 2, (pk.kernel.name, pk.call_cycles, engine)
