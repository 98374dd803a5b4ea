"""Pareto fronts of results records: the records no other record beats on every objective.

An objective is a results column (a declared field with a unit, :mod:`sn40l_sim.report.fields`;
nested fields by dotted name such as ``latency.tpot_s.p99``) and a direction, ``max`` or ``min``.
A record *dominates* another when it is at least as good on every objective and better on one; the
front is the records no record dominates, in their original order. Records with an empty objective
(a latency without a workload) are left out. A sweep section names its objectives
(:mod:`sn40l_sim.study.sweep.axes`) and the sweep writes the front beside its results.

Examples
--------
>>> records = [{"name": "a", "decode_tokens_per_s": 100.0, "tpot_s": 0.01},
...            {"name": "b", "decode_tokens_per_s": 300.0, "tpot_s": 0.02},
...            {"name": "c", "decode_tokens_per_s": 200.0, "tpot_s": 0.03},   # b is faster and quicker
...            {"name": "d", "decode_tokens_per_s": 400.0, "tpot_s": None}]   # no TPOT: left out
>>> [r["name"] for r in pareto_front(records, {"decode_tokens_per_s": "max", "tpot_s": "min"})]
['a', 'b']
>>> objective_problem("tpot_s"), objective_problem("kv_policy"), objective_problem("tpot")
(None, 'kv_policy is text, not a number', 'tpot is not a declared results field')
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sn40l_sim.errors import InputError
from sn40l_sim.report.fields import RESULTS
from sn40l_sim.report.figure import new_figure, place_labels, plain_log_ticks, save_figure
from sn40l_sim.report.registry import Field
from sn40l_sim.report.results import flatten, rounded

DIRECTIONS = ("max", "min")


def objective_problem(column: str) -> str | None:
    """Why ``column`` cannot be an objective (None when it can): it must be a declared results
    field holding a number (not text, a mapping, a list or a sweep axis)."""
    found = RESULTS.resolve(column)
    top, given = column.split(".")[0], column.count(".")
    if found is None and top in RESULTS and 0 < given < len(RESULTS[top].keys) and not RESULTS[top].path_key:
        # memory.hbm: some of a mapping's key levels, a group (it was "not a declared results field")
        rest = "".join(f".<{k}>" for k in RESULTS[top].keys[given:])
        return f"{column} holds several values; name one of them (e.g. {column}{rest})"
    if found is None:
        return f"{column} is not a declared results field"
    field = found[0]
    if field.parts and not field.is_list:
        # the numbers under the column, not the field's bare name: latency.tpot_s suggested "tpot_s",
        # another field (the step model's mean TPOT), not one of latency.tpot_s's percentiles
        leaves = _numeric_leaves(field, column + ".")
        shown = ", ".join(leaves[:6]) + (f" and {len(leaves) - 6} more" if len(leaves) > 6 else "")
        return f"{column} holds several values; name one of them: {shown}"
    if field.is_list or (field.keys and column.count(".") < len(field.keys)):
        return f"{column} holds several values; name one of them (e.g. {field.pattern()})"
    if field.sweep_only:
        return f"{column} is a sweep axis value, not a result"
    if field.unit == "":
        return f"{column} is text, not a number"
    return None


def _numeric_leaves(field: Field, prefix: str) -> list[str]:
    """Dotted columns of the numbers below ``field``'s parts (``prefix`` is the field's own column
    and a dot), a mapping's as its pattern (``<key>`` for each key level)."""
    leaves: list[str] = []
    for part in field.parts:
        if part.parts:
            leaves += _numeric_leaves(part, f"{prefix}{part.name}.")
        elif not part.is_list and part.unit != "":
            leaves.append(part.pattern(prefix))
    return leaves


def objective_values(records: Sequence[Mapping[str, Any]], objectives: Mapping[str, str]) -> np.ndarray:
    """``len(records) x len(objectives)`` values as the results files hold them (rounded to
    :data:`~sn40l_sim.report.results.SIGNIFICANT_DIGITS` significant digits), NaN where a record has
    none (or an infinite value, which the results files hold as empty)."""
    rows = []
    for record in records:
        flat = flatten(dict(record))
        row = []
        for column in objectives:
            value = flat.get(column)
            # compared as results.json and results.csv hold them (9 significant digits): two records
            # that differ only past those digits (float noise) tie, so the front is the one a reader
            # recomputes from the results files, rather than one of the two dropped on noise
            row.append(rounded(float(value)) if isinstance(value, (int, float)) and not isinstance(value, bool)
                       else np.nan)
        rows.append(row)
    return np.array(rows, dtype=float).reshape(len(records), len(objectives))


def objectives_missing(records: Sequence[Mapping[str, Any]], objectives: Mapping[str, str]) -> dict[str, int]:
    """Objective column -> how many of ``records`` have no number for it (only the columns some
    record lacks). Such records are left out of the front, so an objective that no record has
    (``slo.attainment`` of an experiment without ``slo:``) leaves an empty front: the sweep says so.

    >>> objectives_missing([{"tpot_s": 0.1}, {"tpot_s": None}], {"tpot_s": "min", "slo.attainment": "max"})
    {'tpot_s': 1, 'slo.attainment': 2}
    """
    if not records:
        return {}
    empty = np.isnan(objective_values(records, objectives)).sum(axis=0)
    return {column: int(n) for column, n in zip(objectives, empty, strict=True) if n}


