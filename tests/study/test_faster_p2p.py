"""Faster P2P links never make a prefill slower (docs/validation.md, "A faster machine is not always
faster in the simulator"): an overlapped all-reduce writes what it receives to the activations'
tier at its links' pace, and the engine shares that tier with the kernel's own stream. The mapper
scored the kernel's stream as if it had the tier alone, so at 200 GB/s per port, where the
all-reduce's staging wants 90% of HBM's rate, Llama-3.1-70B's 8K prefill on 16 sockets chose an
output projection streaming at 71 cycles a data tile that the staging held to 141, and the prefill
took 283.3 ms against 272.7 ms at 100 GB/s. The mapper now charges a call what its collectives'
staging holds its stream back (``held_back_cycles``, sn40l_sim/mapper/kernel_cost.py)."""
from __future__ import annotations

from pathlib import Path

from sn40l_sim.engine.run_graph import EngineOptions
from sn40l_sim.hardware.loader import load_hardware, with_overrides
from sn40l_sim.ir import ParallelPlan, Shape
from sn40l_sim.kvcache import make_policy
from sn40l_sim.models.loader import load_model
from sn40l_sim.study.assemble import step_timer

ROOT = Path(__file__).resolve().parents[2]


def _timer(p2p: str):
    node = with_overrides(load_hardware(ROOT / "hw_configs" / "sn40l_node16.yaml"),
                          {"socket.p2p.bytes_per_s_per_port": p2p})
    model = load_model(ROOT / "graphs" / "llama3_1_70b.yaml")
    return step_timer(node, model, make_policy("full", {}), ParallelPlan(16), ParallelPlan(16), {},
                      engine=EngineOptions())


def test_a_prefill_with_overlapped_all_reduces_does_not_slow_down_as_the_links_get_faster():
    timers = [_timer(rate) for rate in ("100 GB/s", "200 GB/s")]
    slow, fast = (timer.prefill(8192) for timer in timers)
    assert fast.cycles <= slow.cycles, (slow.seconds, fast.seconds)
    # and map's total stays a floor of the engine's prefill, the staging's hold included
    placed = timers[1].placed(Shape("prefill", 1, 8192, 0, 0))
    assert sum(pk.call_cycles for pk in placed.kernels) <= fast.cycles
