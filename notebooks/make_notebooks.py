"""Write the notebooks of this folder from the cell sources below (no outputs are stored).

Edit the cells here, then run ``python notebooks/make_notebooks.py``; the ``.ipynb`` files are
generated and committed without outputs. ``tests/test_notebooks.py`` executes them.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat
from kv_policies_cells import KV_POLICIES
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent

#: every notebook starts here: find the repository from the working directory (notebooks/ or the root)
SETUP = '''\
%matplotlib inline
import os
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from sn40l_sim.study.assemble import step_timer
from sn40l_sim.study.experiment import load_experiment
from sn40l_sim.study.points import make_point_policy, points
from sn40l_sim.hardware.loader import load_hardware, with_overrides
from sn40l_sim.ir import ParallelPlan
from sn40l_sim.models.loader import load_model
from sn40l_sim.study.runner import simulate_points

# SN40L_SIM_NOTEBOOK_QUICK=1 (tests/test_notebooks.py sets it): every cell runs, on fewer points per sweep
QUICK = os.environ.get("SN40L_SIM_NOTEBOOK_QUICK") == "1"
REPO = next(p for p in (Path.cwd(), *Path.cwd().parents) if (p / "experiments" / "deepseek_tp16.yaml").is_file())
exp = load_experiment(REPO / "experiments" / "deepseek_tp16.yaml")
spec = exp.spec
node = load_hardware(exp.resolve(spec.hardware))
model = load_model(exp.resolve(spec.model), spec.model_overrides or None)
prefill_plan = ParallelPlan(spec.parallel.prefill.tp, spec.parallel.prefill.attention_dp)
decode_plan = ParallelPlan(spec.parallel.decode.tp, spec.parallel.decode.attention_dp)
policies = {p.name: make_point_policy(exp, p) for p in points(exp)}
# speculative decoding: each decode step verifies DRAFTS MTP drafts and yields MTP tokens on average
# (and the prefill runs the MTP module over the prompt, as run's does)
DRAFTS, MTP = exp.speculation.drafts, exp.speculation.tokens_per_step
timers = {name: step_timer(node, model, policy, prefill_plan, decode_plan, spec.graph_options, prefill_drafts=DRAFTS)
          for name, policy in policies.items()}
PROMPT, MAX_NEW = spec.shape.prompt_len, exp.max_new_tokens
COLORS = {"full": "#c0504d", "snapstream": "#1f4e8c", "snapstream 4:1": "#7a9cc6"}
GIB = 2**30
print(f"{model.name} on {node.name} ({node.sockets} sockets), prompt {PROMPT:,} tokens, "
      f"prefill TP{prefill_plan.tp}, decode TP{decode_plan.tp} with attention DP{decode_plan.attention_dp}")
for name, policy in policies.items():
    print(f"  {name:10s} static decode cache: {policy.static_cache_len(PROMPT, MAX_NEW + DRAFTS):,} tokens per sequence")
if QUICK:
    print("quick run (SN40L_SIM_NOTEBOOK_QUICK=1): fewer points per sweep")'''

THROUGHPUT = [
    ("md", """\
# Decode throughput of DeepSeek-R1 on SN40L, with and without SnapStream

The main experiment (`experiments/deepseek_tp16.yaml`): DeepSeek-R1 with FP8 weights on one
16-socket SN40L node, 128K-token prompts, decode with tensor parallelism 16 and data-parallel
attention, without KV compression (`full`) and with SnapStream's 32K-token cache.

Every number below is simulated: the graph builder makes the fused kernels of one decode step, the
mapper places them on a socket, and the SimPy engine runs them (`step_timer`). Runs in well under a
minute."""),
    ("code", SETUP),
    ("md", """\
## The largest batch that fits

