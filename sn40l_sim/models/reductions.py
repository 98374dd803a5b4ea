"""Whether a kernel template reduces what its row-parallel GEMMs leave partial.

A ``row`` sharding rule splits a weight's input features over the tensor-parallel sockets, so each
socket's GEMM output is a partial sum that a collective must complete before anything reads it
(docs/reference.md, Megatron-style tensor parallelism). The builder takes a kernel's collectives
from its template entry as written, so a template whose collective was deleted still builds a
graph, with silently wrong numbers: a tensor-parallel kernel whose partial sums are never reduced
runs faster than it could (docs/robustness.md). The rule checked here: a kernel whose operators
read a row-parallel weight carries an all-reduce or a reduce-scatter, or an all-gather of the
residual stream's width (``size: hidden``), that runs at the kernel's end or after its last such
operator, one for each group of row-parallel GEMMs whose partial sums an operator of the kernel
reads before the next such GEMM. A fused decoder layer's output projection and down projection are
two groups (its residual add reads the projection's partial sum, and the norm and FFN GEMMs after
it would read it unreduced): each needs its own reduction, placed after the group's last GEMM and,
when ``after`` names an operator, before the next group's first. The all-gather is the column-split form: DeepSeek-R1's prefill MoE kernel gathers its
activations before the down GEMM, splits that GEMM by output columns and gathers the hidden rows
(``graphs/kernels_deepseek.yaml``); an all-gather of anything else (the MLA kernel's latent) does not
complete a projection's output. A kernel that sums several row-parallel outputs before one
all-reduce (the decode MoE kernel's experts and shared expert: nothing reads the experts' partial
output before the shared expert's down GEMM) passes with that one. The rule cannot tell a linear
reader (a sum) from a non-linear one, so a reduction placed after the first reader of a partial sum
but before the next group passes too.

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
    from sn40l_sim.models.template import CollectiveEntry, KernelEntry, KernelTemplates

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
    ctx = RuleRecorder(model, shape, ParallelPlan(tp=2), template)
    # the kernels this model calls: a template's MTP or MoE kernels are not evaluated for a model
    # without that module (their formulas read its tensors)
    called = {k for _, ids in phase_parts(spec, model, runs_drafts(spec, model)) for k, _ in ids}
    for kernel_id, entry in spec.kernels.items():
        if kernel_id not in called:
            continue
        groups, written = _groups(template, ctx, entry)
        g, left, _ = _matched(template, ctx, entry, groups, written)
        surplus = [i for i, c in enumerate(entry.collectives) if c.kind in REDUCING and any(c is f for f in left)]
        if g is None and surplus:
            # a sum over the sockets of what each holds whole is the tensor times the TP degree
            c = entry.collectives[surplus[0]]
            return ((phase, "kernels", kernel_id, "collectives", surplus[0]),
                    f"{c.kind} of size {c.size} reduces no row-parallel GEMM's partial sums: kernel {kernel_id!r} "
                    f"has {len(groups) or 'no'} group(s) of row-parallel GEMMs and " +
                    (f"its other collectives reduce {'it' if len(groups) == 1 else 'them'}" if groups
                     else "so nothing partial") +
                    ", and summing a tensor every socket holds whole multiplies it by the TP degree "
                    "(expected one reduction per group of row-parallel GEMMs)")
        if g is not None:
            op = entry.operators[groups[g][-1]]
            before = f" and before {entry.operators[groups[g + 1][0]]!r}" if g + 1 < len(groups) else ""
            each = f"; each of its {len(groups)} groups of row-parallel GEMMs needs its own" if len(groups) > 1 else ""
            return ((phase, "kernels", kernel_id, "collectives"),
                    f"operator {op!r} reads a row-parallel weight (sharding: row), so its output is a partial sum "
                    f"per socket, but no collective of kernel {kernel_id!r} reduces it (expected an all_reduce or "
                    f"reduce_scatter, or an all_gather of size {GATHERED_WIDTH}, at the kernel's end or after {op!r}"
                    f"{before}, of the size of what it or a later operator of the kernel writes{each})")
    return None


def completing(template: KernelTemplates, ctx: RuleRecorder, entry: KernelEntry) -> dict[int, CollectiveEntry]:
    """Each row-parallel GEMM of ``entry`` (by operator position) and the collective that completes
    its group's partial sums, paired as the rule pairs them (an all-gather of the hidden rows: the
    column-split form, whose GEMMs read their input whole, :mod:`.gathers`)."""
    groups, written = _groups(template, ctx, entry)
    pairs = _matched(template, ctx, entry, groups, written)[2]
    return {i: c for group, c in zip(groups, pairs, strict=False) for i in group}


def _groups(template: KernelTemplates, ctx: RuleRecorder, entry: KernelEntry) -> tuple[list[list[int]], list[set[int]]]:
    """The operator positions of each group of ``entry``'s row-parallel GEMMs, and per operator the
    bytes of each activation it writes."""
    formulas = operators(template.attention)
    groups: list[list[int]] = []
    written: list[set[int]] = []
    partial: set[str] = set()      # activations holding the open group's partial sums
    closed = True                  # an operator has read the open group's partial sums
    for i, op in enumerate(entry.operators):
        ctx.asked.clear()
        steps = formulas[op](ctx)
        written.append({n_bytes for step in steps for _, n_bytes in step.writes})
        reads = {name for step in steps for name, _ in step.reads}
        writes = {name for step in steps for name, _ in step.writes}
        # a GEMM (or lookup) over a row-split weight; an operator that only asks such a weight's
        # width (the FFN's activation, sized by the down GEMM's input slice) reads no weight
        if (any(step.op.weight_bytes for step in steps)
                and any(template.sharding.get(t) == "row" and (op, t) not in NOT_PARTIAL for t in ctx.asked)):
            if closed:
                groups.append([])
                partial, closed = set(), False
            groups[-1].append(i)
            partial |= writes
        elif reads & partial:
            # what reads a partial sum is partial too (a residual add, a combine), and the group
            # is complete: a row-parallel GEMM after it starts another that needs its own reduction
            partial |= writes
            closed = True
    ctx.asked.clear()
    return groups, written


def _matched(template: KernelTemplates, ctx: Ctx, entry: KernelEntry, groups: list[list[int]],
             written: list[set[int]]) -> tuple[int | None, list[CollectiveEntry], list[CollectiveEntry]]:
    """The first group of row-parallel GEMMs (by operator positions) that no collective of the kernel
    reduces, each collective reducing one group at most, or None; the collectives no group took; and
    the collective each group before that one took."""
    position = {op: i for i, op in enumerate(entry.operators)}
    free = list(entry.collectives)
    taken_by: list[CollectiveEntry] = []
    for g, group in enumerate(groups):
        end = groups[g + 1][0] if g + 1 < len(groups) else len(entry.operators)
        # a collective that completes the partial sums carries them: its size is that of an
        # activation written from the partial GEMM on (an all-reduce of the MLA latent's width after
        # a MoE kernel's down projection ran, summing nothing the kernel wrote)
        carried = set().union(*written[group[0]:end])
        fits = [c for c in free
                if (c.kind in REDUCING or (c.kind == "all_gather" and c.size == GATHERED_WIDTH))
                and (c.after is None or group[-1] <= position[c.after] < end)
                and sizes(template.attention)[c.size](ctx) in carried]
        if not fits:
            return g, free, taken_by
        # one placed in the group's window before one left for the kernel's end, which a later group
        # may need; of those alike, a reducing one before a gathering one
        taken = min(fits, key=lambda c: (c.after is None, c.kind not in REDUCING))
        free = [c for c in free if c is not taken]
        taken_by.append(taken)
    return None, free, taken_by
