"""Whether a kernel template computes the whole model: the named activations of its operators
form one complete chain, and no layer runs an operator twice.

The builder derives every activation byte from the names operators read and write
(:mod:`sn40l_sim.models.builder`), so a template that drops or repeats an operator would still
build a graph, with silently wrong numbers: an FFN kernel without its GEMMs reads weights it
never multiplies, a repeated ``flash_pv`` counts its stream twice. Three rules catch that, checked
once per model and template on a small shape (the structure does not depend on the shape):

* no part of a phase (the head, a dense or MoE layer, the tail, an MTP run) names one operator
  formula twice;
* every activation an operator reads was written by an earlier operator of the graph, except
  the graph's input, the sampled ``tokens``;
* every activation an operator writes is read by a later one, except the tokens sampling writes.

Examples
--------
>>> from sn40l_sim.models.loader import load_model
>>> from sn40l_sim.models.template import GRAPHS_DIR, template_for
>>> model = load_model(GRAPHS_DIR / "llama3_1_8b.yaml")
>>> dataflow_problem(template_for(model), model, "prefill") is None
True
"""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from sn40l_sim.ir import ParallelPlan, Shape
from sn40l_sim.models.context import Ctx, Step
from sn40l_sim.models.formulas import operators
from sn40l_sim.models.tensors import dense_layer_count

if TYPE_CHECKING:
    # type-only: the template module checks templates with this one
    from sn40l_sim.models.spec import ModelSpec
    from sn40l_sim.models.template import KernelTemplates, PhaseTemplate

#: the graph's input and output: the tokens a step samples and the next one embeds
GRAPH_TOKENS = "tokens"
#: a small shape whose formulas every model can evaluate (the check reads names, not bytes)
_PROMPT_TOKENS = 64


def dataflow_problem(template: KernelTemplates, model: ModelSpec, phase: str) -> tuple[tuple, str] | None:
    """The first broken rule of ``template``'s ``phase`` for ``model`` as (field path in the
    template file, message), or None when its operators form one complete chain."""
    spec: PhaseTemplate = getattr(template, phase)
    repeated = _repeated_operator(spec, model, phase)
    if repeated is not None:
        return repeated
    # a model with an MTP module drafts: a decode step runs it, and so does a prefill whose blocks
    # have the MTP run (the builder refuses a drafting prefill without them)
    blocks = spec.blocks
    drafts = 1 if model.mtp is not None and (phase == "decode" or blocks.mtp_head or blocks.mtp_tail) else 0
    shape = (Shape("prefill", 1, _PROMPT_TOKENS, drafts=drafts) if phase == "prefill"
             else Shape("decode", 1, 0, kv_len=_PROMPT_TOKENS, drafts=drafts))
    main = Ctx(model, shape, ParallelPlan(), template)
    draft = Ctx(model, replace(shape, drafts=0), ParallelPlan(), template)
    formulas = operators(template.attention)
    steps_of: dict[tuple[str, bool], list[tuple[str, Step]]] = {}
    written: dict[str, tuple[str, str]] = {}      # activation -> (kernel id, operator) last writing it
    unread: dict[str, tuple[str, str]] = {}       # written and not read since
    for kernel_id, is_draft in _kernel_ids(spec, model, drafts):
        key = (kernel_id, is_draft)
        if key not in steps_of:
            ctx = draft if is_draft else main
            steps_of[key] = [(op, s) for op in spec.kernels[kernel_id].operators for s in formulas[op](ctx)]
        for op, step in steps_of[key]:
            for name, _ in step.reads:
                if name not in written and name != GRAPH_TOKENS:
                    return ((phase, "kernels", kernel_id, "operators"),
                            f"operator {op!r} reads activation {name!r}, which no earlier operator of the "
                            f"{phase} graph writes: an operator that writes it is missing or comes later "
                            f"(expected every operator of each layer exactly once, in dataflow order)")
                unread.pop(name, None)
            for name, _ in step.writes:
                if name in unread and name != GRAPH_TOKENS:
                    by_kernel, by_op = unread[name]
                    return ((phase, "kernels", by_kernel, "operators"),
                            f"operator {by_op!r} writes activation {name!r}, which no operator reads before "
                            f"{op!r} (kernel {kernel_id!r}) writes it again: an operator that reads it is "
                            f"missing (expected every operator of each layer exactly once)")
                written[name] = unread[name] = (kernel_id, op)
    unread.pop(GRAPH_TOKENS, None)
    for name, (kernel_id, op) in unread.items():
        return ((phase, "kernels", kernel_id, "operators"),
                f"operator {op!r} writes activation {name!r}, which no later operator of the {phase} graph "
                f"reads: an operator that reads it is missing (expected every operator of each layer "
                f"exactly once)")
    return None


def _kernel_ids(spec: PhaseTemplate, model: ModelSpec, drafts: int) -> list[tuple[str, bool]]:
    """The phase's kernel ids in execution order (each layer kind once, then ``drafts`` MTP runs),
    with whether each is part of a draft run."""
    b = spec.blocks
    layers = []
    if dense_layer_count(model):
        layers += b.dense_layer
    if model.moe is not None and dense_layer_count(model) < model.layers:
        layers += b.moe_layer
    body = b.moe_layer if model.moe is not None else b.dense_layer
    # a second layer of each kind: what one layer leaves for the next must be read there
    out = [(k, False) for k in (*b.head, *layers, *layers, *b.tail)]
    for _ in range(drafts):
        out += [(k, True) for k in (*b.mtp_head, *body, *b.mtp_tail)]
    return out


def _repeated_operator(spec: PhaseTemplate, model: ModelSpec, phase: str) -> tuple[tuple, str] | None:
    b = spec.blocks
    parts = {"head": b.head, "dense_layer": b.dense_layer, "moe_layer": b.moe_layer, "tail": b.tail,
             "an MTP run (mtp_head, layer, mtp_tail)": (*b.mtp_head, *(b.moe_layer if model.moe else b.dense_layer),
                                                        *b.mtp_tail) if b.mtp_head or b.mtp_tail else ()}
    for part, kernel_ids in parts.items():
        seen: dict[str, str] = {}
        for kernel_id in kernel_ids:
            for op in spec.kernels[kernel_id].operators:
                if op in seen:
                    where = "it" if seen[op] == kernel_id else f"kernel {seen[op]!r}"
                    return ((phase, "kernels", kernel_id, "operators"),
                            f"operator {op!r} appears twice in {part}: kernel {kernel_id!r} and {where} both "
                            f"run it, so its work would be counted twice (expected every operator of each "
                            f"layer exactly once)")
                seen[op] = kernel_id
    return None