`simulate_points(..., serve=False)` runs the experiment's points without serving a workload: the
largest compiled decode batch whose weights, KV cache and activations fit in every socket's HBM, and
one decode step at that batch. Each step verifies the experiment's speculative drafts (two MTP drafts
per sequence at 80% acceptance, the paper's setting); reported throughput multiplies by the expected
tokens per step, (1 - 0.8^3) / (1 - 0.8) = 2.44, as the paper does with its x2.4."""),
    ("code", '''\
records = {r["name"]: r for r in simulate_points(exp, node, model, serve=False)}
for name, r in records.items():
    print(f"{name:10s} max batch {r['max_batch']:4d}   decode step {r['decode_step_s'] * 1e3:6.2f} ms   "
          f"decode tokens/s: raw {r['decode_tokens_per_s']:8.1f}, reported (x{MTP:.3g}) {r['decode_tokens_per_s_reported']:8.1f}")'''),
    ("md", """\
## Throughput against the batch

One decode step of the static graph at each batch (the cache length fixed by the policy). Solid:
the batch fits in HBM; dotted: the step time of a batch that would not fit (what more memory would
give)."""),
    ("code", '''\
BATCHES = [1, 16, 64, 256] if QUICK else [1, 2, 4, 8, 16, 32, 64, 128, 256]
fig, ax = plt.subplots(figsize=(7.5, 4.5))
for name, timer in timers.items():
    kv_len = policies[name].static_cache_len(PROMPT, MAX_NEW + DRAFTS)
    tps = [b / timer.decode_step(b, kv_len, DRAFTS).seconds for b in BATCHES]
    limit = records[name]["max_batch"]
    ax.plot(BATCHES, tps, ":", color=COLORS[name], alpha=0.7)
    fits = [(b, t) for b, t in zip(BATCHES, tps) if b <= limit]
    ax.plot(*zip(*fits), "o-", color=COLORS[name], label=f"{name} (fits up to batch {limit})")
ax.set_xscale("log", base=2)
ax.set_yscale("log")
ax.set_xticks(BATCHES, [str(b) for b in BATCHES])
ax.minorticks_off()
ax.set_xlabel("decode batch (sequences per node)")
ax.set_ylabel("decode tokens/s per node (raw)")
ax.set_title(f"{model.name}, {PROMPT // 1024}K-token prompts, one 16-socket node")
ax.grid(alpha=0.3)
ax.legend()
plt.show()'''),
    ("md", """\
## Throughput against the context

Decode tokens/s at batch 16 for prompts of 8K to 128K tokens. The experiment's SnapStream keeps a
fixed 32K-token cache (the static graph reserves it even for short prompts); `snapstream 4:1` sets
the budget to a quarter of the prompt, as the paper's Table 5 does."""),
    ("code", '''\
from sn40l_sim.kvcache import make_policy

PROMPTS = [32768, 131072] if QUICK else [8192, 16384, 32768, 65536, 131072]
BATCH = 16
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.2))
variants = {name: (lambda prompt, p=policy: p) for name, policy in policies.items()}
variants["snapstream 4:1"] = lambda prompt: make_policy("snapstream", {"budget": prompt // 4})
for name, policy_for in variants.items():
    caches, tps = [], []
    for prompt in PROMPTS:
        policy = policy_for(prompt)
        timer = timers.get(name) or step_timer(node, model, policy, prefill_plan, decode_plan, spec.graph_options,
                                                prefill_drafts=DRAFTS)
        cache = policy.static_cache_len(prompt, MAX_NEW + DRAFTS)
        caches.append(cache)
        tps.append(BATCH / timer.decode_step(BATCH, cache, DRAFTS).seconds)
    ax1.plot(PROMPTS, tps, "o-", color=COLORS[name], label=name)
    ax2.plot(PROMPTS, caches, "o-", color=COLORS[name], label=name)
for ax in (ax1, ax2):
    ax.set_xscale("log", base=2)
    ax.set_xticks(PROMPTS, [f"{p // 1024}K" for p in PROMPTS])
    ax.minorticks_off()
    ax.set_xlabel("prompt length (tokens)")
    ax.grid(alpha=0.3)
    ax.legend()
ax1.set_ylabel(f"decode tokens/s per node at batch {BATCH} (raw)")
ax2.set_ylabel("KV cache per sequence (tokens)")
ax2.set_yscale("log", base=2)
fig.suptitle("Decode throughput against the context")
plt.show()'''),
    ("md", """\
## Memory per socket, by tier

The HBM of one decode socket at each policy's maximum batch: weights (1/16 of every sharded tensor),
the KV cache of the socket's own sequences (data-parallel attention), activations, what the runtime
reserves, and what is left. DDR holds nothing in this deployment (weights and KV stay in HBM)."""),
    ("code", '''\
USES = ["weights", "kv", "activations", "reserved", "free"]
names = list(records)
fig, ax = plt.subplots(figsize=(7, 4.2))
bottom = np.zeros(len(names))
for use in USES:
    values = np.array([records[n]["memory"]["hbm"].get(use, 0) / GIB for n in names])
    ax.bar([f"{n}\\nbatch {records[n]['batch']}" for n in names], values, 0.5, bottom=bottom, label=use)
    bottom += values
ax.set_ylabel("HBM per socket (GiB)")
ax.set_title("HBM of a decode socket at the maximum batch")
ax.legend(loc="upper left", bbox_to_anchor=(1, 1))
plt.show()
for n in names:
    ddr = records[n]["memory"]["ddr"]
    used = sum(v for k, v in ddr.items() if k not in ("free", "capacity", "reserved"))
    print(f"{n:10s} DDR per socket: used {used / GIB:.2f} GiB, reserved {ddr['reserved'] / GIB:.0f} GiB, "
          f"free {ddr['free'] / GIB:,.0f} GiB of {ddr['capacity'] / GIB:,.0f} GiB")'''),
]

