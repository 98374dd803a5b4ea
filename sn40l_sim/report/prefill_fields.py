"""The prefill fields of a record: one prefill of the point's prompt, by kernel, and what the KV
policy adds to it, declared here and listed with every other field by
:data:`sn40l_sim.report.fields.RESULTS` (:func:`sn40l_sim.report.records.prefill_step_fields` produces
them).

Two figures say what a compressing policy costs in prefill, and they differ at short prompts:
``prefill_policy_overhead`` is its kernels' own cycles over the rest's (the SnapStream paper's "2 to 5%"
at 128K, a calibration point: docs/reference.md §4), and ``prefill_policy_slowdown`` is the whole
prefill over the same prompt's without those kernels, which also counts the configurations the other
kernels reload when the policy's kernels take their units between layers (docs/validation.md,
"SnapStream's prefill at short prompts"); ``served_prefill_policy_slowdown`` is the latter over the
prompts a run served, which a trace brings at lengths of their own.
"""
from __future__ import annotations

from sn40l_sim.report.registry import Field
from sn40l_sim.report.table_rows import Row

PREFILL_FIELDS: tuple[Field, ...] = (
    Field("prefill_s", "s", "One prefill of a prompt of prefill_len tokens (a trace's shorter prompts take less).",
          axis="prefill of one prompt", table=Row(60, "prefill, one prompt (s)", ".3f")),
    Field("prefill_cycles", "cycles", "One prefill of the point's prompt, in socket clock cycles of the node that "
          "prefills it (prefill_hardware's when the experiment names one; prefill_s is the same time in seconds).", golden=True,
          axis="prefill"),
    Field("prefill_kernel_cycles", "cycles", "Cycles of one prefill by kernel kind, summed over the graph.",
          keys=("kernel",), golden=True, axis="prefill time in {kernel} kernels"),
    Field("prefill_kernel_share", "1", "Fraction of one MoE layer's prefill time by kernel kind (the engine's "
          "representative layer: the first with a MoE kernel, else the first layer).", keys=("kernel",), csv=15,
          design=True, golden=True, axis="share of a prefill MoE layer: {kernel}"),
    Field("prefill_kernel_share_layer", "1", "Index of the layer prefill_kernel_share describes.",
          axis="representative prefill layer"),
    Field("prefill_policy_overhead", "1", "Cycles of the kernels the KV policy adds to prefill over the cycles of "
          "the rest (SnapStream's prefill overhead as the paper's Table 4 counts it, a calibration point; 0 for "
          "full). Not what the policy adds to the prefill: prefill_policy_slowdown.",
          axis="KV-policy prefill overhead (its kernels over the rest)",
          table=Row(70, "KV-policy prefill kernels (% of rest)", ".2f", 100)),
    Field("prefill_policy_slowdown", "1", "One prefill of the point's prompt over the same prefill without the "
          "KV policy's kernels, less 1: what the policy adds to the prompt's prefill and so to its TTFT, "
          "configuration reloads its kernels cause in the others included (prefill_policy_overhead counts only "
          "its kernels' own cycles); 0 for full; empty in a steps-only evaluation (validate) and with several "
          "models on one node.", axis="prefill slowdown from the KV policy (fraction)",
          table=Row(71, "KV-policy prefill slowdown (%)", ".2f", 100)),
    Field("served_prefill_policy_slowdown", "1", "The same over the served requests: their prompts, each prefilled "
          "whole at its compiled length (a prefix hit or a chunk aside), with the KV policy's kernels over without "
          "them, less 1. A trace's prompts shorter than prefill_len run shorter graphs, where the policy may cost "
          "a different share; 0 for full; empty in a steps-only evaluation.",
          axis="prefill slowdown from the KV policy over the served prompts (fraction)",
          table=Row(72, "KV-policy prefill slowdown, served (%)", ".2f", 100)),
    Field("prefill_switch_load_s", "s", "Configuration loads the prefill adds when the node ran another graph just "
          "before (a co-located node's decode step, another model): the loads of its kernels that stay loaded "
          "from one prefill to the next. Charged by co-located serving, not part of prefill_s.",
          axis="prefill configuration reload after another graph (s)"),
)
