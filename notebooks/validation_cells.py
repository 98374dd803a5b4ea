"""The cells of ``validation.ipynb`` (written by ``make_notebooks.py``, which imports this list)."""
from __future__ import annotations

from setup_cell import SETUP

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
        # lifted 3 points: written from the axis itself, its first letter was struck through by it
        ax2.annotate("held back", (i - 0.2, 0), xytext=(0, 3), textcoords="offset points", rotation=90,
                     ha="center", va="bottom", fontsize=7)
ax2.set_xticks(x, labels, rotation=20)
ax2.set_ylabel(f"decode tokens/s per node (reported, x{MTP:.3g})")
ax2.set_title("Table 5: decode, one 16-socket node")
ax2.legend()
plt.show()
for m, s in rows:
    if m.get("value") is not None and m["quantity"] in ("decode_tokens_per_s_reported", "max_batch"):
        print(f"{m['id']:20s} measured {m['value']:8.4g}  simulated {s:8.4g}  error {100 * (s - m['value']) / m['value']:+6.1f}%")'''),
]