PREFILL = [
    ("md", """\
# Where prefill time goes, and what SnapStream adds

Prefill of one 128K-token prompt of DeepSeek-R1 on a 16-socket node (TP16, batch 1) with
SnapStream: the share of one MoE layer's time per fused kernel, beside the paper's Table 4, and the
cost of SnapStream's two extra kernels (SnapKV compression and the ring-buffer construction)
against the prompt length. The measurements are read from `experiments/reference/`."""),
    ("code", SETUP),
    ("code", '''\
from sn40l_sim.kvcache import make_policy
from sn40l_sim.report.records import policy_overhead
from sn40l_sim.yamlio import load_document

reference = load_document(REPO / "experiments" / "reference" / "snapstream_paper.yaml").data["measurements"]
table4 = {m["key"]: m["value"] for m in reference if m["quantity"] == "prefill_kernel_share"}
overhead_ref = next(m for m in reference if m["quantity"] == "prefill_policy_overhead")
print("Table 4 kernels:", ", ".join(f"{k} {v:.2%}" for k, v in table4.items()))
print("prefill overhead of the SnapStream kernels (paper):", overhead_ref["source"])'''),
    ("md", """\
## One MoE layer at 128K tokens

`PhaseTiming.layer_shares()` gives each kernel kind's share of the representative MoE layer."""),
    ("code", '''\
prefill = timers["snapstream"].prefill(PROMPT)
shares = prefill.layer_shares()
kinds = sorted(set(shares) | set(table4), key=lambda k: -max(shares.get(k, 0), table4.get(k, 0)))
x = np.arange(len(kinds))
fig, ax = plt.subplots(figsize=(8, 4.2))
ax.bar(x - 0.2, [100 * shares.get(k, 0) for k in kinds], 0.4, label="simulated", color="#1f4e8c")
ax.bar(x + 0.2, [100 * table4.get(k, np.nan) for k in kinds], 0.4, label="SnapStream paper, Table 4", color="#c9a227")
ax.set_xticks(x, kinds, rotation=20)
ax.set_ylabel("share of the layer's prefill time (%)")
ax.set_title(f"Prefill of one MoE layer (layer {prefill.layer}), {PROMPT // 1024}K-token prompt, SnapStream")
ax.legend()
plt.show()
print(f"whole prefill: {prefill.seconds:.3f} s simulated")
for k in kinds:
    print(f"  {k:12s} simulated {shares.get(k, 0):7.2%}   paper {table4.get(k, float('nan')):7.2%}")'''),
    ("md", """\
## SnapStream's prefill overhead against the prompt length

For each prompt length the budget is a quarter of the prompt (4:1, as in Table 5). The overhead is
the cycles of the policy's own kernels over the cycles of all the others, over the whole model. The
band is the paper's "about 2-5%"."""),
    ("code", '''\
PROMPTS = [16384, 131072] if QUICK else [4096, 8192, 16384, 32768, 65536, 131072]
rows = []
for prompt in PROMPTS:
    policy = make_policy("snapstream", {"budget": prompt // 4})
    timing = step_timer(node, model, policy, prefill_plan, decode_plan, spec.graph_options,
                        prefill_drafts=DRAFTS).prefill(prompt)
    extra = {k.kind for k in policy.prefill_kernels(model, prompt, prefill_plan.tp)}
    rows.append((prompt, timing.seconds, policy_overhead(timing.kernel_cycles, extra), timing.layer_shares()))

low, high = overhead_ref["tolerance"]["range"]
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.2))
ax1.axhspan(100 * low, 100 * high, color="#c9a227", alpha=0.25, label="paper (DeepSeek-R1 deployment): about 2-5%")
ax1.plot(PROMPTS, [100 * r[2] for r in rows], "o-", color="#1f4e8c", label="simulated")
ax1.set_ylabel("SnapStream kernels / rest of prefill (%)")
ax1.legend()
bottom = np.zeros(len(rows))
for kind in sorted({k for r in rows for k in r[3]}, key=lambda k: -rows[-1][3].get(k, 0)):
    values = np.array([100 * r[3].get(kind, 0) for r in rows])
    ax2.bar(range(len(rows)), values, bottom=bottom, label=kind)
    bottom += values
ax2.set_xticks(range(len(rows)), [f"{p // 1024}K" for p in PROMPTS])
ax2.set_ylabel("share of one MoE layer (%)")
ax2.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1, 1))
for ax in (ax1,):
    ax.set_xscale("log", base=2)
    ax.set_xticks(PROMPTS, [f"{p // 1024}K" for p in PROMPTS])
    ax.minorticks_off()
    ax.grid(alpha=0.3)
for ax in (ax1, ax2):
    ax.set_xlabel("prompt length (tokens)")
fig.suptitle("SnapStream's prefill cost and the layer's kernel mix against the prompt length")
plt.show()
for prompt, seconds, overhead, _ in rows:
    print(f"{prompt // 1024:4d}K  prefill {seconds * 1e3:9.1f} ms   SnapStream kernels {overhead:6.2%}")'''),
]

