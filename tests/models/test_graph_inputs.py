"""build_graph's model, shape and plan from a Python caller: a path for the model, a number for the
plan or a text for a count is an InputError naming the argument, not an AttributeError or a
TypeError from a comparison deep in the builder (sn40l_sim/models/graph_inputs.py)."""
from __future__ import annotations

from pathlib import Path

import pytest

from sn40l_sim.errors import InputError
from sn40l_sim.ir import ParallelPlan, Shape
from sn40l_sim.models.builder import build_graph
from sn40l_sim.models.loader import load_model

REPO = Path(__file__).resolve().parents[2]
LLAMA = REPO / "graphs" / "llama3_1_8b.yaml"
STEP = Shape("decode", batch=8, prompt_len=0, kv_len=1024)


@pytest.mark.parametrize("model, shape, plan, named", [
    (str(LLAMA), STEP, ParallelPlan(8), "model: expected a ModelSpec, such as load_model("),
    (None, STEP, ParallelPlan(8), "model: expected a ModelSpec"),
    ("llama", ("decode", 8, 0, 1024), ParallelPlan(8), "model: expected a ModelSpec"),
    (..., ("decode", 8, 0, 1024), ParallelPlan(8), "shape: expected a Shape, such as Shape('decode', "),
    (..., STEP, 8, "plan: expected a ParallelPlan, such as ParallelPlan(tp=8), got 8"),
    (..., STEP, ParallelPlan(8.0), "parallel plan: attention_dp (1) must divide tp (8.0), both >= 1"),
    (..., Shape("decode", "8", 0, 1024), ParallelPlan(8), "shape: batch must be an integer, got '8'"),
    (..., Shape("decode", 8, 0, 1024.0), ParallelPlan(8), "shape: kv_len must be an integer, got 1024.0"),
    (..., Shape("decode", 8, 0, 1024, drafts="1"), ParallelPlan(8), "shape: drafts must be an integer, got '1'"),
    (..., Shape("decode", 8, 0, 1024, drafts=-1), ParallelPlan(8), "shape: drafts must be from 0 to 15"),
])
def test_a_wrong_argument_is_named(model, shape, plan, named):
    model = load_model(LLAMA) if model is ... else model
    with pytest.raises(InputError) as caught:
        build_graph(model, shape, plan)
    assert str(caught.value).startswith(named)


def test_numpy_counts_build_the_same_graph():
    import numpy as np
    llama = load_model(LLAMA)
    plain = build_graph(llama, STEP, ParallelPlan(8))
    counted = build_graph(llama, Shape("decode", np.int64(8), 0, np.int64(1024)), ParallelPlan(np.int64(8)))
    assert [k.signature() for k in counted.kernels()] == [k.signature() for k in plain.kernels()]
    assert len(plain.kernels()) == 35
