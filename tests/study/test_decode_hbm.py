"""A faster HBM never makes a looped decode step slower (docs/validation.md, "A faster machine is
not always faster in the simulator").

Llama-3.1-8B's decoder on 8 sockets at batch 64 with 33K-token caches streams 1.1 GB per layer, four
times what half the SRAM can read ahead. When the mapper scored the loop as if the whole stream
could load while the iteration waits for the previous one's all-reduce, faster HBM picked a coarse
tiling whose fill then followed the gate: the step took 17.61, 17.27 and 18.39 ms at 700, 750 and
800 GB/s per HBM module.
"""
from __future__ import annotations

from pathlib import Path

from sn40l_sim.engine.run_graph import EngineOptions
from sn40l_sim.hardware.loader import load_hardware, with_overrides
from sn40l_sim.ir import ParallelPlan
from sn40l_sim.kvcache import make_policy
from sn40l_sim.models.loader import load_model
from sn40l_sim.study.assemble import step_timer

ROOT = Path(__file__).resolve().parents[2]


def test_a_looped_decode_step_does_not_slow_down_as_hbm_gets_faster():
    node8 = load_hardware(ROOT / "hw_configs" / "sn40l_node8.yaml")
    model = load_model(ROOT / "graphs" / "llama3_1_8b.yaml")
    cycles = []
    for rate in ("700 GB/s", "750 GB/s", "800 GB/s"):
        node = with_overrides(node8, {"socket.memory.hbm.bytes_per_s_per_unit": rate})
        timer = step_timer(node, model, make_policy("full", {}), ParallelPlan(8), ParallelPlan(8, 8), {},
                           engine=EngineOptions())
        cycles.append(timer.decode_step(64, 33280).cycles)
    assert cycles == sorted(cycles, reverse=True), cycles