DESIGN = [
    ("md", """\
# What better hardware would buy

The main experiment's decode and prefill with one hardware number changed at a time:
HBM bandwidth, P2P link bandwidth (the tensor-parallel collectives), the number of sockets per node,
and HBM capacity. Changes go through `with_overrides` (the loader's checks run again; the published
totals are not re-checked, since the part is hypothetical), either directly or through a sweep
section written inline."""),
    ("code", SETUP),
    ("code", '''\
records = {r["name"]: r for r in simulate_points(exp, node, model, serve=False)}
batches = {name: r["max_batch"] for name, r in records.items()}
print("decode batches (largest that fits):", batches)


def step_figures(hw):
    """Decode tokens/s at each policy's batch, and the SnapStream prefill time, on hardware ``hw``."""
    out = {}
    for name, policy in policies.items():
        timer = step_timer(hw, model, policy, prefill_plan, decode_plan, spec.graph_options, prefill_drafts=DRAFTS)
        kv_len = policy.static_cache_len(PROMPT, MAX_NEW + DRAFTS)
        out[name] = batches[name] / timer.decode_step(batches[name], kv_len, DRAFTS).seconds
        if name == "snapstream":
            out["prefill_s"] = timer.prefill(PROMPT).seconds
    return out'''),
    ("md", """\
## HBM and P2P bandwidth

Each bandwidth scaled by 0.5x to 4x. Decode streams the weights and the cache from HBM, so it
follows HBM bandwidth until compute or the collectives take over; prefill at 128K is dominated by
attention compute."""),
    ("code", '''\
FACTORS = [1, 2] if QUICK else [0.5, 1, 2, 4]
FIELDS = {"HBM bandwidth": ("socket.memory.hbm.bytes_per_s_per_unit", node.socket.memory["hbm"].bytes_per_s_per_unit),
          "P2P bandwidth": ("socket.p2p.bytes_per_s_per_port", node.socket.p2p.bytes_per_s_per_port)}
results = {}
for label, (field, base) in FIELDS.items():
    results[label] = [step_figures(with_overrides(node, {field: base * f})) for f in FACTORS]

fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), sharey=True)
for ax, (label, rows) in zip(axes, results.items()):
    one = rows[FACTORS.index(1)]
    for name in policies:
        ax.plot(FACTORS, [r[name] / one[name] for r in rows], "o-", color=COLORS[name],
                label=f"decode, {name} (batch {batches[name]})")
    ax.plot(FACTORS, [one["prefill_s"] / r["prefill_s"] for r in rows], "s--", color="grey",
            label="prefill, 128K prompt")
    ax.plot(FACTORS, FACTORS, ":", color="black", alpha=0.4, label="proportional")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xticks(FACTORS, [f"{f:g}x" for f in FACTORS])
    ax.set_yticks(FACTORS, [f"{f:g}x" for f in FACTORS])
    ax.minorticks_off()
    ax.set_xlabel(f"{label} (x today's)")
    ax.grid(alpha=0.3)
    ax.set_title(label)
axes[0].set_ylabel("speed-up over today's hardware")
axes[1].legend(fontsize=8)
plt.show()
for label, rows in results.items():
    for f, r in zip(FACTORS, rows):
        print(f"{label:14s} x{f:<4g} decode tokens/s: full {r['full']:8.1f}, snapstream {r['snapstream']:8.1f};"
              f"  prefill {r['prefill_s']:.3f} s")'''),
    ("md", """\
## More sockets, more HBM: a sweep written inline

A sweep section zips the socket count with the P2P ports a full mesh needs and the tensor-parallel
degree; a second one grids HBM capacity per module. Points that do not fit (DeepSeek's weights do
not fit on 8 sockets) are listed, not plotted. `python -m sn40l_sim sweep FILE --jobs N` runs the
same file in parallel processes; here the points run in this process. The workload is shortened to
8 output tokens (the decode step and the memory fit do not depend on it)."""),
    ("code", '''\
import dataclasses
import tempfile
import textwrap

from sn40l_sim.study.sweep.load import load_sweep
from sn40l_sim.study.sweep.run import run_points

# a folder of its own for the two sweep files, removed once they are loaded and run
workdir = tempfile.TemporaryDirectory()
folder = Path(workdir.name)
head = f"""\\
base: {REPO / "experiments" / "deepseek_tp16.yaml"}
hardware: {exp.resolve(spec.hardware)}
model: {exp.resolve(spec.model)}
workload: {{kind: fixed, count: batch, output_len: 8}}
serving: {{max_new_tokens: 8, prefill_nodes: 1}}
"""
(folder / "sockets.yaml").write_text(head + textwrap.dedent("""\\
    name: sockets
    sweep:
      mode: zip
      infeasible: skip
      axes:
        sockets: {path: hardware.sockets, values: [8, 16, 32]}
        ports: {path: hardware.socket.p2p.ports, values: [16, 16, 32]}
        prefill_tp: {path: parallel.prefill.tp, values: [8, 16, 32]}
        decode_tp: {path: parallel.decode.tp, values: [8, 16, 32]}
        attention_dp: {path: parallel.decode.attention_dp, values: [8, 16, 32]}
    """))
(folder / "capacity.yaml").write_text(head + textwrap.dedent("""\\
    name: hbm_capacity
    sweep:
      infeasible: skip
      axes:
        hbm_module: {path: hardware.socket.memory.hbm.capacity_bytes_per_unit, values: [16 GiB, 24 GiB, 32 GiB]}
    """))
swept = {}
for name in ("sockets", "capacity"):
    sweep = load_sweep(folder / f"{name}.yaml")
    if QUICK:   # the two ends of each sweep
        sweep = dataclasses.replace(sweep, points=[sweep.points[0], sweep.points[-1]])
    swept[name] = run_points(sweep, jobs=1, progress=False)
    print(f"{name}: {len(swept[name])} records; did not fit: {[n for n, _ in swept[name].skipped]}")
workdir.cleanup()'''),
    ("code", '''\
fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
for ax, (name, axis, unit, scale) in zip(axes, [("sockets", "sockets", "sockets per node", 1),
                                                ("capacity", "hbm_module", "HBM per socket (GiB)", 4 / GIB)]):
    for policy in policies:
        rows = sorted((r["sweep"][axis] * scale, r) for r in swept[name] if r["kv_policy"] == policy)
        xs = [x for x, _ in rows]
        ax.plot(xs, [r["decode_tokens_per_s_reported"] for _, r in rows], "o-", color=COLORS[policy], label=policy)
        for x, r in rows:
            ax.annotate(f"batch {r['batch']}", (x, r["decode_tokens_per_s_reported"]), fontsize=7,
                        textcoords="offset points", xytext=(4, -10))
    ax.set_xlabel(unit)
    ax.set_xticks(sorted({x for x, _ in rows}))
    ax.grid(alpha=0.3)
    ax.legend()
axes[0].set_ylabel(f"decode tokens/s per node (reported, x{MTP:.3g})")
axes[1].set_ylabel(f"decode tokens/s per node (reported, x{MTP:.3g})")
axes[0].set_title("sockets per node (TP = sockets)")
axes[1].set_title("HBM capacity per socket (16 sockets)")
plt.show()'''),
]

