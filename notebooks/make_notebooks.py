"""Write the notebooks of this folder from their cell sources (no outputs are stored).

The cells of ``throughput.ipynb`` and ``prefill_breakdown.ipynb`` are below; those of the other
notebooks are in the ``*_cells.py`` modules beside this file, and the cell every notebook starts
with in ``setup_cell.py``. Edit the cells, then run ``python notebooks/make_notebooks.py``; the
``.ipynb`` files are generated and committed without outputs. ``tests/test_notebooks.py`` executes
them.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat
from design_space_cells import DESIGN
from kv_policies_cells import KV_POLICIES
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook
from setup_cell import SETUP
from validation_cells import VALIDATION

HERE = Path(__file__).resolve().parent

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
    kv_len = policies[name].static_cache_len(PROMPT, SLOT_NEW)
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
        cache = policy.static_cache_len(prompt, SLOT_NEW)
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
# lower left: the overhead is highest at short prompts, and the default corner hid the 4K point's line
ax1.legend(loc="lower left", fontsize=8)
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
