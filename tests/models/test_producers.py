"""Each operator names the operators of its kernel whose outputs it reads (Operator.producers,
sn40l_sim/models/activations.py): the kernel's dataflow graph, along which the mapper fills its
pipeline (sn40l_sim/mapper/fill_path.py)."""
from __future__ import annotations

import pytest

from sn40l_sim.ir import ParallelPlan, Shape
from sn40l_sim.models.builder import build_graph


def _kernels(model, shape, plan):
    """The first kernel of each kind of the graph, and of the MoE layers' (``L03``) by kind too."""
    out = {}
    for k in build_graph(model, shape, plan).kernels():
        out.setdefault(k.kind, k)
        if k.layer == 3:
            out.setdefault(f"moe_{k.kind}", k)
    return out


@pytest.fixture(scope="module")
def r1_decode(r1):
    return _kernels(r1, Shape("decode", 16, 0, kv_len=4096, drafts=2), ParallelPlan(16, 16))


def _producers(kernel):
    return {op.name: op.producers for op in kernel.operators}


def test_mla_projects_query_and_latent_side_by_side(r1_decode):
    named = _producers(r1_decode["mla"])
    assert named["q_a"] == ("attn_norm", "q_a.dequant")
    assert named["kv_a"] == ("attn_norm", "kv_a.dequant")
    # the scores wait for the query path and for the rows this step writes to the cache
    assert set(named["absorbed_qk"]) == {"q_absorb", "rope", "cache_write"}


def test_shared_expert_does_not_wait_for_the_routed_ones(r1_decode):
    named = _producers(r1_decode["moe_ffn"])
    assert named["shared_gate_up"] == ("shared_gate_up.dequant",)
    assert named["combine"] == ("expert_down", "shared_down")


def test_producers_are_earlier_operators_of_the_kernel(r1, llama8b):
    graphs = [build_graph(r1, Shape("decode", 16, 0, kv_len=4096, drafts=2), ParallelPlan(16, 16)),
              build_graph(r1, Shape("prefill", 1, 4096), ParallelPlan(16, 1)),
              build_graph(llama8b, Shape("decode", 8, 0, kv_len=1024), ParallelPlan(8)),
              build_graph(llama8b, Shape("prefill", 1, 2048), ParallelPlan(8))]
    joins = 0
    for graph in graphs:
        for kernel in graph.kernels():
            before: set[str] = set()
            for op in kernel.operators:
                assert op.producers is not None and set(op.producers) <= before, (kernel.name, op.name)
                joins += len(op.producers) > 1
                before.add(op.name)
    assert joins > 0   # the graphs are not chains
