"""Dense SwiGLU FFN: ``down(SiLU(x W_gate) * (x W_up))``, gate/up column-parallel, down
row-parallel (its partial sums are all-reduced by the kernel's ``hidden`` collective).

Used by Llama's every layer and by DeepSeek's first ``dense_layers`` layers (fused with the output
projection in DeepSeek prefill, the ``o_proj_ffn`` kernel).
"""
from __future__ import annotations

from sn40l_sim.models.context import ACT, Ctx, Step


def dense_gate_up(c: Ctx) -> list[Step]:
    """``[T, hidden] @ [hidden, 2 * dense_ffn / tp]``."""
    t = c.tokens
    return c.gemm("dense_gate_up", t, "dense_gate_up", reads=(("hn", t * c.model.hidden * ACT),),
                  writes=(("ffn_gate_up", t * c.dims("dense_gate_up")[1] * ACT),))


def dense_act(c: Ctx) -> list[Step]:
    """SiLU(gate) * up on the socket's ``dense_ffn / tp`` slice (one exp per element)."""
    n = c.tokens * c.dims("dense_down")[0]
    return c.simd("dense_act", "elementwise", n, transcendentals=n,
                  reads=(("ffn_gate_up", c.tokens * c.dims("dense_gate_up")[1] * ACT),), writes=(("ffn_act", n * ACT),))


def dense_down(c: Ctx) -> list[Step]:
    """``[T, dense_ffn / tp] @ [dense_ffn / tp, hidden]`` (partial sums)."""
    t = c.tokens
    return c.gemm("dense_down", t, "dense_down", reads=(("ffn_act", t * c.dims("dense_down")[0] * ACT),),
                  writes=(("ffn_out", t * c.model.hidden * ACT),))


OPERATORS = {f.__name__: f for f in (dense_gate_up, dense_act, dense_down)}
SIZES: dict = {}
#: a model whose every layer is MoE has no dense FFN tensors (``dense_ffn`` left out)
FORMULA_WEIGHTS = {"dense_gate_up": ("dense_gate_up", "dense_ffn"), "dense_act": ("dense_gate_up", "dense_ffn"),
                   "dense_down": ("dense_down", "dense_ffn")}
