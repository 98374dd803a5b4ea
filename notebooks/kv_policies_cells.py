"""The cells of ``kv_policies.ipynb`` (written by ``make_notebooks.py``, which imports this list)."""
from __future__ import annotations

KV_POLICIES = [
    ("md", """\
# KV-cache policies side by side

`experiments/kv_policies.yaml` puts the answers to "the KV cache does not fit" next to each other on
the same hardware and workload: no compression, quantised KV (FP8, INT4 with KIVI's group scales,
INT4 with ZipCache-style INT8 salient tokens), cross-layer sharing (CLA), the eviction policies
(StreamingLLM, SnapKV, H2O, SnapStream, SnapStream + FP8) and DDR offload with recall (ArkVale).
The full experiment sweeps DeepSeek-R1 and Llama-3.1-70B at 32K and 124K prompts
(`python -m sn40l_sim run experiments/kv_policies.yaml --jobs 2`, about 10 s on 2 cores); this notebook runs
its DeepSeek-R1 points at 32K without serving a workload (memory, largest batch, one prefill and one
decode step each), in well under a minute.

**The simulator does not predict accuracy.** It counts bytes, FLOPs and cycles. What each policy
gives up is shown as the fractions of tokens it keeps and attends to and the bits it stores; how
much that costs in answer quality is for the published evaluations of each method."""),
    ("code", '''\
%matplotlib inline
import os
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from sn40l_sim.models.params import kv_bytes_per_token
from sn40l_sim.study.assemble import assemble
from sn40l_sim.study.experiment import load_experiment
from sn40l_sim.study.runner import simulate_assembly

REPO = next(p for p in (Path.cwd(), *Path.cwd().parents) if (p / "experiments" / "kv_policies.yaml").is_file())
exp = load_experiment(REPO / "experiments" / "kv_policies.yaml")
asm = assemble(exp)   # the experiment's base model; its sweep adds Llama-3.1-70B
PROMPT, MAX_NEW = 32768, exp.max_new_tokens
points = [p for p in asm.points if p.prompt_len == PROMPT]
# SN40L_SIM_NOTEBOOK_QUICK=1 (tests/test_notebooks.py sets it): every cell runs, on four of the policies
# (no compression, a quantised cache, an eviction policy and DDR offload)
if os.environ.get("SN40L_SIM_NOTEBOOK_QUICK") == "1":
    points = [p for p in points if p.entry in ("full", "fp8", "snapstream", "arkvale")]
node, model = asm.node, asm.model
print(f"{model.name} on {node.name} ({node.sockets} sockets), prompt {PROMPT:,} tokens, up to {MAX_NEW} new, "
      f"{len(points)} policy entries")
if os.environ.get("SN40L_SIM_NOTEBOOK_QUICK") == "1":
    print("quick run (SN40L_SIM_NOTEBOOK_QUICK=1): four of the policies")'''),
    ("md", """\
## Each policy at its largest batch

Every entry runs at the largest compiled decode batch whose weights, KV (and a policy's state:
H2O's accumulated scores, ArkVale's page digests) and activations fit in HBM; ArkVale's store of
the whole cache sits in DDR."""),
    ("code", '''\
records = {r["policy_entry"]: r for r in simulate_assembly(asm, only=points, serve=False)}
GIB = 2**30
# memory and DDR traffic are per socket (results.md: memory, decode_tier_bytes), tokens/s per node
print(f"{'policy':18s} {'batch':>6s} {'HBM KV/socket':>14s} {'DDR store/socket':>16s} {'step ms':>8s} {'tokens/s':>9s} "
      f"{'prefill +':>9s} {'DDR/step/socket':>15s}")
for name, r in records.items():
    store = sum(t.get("kv_offload", 0) for t in r["memory"].values())
    print(f"{name:18s} {r['max_batch']:6d} {r['memory']['hbm']['kv'] / GIB:11.2f} GiB {store / GIB:12.1f} GiB "
          f"{r['decode_step_s'] * 1e3:8.1f} {r['decode_tokens_per_s']:9.0f} {100 * r['prefill_policy_overhead']:8.1f}% "
          f"{r['decode_tier_bytes']['ddr'] / 1e9:12.2f} GB")'''),
    ("md", """\
## Bytes per token against throughput

The x axis is what a sequence keeps in HBM per token of its context (its slots with scales, and the
policy's state); up and to the left is better. The same plot for the whole experiment comes from
`python -m sn40l_sim plot out/kv_policies/results.csv --x kv_bytes_per_context_token --y
decode_tokens_per_s --hue prefill_len --where model=deepseek-r1 --kind scatter --label policy_entry --logx`."""),
    ("code", '''\
# the plot command's label placement and log ticks: names written at one offset ran into each other
# (streamingllm over snapstream, int4_kivi over int4_zipcache, fp8 over cla2)
from sn40l_sim.report.figure import place_labels, plain_log_ticks

fig, ax = plt.subplots(figsize=(8, 4.6), layout="constrained")
for offload, colour, label in ((False, "#1f4e8c", "KV in HBM only"), (True, "#c0504d", "a store of the whole cache in DDR")):
    shown = [r for r in records.values() if (r["kv_offload_bytes_per_context_token"] > 0) == offload]
    ax.scatter([r["kv_bytes_per_context_token"] for r in shown], [r["decode_tokens_per_s"] for r in shown],
               color=colour, label=label)
ax.set_xscale("log")
plain_log_ticks(ax, "x")
ax.set_xlabel("KV bytes per context token in HBM (B/token)")
ax.set_ylabel("decode tokens/s (raw)")
ax.set_title(f"{model.name}, {PROMPT // 1024}K prompts")
ax.grid(True, alpha=0.3)
ax.legend(fontsize=8)
place_labels(ax, [r["kv_bytes_per_context_token"] for r in records.values()],
             [r["decode_tokens_per_s"] for r in records.values()], list(records), fontsize=7)
plt.show()'''),
    ("md", """\
## What each policy gives up (not what it costs in accuracy)

Tokens kept at the end of a sequence (a store counts), tokens one decode step attends to, bits per
cached element (scales included) and layers' worth of cache, each as a fraction of the full BF16
cache's."""),
    ("code", '''\
print(f"{'policy':18s} {'tokens kept':>12s} {'attended':>9s} {'bits':>6s} {'layers':>7s}")
for name, r in records.items():
    print(f"{name:18s} {r['kv_retained_token_fraction']:12.3f} {r['kv_attended_token_fraction']:9.3f} "
          f"{16 * r['kv_bit_fraction']:6.1f} {r['kv_layer_fraction']:7.2f}")'''),
    ("md", """\
## Memory over a sequence's life

Bytes one sequence holds (all layers, the MTP layer's included) after its 32K-token prompt and each
generated token, over a generation longer than the experiment's `max_new_tokens` so that growth
shows: the cache a policy keeps (solid) and, for DDR offload, the store in DDR (dashed) beside the
HBM buffer attention reads. Full and quantised caches grow with every token, SnapKV grows from its
compressed prompt, the ring and heavy-hitter policies stay at their budget."""),
    ("code", '''\
LIFE = 32768
steps = np.arange(0, LIFE + 1, 512)
fig, ax = plt.subplots(figsize=(10, 4.8), constrained_layout=True)
styles = ["-", (0, (5, 1)), (0, (1, 1)), "-."]
for i, p in enumerate(points):
    policy, m = asm.policy(p), asm.model_for(p)
    per_token = kv_bytes_per_token(m, include_mtp=True)
    fp = policy.footprint(m, PROMPT, MAX_NEW)
    colour, style = plt.cm.tab20(i % 20), styles[i % len(styles)]
    held = np.array([policy.cache_len(PROMPT, int(g)) for g in steps]) * per_token / GIB
    if fp.store_tier is None:
        ax.plot(steps, held, color=colour, linestyle=style, label=p.entry)
    else:   # the buffer attention reads stays at its budget; the store grows with every token
        ax.plot(steps, np.minimum(held, fp.slots * per_token / GIB), color=colour, label=f"{p.entry}: HBM buffer")
        ax.plot(steps, held, color=colour, linestyle="--", label=f"{p.entry}: DDR store")
ax.set_xlabel("tokens generated after the prompt")
ax.set_ylabel("KV bytes of one sequence (GiB)")
ax.set_title(f"{model.name}, {PROMPT // 1024}K prompt: what one sequence keeps as it generates")
ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
ax.grid(True, alpha=0.3)
plt.show()'''),
]
