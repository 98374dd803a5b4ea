"""Prefill (TTFT) of one prompt over models, prompt lengths and sockets, against first principles:
the table of docs/validation.md ("Prefill across models, lengths and sockets").

    python scripts/prefill_table.py                                   # the whole table (about 2 min)
    python scripts/prefill_table.py --models llama3_1_70b --sockets 16 --lens 131072
    python scripts/prefill_table.py --write-experiment /tmp/prefill.yaml   # the experiment, for run

Each row is what ``python -m sn40l_sim run EXPERIMENT --set model=graphs/MODEL.yaml --set
hardware.sockets=S --set parallel.prefill.tp=S --set parallel.decode.tp=S --set
shape.prompt_len=L`` prints as "prefill, one prompt" (= its TTFT: one request, batch 1, no queue),
EXPERIMENT being the file ``--write-experiment`` writes (hw_configs/sn40l_node16.yaml, full cache
and SnapStream's 32K cache, one request of one output token). The steps only are simulated here
(``serve=False``), the same prefill ``run`` times. A prompt of the model's whole ``max_context`` is
run one token short (131,071 for Llama-3.1: the output token needs a position); it runs the graph
compiled for 131,072 (``serving.prefill_lens``); a longer one is a row that says it does not run.

Columns: the TTFT in ms, full cache and SnapStream; MFU = (2 x active parameters x L + causal
attention 2 x layers x heads x (d_qk + d_v) x L^2 / 2) / (sockets x BF16 peak x TTFT), the
parameters and peak from ``describe``; the attention FLOPs' share of those; the attention
kernel's share of the simulated prefill (``prefill_kernel_cycles``); the memory tier the
prefill's activations went to when they left HBM. Nothing is read from a file of expected values.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from sn40l_sim.commands.argtypes import positive_ints  # noqa: E402
from sn40l_sim.errors import InputError  # noqa: E402
from sn40l_sim.hardware import figures  # noqa: E402
from sn40l_sim.hardware.loader import load_hardware  # noqa: E402
from sn40l_sim.models.loader import load_model  # noqa: E402
from sn40l_sim.models.params import active_params  # noqa: E402
from sn40l_sim.models.spec import ModelSpec  # noqa: E402
from sn40l_sim.report.outputs import check_file  # noqa: E402
from sn40l_sim.study.runner import simulate_experiment  # noqa: E402
from sn40l_sim.study.sweep.base import experiment_with_sets  # noqa: E402

MODELS = ("llama3_1_8b", "llama3_1_70b", "llama3_1_405b", "deepseek_r1")
LENS = (1024, 4096, 16384, 32768, 131072)
#: attention kernels by model family (prefill_kernel_cycles keys)
ATTENTION_KERNELS = ("attention", "mha")

EXPERIMENT = """\
# Prefill (TTFT) of one prompt at batch 1: scripts/prefill_table.py, docs/validation.md
# ("Prefill across models, lengths and sockets"). Written by scripts/prefill_table.py.
kind: experiment
name: prefill_lengths
hardware: {repo}/hw_configs/sn40l_node16.yaml
model: {repo}/graphs/llama3_1_8b.yaml
parallel:
  prefill: {{tp: 16}}
  decode: {{tp: 16}}
policies:
  - {{name: full, policy: full}}
  - {{name: snapstream, policy: snapstream, params: {{budget: 32768}}}}
shape: {{prompt_len: 1024, batch: 1, max_new_tokens: 1}}
workload: {{kind: fixed, count: 1, output_len: 1}}
serving:
  mode: disaggregated
  prefill_nodes: 1
  decode_nodes: 1
  batch: 1
  max_new_tokens: 1
