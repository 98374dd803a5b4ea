"""Mixture of experts: router, routed experts, shared experts.

Deployment (docs/reference.md §3): the experts are tensor-parallel, each socket holding
``1 / tp`` of every expert (gate/up split by columns, down by rows), so every socket processes every
token's routed work on its slice and an all-reduce of ``[T, hidden]`` sums the slices after the
down GEMM. All routed experts run in ONE fused kernel; the routed GEMMs are written as grouped
GEMMs whose rows are the ``T * k`` (token, expert) pairs, so their FLOPs are exact whatever the
per-expert split, while the weight bytes are those of the experts loaded.

Which experts' weights a call streams is the option ``expert_loading``:

``"touched"`` (default)
    the loading follows the batch: the call streams the experts its routed tokens touch, the
    expected number of distinct experts the call's ``T`` rows route to
    (:func:`sn40l_sim.models.routing.expected_distinct_experts`, with ``routing_skew``). ``T`` is
    the batch in a plain decode step, ``batch x (drafts + 1)`` in a speculative verify step and the
    whole prompt in prefill, so the stream grows with the batch and converges to all ``E`` experts
    (at 256 experts, top-8: 8 at one row, about 102 at 16, 255.4 at 192; from about a thousand rows
    the stream is all experts', to the byte).
``"all"``
    a static fused MoE kernel that walks every expert, preloading the next one's weights, so each
    call streams all ``E`` experts' shards whatever the routing: the SnapStream paper's DeepSeek
    deployment describes its MoE FFN this way (docs/reference.md §3, "all experts in one fused
    kernel that preloads the next expert's weights"), and the experiments that reproduce it set it.

The router is replicated: after the output projection's all-reduce every socket holds every
token's hidden state, and every socket needs every token's routing for its slice of every expert,
so computing it everywhere (``[T, hidden] @ [hidden, E]``, 3.7 MB of BF16 weights) avoids a
collective on the critical path; a split router would need an all-gather of the top-k indices and
weights before the experts could start. Scoring is a sigmoid (or softmax) per expert, then the
group-limited top-k (top ``topk_groups`` of ``groups`` by their best scores, then the top ``k``
experts in them), counted as a selection over the ``E`` scores.
"""
from __future__ import annotations

from sn40l_sim.models.context import ACT, Ctx, Step
from sn40l_sim.models.routing import expected_distinct_experts

#: bytes per routing entry: int32 expert index + BF16 weight
ROUTE_ENTRY = 6
#: resolution of the fractional share of expert bytes under ``expert_loading="touched"``
_SHARE_DEN = 1_000_000


def _k(c: Ctx) -> int:
    return c.model.moe.experts_per_token


def touched(c: Ctx) -> float:
    """Expected distinct experts the step's tokens route to."""
    moe = c.model.moe
    return expected_distinct_experts(moe.routed_experts, moe.experts_per_token, c.tokens, c.routing_skew)


def _loaded_share(c: Ctx) -> tuple[int, int]:
    if c.expert_loading == "all":
        return 1, 1
    return round(touched(c) * _SHARE_DEN), c.model.moe.routed_experts * _SHARE_DEN


def router_gemm(c: Ctx) -> list[Step]:
    """Gate logits ``[T, hidden] @ [hidden, E]`` (replicated)."""
    t, e = c.tokens, c.model.moe.routed_experts
    return c.gemm("router_gemm", t, "router", reads=(("hn", t * c.model.hidden * ACT),),
                  writes=(("router_logits", t * e * ACT),))


def router_score(c: Ctx) -> list[Step]:
    """Sigmoid (or softmax exp) per expert, plus the balancing bias when the model has one."""
    t, e = c.tokens, c.model.moe.routed_experts
    return c.simd("router_score", "elementwise", t * e, transcendentals=t * e,
                  weight="router_bias" if "router_bias" in c.tensors else None,
                  reads=(("router_logits", t * e * ACT),), writes=(("router_scores", t * e * ACT),))


def router_topk(c: Ctx) -> list[Step]:
    """Group-limited top-k over the ``E`` scores; writes index + weight per chosen expert."""
    t, e = c.tokens, c.model.moe.routed_experts
    return c.simd("router_topk", "topk", t * e, reads=(("router_scores", t * e * ACT),),
                  writes=(("routing", t * _k(c) * ROUTE_ENTRY),))


def dispatch(c: Ctx) -> list[Step]:
    """Gather each (token, expert) pair's hidden row into expert order."""
    t, h = c.tokens, c.model.hidden
    return c.simd("dispatch", "gather", t * _k(c) * h,
                  reads=(("hn", t * h * ACT), ("routing", t * _k(c) * ROUTE_ENTRY)),
                  writes=(("expert_in", t * _k(c) * h * ACT),),
                  notes=(("experts_touched", round(touched(c), 3)),
                         ("experts_loaded", round(c.model.moe.routed_experts * _loaded_share(c)[0]
                                                  / _loaded_share(c)[1], 3))))


