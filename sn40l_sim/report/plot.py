"""The throughput plot ``run`` writes beside the results (matplotlib's Agg canvas, no pyplot, no
display: :mod:`.figure`).

Left: decode tokens/s per point, raw and reported (x the expected tokens per step of speculative
decoding), with the batch written on each bar; beyond :data:`MANY_POINTS` points (a sweep run by
``run``) the bars lie on their side, one name a line. Right: KV occupancy of the decode node over
the served run, as a fraction of the memory reserved for its slots (a legend for a few points).

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

from matplotlib.lines import Line2D

from sn40l_sim.errors import InputError
from sn40l_sim.report.fields import RESULTS
from sn40l_sim.report.figure import new_figure, plain_log_ticks, save_figure

#: points beyond which the bars lie on their side, one name a line down the axis, and the occupancy
#: panel keeps no legend: a sweep of 52 points run by ``run`` wrote its names and batches into each
#: other, and its legend ran off the figure
MANY_POINTS = 12


def throughput_plot(records: Sequence[dict[str, Any]], path: Path, title: str = "") -> Path:
    """Draw the plot to ``path`` (PNG or SVG by suffix) and return the path."""
    if not records:   # from Python, an IndexError (records[0]) after the figure was made
        raise InputError("records: expected at least one result record, such as results.json's, got none")
    path = Path(path)   # a str, as a notebook writes it, was an AttributeError ('str' has no 'suffix')
    names = [r["name"] for r in records]
    raw = [r["decode_tokens_per_s"] for r in records]
    reported = [r["decode_tokens_per_s_reported"] for r in records]
    many = len(records) > MANY_POINTS
    fig = new_figure((12, max(4.2, 1.6 + 0.2 * len(records))) if many else (11, 4.2))
    ax_bar, ax_kv = fig.subplots(1, 2)
    x = range(len(records))
    width = 0.38
    per_step = records[0].get("tokens_per_forward", 1)
    shown = f"{per_step:.3g}"
    # the drafts a step verifies, not the tokens it yields, say whether it decodes speculatively:
    # drafts never accepted (acceptance 0, which run warns of) are timed in the step and yield one token
    drafts = records[0].get("speculative_drafts", 0 if per_step == 1 else None)
    if drafts == 0:
        # without speculative decoding the two bars are equal: "x 1 tokens / step" read as a typo
        reported_label = "reported (= raw: no speculative decoding)"
    elif shown == "1" and drafts is not None:
        reported_label = f"reported (= raw: {drafts} draft{'s' if drafts != 1 else ''} a step, none accepted)"
    else:
        reported_label = f"reported (x {shown} tokens / step)"
    labels = ("raw (1 token / sequence and step)", reported_label)
    draw = ax_bar.barh if many else ax_bar.bar
    draw([i - width / 2 for i in x], raw, width, label=labels[0], color="#7a9cc6")
    bars = draw([i + width / 2 for i in x], reported, width, color="#1f4e8c", label=labels[1])
    for bar, r in zip(bars, records, strict=True):
        if many:   # at the end of its bar, read across
            ax_bar.annotate(f"batch {r['batch']}", (bar.get_width(), bar.get_y() + bar.get_height() / 2),
                            xytext=(2, 0), textcoords="offset points", ha="left", va="center", fontsize=6)
        else:
            ax_bar.annotate(f"batch {r['batch']}", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                            ha="center", va="bottom", fontsize=8)
    if many:
        ax_bar.set_yticks(list(x), names, fontsize=7)
        ax_bar.invert_yaxis()   # the first point at the top, as the results list it
        ax_bar.set_xlabel("decode tokens/s per node")
    else:
        ax_bar.set_xticks(list(x), names, rotation=20 if len(names) > 3 else 0,
                          ha="right" if len(names) > 3 else "center")
        ax_bar.set_ylabel("decode tokens/s per node")
    ax_bar.set_title("Decode throughput at each point's batch")
    if many:   # under the figure: inside the axes it hid the first bars' batches
        fig.legend(*ax_bar.get_legend_handles_labels(), loc="outside lower left", ncols=2, fontsize=8)
    else:
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
    ax_kv.set_title("KV occupancy over the served run" + ("\n(a line a point)" if many else ""))
    if ax_kv.lines and not many:
        ax_kv.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    return save_figure(fig, path, metadata={"Software": None} if path.suffix == ".png" else None)


def slo_attainment_plot(records: Sequence[dict[str, Any]], path: Path, title: str = "") -> Path | None:
    """SLO attainment against the arrival rate, one line per point, from the probes of a rate
    search (``rate_probes``); the highest rate under the SLOs is marked on each line. None (and no
    file) when no record holds probes.

    >>> import tempfile, pathlib
    >>> rec = {"name": "full", "max_rate_per_s": 2.0, "rate_probes": [
    ...     {"rate_per_s": 1.0, "attainment": 1.0, "holds": True}, {"rate_per_s": 2.0, "attainment": 0.95, "holds": True},
    ...     {"rate_per_s": 4.0, "attainment": 0.2, "holds": False}]}
    >>> slo_attainment_plot([rec], pathlib.Path(tempfile.mkdtemp()) / "slo.png").stat().st_size > 0
    True
    """
    path = Path(path)
    searched = [r for r in records if r.get("rate_probes")]
    if not searched:
        return None
    probe = {part.name: part for part in RESULTS["rate_probes"].parts}
    fig = new_figure((7.8, 4.2))
    ax = fig.subplots()
    for r in searched:
        probes = sorted(r["rate_probes"], key=lambda p: p["rate_per_s"])
        (line,) = ax.plot([p["rate_per_s"] for p in probes], [p["attainment"] for p in probes], label=r["name"])
        # a probe above the rate the decode slots or the prefilling nodes sustain fails though all its
        # requests met the SLOs (a finite run starts with free slots and an empty queue): drawn
        # alike, it read as a rate that held
        for holds, face in ((True, line.get_color()), (False, "white")):
            shown = [p for p in probes if bool(p.get("holds")) == holds]
            if shown:
                ax.plot([p["rate_per_s"] for p in shown], [p["attainment"] for p in shown], linestyle="none",
                        marker="o", color=line.get_color(), markerfacecolor=face)
        best = r.get("max_rate_per_s")
        if best is not None:
            ax.axvline(best, color=line.get_color(), linestyle=":", linewidth=1)
    ax.set_xscale("log")
    plain_log_ticks(ax, "x")
    ax.set_xlabel(probe["rate_per_s"].axis_label()[0])
    ax.set_ylabel(probe["attainment"].axis_label()[0])
    ax.set_ylim(0, 1.05)
    ax.set_title(title or "SLO attainment against arrival rate", fontsize=9)
    # what the markers and the dotted lines mean, whatever the title (run's names the experiment)
    key = [Line2D([], [], color="grey", marker="o", linestyle="none", label="SLOs hold"),
           Line2D([], [], color="grey", marker="o", markerfacecolor="white", linestyle="none",
                  label="SLOs fail (or the rate is above what\nthe decode slots or prefill sustain)"),
           Line2D([], [], color="grey", linestyle=":", label="highest rate under the SLOs")]
    # beside the axes: inside, it hid the lines where they fall (at the rates searched)
    ax.legend(handles=[*ax.get_legend_handles_labels()[0], *key], fontsize=7, loc="upper left",
              bbox_to_anchor=(1.01, 1))
    return save_figure(fig, path, metadata={"Software": None} if path.suffix == ".png" else None)
