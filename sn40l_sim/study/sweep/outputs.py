"""The ``plot:`` and ``objectives:`` entries of an experiment's ``sweep:`` section, checked against
the columns a sweep's results can have before anything runs (the axes themselves are
:mod:`sn40l_sim.study.sweep.axes`).

Examples
--------
>>> parse_plot({"x": "batch", "y": "decode_tokens_per_s"})["x"]
'batch'
>>> parse_plot({"x": "batch", "y": "no_such_column"})
Traceback (most recent call last):
...
sn40l_sim.study.sweep.axes.AxisError: 'no_such_column' is not a column of the results (see docs/results.md)
"""
from __future__ import annotations

from typing import Any

from sn40l_sim.errors import shown
from sn40l_sim.report.fields import RESULTS
from sn40l_sim.report.pareto import DIRECTIONS, objective_problem
from sn40l_sim.study.sweep.axes import AxisError

#: keys of the ``plot:`` entry
PLOT_KEYS = frozenset({"x", "y", "hue", "kind", "logx", "logy", "where", "label"})


def parse_plot(spec: Any, axis_names: list[str] | None = None, nested: dict[str, str] | None = None) -> dict[str, Any] | None:
    """The ``plot:`` entry of a sweep section (None when absent); with ``axis_names``, a column
    ``sweep.<name>`` must name one of them (the results have no other ``sweep.`` column) and not one
    of the ``nested`` axes (name -> ``lists`` or ``mappings``: results.csv has no column of a list,
    and a mapping's fields as ``sweep.<name>.<field>``). What only the results can show (rows that
    share an x, a ``where`` no row matches) is found after the run.

    >>> parse_plot({"x": "batch", "y": "ttft_s", "hue": "kv_policy"})["hue"]
    'kv_policy'
    """
    if spec is None:
        return None
    if not isinstance(spec, dict):
        raise AxisError("expected a mapping {x, y, hue, kind, logx, logy, where, label}")
    unknown = sorted(set(spec) - PLOT_KEYS, key=str)
    if unknown:
        raise AxisError(f"unknown key (expected {', '.join(sorted(PLOT_KEYS))})", (unknown[0],))
    for key in ("x", "y"):
        if not isinstance(spec.get(key), str):
            raise AxisError("required: a column of results.csv", (key,))
    hue = spec.get("hue")
    hues = [hue] if isinstance(hue, str) else hue if isinstance(hue, list) else None
    if hue is not None and (hues is None or not all(isinstance(h, str) for h in hues)):
        raise AxisError("expected a column of results.csv or a list of them", ("hue",))
    where = spec.get("where")
    if where is not None and (not isinstance(where, dict) or any(isinstance(v, (dict, list)) for v in where.values())):
        raise AxisError("expected a mapping of results column -> value, such as {batch: 16}", ("where",))
    kind = spec.get("kind", "line")
    if kind not in ("line", "bar", "scatter"):
        raise AxisError(f"expected line, bar or scatter, got {shown(kind)}", ("kind",))
    label = spec.get("label")
    if label is not None and not isinstance(label, str):
        raise AxisError(f"expected a column of results.csv, got {shown(label)}", ("label",))
    if label is not None and kind != "scatter":   # what the plot would refuse after every run
        raise AxisError("labels are written beside the points of a scatter plot: add kind: scatter", ("label",))
    for key in ("logx", "logy"):
        if not isinstance(spec.get(key, False), bool):
            raise AxisError(f"expected true or false, got {shown(spec[key])}", (key,))
    if spec.get("logx") and kind == "bar":   # a bar plot's x is categories: the log axis was dropped unsaid
        raise AxisError("a bar plot's x axis is categories, which have no logarithmic scale: drop logx or use "
                        "kind: line", ("logx",))
    # the columns must be ones a sweep's results.csv can have: found now, not after every run
    columns = [("x", spec["x"]), ("y", spec["y"])] + [(("hue", i) if isinstance(hue, list) else "hue", h)
                                                      for i, h in enumerate(hues or [])]
    columns += [(("where", c), c) for c in (where or {})] + ([("label", label)] if label is not None else [])
    # x is placed by its numbers on a scatter plot and on a log axis (the plot refuses text there)
    numeric_x = ": a scatter plot places points by their numbers" if kind == "scatter" else \
        ": a logarithmic x axis needs numbers" if spec.get("logx") else None
    for at, column in columns:
        if not isinstance(column, str) or RESULTS.resolve(column) is None:
            # an axis's own name is its column with sweep. before it (the results hold no other)
            hint = f": the axis {column} is the column sweep.{column}" if column in (axis_names or ()) else ""
            raise AxisError(f"{shown(column)} is not a column of the results{hint} (see docs/results.md)",
                            at if isinstance(at, tuple) else (at,))
        problem = _not_plotted(column, numeric=at == "y" or (at == "x" and numeric_x is not None))
        if problem:
            why = numeric_x if at == "x" and problem.endswith("is text, not a number") else ""
            raise AxisError(f"{problem}{why} (see docs/results.md)", at if isinstance(at, tuple) else (at,))
        name = column.removeprefix("sweep.")   # a mapping axis's field is sweep.<name>.<field>
        if axis_names is not None and column.startswith("sweep.") and name not in axis_names and not any(
                name.startswith(f"{m}.") for m, k in (nested or {}).items() if k == "mappings"):
            raise AxisError(f"{shown(column)} names no axis of this sweep (its axis columns: "
                            f"{', '.join('sweep.' + n for n in axis_names)})", at if isinstance(at, tuple) else (at,))
        kind = (nested or {}).get(name)
        if kind is not None:
            what = "lists, which results.csv leaves out (they stay in results.json)" if kind == "lists" else \
                f"mappings, whose fields are the columns {column}.<field>"
            raise AxisError(f"{shown(column)} holds {what}: plot another column (prefill_len for prompt_lens)",
                            at if isinstance(at, tuple) else (at,))
    return dict(spec)


