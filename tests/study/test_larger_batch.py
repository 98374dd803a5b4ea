"""A larger decode batch is not a faster step (docs/validation.md, "Larger batches, faster"). One
more sequence adds its rows to every GEMM and its cache to the attention, so the step may grow, not
fall. It once fell between batches that are not powers of two: Llama-3.1-8B on 8 sockets with 1K
caches took 2.832 ms at batch 80 and 2.478 at 88, 4.689 at 224 and 4.205 at 232, and
Llama-3.1-70B on 16 sockets 9.087 and 8.854 ms at 80 and 88.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from sn40l_sim.engine.run_graph import EngineOptions
from sn40l_sim.hardware.loader import load_hardware
from sn40l_sim.ir import ParallelPlan
from sn40l_sim.kvcache import make_policy
from sn40l_sim.models.loader import load_model
from sn40l_sim.study.assemble import step_timer

ROOT = Path(__file__).resolve().parents[2]


def _timer(model: str, sockets: int):
    node = load_hardware(ROOT / "hw_configs" / f"sn40l_node{sockets}.yaml")
    return step_timer(node, load_model(ROOT / "graphs" / f"{model}.yaml"), make_policy("full", {}),
                      ParallelPlan(tp=sockets), ParallelPlan(tp=sockets), engine=EngineOptions())


@pytest.mark.parametrize(("model", "sockets", "smaller", "larger"), [
    ("llama3_1_8b", 8, 80, 88),
    ("llama3_1_8b", 8, 224, 232),
    ("llama3_1_70b", 16, 80, 88),
])
def test_eight_more_sequences_do_not_make_the_step_shorter(model, sockets, smaller, larger):
    timer = _timer(model, sockets)
    fewer = timer.decode_step(smaller, 1024).seconds
    more = timer.decode_step(larger, 1024).seconds
    assert more >= fewer, (fewer, more)
