"""A sweep's figures: ``sweep.png`` from the ``plot:`` entry of its section (drawn from the
``results.csv`` the sweep wrote, as ``python -m sn40l_sim plot`` draws it) and the Pareto front of its
``objectives:`` (``pareto.json``, ``pareto.csv``, ``pareto.png``). Part of :mod:`.run`.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from sn40l_sim.errors import InputError
from sn40l_sim.report.outputs import write_text
from sn40l_sim.report.pareto import pareto_front, pareto_plot
from sn40l_sim.report.plot_csv import plot_csv
from sn40l_sim.report.results import to_csv, to_json
from sn40l_sim.study.sweep.load import Sweep


def write_front(records: Sequence[dict], objectives: dict[str, str], out_dir: Path, title: str = "",
                plot: bool = True) -> list[dict]:
    """Write the records on the Pareto front of ``objectives`` to ``pareto.json`` and
    ``pareto.csv`` (the format of the results) and, with two objectives or more and ``plot``, draw
    ``pareto.png``; returns the front."""
    front = [dict(r) for r in pareto_front(records, objectives)]
    write_text(out_dir / "pareto.json", to_json(front))
    write_text(out_dir / "pareto.csv", to_csv(front) if front else "")
    if plot and front and len(objectives) >= 2:
        pareto_plot(records, objectives, out_dir / "pareto.png", title=f"{title}: Pareto front")
    return front


def plot_sweep(sweep: Sweep, csv_path: Path, out: Path) -> Path:
    """Draw the section's ``plot:`` from the sweep's ``csv_path`` into ``out``; a column or value the
    results do not hold is an :class:`InputError` at ``sweep.plot`` of the experiment file."""
    spec = sweep.plot or {}
    hue = spec.get("hue")
    where = spec.get("where") or {}
    try:
        return plot_csv(csv_path, x=spec["x"], y=spec["y"], hue=[hue] if isinstance(hue, str) else hue,
                        out=out, kind=spec.get("kind", "line"), logx=bool(spec.get("logx", False)),
                        logy=bool(spec.get("logy", False)),
                        where={str(k): str(v) for k, v in where.items()}, label=spec.get("label"),
                        value_names=_value_names(sweep), label_as=_label_as(sweep))
    except InputError as exc:
        raise _plot_section_error(sweep, csv_path, exc) from None


def _value_names(sweep: Sweep) -> dict[str, dict[str, str]]:
    """``sweep.<axis>`` column -> value as the CSV holds it -> the axis's label for it, for the axes
    whose ``labels:`` name text values (a model file's path: the legend shows the label) or null
    (an empty cell: ``prefill_chunk: [null, 2048]`` labelled ``whole`` showed a blank entry)."""
    return {f"sweep.{axis.name}": {("" if value is None else value): name
                                   for value, name in zip(axis.values, axis.value_labels, strict=True)
                                   if (isinstance(value, str) or value is None) and name != value}
            for axis in sweep.axes if axis.value_labels}


def _label_as(sweep: Sweep) -> dict[str, str]:
    """``sweep.<axis>`` -> ``sweep.<its path>`` for the axes named apart from their path, so that the
    plot labels ``sweep.hbm`` as the field it sets, with its unit."""
    return {f"sweep.{axis.name}": "sweep." + ".".join(axis.path) for axis in sweep.axes
            if axis.name != ".".join(axis.path)}


#: the options of ``python -m sn40l_sim plot`` that are keys of a sweep's ``plot:`` section
_PLOT_OPTIONS = re.compile(r"--(x|y|hue|where|logx|logy|kind|label)\b")


def _plot_section_error(sweep: Sweep, csv_path: Path, exc: InputError) -> InputError:
    """:func:`plot_csv`'s error, which names the plot command's options (``--x``), located instead at
    the experiment's ``plot:`` section (``sweep.plot.x``, with its line), the results it plotted named."""
    key = (exc.field or "").removeprefix("--")
    at = ("sweep", "plot") + ((key,) if _PLOT_OPTIONS.fullmatch(exc.field or "") and key in (sweep.plot or {}) else ())
    message = _PLOT_OPTIONS.sub(r"sweep.plot.\1", exc.message.replace("--where COLUMN=VALUE", "--where {COLUMN: VALUE}"))
    return sweep.doc.error(at, f"{message} (plotting {csv_path})")


__all__ = ["plot_sweep", "write_front"]