def expert_gate_up(c: Ctx) -> list[Step]:
    """Grouped gate+up GEMM: ``[T*k, hidden] @ [hidden, 2 * expert_ffn / tp]`` over loaded experts."""
    m = c.tokens * _k(c)
    return c.gemm("expert_gate_up", m, "expert_gate_up", share=_loaded_share(c),
                  reads=(("expert_in", m * c.model.hidden * ACT),),
                  writes=(("expert_gate_up", m * c.dims("expert_gate_up")[1] * ACT),))


def expert_act(c: Ctx) -> list[Step]:
    """SiLU(gate) * up on each pair's ``expert_ffn / tp`` slice (one exp per element)."""
    m = c.tokens * _k(c)
    n = m * c.dims("expert_down")[0]
    return c.simd("expert_act", "elementwise", n, transcendentals=n,
                  reads=(("expert_gate_up", m * c.dims("expert_gate_up")[1] * ACT),), writes=(("expert_act", n * ACT),))


def expert_down(c: Ctx) -> list[Step]:
    """Grouped down GEMM: ``[T*k, expert_ffn / tp] @ [expert_ffn / tp, hidden]`` (partial sums)."""
    m = c.tokens * _k(c)
    return c.gemm("expert_down", m, "expert_down", share=_loaded_share(c),
                  reads=(("expert_act", m * c.dims("expert_down")[0] * ACT),),
                  writes=(("expert_out", m * c.model.hidden * ACT),))


def shared_gate_up(c: Ctx) -> list[Step]:
    """Shared expert(s), gate+up: ``[T, hidden] @ [hidden, 2 * shared_ffn / tp]``."""
    if "shared_gate_up" not in c.tensors:
        return []
    return c.gemm("shared_gate_up", c.tokens, "shared_gate_up",
                  reads=(("hn", c.tokens * c.model.hidden * ACT),),
                  writes=(("shared_gate_up", c.tokens * c.dims("shared_gate_up")[1] * ACT),))


def shared_act(c: Ctx) -> list[Step]:
    """SiLU(gate) * up of the shared expert slice."""
    if "shared_down" not in c.tensors:
        return []
    n = c.tokens * c.dims("shared_down")[0]
    return c.simd("shared_act", "elementwise", n, transcendentals=n,
                  reads=(("shared_gate_up", c.tokens * c.dims("shared_gate_up")[1] * ACT),),
                  writes=(("shared_act", n * ACT),))


def shared_down(c: Ctx) -> list[Step]:
    """Shared expert down projection (partial sums)."""
    if "shared_down" not in c.tensors:
        return []
    t = c.tokens
    return c.gemm("shared_down", t, "shared_down", reads=(("shared_act", t * c.dims("shared_down")[0] * ACT),),
                  writes=(("shared_out", t * c.model.hidden * ACT),))


def combine(c: Ctx) -> list[Step]:
    """Weighted sum of each token's ``k`` expert outputs plus the shared output."""
    t, h = c.tokens, c.model.hidden
    reads = (("expert_out", t * _k(c) * h * ACT), ("routing", t * _k(c) * ROUTE_ENTRY))
    if "shared_down" in c.tensors:
        reads += (("shared_out", t * h * ACT),)
    return c.simd("combine", "reduction", t * _k(c) * h, reads=reads, writes=(("ffn_out", t * h * ACT),))


OPERATORS = {f.__name__: f for f in (router_gemm, router_score, router_topk, dispatch, expert_gate_up,
                                     expert_act, expert_down, shared_gate_up, shared_act, shared_down,
                                     combine)}

#: formula (operator or collective size) -> (weight tensor it needs that only MoE models have, the
#: model part that holds it);
#: the shared-expert operators need none (they add nothing without shared experts)
FORMULA_WEIGHTS = {**{op: ("router", "a moe section") for op in ("router_gemm", "router_score", "router_topk")},
                    **{op: ("expert_gate_up", "a moe section")
                       for op in ("dispatch", "expert_gate_up", "expert_act", "combine")},
                    "expert_down": ("expert_down", "a moe section")}


def expert_intermediate(c: Ctx) -> int:
    """``[T x (k routed + shared), expert_ffn]`` BF16: the activated expert intermediates, the tensor
    the prefill MoE kernel gathers over P2P before its down GEMM (docs/reference.md §3: "P2P gathers
    activations before the down GEMM, overlapped"; each socket computed 1/tp of its columns)."""
    moe = c.model.moe
    return c.tokens * (moe.experts_per_token + moe.shared_experts) * moe.expert_ffn * ACT


SIZES: dict = {f.__name__: f for f in (expert_intermediate,)}
FORMULA_WEIGHTS["expert_intermediate"] = ("expert_gate_up", "a moe section")
