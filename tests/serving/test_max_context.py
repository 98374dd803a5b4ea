"""A prompt as long as each shipped model's maximum context fits on a prefill node of its
deployment: weights and KV in HBM, the resident activations beside them or spilling to DDR.

(``run`` serves prompts up to the context less the tokens generated after them, which run the prefill
graph compiled for the whole context, the one sized here; this pins the memory that used to refuse
them: activations counted with FlashAttention's re-reads grew as the square of the prompt and,
placed first, pushed weights and KV out of HBM.)
"""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from sn40l_sim.errors import InputError
from sn40l_sim.hardware.loader import load_hardware
from sn40l_sim.ir import ParallelPlan, Shape
from sn40l_sim.kvcache import make_policy
from sn40l_sim.kvcache.sizing import kv_bytes_per_socket
from sn40l_sim.models.builder import build_graph
from sn40l_sim.models.loader import load_model
from sn40l_sim.models.template import GRAPHS_DIR
from sn40l_sim.serving.context_limit import check_output_context
from sn40l_sim.serving.socket_memory import place_socket, spilled_uses
from sn40l_sim.serving.step_costs import activation_bytes
from sn40l_sim.study.assemble import memory_placer

#: model file -> (node file, prefill tensor parallelism) of the shipped experiments
DEPLOYMENTS = {"deepseek_r1.yaml": ("sn40l_node16.yaml", 16), "llama3_1_8b.yaml": ("sn40l_node8.yaml", 8),
               "llama3_1_70b.yaml": ("sn40l_node8.yaml", 8), "llama3_1_405b.yaml": ("sn40l_node16.yaml", 16)}


def test_every_shipped_model_states_its_maximum_context():
    models = sorted(p.name for p in GRAPHS_DIR.glob("*.yaml") if not p.name.startswith("kernels"))
    assert models == sorted(DEPLOYMENTS)
    assert {m: load_model(GRAPHS_DIR / m).max_context for m in models} == {
        "deepseek_r1.yaml": 163840, "llama3_1_8b.yaml": 131072, "llama3_1_70b.yaml": 131072,
        "llama3_1_405b.yaml": 131072}


@pytest.mark.parametrize("model_file", sorted(DEPLOYMENTS))
def test_a_prompt_of_the_maximum_context_fits_on_a_prefill_node(model_file):
    node_file, tp = DEPLOYMENTS[model_file]
    model = load_model(GRAPHS_DIR / model_file)
    node = load_hardware(f"hw_configs/{node_file}")
    plan, length = ParallelPlan(tp=tp), model.max_context
    graph = build_graph(model, Shape("prefill", 1, length), plan, make_policy("snapstream", {"budget": 32768}))
    kv = kv_bytes_per_socket(model, plan, 1, length, phase="prefill")
    placement = place_socket(memory_placer(node, model), ("activations",), plan, kv, activation_bytes(graph))
    assert spilled_uses(placement, ("activations",)) == {}
    assert placement.by_tier["hbm"]["kv"] == kv and placement.total("activations") == activation_bytes(graph)


def test_a_prompt_and_its_output_may_fill_the_maximum_context_exactly():
    # positions 0 .. prompt + new - 1 of a 100-position model: a prompt of 60 with 40 new tokens
    # ends at position 99, the last there is; one more new token needs position 100
    def point(new: int) -> SimpleNamespace:
        return SimpleNamespace(model=SimpleNamespace(name="m", max_context=100), prompt_len=60, max_new_tokens=new,
                               prefill_lens=(64,), max_context_set=None)
    check_output_context(point(40))
    with pytest.raises(InputError, match="make 101, beyond the maximum context of m, 100 tokens"):
        check_output_context(point(41))