def front_mask(values: np.ndarray, directions: Sequence[str]) -> np.ndarray:
    """True for the rows of ``values`` that no other row dominates (rows with a NaN are False).

    >>> front_mask(np.array([[1.0, 5.0], [2.0, 4.0], [1.0, 6.0], [2.0, 4.0]]), ["max", "min"]).tolist()
    [False, True, False, True]
    """
    wrong = [d for d in directions if d not in DIRECTIONS]
    if wrong:   # any other word was read as "min" (a sweep's objectives are checked before; a Python caller's not)
        raise InputError(f"objectives: expected {' or '.join(map(repr, DIRECTIONS))} for each column, got {wrong[0]!r}")
    # every objective turned into one to minimise
    costs = values * np.array([-1.0 if d == "max" else 1.0 for d in directions])
    valid = ~np.isnan(costs).any(axis=1)
    mask = valid.copy()
    candidates = costs[valid]
    for i in np.flatnonzero(valid):
        row = costs[i]
        dominated = (candidates <= row).all(axis=1) & (candidates < row).any(axis=1)
        mask[i] = not dominated.any()
    return mask


def pareto_front(records: Sequence[Mapping[str, Any]], objectives: Mapping[str, str]) -> list[Mapping[str, Any]]:
    """The non-dominated records for ``objectives`` (column -> ``max`` | ``min``), in order.

    Examples
    --------
    ``c`` is slower per token and gives fewer tokens/s than ``a``: dominated.

    >>> runs = [{"name": "a", "tpot_s": 0.05, "decode_tokens_per_s": 100},
    ...         {"name": "b", "tpot_s": 0.04, "decode_tokens_per_s": 80},
    ...         {"name": "c", "tpot_s": 0.06, "decode_tokens_per_s": 90}]
    >>> [r["name"] for r in pareto_front(runs, {"decode_tokens_per_s": "max", "tpot_s": "min"})]
    ['a', 'b']
    """
    if not records:
        return []
    mask = front_mask(objective_values(records, objectives), list(objectives.values()))
    return [r for r, keep in zip(records, mask, strict=True) if keep]


def pareto_plot(records: Sequence[Mapping[str, Any]], objectives: Mapping[str, str], path: Path,
                title: str = "") -> Path:
    """Every record on the first two objectives, the front highlighted and joined, to ``path``
    (PNG or SVG by suffix). With more objectives the front is still that of all of them, so some
    of its points may look dominated on these two axes: its points are then not joined, and the
    legend says whose front it is.

    Raises
    ------
    ValueError
        With fewer than two objectives (a front of one objective is its best records: no plot).
    """
    if len(objectives) < 2:
        raise ValueError("a Pareto plot needs two objectives")
    columns = list(objectives)[:2]
    values = objective_values(records, objectives)
    mask = front_mask(values, list(objectives.values()))
    labels = [RESULTS.axis_label(c) or (c, 1.0) for c in columns]
    x, y = values[:, 0] * labels[0][1], values[:, 1] * labels[1][1]
    fig = new_figure((7, 4.8))
    ax = fig.subplots()
    ax.scatter(x[~mask], y[~mask], s=14, color="#b8b8b8", label="dominated")
    order = np.argsort(x[mask], kind="stable")
    # with more objectives the front is not a curve on these two axes: a line joining its points
    # drew a zig-zag read as a trade-off curve, through points the plot shows as dominated
    joined = len(objectives) == 2
    ax.plot(x[mask][order], y[mask][order], "-o" if joined else "o", color="#1f4e8c", markersize=5,
            label="Pareto front" if joined else f"Pareto front of all {len(objectives)} objectives")
    names = [str(r.get("name", "")) for r, keep in zip(records, mask, strict=True) if keep]
    ax.set_xlabel(f"{labels[0][0]}, {objectives[columns[0]]}imise")
    ax.set_ylabel(f"{labels[1][0]}, {objectives[columns[1]]}imise")
    if _wide(x):
        ax.set_xscale("log")
        plain_log_ticks(ax, "x")
    if _wide(y):
        ax.set_yscale("log")
        plain_log_ticks(ax, "y")
    ax.set_title(title or "Pareto front")
    ax.legend(fontsize=8)
    # the front's names where they do not collide (they overlapped when close, and more than six were
    # all left out); pareto.csv lists every one
    place_labels(ax, x[mask][order], y[mask][order], [names[i] for i in order], fontsize=6)
    return save_figure(fig, path)


def _wide(values: np.ndarray) -> bool:
    """Positive values spanning more than two decades read better on a log axis."""
    shown = values[~np.isnan(values)]
    return bool(shown.size) and bool((shown > 0).all()) and shown.max() > 100 * shown.min()


__all__ = ["DIRECTIONS", "objective_problem", "objective_values", "objectives_missing", "front_mask", "pareto_front", "pareto_plot"]
