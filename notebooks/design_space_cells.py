"""The cells of ``design_space.ipynb`` (written by ``make_notebooks.py``, which imports this list)."""
from __future__ import annotations

from setup_cell import SETUP

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
        kv_len = policy.static_cache_len(PROMPT, SLOT_NEW)
        out[name] = batches[name] / timer.decode_step(batches[name], kv_len, DRAFTS).seconds
        if name == "snapstream":
            out["prefill_s"] = timer.prefill(PROMPT).seconds
    return out'''),
    ("md", """\
## HBM and P2P bandwidth

Each bandwidth scaled by 0.5x to 4x. Decode streams the weights and the cache from HBM, but those
streams are only part of its step: the kernel configurations a step loads (the largest share of the
full-cache step, README "What it shows"), the collectives and the compute do not move with HBM, so
decode gains far less than the bandwidth at either end (the tokens/s printed below the plot).
Prefill at 128K is dominated by attention compute and moves with neither bandwidth much beyond
today's."""),
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
# the capacity axis sets one HBM module; a socket holds the hardware file's modules per die x dies
MODULES = node.socket.memory["hbm"].units_per_die * node.socket.dies
print(f"HBM per socket = {MODULES} modules x the swept module capacity")
# constrained layout and margins: the batch written right of the last point ran past the frame,
# into the right panel's y label
fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), layout="constrained")
for ax, (name, axis, unit, scale) in zip(axes, [("sockets", "sockets", "sockets per node", 1),
                                                ("capacity", "hbm_module", "HBM per socket (GiB)", MODULES / GIB)]):
    for policy in policies:
        rows = sorted((r["sweep"][axis] * scale, r) for r in swept[name] if r["kv_policy"] == policy)
        xs = [x for x, _ in rows]
        ax.plot(xs, [r["decode_tokens_per_s_reported"] for _, r in rows], "o-", color=COLORS[policy], label=policy)
        for x, r in rows:
            ax.annotate(f"batch {r['batch']}", (x, r["decode_tokens_per_s_reported"]), fontsize=7,
                        textcoords="offset points", xytext=(4, -10))
    ax.set_xlabel(unit)
    ax.margins(x=0.15, y=0.1)
    ax.set_xticks(sorted({x for x, _ in rows}))
    ax.grid(alpha=0.3)
    ax.legend()
axes[0].set_ylabel(f"decode tokens/s per node (reported, x{MTP:.3g})")
axes[1].set_ylabel(f"decode tokens/s per node (reported, x{MTP:.3g})")
axes[0].set_title("sockets per node (TP = sockets)")
axes[1].set_title("HBM capacity per socket (16 sockets)")
plt.show()'''),
]