VALIDATION = [
    ("md", """\
# Simulated against measured

Every measurement in `experiments/reference/snapstream_paper.yaml` (SnapStream paper, Tables 4 and
5) beside the simulator's value. Calibration points are the measurements the hardware file's
`calibrated:` parameters may be fitted to; the held-back cells of Table 5 have no value here and
show the simulator's prediction only. The same table comes from `python -m sn40l_sim validate`."""),
    ("code", SETUP),
    ("code", '''\
from sn40l_sim.yamlio import load_document

REFERENCE = REPO / "experiments" / "reference" / "snapstream_paper.yaml"


def simulate(path):
    """Records of an experiment's points (memory, max batch, one prefill and one decode step)."""
    e = load_experiment(path)
    hw = load_hardware(e.resolve(e.spec.hardware))
    m = load_model(e.resolve(e.spec.model), e.spec.model_overrides or None)
    return simulate_points(e, hw, m, serve=False)


try:  # the project's validation module, when it is installed
    from sn40l_sim.study import validation
    have_module = all(hasattr(validation, f) for f in ("load_references", "compare", "format_table"))
except ImportError:
    have_module = False

if have_module:
    comparisons = validation.compare(validation.load_references([REFERENCE]), simulate)
    print(validation.format_table(comparisons))
    rows = [(c.reference.measurement.model_dump(), c.simulated) for c in comparisons]
else:  # the same comparison from the records directly
    doc = load_document(REFERENCE)
    cache, rows = {}, []
    for m in doc.data["measurements"]:
        path = doc.resolve(m["experiment"])
        if path not in cache:
            cache[path] = {r["name"]: r for r in simulate(path)}
        value = cache[path][m["point"]][m["quantity"]]
        rows.append((m, float(value.get(m["key"], 0.0) if m.get("key") else value)))
    for m, sim in rows:
        measured = "(held back)" if m.get("value") is None else f"{m['value']:.4g}"
        quantity = m["quantity"] + (f"[{m['key']}]" if m.get("key") else "")
        print(f"{m['id']:20s} {quantity:36s} {measured:>12s} {sim:12.4g}")'''),
    ("md", """\
## Table 4: kernel shares of a prefill MoE layer, and Table 5: decode

Left: the share of each kernel, measured and simulated (percentage points apart). Right: the six
decode tokens/s cells of Table 5 (reported tokens/s per node, at 128K, 64K and 32K prompts),
measured beside simulated; a held-back cell has no measured bar, is annotated "held back" and shows
the simulator's prediction only. The maximum batches are printed below the plot, not drawn."""),
    ("code", '''\
shares = [(m, s) for m, s in rows if m["quantity"] == "prefill_kernel_share"]
decode = [(m, s) for m, s in rows if m["quantity"] == "decode_tokens_per_s_reported"]
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.4))
x = np.arange(len(shares))
ax1.bar(x - 0.2, [100 * m["value"] for m, _ in shares], 0.4, label="measured", color="#c9a227")
ax1.bar(x + 0.2, [100 * s for _, s in shares], 0.4, label="simulated", color="#1f4e8c")
ax1.set_xticks(x, [m["key"] for m, _ in shares], rotation=20)
ax1.set_ylabel("share of the layer's prefill time (%)")
ax1.set_title("Table 4: prefill, one MoE layer, 128K prompt")
ax1.legend()
labels = [m["id"].replace("t5_", "").replace("_tps", "") for m, _ in decode]
x = np.arange(len(decode))
measured = [m.get("value") for m, _ in decode]
ax2.bar([i - 0.2 for i, v in enumerate(measured) if v is not None], [v for v in measured if v is not None], 0.4,
        label="measured", color="#c9a227")
ax2.bar(x + 0.2, [s for _, s in decode], 0.4, label="simulated", color="#1f4e8c")
for i, v in enumerate(measured):
    if v is None:
        ax2.annotate("held back", (i - 0.2, 0), rotation=90, ha="center", va="bottom", fontsize=7)
ax2.set_xticks(x, labels, rotation=20)
ax2.set_ylabel(f"decode tokens/s per node (reported, x{MTP:.3g})")
ax2.set_title("Table 5: decode, one 16-socket node")
ax2.legend()
plt.show()
for m, s in rows:
    if m.get("value") is not None and m["quantity"] in ("decode_tokens_per_s_reported", "max_batch"):
        print(f"{m['id']:20s} measured {m['value']:8.4g}  simulated {s:8.4g}  error {100 * (s - m['value']) / m['value']:+6.1f}%")'''),
]

