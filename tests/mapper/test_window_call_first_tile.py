"""A call (not a looped iteration) whose stream waits mid-way for a window's collective is replayed
with its collectives starting once its first data tile is out, its bytes in (the engine's
``_first_tile_cycles``, sn40l_sim/engine/kernel_process.py), as the loop's first iteration already
was (sn40l_sim/mapper/window_replay.py, ``first_tile_cycles``).

Llama-3.1-8B's decoder at batch 16 with 2K caches on 16 sockets, kernel looping off: its o_proj
all-reduce was scored as starting one tile's compute after its window opens, where the engine starts
it once that tile's weights are in, and a plan of 32 data tiles was scored 2,758 cycles (3.4%) short of the engine's
call (77,742 against 80,500). The mapper chose it over 128 data tiles, which both now score at
79,488 cycles: the step 3,122,382 -> 3,089,998 cycles (1.0% faster; docs/validation.md, "Decode
all-reduces under the GEMM").
"""
from __future__ import annotations

from pathlib import Path

import pytest

from sn40l_sim.engine.run_graph import EngineOptions, run_graph
from sn40l_sim.hardware.loader import load_hardware
from sn40l_sim.ir import ParallelPlan, Shape
from sn40l_sim.kvcache import make_policy
from sn40l_sim.models.loader import load_model
from sn40l_sim.study.assemble import step_timer

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def decode_8b():
    """The 8B's unlooped decode on 16 sockets at batch 16, 2K caches: placed graph and its run."""
    node = load_hardware(ROOT / "hw_configs" / "sn40l_node16.yaml")
    model = load_model(ROOT / "graphs" / "llama3_1_8b.yaml")
    timer = step_timer(node, model, make_policy("full", {}), ParallelPlan(tp=16), ParallelPlan(tp=16),
                       engine=EngineOptions(kernel_looping=False))
    placed = timer.placed(Shape("decode", 16, 0, 2048))
    return placed, run_graph(node, placed, timer.engine)


def test_a_windowed_calls_score_is_the_engines_call(decode_8b):
    placed, run = decode_8b
    assert not run.loops
    calls = [(pk, rec) for pk, rec in zip(placed.kernels, run.records, strict=True)
             if any(c.overlapped and c.after for c in pk.kernel.collectives)]
    assert len(calls) == 32   # one decoder call a layer, each with its windows
    for pk, rec in calls:
        # the call from its boundary (launch, barrier) on, its configuration load (if any) included
        engine = rec.end - rec.start - rec.launch_cycles - rec.barrier_cycles
        assert abs(pk.call_cycles - engine) <= 2, (pk.kernel.name, pk.call_cycles, engine)
