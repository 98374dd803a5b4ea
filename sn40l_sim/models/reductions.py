"""Whether a kernel template reduces what its row-parallel GEMMs leave partial.

A ``row`` sharding rule splits a weight's input features over the tensor-parallel sockets, so each
socket's GEMM output is a partial sum that a collective must complete before anything reads it
(docs/reference.md, Megatron-style tensor parallelism). The builder takes a kernel's collectives
from its template entry as written, so a template whose collective was deleted still builds a
graph, with silently wrong numbers: a tensor-parallel kernel whose partial sums are never reduced
runs faster than it could (docs/robustness.md). The rule checked here: a kernel whose operators
read a row-parallel weight carries an all-reduce or a reduce-scatter, or an all-gather of the
residual stream's width (``size: hidden``), that runs at the kernel's end or after its last such
operator. The all-gather is the column-split form: DeepSeek-R1's prefill MoE kernel gathers its
activations before the down GEMM, splits that GEMM by output columns and gathers the hidden rows
(``graphs/kernels_deepseek.yaml``); an all-gather of anything else (the MLA kernel's latent) does not
complete a projection's output. A kernel that sums several row-parallel outputs before one
all-reduce (the decode MoE kernel's experts and shared expert) passes with that one.

Which weights an operator reads is what its formula asks the sharding table about, recorded on the
small shape of :mod:`.dataflow` (the rule is structural, not a matter of sizes).

Examples
--------
>>> from sn40l_sim.models.loader import load_model
>>> from sn40l_sim.models.template import GRAPHS_DIR, template_for
>>> model = load_model(GRAPHS_DIR / "llama3_1_8b.yaml")
>>> unreduced_row_parallel(template_for(model), model, "prefill") is None
True
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sn40l_sim.ir import ParallelPlan, Shape
from sn40l_sim.models.context import Ctx
from sn40l_sim.models.dataflow import PROBE_TOKENS, phase_parts, runs_drafts
from sn40l_sim.models.formulas import operators, sizes
from sn40l_sim.models.tensors import ShardRule

if TYPE_CHECKING:
    from sn40l_sim.models.spec import ModelSpec
    from sn40l_sim.models.template import KernelTemplates

#: (operator formula, tensor) whose ``row`` rule leaves no partial sum: a tied output head multiplies
#: by the embedding table ``[vocab, hidden]`` turned over (:func:`sn40l_sim.models.common.lm_head`), so
#: the rule splits the logits' columns; sampling asks it only for the width of its vocab slice
NOT_PARTIAL = frozenset({("lm_head", "embedding"), ("sample", "embedding")})
#: the collectives that complete a row-parallel GEMM's partial sums
REDUCING = ("all_reduce", "reduce_scatter")
#: the size formula of an all-gather that completes the column-split form instead: the residual stream
GATHERED_WIDTH = "hidden"


@dataclass(frozen=True)
class RuleRecorder(Ctx):
    """A formula context that notes every weight whose sharding rule a formula asks for."""

    asked: list[str] = field(default_factory=list)

    def rule(self, tensor: str) -> ShardRule:
        self.asked.append(tensor)
        return super().rule(tensor)


def unreduced_row_parallel(template: KernelTemplates, model: ModelSpec, phase: str) -> tuple[tuple, str] | None:
    """The first kernel of ``template``'s ``phase`` that leaves a row-parallel GEMM's partial sums
    unreduced, as (field path in the template file, message), or None."""
    spec = getattr(template, phase)
    shape = (Shape("prefill", 1, PROBE_TOKENS) if phase == "prefill" else Shape("decode", 1, 0, kv_len=PROBE_TOKENS))
    formulas = operators(template.attention)
    ctx = RuleRecorder(model, shape, ParallelPlan(tp=2), template)
    # the kernels this model calls: a template's MTP or MoE kernels are not evaluated for a model
    # without that module (their formulas read its tensors)
    called = {k for _, ids in phase_parts(spec, model, runs_drafts(spec, model)) for k, _ in ids}
    for kernel_id, entry in spec.kernels.items():
        if kernel_id not in called:
            continue
        last_row = None
        written: list[set[int]] = []   # per operator, the bytes of each activation it writes
        for i, op in enumerate(entry.operators):
            ctx.asked.clear()
            written.append({n_bytes for step in formulas[op](ctx) for _, n_bytes in step.writes})
            if any(template.sharding.get(t) == "row" and (op, t) not in NOT_PARTIAL for t in ctx.asked):
                last_row = i
        if last_row is None:
            continue
        # a collective that completes the partial sums carries them: its size is that of an
        # activation written from the partial GEMM on (an all-reduce of the MLA latent's width after
        # a MoE kernel's down projection ran, summing nothing the kernel wrote)
        carried = set().union(*written[last_row:])
        position = {op: i for i, op in enumerate(entry.operators)}
        if any((c.kind in REDUCING or (c.kind == "all_gather" and c.size == GATHERED_WIDTH))
               and (c.after is None or position[c.after] >= last_row)
               and sizes(template.attention)[c.size](ctx) in carried for c in entry.collectives):
            continue
        op = entry.operators[last_row]
        return ((phase, "kernels", kernel_id, "collectives"),
                f"operator {op!r} reads a row-parallel weight (sharding: row), so its output is a partial sum "
                f"per socket, but no collective of kernel {kernel_id!r} reduces it (expected an all_reduce or "
                f"reduce_scatter, or an all_gather of size {GATHERED_WIDTH}, at the kernel's end or after {op!r}, "
                f"of the size of what it or a later operator of the kernel writes)")
    return None
