"""The MoE formulas' activations are conserved: what one operator writes, the next reads whole.

The router's top-k writes one routing entry (expert index and weight) per (token, chosen expert)
pair, and the dispatch and the combine read exactly those entries; the dispatch writes one hidden
row per pair, which the grouped gate+up GEMM reads; and so on down to the combine. A formula that
writes or reads a different count than its neighbour (``T`` entries for ``T x k``, say) moves
bytes no one produced, which no cycle count would show at once."""
from __future__ import annotations

import pytest

from sn40l_sim.ir import ParallelPlan, Shape
from sn40l_sim.models import moe
from sn40l_sim.models.context import Ctx
from sn40l_sim.models.template import template_for

SHAPES = {"prefill": Shape("prefill", 1, 4096), "decode": Shape("decode", 16, 0, kv_len=8192)}


@pytest.mark.parametrize("phase", sorted(SHAPES))
def test_every_moe_activation_is_read_with_the_bytes_it_was_written(r1, phase):
    ctx = Ctx(r1, SHAPES[phase], ParallelPlan(tp=16), template_for(r1))
    written: dict[str, int] = {}
    reads: list[tuple[str, str, int]] = []
    for name, formula in moe.OPERATORS.items():
        for step in formula(ctx):
            for tensor, n_bytes in step.writes:
                assert written.setdefault(tensor, n_bytes) == n_bytes, (name, tensor)
            reads += [(name, tensor, n_bytes) for tensor, n_bytes in step.reads]
    inner = [(name, tensor, n_bytes) for name, tensor, n_bytes in reads if tensor in written]
    assert {tensor for _, tensor, _ in inner} >= {"routing", "expert_in", "expert_out", "router_logits"}
    for name, tensor, n_bytes in inner:
        assert n_bytes == written[tensor], f"{name} reads {n_bytes} bytes of {tensor}, written {written[tensor]}"
    # the routing table: T tokens x k experts, one entry each (independently of the formulas)
    tokens = ctx.tokens
    assert written["routing"] == tokens * r1.moe.experts_per_token * moe.ROUTE_ENTRY
    assert written["expert_in"] == tokens * r1.moe.experts_per_token * r1.hidden * 2   # BF16 rows


def test_the_prefill_gather_before_the_down_gemm_holds_routed_and_shared_intermediates(r1):
    # DeepSeek-V3/R1 config.json: num_experts_per_tok 8, n_shared_experts 1, moe_intermediate_size
    # 2048. Every prompt token has 8 routed and 1 shared expert intermediate of 2048 BF16 values
    assert (r1.moe.experts_per_token, r1.moe.shared_experts, r1.moe.expert_ffn) == (8, 1, 2048)
    ctx = Ctx(r1, SHAPES["prefill"], ParallelPlan(tp=16), template_for(r1))
    assert moe.expert_intermediate(ctx) == 4096 * (8 + 1) * 2048 * 2


def test_the_router_scores_every_expert_and_writes_an_index_and_a_weight_per_choice(r1):
    # decode of 16 sequences: 16 tokens x 256 experts, one sigmoid each; the top-8 routing
    # table holds an int32 expert index and a BF16 weight (4 + 2 bytes) per (token, expert)
    ctx = Ctx(r1, SHAPES["decode"], ParallelPlan(tp=16), template_for(r1))
    (score,) = moe.router_score(ctx)
    assert score.op.elements == score.op.transcendentals == 16 * 256
    (topk,) = moe.router_topk(ctx)
    assert topk.writes == (("routing", 16 * 8 * (4 + 2)),)
