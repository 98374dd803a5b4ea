"""``describe`` for model files: parameters, KV bytes, and per-kernel costs of one prefill layer and
one decode step, with and without SnapStream.

Plans are the attention family's reference deployment: DeepSeek (MLA) runs the paper's, prefill
TP16 and decode TP16 with attention DP16; Llama (GQA) runs TP8 (one socket per KV head) in both
phases. Shapes: prefill of a 128K
(131072-token) prompt at batch 1; decode at batch 16 over a 128K cache (no compression) and at
batch 64 over a 32K cache (SnapStream's budget for 128K prompts, docs/reference.md §3).
All per-kernel figures are per socket.
"""
from __future__ import annotations

from pathlib import Path

from sn40l_sim.errors import InputError
from sn40l_sim.ir import FusedKernel, KernelGraph, ParallelPlan, Shape
from sn40l_sim.kvcache import make_policy
from sn40l_sim.models import params as P
from sn40l_sim.models.builder import build_graph
from sn40l_sim.models.loader import load_model
from sn40l_sim.models.spec import ModelSpec
from sn40l_sim.models.template import template_for

#: the example prompt (a model's maximum context where that is shorter) and SnapStream's budget
#: for it (a quarter of a shorter prompt)
PROMPT = 131072
SNAPSTREAM_BUDGET = 32768
DECODE_BATCHES = ((16, "full cache"), (64, "SnapStream cache"))


def example_lengths(model: ModelSpec) -> tuple[int, int]:
    """(prompt, SnapStream budget) of the figures :func:`describe_model` prints: a 128K prompt, or
    the model's maximum context when shorter (run refuses a longer prompt), and a 32K budget, or a
    quarter of the shorter prompt.

    >>> from types import SimpleNamespace as NS
    >>> example_lengths(NS(max_context=None)), example_lengths(NS(max_context=65536))
    ((131072, 32768), (65536, 16384))
    """
    prompt = min(PROMPT, model.max_context or PROMPT)
    return prompt, SNAPSTREAM_BUDGET if prompt == PROMPT else max(1, prompt // 4)


def default_plans(model: ModelSpec) -> tuple[ParallelPlan, ParallelPlan]:
    """(prefill, decode) plans used by :func:`describe_model`."""
    return model.attention.reference_plans()


def describe_model(path: str | Path) -> str:
    """The text ``python -m sn40l_sim describe graphs/<model>.yaml`` prints.

    Examples
    --------
    >>> from sn40l_sim.models.template import GRAPHS_DIR
    >>> text = describe_model(GRAPHS_DIR / "deepseek_r1.yaml")
    >>> "671.03 B" in text and "70,272 B" in text and "L03.mha" in text
    True
    """
    model = load_model(path)
    prefill_plan, decode_plan = default_plans(model)
    lines = [f"{model.name}  ({path})", ""]
    prompt, budget = example_lengths(model)
    lines += _summary(model, decode_plan, prompt, budget)
    policy, why = _snapstream(budget)
    layer = model.dense_layers if model.moe is not None else 0
    kind = "MoE" if model.moe is not None else "dense"

    graph = build_graph(model, Shape("prefill", batch=1, prompt_len=prompt), prefill_plan)
    lines += ["", f"Prefill, one {kind} layer (layer {layer}), prompt {prompt:,} tokens, batch 1, "
              f"TP{prefill_plan.tp}; per socket:"]
    lines += _table(_layer(graph, layer))
    if policy is not None:
        graph = build_graph(model, Shape("prefill", batch=1, prompt_len=prompt), prefill_plan, policy=policy)
        extra = [k for k in _layer(graph, layer) if k.phase == "prefill" and k.kind not in _kinds(model, "prefill")]
        lines += ["", f"  with SnapStream (budget {budget:,}), extra kernels of the same layer:"]
        lines += _table(extra)
        base = sum(k.flops for k in _layer(build_graph(model, Shape("prefill", 1, prompt), prefill_plan), layer))
        lines.append(f"  SnapStream adds {sum(k.flops for k in extra) / base:.2%} to the layer's FLOPs")
    else:
        lines += ["", f"  SnapStream: policy unavailable ({why})"]

    for batch, label in DECODE_BATCHES:
        kv_len = prompt
        if label.startswith("SnapStream") and policy is None:
            lines += ["", f"Decode at batch {batch}, {label}: policy unavailable ({why})"]
            continue
        if policy is not None and label.startswith("SnapStream"):
            kv_len = policy.static_cache_len(prompt, 0)
        graph = build_graph(model, Shape("decode", batch=batch, prompt_len=prompt, kv_len=kv_len), decode_plan)
        lines += ["", f"Decode step, batch {batch}, {label} of {kv_len:,} tokens per sequence, TP{decode_plan.tp}"
                  f" / attention DP{decode_plan.attention_dp}; one {kind} layer (layer {layer}), per socket:"]
        lines += _table(_layer(graph, layer))
        lines += _step_totals(graph)
    return "\n".join(lines)


def _summary(model: ModelSpec, plan: ParallelPlan, prompt: int, budget: int) -> list[str]:
    total, active = P.total_params(model), P.active_params(model)
    out = [f"parameters      {total / 1e9:.2f} B total, {active / 1e9:.2f} B active per token"]
    if not model.tie_embeddings:
        # active counts the one embedding row a token gathers; some model cards (Mixtral's 12.9B,
        # Qwen1.5-MoE's A2.7B) count the whole table, and a reader compares with them
        whole = active - model.hidden + model.vocab * model.hidden
        out[0] += f" ({whole / 1e9:.2f} B with the whole embedding table, the count some model cards quote)"
    if model.mtp is not None:
        out.append(f"                MTP module(s) not included: {P.mtp_params(model) / 1e9:.2f} B of their own "
                   f"({P.mtp_params(model, with_shared_copies=True) / 1e9:.2f} B with the checkpoint's copies of "
                   f"embedding and head); total with MTP {P.total_params(model, include_mtp=True) / 1e9:.2f} B")
    groups = P.weight_bytes_by_group(model)
    parts = ", ".join(f"{k} {v / 1e9:.2f} GB" for k, v in groups.items() if v)
    mtp = " with the MTP module" if model.mtp is not None else ""
    out.append(f"weights         {P.weight_bytes(model) / 1e9:.2f} GB stored{mtp} ({model.weight_dtype}; {parts})")
    # GiB as the HBM capacity is stated (64 GiB), with GB beside it: the line above is in GB
    per_socket = P.weight_bytes_per_socket(model, plan)
    out.append(f"                {per_socket / 2**30:.2f} GiB ({per_socket / 1e9:.2f} GB) per socket at TP{plan.tp}; "
               f"replicated: {', '.join(P.replicated_tensors(model))}")
    att = model.attention
    out.append(f"attention       {att.title or att.kind} ({att.kind}): {att.heads} query heads, "
               f"{att.kv_width():,} elements cached per token and layer")
    per_token = P.kv_bytes_per_token(model)
    # the MTP module's layer caches too when its drafts are verified (run counts it then); with
    # several modules, each that the drafts run (kv_format.kv_cache_layers)
    mtp = ""
    if model.mtp is not None and model.mtp.modules == 1:
        mtp = f"; {P.kv_bytes_per_token(model, include_mtp=True):,} B with the MTP layer's cache (speculative decoding)"
    elif model.mtp is not None:
        mtp = (f"; {P.kv_bytes_per_token(model, include_mtp=1):,} B with one MTP module's cache, "
               f"{P.kv_bytes_per_token(model, include_mtp=True):,} B with all {model.mtp.modules} (speculative "
               "decoding: a cache per module the drafts run)")
    # the longest prompt plus output run and check accept (a long-context variant raises it)
    out.append(f"context         {model.max_context:,} tokens at most (max_context)" if model.max_context
               else "context         no maximum stated (max_context): no prompt is refused as too long")
    out.append(f"KV cache        {per_token:,} B per token ({model.kv_dtype}); "
               f"{P.kv_bytes(model, prompt) / 1e9:.2f} GB for {prompt:,} tokens, "
               f"{P.kv_bytes(model, budget) / 1e9:.2f} GB for {budget:,}{mtp}")
    if model.moe is not None:
        moe = model.moe
        touched = ", ".join(f"B={b}: {P.expected_distinct_experts(moe.routed_experts, moe.experts_per_token, b):.1f}"
                            for b in (1, 16, 64, 256))
        out.append(f"routing         expected distinct experts of {moe.routed_experts} (uniform top-"
                   f"{moe.experts_per_token}): {touched}")
    return out


def _snapstream(budget: int):
    try:
        return make_policy("snapstream", {"budget": budget}), ""
    except InputError as exc:
        return None, str(exc)


def _kinds(model: ModelSpec, phase: str) -> set[str]:
    t = getattr(template_for(model), phase)
    return {e.kind or e.name or k for k, e in t.kernels.items()}


def _layer(graph: KernelGraph, layer: int) -> list[FusedKernel]:
    return [k for k in graph.kernels() if k.layer == layer]


def _num(x: float, unit: str = "") -> str:
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.3f} {prefix}{unit}"
    return f"{x:.0f} {unit}".rstrip()


