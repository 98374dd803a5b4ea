"""A section's pipeline fill is the longest path through its stage graph
(sn40l_sim/mapper/fill_path.py): a chain's is every stage and hand-over summed, as before operators
named their producers; parallel branches fill side by side."""
from dataclasses import replace

import pytest
from conftest import deepseek_graph, distinct_kernels

from sn40l_sim.hardware.units._cycles import ceil_cycles
from sn40l_sim.ir import FusedKernel, Operator
from sn40l_sim.mapper._examples import example_decode_kernel
from sn40l_sim.mapper.fill_path import compute_graph
from sn40l_sim.mapper.kernel import best_plan
from sn40l_sim.mapper.planning import handover_cycles
from sn40l_sim.mapper.stages import paced_cycles
from sn40l_sim.mapper.tier_split import TierSplit

HBM = TierSplit.all_in("hbm")


def _latency(sec, i):
    division = sec.alloc.divisions[i] if sec.alloc.divisions else None
    return division.latency_cycles if division is not None else 0


def _compute_edge(sec, r):
    return not sec.stages[r.src].is_memory and not sec.stages[r.dst].is_memory


def _fill_of(socket, sec, compute_cycles):
    """The fill of ``sec`` with ``compute_cycles`` the compute stages' part (their cycles, fills
    and drains and hand-overs), its memory part as the plan's."""
    stages, routed = sec.stages, sec.streams
    memory_paced = sum(s.paced_cycles for s in stages if s.is_memory)
    memory = max([s.latency_cycles for s in stages if s.is_memory]
                 + [r.latency_cycles for r in routed if not _compute_edge(sec, r)] + [0])
    return ceil_cycles(max(0.0, memory_paced + compute_cycles + memory - sec.cycles_per_tile))


def summed_fill(socket, sec):
    """The fill with every stage and every compute-to-compute hand-over summed (the stages as one
    chain), worked out here from the plan's stages, allocation and routes."""
    paced = [paced_cycles(s, c) for s, c in zip(sec.stages, sec.alloc.cycles, strict=True)]
    compute = sum(p + _latency(sec, i) for i, p in enumerate(paced) if not sec.stages[i].is_memory)
    return _fill_of(socket, sec, compute + sum(handover_cycles(socket, r) for r in sec.streams
                                               if _compute_edge(sec, r)))


def path_cycles(socket, sec, names):
    """Cycles of the compute stages named ``names`` in order and of the hand-overs between them."""
    at = {s.name: i for i, s in enumerate(sec.stages)}
    nodes = [at[n] for n in names]
    hand = {(r.src, r.dst): handover_cycles(socket, r) for r in sec.streams}
    return (sum(sec.alloc.cycles[i] + _latency(sec, i) for i in nodes)
            + sum(hand[a, b] for a, b in zip(nodes, nodes[1:], strict=False)))


def test_a_chain_fills_through_every_stage(socket):
    """A hand-written kernel (no producers) and the same operators naming each the one before
    are one chain: both fill as the sum of every stage and hand-over, exactly."""
    kernel = example_decode_kernel()
    named = replace(kernel, operators=tuple(
        replace(op, producers=(kernel.operators[i - 1].name,) if i else ())
        for i, op in enumerate(kernel.operators)))
    plans = [best_plan(socket, k, HBM) for k in (kernel, named)]
    for plan in plans:
        for sec in plan.sections:
            assert sec.fill_cycles == summed_fill(socket, sec) > 0
    assert [s.fill_cycles for s in plans[0].sections] == [s.fill_cycles for s in plans[1].sections]
    assert plans[0].objective == plans[1].objective


def _diamond(branched: bool) -> FusedKernel:
    """A norm feeding a large and a small projection of the same rows, joined by an add: the
    projections are parallel branches when the operators name their producers (a chain else)."""
    rows, width = 64, 7168

    def gemm(name, n):
        return Operator(name, "gemm", flops=2 * rows * width * n, m=rows, k=width, n=n, weight_bytes=width * n * 2,
                        producers=("norm",) if branched else None)
    ops = (Operator("norm", "elementwise", elements=rows * width, act_in_bytes=rows * width * 2,
                    producers=() if branched else None),
           gemm("q", 4096), gemm("kv", 512),
           Operator("join", "elementwise", elements=rows * 4608, act_out_bytes=rows * 4608 * 2,
                    producers=("q", "kv") if branched else None))
    return FusedKernel("diamond", "mla", "decode", ops)


def test_parallel_branches_fill_as_the_longer(socket):
    plan = best_plan(socket, _diamond(True), HBM)
    assert len(plan.sections) == 1
    sec = plan.sections[0]
    long, short = (path_cycles(socket, sec, p) for p in (("norm", "q", "join"), ("norm", "kv", "join")))
    assert long > short
    assert sec.fill_cycles == _fill_of(socket, sec, long) > 0
    # the short branch's projection fills beside the long one, not after it
    assert sec.fill_cycles < summed_fill(socket, sec)
    # as a chain (``kv`` after ``q``), the same operators fill through both
    chained = best_plan(socket, _diamond(False), HBM).sections[0]
    assert chained.fill_cycles == summed_fill(socket, chained)


@pytest.mark.parametrize("phase", ["decode", "prefill"])
def test_fill_never_exceeds_the_sum(socket, phase):
    """Over the main experiment's kernels: every section fills within the sum of its stages and
    hand-overs, a chain's exactly at it; and a decode kernel's branches (DeepSeek's MLA projects
    the query and the latent KV from the same rows) fill side by side."""
    shorter = 0
    for kernel in distinct_kernels(deepseek_graph(phase)):
        for sec in best_plan(socket, kernel, HBM).sections:
            summed = summed_fill(socket, sec)
            assert sec.fill_cycles <= summed, kernel.name
            compute, edges = compute_graph(sec.stages, sec.streams)
            if edges == [(k, k + 1) for k in range(len(compute) - 1)]:
                assert sec.fill_cycles == summed, kernel.name
            shorter += sec.fill_cycles < summed
    if phase == "decode":
        assert shorter > 0


def test_split_kv_combine_sits_between_the_sum_and_its_readers(socket):
    """One long cache spread over four tiles leaves partial results: their merge reads the weighted
    sum, and what read the sum reads the merged rows instead (so the merge is on the fill's path)."""
    from sn40l_sim.mapper.attention import with_combines

    mla = distinct_kernels(deepseek_graph("decode", batch=1))[1]
    named = {op.name: op.producers for op in with_combines(socket, mla.operators, 4)}
    assert named["absorbed_qk.combine"] == ("absorbed_pv",)
    assert named["v_unabsorb"] == ("absorbed_qk.combine", "v_unabsorb.dequant")
