"""What a sweep would run, without running or checking it: ``describe``'s account of a ``sweep:``
section, each axis with its values and every file the sweep points name (a model or hardware axis
names files the base does not).

Examples
--------
>>> outline = sweep_outline(load_sweep("experiments/socket_scaling.yaml"))
>>> outline.runs, sorted({label for label, _, _ in outline.files})
(4, ['hardware', 'model'])
>>> sorted({Path(rel).name for label, rel, _ in outline.files if label == "model"})
['llama3_1_70b.yaml', 'llama3_1_8b.yaml']
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sn40l_sim.errors import InputError
from sn40l_sim.study.experiment_files import referenced_files
from sn40l_sim.study.points import points
from sn40l_sim.study.sweep.axes import Axis, value_text
from sn40l_sim.study.sweep.base import experiment_from_data
from sn40l_sim.study.sweep.load import Sweep, load_sweep  # noqa: F401  (load_sweep: the docstring's example)

#: an axis with more values shows the first few and the last (a range of 10,000 is one line)
SHOWN_VALUES = 12


@dataclass(frozen=True)
class SweepOutline:
    """The runs and files of a sweep."""

    #: runs of the sweep points whose experiment validates (each point runs its experiment's points:
    #: KV policies x prompt lengths)
    runs: int
    #: sweep points whose experiment does not validate (``check`` says why)
    invalid: int
    #: ``(label, path as written, resolved path)`` of each distinct file the sweep points name
    files: list[tuple[str, str, Path]]


def sweep_outline(sweep: Sweep) -> SweepOutline:
    """The runs and the files of every point of a loaded sweep (a point whose experiment does not
    validate is counted, not raised: describing is not checking)."""
    runs, invalid = 0, 0
    files: dict[Path, tuple[str, str, Path]] = {}
    for sp in sweep.points:
        try:
            exp = experiment_from_data(sp.data, sweep.doc)
            runs += len(points(exp))
            for label, rel, field in referenced_files(exp):
                target = exp.resolve(rel, field)
                files.setdefault(target, (label, rel, target))
        except InputError:
            invalid += 1
    return SweepOutline(runs, invalid, list(files.values()))


def shown_values(axis: Axis) -> str:
    """An axis's values as written (a labelled value as ``label=value``), the middle of a long axis
    elided.

    >>> shown_values(Axis("b", ("serving", "batch"), tuple(range(1, 21)), "batch"))
    '20 values: 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, ..., 20'
    >>> shown_values(Axis("m", ("model",), ("a.yaml", "b.yaml"), "m", ("A", "B")))
    '2 values: A=a.yaml, B=b.yaml'
    """
    texts = []
    for i, value in enumerate(axis.values):
        text = value if isinstance(value, str) else value_text(value)
        label = axis.value_labels[i] if axis.value_labels else text
        texts.append(text if label == text else f"{label}={text}")
    if len(texts) > SHOWN_VALUES:
        texts = texts[:SHOWN_VALUES - 1] + ["...", texts[-1]]
    return f"{len(axis.values)} value{'s' if len(axis.values) != 1 else ''}: " + ", ".join(texts)


def section_options(sweep: Sweep) -> list[str]:
    """The section's other settings in words: what a run that does not fit does, the objectives and
    the plot."""
    said = [f"infeasible: {sweep.infeasible}" + (" (a run that does not fit is listed, not failed)"
                                                  if sweep.infeasible == "skip" else
                                                  " (a run that does not fit fails the sweep)")]
    if sweep.objectives:
        said.append("objectives: " + ", ".join(f"{d}imise {c}" for c, d in sweep.objectives.items()))
    if sweep.plot:
        plot: dict[str, Any] = sweep.plot
        hue = plot.get("hue")
        by = ", ".join(hue) if isinstance(hue, list) else hue
        said.append(f"plot: {plot['y']} against {plot['x']}" + (f" by {by}" if by else ""))
    return said


__all__ = ["SweepOutline", "section_options", "shown_values", "sweep_outline"]
