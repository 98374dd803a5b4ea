"""Decode steps that move the right way with the batch and the weights' datatype (docs/validation.md,
"Larger batches, faster" and "FP8 weights decoded slower than BF16"). One more sequence adds its
rows to every GEMM and its cache to the attention, so the step may grow, not fall; it once fell
between batches that are not powers of two: Llama-3.1-8B on 8 sockets with 1K caches took 2.832 ms
at batch 80 and 2.478 at 88, 4.689 at 224 and 4.205 at 232, and Llama-3.1-70B on 16 sockets 9.087
and 8.854 ms at 80 and 88.
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


@pytest.mark.parametrize(("model", "sockets", "attention_dp"), [("llama3_1_8b", 8, 8), ("llama3_1_70b", 16, 1)])
def test_fp8_weights_do_not_decode_slower_than_bf16(model, sockets, attention_dp):
    """Half the weight bytes, each cast to BF16 before its GEMM: a memory-bound step at batch 16 and
    4K caches must not be slower (it once was, 1.977 against 2.417 ms for the 8B: the casts' stages
    took every idle PCU and the decoder no longer stayed loaded; docs/validation.md)."""
    node = load_hardware(ROOT / "hw_configs" / f"sn40l_node{sockets}.yaml")
    steps = {}
    for dtype in ("bf16", "fp8"):
        spec = load_model(ROOT / "graphs" / f"{model}.yaml", overrides={"weight_dtype": dtype})
        timer = step_timer(node, spec, make_policy("full", {}), ParallelPlan(tp=sockets),
                           ParallelPlan(tp=sockets, attention_dp=attention_dp), engine=EngineOptions())
        steps[dtype] = timer.decode_step(16, 4096).seconds
    assert steps["fp8"] <= steps["bf16"], steps