NOTEBOOKS = {"throughput.ipynb": THROUGHPUT, "prefill_breakdown.ipynb": PREFILL,
             "design_space.ipynb": DESIGN, "validation.ipynb": VALIDATION, "kv_policies.ipynb": KV_POLICIES}


def build(cells: list[tuple[str, str]]) -> nbformat.NotebookNode:
    """A notebook of markdown (``"md"``) and code cells, with no outputs."""
    nb = new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    nb.cells = [new_markdown_cell(src) if kind == "md" else new_code_cell(src) for kind, src in cells]
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{i}"  # stable ids: regenerating gives the same files
    return nb


def main(argv: list[str] | None = None) -> int:
    """Write every notebook (or check that the files are up to date with ``--check``)."""
    # argparse, so that a typo of --check is refused rather than taken as "write the notebooks"
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a committed notebook is out of date")
    check = parser.parse_args(argv).check
    stale = []
    for name, cells in NOTEBOOKS.items():
        text = nbformat.writes(build(cells)) + "\n"
        path = HERE / name
        if check:
            if not path.is_file() or path.read_text(encoding="utf-8") != text:
                stale.append(name)
        else:
            path.write_text(text, encoding="utf-8")
    if stale:
        print("out of date (run python notebooks/make_notebooks.py):", ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