def _not_plotted(column: str, numeric: bool) -> str | None:
    """Why a declared results name cannot be the plot's column (None when it can): a group of
    columns (``memory``, ``latency.tpot_s``) is no column of results.csv, and y takes numbers, which
    a text field (``kv_policy``, ``sweep_point``) never holds. Both were refused by the plot only
    after every run of the sweep; an axis's column (``sweep.<name>``) is left to its values.

    >>> _not_plotted("memory", numeric=False), _not_plotted("kv_policy", numeric=True)
    ('memory holds several values; name one of them (e.g. memory.<tier>.<use>)', 'kv_policy is text, not a number')
    >>> _not_plotted("kv_policy", numeric=False), _not_plotted("sweep.batch", numeric=True)
    (None, None)
    """
    problem = objective_problem(column)
    if problem is None or column.startswith("sweep."):
        return None
    field = RESULTS.resolve(column)[0]
    if field.parts or field.is_list or (field.keys and column.count(".") < len(field.keys)):
        return problem   # a group: the problem names its columns
    return f"{column} is text, not a number" if numeric and field.unit == "" else None


def parse_objectives(spec: Any) -> dict[str, str] | None:
    """The ``objectives:`` entry of a sweep section, column -> ``max`` | ``min`` (None when absent).

    >>> parse_objectives({"decode_tokens_per_s": "max", "latency.tpot_s.p99": "min"})
    {'decode_tokens_per_s': 'max', 'latency.tpot_s.p99': 'min'}
    >>> parse_objectives({"tpot_s": "least"})
    Traceback (most recent call last):
    ...
    sn40l_sim.study.sweep.axes.AxisError: expected max or min, got 'least'
    """
    if spec is None:
        return None
    if not isinstance(spec, dict) or not spec:
        raise AxisError("expected a mapping of results column -> max | min, such as {decode_tokens_per_s: max, "
                        "tpot_s: min}")
    for column, direction in spec.items():
        problem = objective_problem(column) if isinstance(column, str) else f"expected a column name, got {shown(column)}"
        if problem:
            raise AxisError(f"{problem} (see docs/results.md)", (column,))
        if direction not in DIRECTIONS:
            raise AxisError(f"expected max or min, got {shown(direction)}", (column,))
    return dict(spec)
