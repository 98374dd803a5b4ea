"""MLA's element-wise work per socket, counted by hand from DeepSeek-R1's config.json (128 heads,
q_lora_rank 1536, kv_lora_rank 512, 64-wide RoPE parts): what a formula left out would move no
byte and so no flow check would see."""
from __future__ import annotations

from sn40l_sim.ir import ParallelPlan, Shape
from sn40l_sim.models.context import Ctx
from sn40l_sim.models.families import mla
from sn40l_sim.models.template import template_for


def test_rope_rotates_every_heads_query_part_and_the_shared_key(r1):
    # decode of 16 tokens at tp 16: 8 query heads a socket, 64 RoPE values each, plus the one
    # 64-wide RoPE key every token shares over the heads
    ctx = Ctx(r1, Shape("decode", 16, 0, kv_len=8192), ParallelPlan(tp=16), template_for(r1))
    (rope,) = mla.mla_rope(ctx)
    assert rope.op.elements == 16 * 8 * 64 + 16 * 64


def test_each_rmsnorm_takes_one_reciprocal_square_root_a_token(r1):
    ctx = Ctx(r1, Shape("decode", 16, 0, kv_len=8192), ParallelPlan(tp=16), template_for(r1))
    (q_norm,), (kv_norm,) = mla.q_norm(ctx), mla.kv_norm(ctx)
    assert (q_norm.op.elements, q_norm.op.transcendentals) == (16 * 1536, 16)
    # the latent is normalised; the RoPE key passes through
    assert (kv_norm.op.elements, kv_norm.op.transcendentals) == (16 * 512, 16)
