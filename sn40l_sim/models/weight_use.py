"""Whether a kernel template's operators read every weight tensor the model stores.

The dataflow rules (:mod:`.dataflow`) follow the named activations, and a whole fused kernel can
leave that chain intact: the residual stream ``x`` passes a layer whose FFN kernel was deleted from
its block and from the kernel table alike, so the graph builds and runs, with silently wrong
numbers (Llama-3.1-8B's 32K prefill on ``experiments/llama8b_node8.yaml`` ran in 0.198 s instead of
0.289 s, its FFN weights stored in HBM and never multiplied). The rule checked here: every weight
tensor of the model (:func:`~sn40l_sim.models.tensors.inventory`) that the phase's layers hold is
read by some operator of the phase. An MTP module's own tensors count only where the phase runs
its drafts (:func:`.dataflow.runs_drafts`: a template without the MTP blocks serves undrafted).

Which weights an operator reads is what its formula asks the sharding table about, recorded on the
small probe shape of :mod:`.dataflow`, as :mod:`.reductions` records it.

Examples
--------
>>> from sn40l_sim.models.loader import load_model
>>> from sn40l_sim.models.template import GRAPHS_DIR, template_for
>>> model = load_model(GRAPHS_DIR / "llama3_1_8b.yaml")
>>> unread_weight(template_for(model), model, "decode") is None
True
"""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from sn40l_sim.ir import ParallelPlan, Shape
from sn40l_sim.models.dataflow import PROBE_TOKENS, phase_parts, runs_drafts
from sn40l_sim.models.formulas import operators
from sn40l_sim.models.reductions import RuleRecorder
from sn40l_sim.models.tensors import holders, inventory

if TYPE_CHECKING:
    from sn40l_sim.models.spec import ModelSpec
    from sn40l_sim.models.template import KernelTemplates


def unread_weight(template: KernelTemplates, model: ModelSpec, phase: str) -> tuple[tuple, str] | None:
    """The first weight tensor of ``model`` that no operator of ``template``'s ``phase`` reads, as
    (field path in the template file, message), or None when every one is read."""
    spec = getattr(template, phase)
    drafts = runs_drafts(spec, model)
    shape = (Shape("prefill", 1, PROBE_TOKENS, drafts=drafts) if phase == "prefill"
             else Shape("decode", 1, 0, kv_len=PROBE_TOKENS, drafts=drafts))
    main = RuleRecorder(model, shape, ParallelPlan(tp=2), template)
    draft = RuleRecorder(model, replace(shape, drafts=0), ParallelPlan(tp=2), template)
    formulas = operators(template.attention)
    seen: set[tuple[str, bool]] = set()
    for _, kernel_ids in phase_parts(spec, model, drafts):
        for kernel_id, is_draft in kernel_ids:
            if (kernel_id, is_draft) in seen:
                continue
            seen.add((kernel_id, is_draft))
            for op in spec.kernels[kernel_id].operators:
                formulas[op](draft if is_draft else main)
    read = set(main.asked) | set(draft.asked)
    # a tensor no holder of this phase has (an MTP module's own without drafts, a dense FFN of a
    # model whose every layer is MoE) is not asked for
    for tensor in inventory(model):
        if tensor.name in read or not holders(model, tensor, include_mtp=bool(drafts)):
            continue
        return ((phase, "blocks"),
                f"no operator of {phase} reads weight {tensor.name!r} of model {model.name!r}, which every "
                f"socket stores: the kernel that uses it is missing from the blocks (expected every "
                f"operator of each layer exactly once)")
    return None


def split_weight_of_whole_rows(template: KernelTemplates, model: ModelSpec, phase: str) -> tuple[tuple, str] | None:
    """The first weight that ``template`` splits (``column`` or ``row``) while the elementwise
    operator applying it (a norm) works on whole rows at every tensor-parallel degree, as (field
    path in the template file, message), or None.

    A norm's weight scales every element of the row the norm reads whole (its mean square), and its
    formula does the whole row's work whatever the rule says; the gather rule (:mod:`.gathers`) takes
    the rule's word for which operators read whole rows, so a norm marked split let a template drop
    the gather before it (DeepSeek-R1's ``latent``, 6.832 -> 6.753 s for the 128K prefill).
    """
    spec = getattr(template, phase)
    drafts = runs_drafts(spec, model)
    shape = (Shape("prefill", 1, PROBE_TOKENS, drafts=drafts) if phase == "prefill"
             else Shape("decode", 1, 0, kv_len=PROBE_TOKENS, drafts=drafts))
    formulas = operators(template.attention)
    seen: set[tuple[str, bool]] = set()
    for _, kernel_ids in phase_parts(spec, model, drafts):
        for kernel_id, is_draft in kernel_ids:
            for op in spec.kernels[kernel_id].operators:
                if (op, is_draft) in seen:
                    continue
                seen.add((op, is_draft))
                work = []
                for tp in (2, 4):
                    ctx = RuleRecorder(model, replace(shape, drafts=0) if is_draft else shape, ParallelPlan(tp=tp),
                                       template)
                    steps = formulas[op](ctx)
                    elementwise = all(s.op.kind == "elementwise" for s in steps) and any(s.op.weight_bytes for s in steps)
                    work.append((elementwise, sum(s.op.elements for s in steps), ctx.asked))
                (whole, at_2, asked), (_, at_4, _) = work
                split = [t for t in dict.fromkeys(asked) if template.sharding.get(t) in ("column", "row")]
                if whole and split and at_2 == at_4:
                    return (("sharding", split[0]),
                            f"{template.sharding[split[0]]} splits weight {split[0]!r}, but operator {op!r} applies "
                            f"it to whole rows ({at_2:,} elements on each socket at tp 2 and at tp 4: a norm reads "
                            f"its row whole); expected replicated")
    return None
