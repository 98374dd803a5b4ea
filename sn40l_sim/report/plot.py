"""The throughput plot ``run`` writes beside the results (matplotlib, Agg backend, no display).

Left: decode tokens/s per point, raw and reported (x the expected tokens per step of speculative
decoding), with the batch
written on each bar. Right: KV occupancy of the decode node over the served run, as a fraction of
the memory reserved for its slots.

Examples
--------
>>> import tempfile, pathlib
>>> rec = {"name": "full", "batch": 16, "decode_tokens_per_s": 180.0,
...        "decode_tokens_per_s_reported": 432.0, "tokens_per_forward": 2.44,
...        "kv_occupancy": {"capacity_bytes_per_node": 100, "series": [
...            {"node": 0, "t_s": 1.0, "kv_bytes": 50, "slots_in_use": 8}]}}
>>> path = throughput_plot([rec], pathlib.Path(tempfile.mkdtemp()) / "throughput.png", title="demo")
>>> path.stat().st_size > 0
True
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sn40l_sim.report.outputs import atomic_path


def throughput_plot(records: Sequence[dict[str, Any]], path: Path, title: str = "") -> Path:
    """Draw the plot to ``path`` (PNG or SVG by suffix) and return the path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["name"] for r in records]
    raw = [r["decode_tokens_per_s"] for r in records]
    reported = [r["decode_tokens_per_s_reported"] for r in records]
    fig, (ax_bar, ax_kv) = plt.subplots(1, 2, figsize=(11, 4.2), constrained_layout=True)
    x = range(len(records))
    width = 0.38
    ax_bar.bar([i - width / 2 for i in x], raw, width, label="raw (1 token / sequence and step)", color="#7a9cc6")
    bars = ax_bar.bar([i + width / 2 for i in x], reported, width, color="#1f4e8c",
                      label=f"reported (x {records[0].get('tokens_per_forward', 1):.3g} tokens / step)")
    for bar, r in zip(bars, records, strict=True):
        ax_bar.annotate(f"batch {r['batch']}", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        ha="center", va="bottom", fontsize=8)
    ax_bar.set_xticks(list(x), names, rotation=20 if len(names) > 3 else 0, ha="right" if len(names) > 3 else "center")
    ax_bar.set_ylabel("decode tokens/s per node")
    ax_bar.set_title("Decode throughput at each point's batch")
    ax_bar.legend(fontsize=8)
    for r in records:
        occ = r.get("kv_occupancy") or {}
        series = [p for p in occ.get("series", []) if p["node"] == 0]
        capacity = occ.get("capacity_bytes_per_node") or 1
        if series:
            ax_kv.step([p["t_s"] for p in series], [p["kv_bytes"] / capacity for p in series],
                       where="post", label=r["name"])
    ax_kv.set_xlabel("simulated time (s)")
    ax_kv.set_ylabel("KV held / KV reserved (decode node 0)")
    ax_kv.set_ylim(0, 1.05)
    ax_kv.set_title("KV occupancy over the served run")
    if ax_kv.lines:
        ax_kv.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as temporary:   # whole or absent, never a truncated image
        fig.savefig(temporary, dpi=120, metadata={"Software": None} if path.suffix == ".png" else None)
    plt.close(fig)
    return path