"""


def model_flops(model: ModelSpec, prompt: int) -> tuple[float, float]:
    """(FLOPs of the weights, FLOPs of causal attention) of one prompt's prefill: 2 x active
    parameters per token, and per layer and head a QK^T of width d_qk and a PV of width d_v over
    the L^2 / 2 unmasked query-key pairs (the brief's 4 x head_dim when d_qk = d_v). The weights'
    count includes the LM head at every token, which the graph computes for the last one only, so
    it is an upper bound (7% of Llama-3.1-8B's parameters)."""
    att = model.attention
    d_qk = att.query_head_dim()
    d_v = getattr(att, "v_head_dim", None) or d_qk
    linear = 2.0 * active_params(model) * prompt
    attention = 2.0 * model.layers * att.heads * (d_qk + d_v) * prompt * prompt / 2
    return linear, attention


def _reason(message: str) -> str:
    """The first clause of a refusal, for a row: "the model does not fit on the decode node at tp=8"
    of "...: a socket's share of the weights ...". A ``--set`` refusal begins with the value it
    refuses ("32: a full_mesh of 32 sockets ... needs 31 P2P ports ..."), which alone says nothing.

    >>> _reason("32: a full_mesh of 32 sockets needs 31 P2P ports; raise it, or (ring: 2)")
    'a full_mesh of 32 sockets needs 31 P2P ports'
    """
    clauses = message.split(": ")
    if len(clauses) > 1 and " " not in clauses[0].strip():
        clauses = clauses[1:]
    return clauses[0].split(";")[0]


def rows(models: list[str], sockets: list[int], lens: list[int], experiment: Path) -> list[str]:
    peak = figures.peak_flops(load_hardware(REPO / "hw_configs" / "sn40l.yaml").socket, "bf16")
    out = [f"{'model':<14} {'S':>2} {'L':>7} {'full ms':>10} {'snap ms':>10} {'ovh%':>5} {'MFU':>5} "
           f"{'attF':>5} {'attT':>5} {'tok/s':>8}  note"]
    for name in models:
        model = load_model(REPO / "graphs" / f"{name}.yaml")
        for s in sockets:
            for length in lens:
                if length > model.max_context:   # not capped: a row of another length would read as this one
                    out.append(f"{name:<14} {s:>2} {length:>7}  does not run: longer than the model's "
                               f"max_context ({model.max_context:,} tokens)")
                    continue
                prompt = min(length, model.max_context - 1)
                sets = {"model": str(REPO / "graphs" / f"{name}.yaml"), "hardware.sockets": s,
                        "parallel.prefill.tp": s, "parallel.decode.tp": s, "shape.prompt_len": prompt}
                try:
                    exp, hw = experiment_with_sets(experiment, sets)
                    with warnings.catch_warnings():
                        # the SnapStream point warns that a short prompt leaves its 32K slots
                        # unfilled: the column is that deployment at every length, on purpose; a
                        # spill of the prefill's activations is the note column
                        warnings.simplefilter("ignore", UserWarning)
                        _, records = simulate_experiment(exp, serve=False, hardware_overrides=hw)
                except InputError as exc:
                    out.append(f"{name:<14} {s:>2} {prompt:>7}  does not run: {_reason(exc.message)}")
                    continue
                full, snap = (next(r for r in records if r["kv_policy"] == p) for p in ("full", "snapstream"))
                t = full["prefill_s"]
                linear, attention = model_flops(model, prompt)
                kc = full["prefill_kernel_cycles"]
                att_time = sum(kc.get(k, 0) for k in ATTENTION_KERNELS) / sum(kc.values())
                spilled = {tier: uses.get("activations", 0) for tier, uses in full["memory_prefill_node"].items()
                           if tier != "hbm" and uses.get("activations", 0)}
                note = "; ".join(f"activations {n / 2**30:.2f} GiB in {tier.upper()}" for tier, n in spilled.items())
                out.append(f"{name:<14} {s:>2} {prompt:>7} {t * 1e3:>10.2f} {snap['prefill_s'] * 1e3:>10.2f} "
                           f"{100 * (snap['prefill_s'] / t - 1):>5.2f} {(linear + attention) / (s * peak * t):>5.3f} "
                           f"{attention / (linear + attention):>5.3f} {att_time:>5.3f} {prompt / t:>8.0f}  {note}")
    return out




def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS), help="model files of graphs/, without .yaml")
    parser.add_argument("--sockets", type=positive_ints, default=[8, 16], help="sockets of the node (tp over all)")
    parser.add_argument("--lens", type=positive_ints, default=list(LENS), help="prompt lengths (tokens)")
    parser.add_argument("--write-experiment", type=Path, metavar="FILE", help="write the experiment and stop")
    args = parser.parse_args(argv)
    text = EXPERIMENT.format(repo=REPO)
    if args.write_experiment is not None:
        try:   # a folder or an unwritable place: one line, as run's --trace refuses it
            check_file(args.write_experiment, "--write-experiment")
        except InputError as exc:
            parser.error(str(exc))
        args.write_experiment.write_text(text)
        return 0
    models = args.models.split(",")
    for name in models:
        if not (REPO / "graphs" / f"{name}.yaml").is_file():
            parser.error(f"graphs/{name}.yaml: no such model file")
        try:   # a file of graphs/ that is not a model (a kernel template) is bad input, not a traceback
            load_model(REPO / "graphs" / f"{name}.yaml")
        except InputError as exc:
            parser.error(str(exc))
    with tempfile.TemporaryDirectory() as tmp:
        experiment = Path(tmp) / "prefill_lengths.yaml"
        experiment.write_text(text)
        for line in rows(models, args.sockets, args.lens, experiment):
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
