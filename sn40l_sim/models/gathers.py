"""Whether a kernel template gathers what its column-split operators leave split before an operator
reads it whole, and switches layouts around data-parallel decode attention.

The twin of :mod:`.reductions`. A ``column`` sharding rule splits a weight's output features over
the tensor-parallel sockets, so each socket holds a slice of the GEMM's output columns (Megatron-style
tensor parallelism, docs/reference.md). Per-head work (RoPE, attention over the socket's heads, an
activation function) runs on the slice, and a row-parallel GEMM consumes it as it is; but an operator
that reads the whole row needs the slice all-gathered first. The builder takes a kernel's collectives
from its template entry as written, so a template whose gather was deleted still builds a graph that
runs faster than it could (docs/robustness.md). The rules checked here, from what each operator's
formula asks the sharding table (as :mod:`.reductions` does) and which activations it reads and
writes (:mod:`.dataflow`):

* an operator that applies a ``replicated`` weight to the rows it reads (a norm over the hidden or
  latent width, the router) reads them whole: a split activation it reads needs an ``all_gather``
  in its kernel (DeepSeek's ``latent`` before ``q_norm`` and ``kv_norm``);
* a row-parallel GEMM whose group of partial sums :mod:`.reductions` pairs with an all-gather of the
  hidden rows is the column-split form: it is split by output columns, so it reads its input whole
  (DeepSeek's prefill MoE kernel: ``expert_intermediate`` before ``expert_down``), whatever reduces
  the kernel's other groups, and rows switched back from the sequences to the heads are head-split;
* a row-parallel GEMM reduced by a ``reduce_scatter`` leaves each socket its share of the reduced
  rows (sequence parallelism): row-local operators (a residual add, a norm) run on them as they are,
  from kernel to kernel and layer to layer, but a GEMM of a weight split over the sockets reads every
  row, so an ``all_gather`` of size ``hidden`` must come first (docs/validation.md: "a reduce-scatter
  alone would not do"), not one that completes a column-split GEMM's output after it;
* what one part of the graph hands the next, the residual stream ``x`` and the sampled ``tokens``,
  leaves its kernel whole: written split (the MTP projection, sampling over a vocab slice) it needs an
  all-gather, of size ``hidden`` for the residual stream and of the candidates for the tokens;
* in decode, attention runs data-parallel over the batch when ``attention_dp > 1`` (its formulas
  count the socket's sequences, :attr:`~sn40l_sim.models.context.Ctx.seqs`): an operator counting
  sequences that reads a head-split activation needs an ``all_to_all`` (TP to DP layout: ``mla_q_to_dp``,
  ``gqa_q_to_dp``), and an operator of the TP layout reading what such an operator wrote needs another
  (``mla_o_to_tp``, ``gqa_o_to_tp``). Their sizes are zero with ``attention_dp = 1``, so a decode
  template carries them whatever the plan. An all-to-all that no switch takes (one written twice)
  would move rows already in the layout their readers need, and is refused.

What it cannot see. A collective without ``after`` has no place in the kernel's order, so only one
with ``after`` can be found too late (after the operator that reads the gathered tensor); one all-gather
in a kernel passes for every split activation its operators read whole (the rule does not tell which
tensor a gather carries, nor its size); a split activation handed to another kernel may be gathered in
either. Prefill templates run attention head-parallel, and the layout switch is not asked of them: an
experiment refuses a prefill plan with ``attention_dp > 1`` (a prefill runs one prompt).

Examples
--------
>>> from sn40l_sim.models.loader import load_model
>>> from sn40l_sim.models.template import GRAPHS_DIR, template_for
>>> model = load_model(GRAPHS_DIR / "deepseek_r1.yaml")
>>> ungathered_column_parallel(template_for(model), model, "decode") is None
True
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sn40l_sim.ir import ParallelPlan, Shape
from sn40l_sim.models.dataflow import GRAPH_TOKENS, PROBE_TOKENS, phase_parts, runs_drafts
from sn40l_sim.models.formulas import operators
from sn40l_sim.models.reductions import GATHERED_WIDTH, NOT_PARTIAL, REDUCING, RuleRecorder, completing

if TYPE_CHECKING:
    from sn40l_sim.models.context import Step
    from sn40l_sim.models.spec import ModelSpec
    from sn40l_sim.models.template import CollectiveEntry, KernelEntry, KernelTemplates

#: layouts of an activation: on every socket whole, split by columns (heads) over the TP sockets, or
#: split by sequences over the attention data-parallel groups
WHOLE, SPLIT, DP = "whole", "split", "dp"
#: a row-parallel GEMM's output after a reduce-scatter: each socket holds its share of the reduced
#: rows, which an all-gather of the hidden width makes whole again (docs/validation.md: "a
#: reduce-scatter alone would not do"). A row-local operator (a norm, a residual add) runs on the
#: socket's rows as they are; a GEMM of a weight split over the sockets needs every row
SCATTERED = "scattered"
#: what one part of the graph hands the next, which must leave its kernel whole
HANDED = ("x", GRAPH_TOKENS)


@dataclass(frozen=True)
class LayoutRecorder(RuleRecorder):
    """A formula context that also notes whether a formula counts the socket's sequences (the
    data-parallel layout of attention)."""

    counted: list[str] = field(default_factory=list)

    @property
    def seqs(self) -> int:
        self.counted.append("seqs")
        return super().seqs

    @property
    def fewest_seqs(self) -> int:
        self.counted.append("fewest_seqs")
        return super().fewest_seqs


@dataclass(frozen=True)
class _Op:
    """One operator of a kernel as the rule sees it."""

    name: str
    reads: frozenset[str]
    writes: frozenset[str]
    out: str                 # layout it writes when its inputs are as it needs them
    whole_reader: bool       # reads its inputs whole
    counts_seqs: bool        # runs in the data-parallel layout (decode)
    sharded: bool = False    # applies a weight split over the TP sockets (column or row)


def ungathered_column_parallel(template: KernelTemplates, model: ModelSpec, phase: str) -> tuple[tuple, str] | None:
    """The first kernel of ``template``'s ``phase`` that leaves a column-split activation ungathered
    before an operator reads it whole, or switches no layout around data-parallel attention, as
    (field path in the template file, message), or None."""
    spec = getattr(template, phase)
    # attention_dp = 2 so that a formula counting sequences is seen to (a decode template serves any plan)
    shape = (Shape("prefill", 1, PROBE_TOKENS) if phase == "prefill" else Shape("decode", 2, 0, kv_len=PROBE_TOKENS))
    ctx = LayoutRecorder(model, shape, ParallelPlan(tp=2, attention_dp=2), template)
    formulas = operators(template.attention)
    seen: dict[str, tuple[list[_Op], list[CollectiveEntry]]] = {}
    layout: dict[str, str] = {}
    idle: list[tuple[str, str]] = []   # (kernel, message): said once no switch is missing anywhere
    for _, ids in phase_parts(spec, model, runs_drafts(spec, model)):
        # the residual stream stays reduce-scattered from part to part (sequence parallelism:
        # each socket's rows), gathered before each GEMM of a split weight that reads it
        layout = {name: SCATTERED if layout.get(name) == SCATTERED else WHOLE for name in HANDED}
        for kernel_id, _ in ids:
            entry = spec.kernels[kernel_id]
            if kernel_id not in seen:
                paired = completing(template, ctx, entry)
                ctx.counted.clear()
                seen[kernel_id] = ([_classify(template, ctx, entry, op, formulas[op](ctx), phase, paired.get(i))
                                    for i, op in enumerate(entry.operators)], list(paired.values()))
            problem = _kernel_problem(entry, *seen[kernel_id], layout, idle, kernel_id)
            if problem is not None:
                return (phase, "kernels", kernel_id, "collectives"), f"kernel {kernel_id!r}: {problem}"
    if idle:
        # after the switches missing: an all-to-all in the kernel before its reader's is idle there
        kernel_id, problem = idle[0]
        return (phase, "kernels", kernel_id, "collectives"), f"kernel {kernel_id!r}: {problem}"
    return None


def _classify(template: KernelTemplates, ctx: LayoutRecorder, entry: KernelEntry, op: str, steps: list[Step],
              phase: str, completer: CollectiveEntry | None = None) -> _Op:
    """How operator ``op`` (its formula's ``steps``, evaluated with ``ctx``) treats layouts; a
    row-parallel GEMM's ``completer`` is the collective :mod:`.reductions` pairs with its group."""
    asked = list(ctx.asked)
    counts = bool(ctx.counted) and phase == "decode"
    ctx.asked.clear()
    ctx.counted.clear()
    rules = {t: template.sharding.get(t) for t in asked}
    weighted = any(step.op.weight_bytes for step in steps)
    reads = frozenset(name for step in steps for name, _ in step.reads)
    writes = frozenset(name for step in steps for name, _ in step.writes)
    reducing = [c for c in entry.collectives if c.kind in REDUCING]
    if weighted and "replicated" in rules.values():
        return _Op(op, reads, writes, WHOLE, True, counts)
    if weighted and any(r == "column" or (r == "row" and (op, t) in NOT_PARTIAL) for t, r in rules.items()):
        return _Op(op, reads, writes, SPLIT, False, counts, True)
    if weighted and "row" in rules.values():
        # its partial sums are :mod:`.reductions`' concern; without a reducing collective in the
        # kernel it is the column-split form, which reads its input whole; reduced by
        # reduce-scatters alone, its rows stay split over the sockets
        if completer is not None:
            # paired by group: a fused decoder's o_proj completed by an all-gather is the
            # column-split form even when a later group's all-reduce is in the kernel
            return _Op(op, reads, writes, SCATTERED if completer.kind == "reduce_scatter" else WHOLE,
                       completer.kind == "all_gather", counts, True)
        out = SCATTERED if _reduction_of(entry, op, reducing) == "reduce_scatter" else WHOLE
        return _Op(op, reads, writes, out, not reducing, counts, True)
    return _Op(op, reads, writes, DP if counts else "", False, counts)


def _reduction_of(entry: KernelEntry, op: str, reducing: list[CollectiveEntry]) -> str | None:
    """The kind of the collective that reduces row-parallel ``op``: the first placed at or after it,
    else one placed nowhere (at the kernel's end), as :mod:`.reductions` pairs them."""
    position = {name: i for i, name in enumerate(entry.operators)}
    placed = sorted((position[c.after], c.kind) for c in reducing
                    if c.after is not None and position[c.after] >= position[op])
    unplaced = [c.kind for c in reducing if c.after is None]
    return placed[0][1] if placed else (unplaced[0] if unplaced else None)


def _kernel_problem(entry: KernelEntry, ops: list[_Op], paired: list[CollectiveEntry], layout: dict[str, str],
                    idle: list[tuple[str, str]], kernel_id: str) -> str | None:
    """The first gather or layout switch the kernel lacks, updating ``layout`` with what it writes
    and noting in ``idle`` an all-to-all of ``kernel_id`` that switches nothing (``paired``: the
    collectives :mod:`.reductions` pairs with the kernel's row-parallel GEMMs)."""
    gathers = [c for c in entry.collectives if c.kind == "all_gather"]
    switches = [c for c in entry.collectives if c.kind == "all_to_all"]
    position = {op: i for i, op in enumerate(entry.operators)}
    written_at: dict[str, int] = {}      # activation -> position of the operator of this kernel writing it
    switched: dict[str, CollectiveEntry] = {}   # direction (from TP, from DP) -> the all-to-all taking it
    for i, op in enumerate(ops):
        ins = {name: layout.get(name, WHOLE) for name in op.reads}
        # rows switched back from the sequences to the heads (an all-to-all) are head-split again
        split_in = sorted(n for n, lay in ins.items() if lay == SPLIT or (lay == DP and not op.counts_seqs))
        scattered_in = sorted(n for n, lay in ins.items() if lay == SCATTERED)
        if op.sharded and scattered_in:
            # a socket's GEMM slice of a split weight runs over every row, of which a
            # reduce-scattered tensor holds the socket's share: the hidden rows are gathered first
            name = scattered_in[0]
            # not one that completes a column-split GEMM's output: it runs after that GEMM
            unpaired = [c for c in gathers if c.size == GATHERED_WIDTH and not any(c is p for p in paired)]
            if not _fits(unpaired, position, written_at.get(name, -1), i):
                return (f"operator {op.name!r} reads {name!r}, which a reduce_scatter left split over the "
                        f"tensor-parallel sockets, and no all_gather of size {GATHERED_WIDTH} of the kernel gathers "
                        f"it before {op.name!r} (expected one, without `after` or after the operator writing "
                        f"{name!r} and before {op.name!r}, or an all_reduce in place of the reduce_scatter)")
            ins.update(dict.fromkeys(scattered_in, WHOLE))
        row_local = bool(scattered_in) and not op.sharded
        if op.whole_reader and split_in:
            name = split_in[0]
            if not _fits([c for c in gathers if c.size != GATHERED_WIDTH], position, written_at.get(name, -1), i):
                return (f"operator {op.name!r} reads {name!r} whole, but a column-split operator (sharding: "
                        f"column) left it split over the tensor-parallel sockets and no all_gather of the kernel "
                        f"gathers it before {op.name!r} (expected an all_gather, without `after` or after the "
                        f"operator writing {name!r} and before {op.name!r})")
        switch_from = None
        if op.counts_seqs and split_in:
            switch_from = ("TP", split_in[0], "its heads' rows to the sequences each socket runs")
        elif not op.counts_seqs and any(lay == DP for lay in ins.values()):
            switch_from = ("DP", sorted(n for n, lay in ins.items() if lay == DP)[0], "the sequences' rows back to heads")
        if switch_from is not None and switch_from[0] not in switched:
            # one all-to-all moves every activation of one direction (the queries with the new keys
            # and values): the first reader of that direction needs it
            free = [c for c in switches if not any(c is s for s in switched.values())]
            name = switch_from[1]
            fit = _fits(free, position, written_at.get(name, -1), i)
            if not fit:
                return (f"operator {op.name!r} reads {name!r} in the {'DP' if switch_from[0] == 'TP' else 'TP'} "
                        f"layout (attention data-parallel over the batch with attention_dp > 1), but it was "
                        f"written in the {switch_from[0]} layout and no all_to_all of the kernel moves "
                        f"{switch_from[2]} before {op.name!r} (expected one all_to_all for each switch of layout)")
            switched[switch_from[0]] = fit
        if row_local and not any(lay in (SPLIT, DP) for lay in ins.values()):
            out = SCATTERED
        elif op.out:
            out = op.out
        else:
            out = (SPLIT if any(lay in (SPLIT, DP) for lay in ins.values())
                   else SCATTERED if SCATTERED in ins.values() else WHOLE)
        for name in op.writes:
            layout[name] = out
            written_at[name] = i
            # reduce-scattered rows may be gathered in a later kernel or part (before a GEMM of a
            # split weight, above)
            if name in HANDED and out not in (WHOLE, SCATTERED):
                wanted = [c for c in gathers if (c.size == GATHERED_WIDTH) == (name == "x")]
                if not _fits(wanted, position, i, len(entry.operators)):
                    size = f"of size {GATHERED_WIDTH}" if name == "x" else "of what each socket picked"
                    return (f"operator {op.name!r} writes {name!r}, which the next part of the graph reads whole, "
                            f"split over the tensor-parallel sockets, and no all_gather {size} of the kernel "
                            f"gathers it (expected one, without `after` or after {op.name!r})")
                layout[name] = WHOLE
    # an all-to-all no switch took moves rows already in the layout their readers need (a second
    # one of a direction, or one in a kernel without data-parallel attention): its bytes and time
    # would be counted for nothing, as a reduction no group takes is (:mod:`.reductions`)
    unused = [c for c in switches if not any(c is s for s in switched.values())]
    if unused:
        idle.append((kernel_id, f"all_to_all of size {unused[0].size} switches no layout: no operator of the kernel "
                     f"reads in the data-parallel layout what was written in the tensor-parallel one, or back, that "
                     f"another all_to_all does not already move (expected one all_to_all for each switch of layout)"))
    # an all-gather of the hidden rows placed after a reduce-scattered tensor is written gathers it
    # for what follows (which tensor a gather carries is not written, as for the column-split ones)
    regathered = [c for c in gathers if c.size == GATHERED_WIDTH]
    for name, lay in list(layout.items()):
        if lay == SCATTERED and _fits(regathered, position, written_at.get(name, -1), len(entry.operators)):
            layout[name] = WHOLE
    return None


def _fits(collectives: list[CollectiveEntry], position: dict[str, int], written: int, read: int) -> CollectiveEntry | None:
    """One of ``collectives`` that can run between the operator at position ``written`` (-1: an
    earlier kernel) and the one at ``read``: unplaced (its order is not written), or placed after an
    operator in that window."""
    for c in collectives:
        if c.after is None or written <= position.get(c.after, -2) < read:
            return c
    return None