def _table(kernels: list[FusedKernel]) -> list[str]:
    head = f"  {'kernel':<18}{'FLOPs':>13}{'weights':>12}{'act in':>12}{'act out':>12}{'KV read':>12}{'KV write':>12}  collectives"
    rows = [head]
    for k in kernels:
        act_in = sum(o.act_in_bytes for o in k.operators)
        act_out = sum(o.act_out_bytes for o in k.operators)
        kv_r = sum(o.kv_read_bytes for o in k.operators)
        kv_w = sum(o.kv_write_bytes for o in k.operators)
        colls = ", ".join(f"{c.kind} {_num(c.bytes, 'B')}{' (overlapped)' if c.overlapped else ''}" for c in k.collectives)
        notes = "".join(f"  [{name} {value:g}]" for name, value in k.notes)
        rows.append(f"  {k.name:<18}{_num(k.flops):>13}{_num(k.weight_bytes, 'B'):>12}{_num(act_in, 'B'):>12}"
                    f"{_num(act_out, 'B'):>12}{_num(kv_r, 'B'):>12}{_num(kv_w, 'B'):>12}  {colls or '-'}{notes}")
    return rows


def _step_totals(graph: KernelGraph) -> list[str]:
    ks = graph.kernels()
    flops = sum(k.flops for k in ks)
    weights = sum(k.weight_bytes for k in ks)
    kv = sum(o.kv_read_bytes for k in ks for o in k.operators)
    return [f"  whole step ({len(ks)} kernels): {_num(flops, 'FLOP')}, weights read {_num(weights, 'B')}, "
            f"KV read {_num(kv, 'B')} per socket"]
