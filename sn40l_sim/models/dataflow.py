"""Whether a kernel template computes the whole model: the named activations of its operators
form one complete chain, and no layer runs an operator twice.

The builder derives every activation byte from the names operators read and write
(:mod:`sn40l_sim.models.builder`), so a template that drops or repeats an operator would still
build a graph, with silently wrong numbers: an FFN kernel without its GEMMs reads weights it
never multiplies, a repeated ``flash_pv`` counts its stream twice. Four rules catch that, checked
once per model and template on a small shape (the structure does not depend on the shape):

* no part of a phase (the head, a dense or MoE layer, the tail, an MTP run) names one operator
  formula twice;
* every activation an operator reads was written by an earlier operator of its part, but the
  residual stream ``x`` and the sampled ``tokens``, which one part hands the next (so a layer
  cannot read what another layer left);
* every activation an operator writes is read by a later one of its part (or, for ``x`` and the
  tokens, of the next part);
* every layer writes to the KV cache.

Every operator names what it reads and writes (an FFN's activation its gate/up output and its
result), so leaving any one out breaks a rule (``tests/models/test_dataflow.py`` leaves out each
operator of each shipped template in turn).

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
from sn40l_sim.models.formulas import formula_weights, operators
from sn40l_sim.models.tensors import dense_layer_count

if TYPE_CHECKING:
    # type-only: the template module checks templates with this one
    from sn40l_sim.models.spec import ModelSpec
    from sn40l_sim.models.template import KernelEntry, KernelTemplates, PhaseTemplate

#: the graph's input and output: the tokens a step samples and the next one embeds
GRAPH_TOKENS = "tokens"
#: a small shape whose formulas every model can evaluate (the check reads names, not bytes)
PROBE_TOKENS = 64


def _missing_weight(kernel: KernelEntry, ctx: Ctx, needs: dict[str, tuple[str, str]], at: tuple) -> tuple[tuple, str] | None:
    """The first operator or collective size of ``kernel`` that needs a weight the model lacks (an
    MoE formula for a dense model, MLA's compressed query for one projecting it directly): it
    cannot be built, so it is refused here, named, rather than failing inside its formula."""
    named = [("operators", op) for op in kernel.operators] + [("collectives", c.size) for c in kernel.collectives]
    for field, formula in named:
        tensor, holder = needs.get(formula, (None, ""))
        if tensor is not None and tensor not in ctx.tensors:
            kind = "operator" if field == "operators" else "collective size"
            return ((*at, field), f"{kind} {formula!r} needs weight {tensor!r}, which model {ctx.model.name!r} "
                    f"does not have (it comes with {holder}): remove it, or use a template for this model")
    return None


def dataflow_problem(template: KernelTemplates, model: ModelSpec, phase: str) -> tuple[tuple, str] | None:
    """The first broken rule of ``template``'s ``phase`` for ``model`` as (field path in the
    template file, message), or None when its operators form one complete chain."""
    spec: PhaseTemplate = getattr(template, phase)
    repeated = _repeated_operator(spec, model, phase)
    if repeated is not None:
        return repeated
    # a model with an MTP module drafts where the phase's blocks have the MTP run (the builder
    # refuses a drafting step or prefill without them; a template without them serves undrafted)
    drafts = runs_drafts(spec, model)
    shape = (Shape("prefill", 1, PROBE_TOKENS, drafts=drafts) if phase == "prefill"
             else Shape("decode", 1, 0, kv_len=PROBE_TOKENS, drafts=drafts))
    main = Ctx(model, shape, ParallelPlan(), template)
    draft = Ctx(model, replace(shape, drafts=0), ParallelPlan(), template)
    formulas = operators(template.attention)
    needs = formula_weights(template.attention)
    steps_of: dict[tuple[str, bool], list[tuple[str, Step]]] = {}
    written: dict[str, tuple[str, str]] = {}      # activation -> (kernel id, operator) last writing it
    unread: dict[str, tuple[str, str]] = {}       # written and not read since
    previous = "head"
    for part, kernel_ids in phase_parts(spec, model, drafts):
        if part != "head":
            # a layer starts from the residual stream (and the tokens) alone: anything else read
            # was written in this part, not left by another layer
            problem = _left_unread(unread, phase, previous)
            if problem is not None:
                return problem
            written = {name: at for name, at in written.items() if name in _BETWEEN_PARTS}
        previous = part
        writes_cache = False
        for kernel_id, is_draft in kernel_ids:
            key = (kernel_id, is_draft)
            if key not in steps_of:
                ctx = draft if is_draft else main
                problem = _missing_weight(spec.kernels[kernel_id], ctx, needs, (phase, "kernels", kernel_id))
                if problem is not None:
                    return problem
                steps_of[key] = [(op, s) for op in spec.kernels[kernel_id].operators for s in formulas[op](ctx)]
            for op, step in steps_of[key]:
                writes_cache = writes_cache or step.op.kv_write_bytes > 0
                for name, _ in step.reads:
                    if name not in written and name != GRAPH_TOKENS:
                        return ((phase, "kernels", kernel_id, "operators"),
                                f"operator {op!r} reads activation {name!r}, which no earlier operator of its "
                                f"{part} writes: an operator that writes it is missing or comes later "
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
        if part.endswith("layer") and not writes_cache:
            return ((phase, "blocks"), f"the {part} writes nothing to the KV cache: the operator that writes "
                    f"its cache is missing (expected every operator of each layer exactly once)")
    unread.pop(GRAPH_TOKENS, None)
    return _left_unread(unread, phase, "graph", keep=())


#: what one part of the graph (the head, a layer, the tail, an MTP run) hands the next: the
#: residual stream and the sampled tokens
_BETWEEN_PARTS = ("x", GRAPH_TOKENS)


def _left_unread(unread: dict[str, tuple[str, str]], phase: str, part: str,
                 keep: tuple[str, ...] = _BETWEEN_PARTS) -> tuple[tuple, str] | None:
    """A problem for the first activation ``part`` wrote and nothing read (but those in ``keep``,
    which the next part reads), else None; those kept stay in ``unread``."""
    for name, (kernel_id, op) in list(unread.items()):
        if name in keep:
            continue
        return ((phase, "kernels", kernel_id, "operators"),
                f"operator {op!r} writes activation {name!r}, which no later operator of its {part} reads: an "
                f"operator that reads it is missing (expected every operator of each layer exactly once)")
    return None


def runs_drafts(spec: PhaseTemplate, model: ModelSpec) -> int:
    """1 if the phase runs the model's MTP module (the model has one and the template's blocks call
    it), else 0."""
    blocks = spec.blocks
    return 1 if model.mtp is not None and (blocks.mtp_head or blocks.mtp_tail) else 0


def phase_parts(spec: PhaseTemplate, model: ModelSpec, drafts: int) -> list[tuple[str, list[tuple[str, bool]]]]:
    """The phase's parts in execution order, each with its kernel ids and whether each is part of a
    draft run: the head, each layer kind twice (what one layer leaves for the next must be read
    there), the tail, then ``drafts`` MTP runs."""
    b = spec.blocks
    layers = []
    if dense_layer_count(model):
        layers.append(("dense layer", b.dense_layer))
    if model.moe is not None and dense_layer_count(model) < model.layers:
        layers.append(("MoE layer", b.moe_layer))
    body = b.moe_layer if model.moe is not None else b.dense_layer
    out = [("head", [(k, False) for k in b.head])]
    out += [(name, [(k, False) for k in kernels]) for name, kernels in (*layers, *layers)]
    out.append(("tail", [(k, False) for k in b.tail]))
    for _ in range(drafts):
        out.append(("MTP run", [(k, True) for k in (*b.mtp_head, *body, *b.mtp_tail)]))
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
