"""Decode across batch sizes against the two rooflines: the check in docs/validation.md ("Decode
across batch sizes against the rooflines").

    python scripts/decode_rooflines.py                          # every case below (about 80 s cold, 2 s warm)
    python scripts/decode_rooflines.py --cases 8b-tp8-1k,r1-tp16-4k --max-batch 256

For each case (model, sockets, cache length per sequence, speculative drafts) the decode batch runs
over powers of two from 1 to the largest whose weights, KV cache and the step's activations fit in a
socket's usable HBM (``serving.batch: max``'s test, counted here from the model's figures).
Each line holds the step (``StepTimer.decode_step``, as ``run`` times it), tokens/s (batch x (1 +
drafts) / step: rows the step computes), and, from first principles, per socket:

* the **HBM roofline**: the weights a step streams (every weight but the embedding table, of which
  a step gathers one row a token; the MTP module's weights and the LM head once per draft) plus the
  cache it reads (GQA: ``ceil(kv_heads / tp)`` heads of every sequence; MLA with attention
  data-parallel: the latent of ``ceil(batch / dp)`` sequences), over the socket's peak HBM bytes/s;
* the **compute roofline**: 2 x parameters x rows (batch x (1 + drafts), the MTP module's own rows
  added): a dense model's parameters a socket streams (its shards, and what it holds whole), a MoE
  model's active parameters over ``tp``; plus attention (QK and PV, 4 FLOPs per head, head element
  and cached token; MLA absorbed: ``kv_lora_rank + rope`` for the scores, ``kv_lora_rank`` for the values),
  over the socket's peak BF16 FLOP/s;

``frac`` is max(roofline) / step. ``B/A`` and ``F/A`` are the simulator's own byte and FLOP counts
over these (a check of the counts, not of the timing). The breakdown columns are
``decode_step_breakdown`` in ms: weights streaming, attention (KV reads and attention compute),
collectives, configuration loads, other compute, and the rest. Flags: ``BELOW`` the step under a
roofline; ``SHORTER`` a step shorter than at half the batch; ``TOKS`` tokens/s more than 1% lower than at half the batch while memory-
bound; ``>2X`` a step more than twice the one at half the batch while memory-bound. Exit 1 when a
``BELOW`` or ``SHORTER`` is flagged (unphysical); the others are reported. Nothing is read from a
file of expected values.
"""
from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from sn40l_sim.commands.argtypes import positive_int  # noqa: E402
from sn40l_sim.engine.breakdown import decode_step_breakdown  # noqa: E402
from sn40l_sim.hardware import figures  # noqa: E402
from sn40l_sim.hardware.loader import load_hardware  # noqa: E402
from sn40l_sim.ir import ParallelPlan  # noqa: E402
from sn40l_sim.kvcache import make_policy  # noqa: E402
from sn40l_sim.models import params  # noqa: E402
from sn40l_sim.models.loader import load_model  # noqa: E402
from sn40l_sim.models.spec import ModelSpec  # noqa: E402
from sn40l_sim.models.template import template_for  # noqa: E402
from sn40l_sim.models.tensors import holders, inventory  # noqa: E402
from sn40l_sim.study.step_timing import step_timer  # noqa: E402

#: a relative margin for float rounding of the rooflines against the cycle-rounded step
ROUNDING = 1e-9
#: tokens/s lower than at half the batch by more than this is flagged
TOKS_DROP = 0.01
#: the breakdown's columns (ms) and the causes of ``decode_step_breakdown`` each adds; "rest" the others
COLUMNS = {"wts": ("weights_streaming",), "attn": ("kv_reads", "attention_compute"), "coll": ("collectives",),
           "config": ("configuration",), "compute": ("other_compute",), "rest": ()}


@dataclass(frozen=True)
class Case:
    label: str
    model: str          # a file of graphs/, without .yaml
    sockets: int        # hw_configs/sn40l_node{sockets}.yaml; tensor-parallel over every socket
    kv_len: int         # cached tokens per sequence
    attention_dp: int = 1
    drafts: int = 0
    expert_loading: str | None = None


CASES = {c.label: c for c in (
    Case("8b-tp8-1k", "llama3_1_8b", 8, 1024), Case("8b-tp8-4k", "llama3_1_8b", 8, 4096),
    Case("8b-tp16-1k", "llama3_1_8b", 16, 1024), Case("8b-tp16-4k", "llama3_1_8b", 16, 4096),
    Case("70b-tp8-1k", "llama3_1_70b", 8, 1024), Case("70b-tp8-4k", "llama3_1_70b", 8, 4096),
    Case("70b-tp16-1k", "llama3_1_70b", 16, 1024), Case("70b-tp16-4k", "llama3_1_70b", 16, 4096),
    # experiments/deepseek_tp16.yaml's deployment: attention DP16, two MTP drafts, all experts streamed
    Case("r1-tp16-4k", "deepseek_r1", 16, 4096, 16, 2, "all"),
    Case("r1-tp16-32k", "deepseek_r1", 16, 32768, 16, 2, "all"),
)}


def _tensor_bytes(model: ModelSpec, names: set[str], tp: int) -> int:
    """Per-socket stored bytes of the named tensors of the main model (one copy each holder)."""
    rules = template_for(model).sharding
    return sum(t.shard_bytes(model, rules[t.name], tp) * holders(model, t, False)
               for t in inventory(model) if t.name in names)


def first_principles(model: ModelSpec, case: Case, batch: int) -> tuple[float, float, float]:
    """(weight bytes, KV bytes, FLOPs) one decode step moves and computes on the busiest socket."""
    tp, att = case.sockets, model.attention
    plan = ParallelPlan(tp=tp, attention_dp=case.attention_dp)
    mtp = case.drafts > 0
    main_w = params.weight_bytes_per_socket(model, plan, include_mtp=False)
    embed = _tensor_bytes(model, {"embedding"}, tp)
    weights = main_w - embed
    rows = batch * (1 + case.drafts)
    if model.moe is None:
        # every weight a socket streams is used once a row: its shard of each tensor, the tensors
        # it holds whole (8 KV heads over 16 sockets: each holds one, as its pair socket does) in full
        rules = template_for(model).sharding
        streamed = sum(t.shard_bytes(model, rules[t.name], tp) / t.element_size(model) * holders(model, t, False)
                       for t in inventory(model) if t.name != "embedding")
        flops = 2 * streamed * rows
    else:
        flops = 2 * (params.active_params(model) - model.hidden) * rows / tp
    if mtp:
        # each draft runs the MTP module's own weights and the shared LM head once over the batch
        own_w = params.weight_bytes_per_socket(model, plan, include_mtp=True) - main_w
        head = _tensor_bytes(model, {"lm_head"}, tp)
        weights += case.drafts * (own_w + head)
        own_active = params.active_params(model, include_mtp=True) - params.active_params(model)
        head_params = model.vocab * model.hidden
        flops += case.drafts * 2 * (own_active + head_params) * batch / tp
    layers = model.layers + (model.mtp.modules if mtp else 0)
    if att.kind == "mla":
        seqs = math.ceil(batch / case.attention_dp)
        kv = params.kv_bytes_per_token(model, include_mtp=mtp) * case.kv_len * seqs
        per_token = 2 * att.heads * (att.kv_lora_rank + att.qk_rope_head_dim) + 2 * att.heads * att.kv_lora_rank
        # the main model's rows verify 1 + drafts tokens; each MTP layer run reads its own cache
        attn = per_token * case.kv_len * seqs * (model.layers * (1 + case.drafts) + case.drafts)
        return weights, kv, flops + attn
    kv_share = math.ceil(att.kv_heads / tp) / att.kv_heads
    kv = params.kv_bytes_per_token(model) * case.kv_len * batch * kv_share
    attn = 4 * (att.heads // tp) * att.head_dim * case.kv_len * rows * layers
    return weights, kv, flops + attn


@dataclass(frozen=True)
class Row:
    """One batch of a case: the step, its two rooflines (first principles), the simulator's own
    counts and the step's breakdown, in seconds, bytes and FLOPs per socket."""
    batch: int
    rows: int           # tokens the step computes: batch x (1 + drafts)
    step_s: float
    hbm_s: float
    compute_s: float
    bytes_: float       # weights + KV, first principles
    flops: float
    sim_bytes: int      # the same, as the simulator's kernels count them
    sim_flops: int
    parts: dict[str, float]
    flags: tuple[str, ...]

    @property
    def tokens_per_s(self) -> float:
        return self.rows / self.step_s

    @property
    def memory_bound(self) -> bool:
        return self.hbm_s >= self.compute_s


def case_rows(case: Case, max_batch: int) -> list[Row]:
    """The batches of one case, powers of two from 1 while they fit and are at most ``max_batch``."""
    node = load_hardware(REPO / "hw_configs" / f"sn40l_node{case.sockets}.yaml")
    socket = node.socket
    model = load_model(REPO / "graphs" / f"{case.model}.yaml")
    options = {"expert_loading": case.expert_loading} if case.expert_loading else None
    plan = ParallelPlan(tp=case.sockets, attention_dp=case.attention_dp)
    timer = step_timer(node, model, make_policy("full", {}), ParallelPlan(tp=case.sockets), plan, options)
    hbm_bps, peak = figures.memory_bytes_per_s(socket, "hbm"), figures.peak_flops(socket)
    usable = figures.usable_memory_bytes(socket, "hbm")
    stored = params.weight_bytes_per_socket(model, plan, include_mtp=case.drafts > 0)
    out: list[Row] = []
    batch = 1
    while batch <= max_batch:
        weights, kv, flops = first_principles(model, case, batch)
        # the full cache holds what a step reads
        if stored + kv + timer.decode_activation_bytes(batch, case.kv_len, case.drafts) > usable:
            break
        step = timer.decode_step(batch, case.kv_len, case.drafts)
        row = Row(batch, batch * (1 + case.drafts), step.seconds, (weights + kv) / hbm_bps, flops / peak,
                  weights + kv, flops, sum(k.weight_bytes + k.kv_bytes for k in step.kernels),
                  sum(k.flops for k in step.kernels), decode_step_breakdown(step), ())
        out.append(Row(**{**row.__dict__, "flags": _flags(row, out[-1] if out else None)}))
        batch *= 2
    return out


def _flags(row: Row, prev: Row | None) -> tuple[str, ...]:
    flags = []
    if row.step_s < max(row.hbm_s, row.compute_s) * (1 - ROUNDING):
        flags.append("BELOW")
    if prev is not None:
        if row.step_s < prev.step_s:
            flags.append("SHORTER")
        if row.memory_bound and row.tokens_per_s < prev.tokens_per_s * (1 - TOKS_DROP):
            flags.append("TOKS")
        if row.memory_bound and row.step_s > 2 * prev.step_s:
            flags.append(">2X")
    return tuple(flags)


def case_lines(case: Case, max_batch: int) -> tuple[list[str], int]:
    """The table of one case and its count of unphysical flags (BELOW, SHORTER)."""
    socket = load_hardware(REPO / "hw_configs" / f"sn40l_node{case.sockets}.yaml").socket
    ridge = figures.peak_flops(socket) / figures.memory_bytes_per_s(socket, "hbm")
    lines = [f"{case.label}: {case.model}, TP{case.sockets}"
             + (f" / attention DP{case.attention_dp}" if case.attention_dp > 1 else "")
             + f", {case.kv_len}-token caches, {case.drafts} drafts; ridge {ridge:.0f} FLOP/byte",
             f"{'batch':>6} {'step ms':>9} {'tok/s':>9} {'hbm ms':>8} {'cmp ms':>8} {'frac':>5} {'FLOP/B':>7} "
             f"{'B/A':>5} {'F/A':>5} " + " ".join(f"{c:>7}" for c in COLUMNS) + "  flags"]
    bad = 0
    for r in case_rows(case, max_batch):
        bad += sum(f in ("BELOW", "SHORTER") for f in r.flags)
        grouped = {c: sum(r.parts.get(p, 0.0) for p in causes) for c, causes in COLUMNS.items()}
        grouped["rest"] = r.step_s - sum(grouped.values())
        lines.append(f"{r.batch:>6} {r.step_s * 1e3:>9.3f} {r.tokens_per_s:>9.0f} {r.hbm_s * 1e3:>8.3f} "
                     f"{r.compute_s * 1e3:>8.3f} {max(r.hbm_s, r.compute_s) / r.step_s:>5.2f} "
                     f"{r.flops / r.bytes_:>7.1f} {r.sim_bytes / r.bytes_:>5.2f} {r.sim_flops / r.flops:>5.2f} "
                     + " ".join(f"{v * 1e3:>7.3f}" for v in grouped.values()) + "  " + " ".join(r.flags))
    return lines, bad


def _labels(text: str) -> list[str]:
    labels = [x for x in text.split(",") if x]
    unknown = [x for x in labels if x not in CASES]
    if not labels or unknown:
        raise argparse.ArgumentTypeError(f"expected comma-separated cases of {', '.join(CASES)}; got {text!r}")
    return labels




def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=_labels, default=list(CASES), help=f"of: {', '.join(CASES)}")
    parser.add_argument("--max-batch", type=positive_int, default=4096, help="the largest batch tried (default 4096)")
    args = parser.parse_args(argv)
    bad = 0
    for label in args.cases:
        lines, flagged = case_lines(CASES[label], args.max_batch)
        bad += flagged
        print("\n".join(lines), end="\n\n", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
