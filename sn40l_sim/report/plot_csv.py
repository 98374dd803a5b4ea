"""Plot two columns of a ``results.csv`` against each other (``python -m sn40l_sim plot``).

One line (or bar group) per value of the ``hue`` columns, x sorted, axis labels with units from :func:`axis_label`
(the declared results fields of :mod:`sn40l_sim.report.fields`; sizes shown in GiB, bandwidths in GB/s), and the
experiment's name as the title. Rows can be filtered with ``where`` (column -> value). When several rows of one hue
share an x the plot refuses to average them silently: the :class:`~sn40l_sim.errors.InputError` names the columns
that tell them apart, to add to ``hue`` or to ``where``. A row without a finite number for ``y`` (or for ``x``, when
that is a column of numbers) is left out with a warning naming its line
(:func:`~sn40l_sim.report.csv_table.numeric_rows`). Matplotlib runs with the Agg backend.

Examples
--------
>>> axis_label("decode_tokens_per_s"), axis_label("memory.hbm.kv")
(('decode tokens/s (raw)', 1.0), ('HBM per socket: kv (GiB)', 9.313225746154785e-10))
>>> axis_label("sweep.hardware.socket.p2p.bytes_per_s_per_port")[0]
'P2P bandwidth per port (GB/s)'
>>> import pathlib, tempfile
>>> folder = pathlib.Path(tempfile.mkdtemp())
>>> _ = (folder / "results.csv").write_text(
...     "experiment,kv_policy,batch,decode_tokens_per_s\\n"
...     "demo,full,1,10\\ndemo,full,2,19\\ndemo,snapstream,1,11\\ndemo,snapstream,2,21\\n")
>>> plot_csv(folder / "results.csv", x="batch", y="decode_tokens_per_s", hue=["kv_policy"]).name
'decode_tokens_per_s_vs_batch.png'
>>> plot_csv(folder / "results.csv", x="batch", y="tpot_s")
Traceback (most recent call last):
...
sn40l_sim.errors.InputError: ...results.csv: --y: unknown column 'tpot_s'; the file has: experiment, kv_policy, batch, decode_tokens_per_s
"""
from __future__ import annotations

import difflib
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from sn40l_sim.errors import InputError
from sn40l_sim.report import figure
from sn40l_sim.report.axis_text import category_ticks, fit_axis_label, natural_key
from sn40l_sim.report.csv_table import finite, matches, number_column, numeric_rows, one_spelling, read_csv
from sn40l_sim.report.fields import RESULTS
from sn40l_sim.report.figure import check_figure_suffix, new_figure, place_labels, plain_log_ticks, save_figure
from sn40l_sim.report.input_labels import INPUT_LABELS, TIER_FIELD_LABELS
from sn40l_sim.report.registry import Fields

GIB = 2.0**30

#: (suffix of the last name part, unit text, scale)
_SUFFIX_UNITS = (("bytes_per_s_per_unit", "GB/s", 1e-9), ("bytes_per_s_per_port", "GB/s", 1e-9),
                 ("bytes_per_s", "GB/s", 1e-9), ("_hz", "GHz", 1e-9), ("bytes", "GiB", 1 / GIB),
                 ("per_s", "", 1.0), ("_s", "s", 1.0))


def axis_label(column: str, fields: Fields = RESULTS) -> tuple[str, float]:
    """``(label with units, factor the values are multiplied by)`` for a CSV column: a results
    column as declared in :mod:`sn40l_sim.report.fields`, a sweep axis by :data:`INPUT_LABELS`."""
    for prefix in ("sweep.hardware.", "sweep."):
        if column.startswith(prefix) and column[len(prefix):]:
            return _input_label(column[len(prefix):], fields)
    declared = fields.axis_label(column)
    return declared if declared is not None else _input_label(column, fields)


def _input_label(name: str, fields: Fields) -> tuple[str, float]:
    """The label of an input path (a sweep axis), or of an undeclared column."""
    last = name.split(".")[-1]
    base = INPUT_LABELS.get(name, INPUT_LABELS.get(last)) or _tier_label(name)
    if base is None and last in fields:  # e.g. serving.batch: labelled as the results field batch
        return fields[last].axis_label()
    base = base or name
    for suffix, unit, scale in _SUFFIX_UNITS:
        if last.endswith(suffix):
            if not unit or base.endswith(")"):
                return base, 1.0
            return f"{base} ({unit})", scale
    return base, 1.0


def _tier_label(name: str) -> str | None:
    """``socket.memory.hbm.latency_s`` -> ``HBM latency`` (any tier: tiers are data)."""
    parts = name.split(".")
    if parts[:2] == ["socket", "memory"] and len(parts) == 4 and parts[3] in TIER_FIELD_LABELS:
        return f"{parts[2].upper()} {TIER_FIELD_LABELS[parts[3]]}"
    return None


def _labelled(column: str, fields: Fields = RESULTS) -> bool:
    """Whether :func:`axis_label` knows the column (else a legend shows its name)."""
    name = column.removeprefix("sweep.hardware.").removeprefix("sweep.")
    return (fields.resolve(column) is not None or name in INPUT_LABELS or _tier_label(name) is not None
            or name.split(".")[-1] in fields)


def _check_columns(path: Path, columns: list[str], wanted: dict[str, Sequence[str]]) -> None:
    for option, names in wanted.items():
        for name in names:
            if name in columns:
                continue
            group = [c for c in columns if c.startswith(name + ".")]   # a nested field, flattened
            if group:
                raise InputError(f"{name!r} is a group of {len(group)} columns; name one of them: {', '.join(group)}",
                                 file=path, field=option)
            raise InputError(f"unknown column {name!r}{_did_you_mean(name, columns)}; the file has: "
                             f"{', '.join(columns)}", file=path, field=option)


def _did_you_mean(name: str, columns: list[str]) -> str:
    """The columns ``name`` most likely meant, first in a message that then lists some 150 columns.

    >>> _did_you_mean("policy", ["name", "kv_policy", "batch"]), _did_you_mean("zzz", ["batch"])
    (" (did you mean 'kv_policy'?)", '')
    """
    ends = [c for c in columns if re.search(rf"[._]{re.escape(name)}$", c)]
    close = list(dict.fromkeys(ends + difflib.get_close_matches(name, columns, n=3, cutoff=0.75)))[:3]
    return f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""


def _series(path: Path, rows: list[dict[str, str]], x: str, y: str, hue: list[str], columns: list[str]):
    """``{hue values: [(x, y), ...]}`` with x sorted; refuses several rows at one x."""
    groups: dict[tuple[str, ...], dict[str, list[dict[str, str]]]] = {}
    for row in rows:
        if finite(row[y]) is None:
            continue
        groups.setdefault(tuple(row[h] for h in hue), {}).setdefault(row[x], []).append(row)
    if not groups:
        raise InputError(f"column {y!r} has no numeric values in the selected rows", file=path, field="--y")
    numeric_x = all(finite(value) is not None for g in groups.values() for value in g)
    out = {}
    for key, by_x in groups.items():
        for value, same in by_x.items():
            if len(same) > 1:
                differ = [c for c in columns if c not in (x, y) and len({r[c] for r in same}) > 1]
                label = ", ".join(f"{h}={v}" for h, v in zip(hue, key, strict=True)) or "all rows"
                raise InputError(f"{len(same)} rows have {x}={value} ({label}); they differ in "
                                 f"{', '.join(differ[:6]) or 'no column'}: add one to --hue or select rows "
                                 "with --where COLUMN=VALUE", file=path, field="--x")
        points = [(value, float(same[0][y])) for value, same in by_x.items()]
        points.sort(key=lambda p: (finite(p[0]), p[0]) if numeric_x else natural_key(p[0]))
        out[key] = points
    return dict(sorted(out.items(), key=lambda kv: tuple((finite(v) is None, finite(v) or 0, v) for v in kv[0]))), numeric_x


def plot_csv(csv_path: str | Path, x: str, y: str, hue: Sequence[str] | None = None, out: str | Path | None = None,
             kind: str = "line", logx: bool = False, where: dict[str, str] | None = None, logy: bool = False,
             label: str | None = None, value_names: Mapping[str, Mapping[str, str]] | None = None,
             label_as: Mapping[str, str] | None = None) -> Path:
    """Plot ``y`` against ``x`` from a results CSV, one series per ``hue`` value; returns the path.

    Parameters
    ----------
    csv_path : str or Path
        A ``results.csv`` written by ``run`` or ``sweep``.
    x, y : str
        Column names (``y`` numeric).
    hue : list of str, optional
        Columns whose combined value picks the series.
    out : str or Path, optional
        ``.png``, ``.svg`` or ``.pdf``; default ``<csv folder>/<y>_vs_<x>.png``.
    kind : {"line", "bar", "scatter"}
        Lines with markers, grouped bars (x as categories), or unjoined points (a Pareto plot: several rows of a
        series may share an x, which must be numbers).
    logx, logy : bool
        Logarithmic x axis (line and scatter plots) / y axis.
    where : dict, optional
        Column -> value: keep only matching rows (numbers compare as numbers).
    label : str, optional
        A column whose value is written beside each point (scatter plots).
    value_names : mapping, optional
        Column -> CSV value -> the name the legend (and a text x axis) gives it (a sweep axis's
        ``labels:``, for its values written as file paths).
    label_as : mapping, optional
        Column -> the column whose label and unit it takes (a sweep axis named apart from its path:
        ``sweep.hbm`` -> ``sweep.hardware.socket.memory.hbm.bytes_per_s_per_unit``, in GB/s).

    Raises
    ------
    InputError
        For a CSV file :func:`~sn40l_sim.report.csv_table.read_csv` refuses (a ragged row, a column
        named twice), an unknown column (naming the available ones), an unsupported output format or kind,
        rows that cannot be told apart, or a value a logarithmic axis cannot show (zero, negative or past 1e200).
    """
    import matplotlib

    path = Path(csv_path)
    hue = [hue] if isinstance(hue, str) else list(hue or [])   # one column's name, not its letters ("unknown column 'k'")
    where = figure.checked_columns(x, y, where)
    columns, rows = read_csv(path)
    _check_columns(path, columns, {"--x": [x], "--y": [y], "--hue": hue, "--where": list(where),
                                   "--label": [label] if label else []})
    if kind not in ("line", "bar", "scatter"):
        raise InputError(f"expected line, bar or scatter, got {kind!r}", field="--kind")
    if label and kind != "scatter":
        raise InputError("labels are written beside the points of a scatter plot: add --kind scatter", field="--label")
    out_path = Path(out) if out is not None else path.parent / f"{_safe(y)}_vs_{_safe(x)}.png"
    check_figure_suffix(out_path, "--out")
    for column, value in where.items():
        kept = [r for r in rows if matches(r[column], value)]
        if not kept:   # which condition emptied the selection, and the values its column does hold
            held = list(dict.fromkeys(r[column] for r in rows))
            shown = ", ".join(repr(v) for v in held[:12]) + (f", ... ({len(held)} values)" if len(held) > 12 else "")
            raise InputError(f"no row matches {where}: {column} is never {value!r} in the rows selected "
                             f"(it holds {shown})", file=path, field="--where")
        rows = kept
    numbers = [y, x] if kind == "scatter" or number_column(rows, x) else [y]
    rows = numeric_rows(path, rows, numbers)
    # rows are grouped by their cells' text: 1 and 1.0 must be one series (and one x), not two
    rows = one_spelling(rows, list(dict.fromkeys([x, *hue])))
    for column, option in zip(numbers, ("--y", "--x"), strict=False):
        _check_magnitude(path, rows, column, option)
    if logy:
        _check_log_axis(path, rows, y, "--logy")
    if logx and kind != "bar":   # a bar plot's x is categories: --logx is refused below
        _check_log_axis(path, rows, x, "--logx")
    label_as = dict(label_as or {})
    x_label, x_scale = axis_label(label_as.get(x, x))
    y_label, y_scale = axis_label(label_as.get(y, y))
    fig = new_figure((7.5, 4.5))
    ax = fig.subplots()
    series, numeric_x = ({}, True) if kind == "scatter" else _series(path, rows, x, y, hue, columns)
    labelled: list[tuple[float, float, str]] = []
    if kind == "scatter":
        labelled = _scatter(ax, path, rows, x, y, hue, label, x_scale, y_scale, value_names, label_as)
        if logx:
            ax.set_xscale("log")
            plain_log_ticks(ax, "x")
    elif kind == "bar" or not numeric_x:
        if logx:   # categories have no log scale: the option was dropped without a word
            raise InputError(f"{x} is drawn as categories ({'--kind bar' if kind == 'bar' else 'not all numbers'}), "
                             "which have no logarithmic scale: drop --logx", file=path, field="--logx")
        categories = sorted({p[0] for pts in series.values() for p in pts},
                            key=lambda v: (finite(v), v) if numeric_x else natural_key(v))
        width = 0.8 / max(1, len(series))
        for i, (key, points) in enumerate(series.items()):
            ys = dict(points)
            xs = [j for j, c in enumerate(categories) if c in ys]
            ax.bar([j - 0.4 + width * (i + 0.5) for j in xs], [ys[categories[j]] * y_scale for j in xs], width,
                   label=_legend(hue, key, value_names, label_as))
        ax.set_xticks(range(len(categories)), [_tick(c, x_scale) if numeric_x else
                                               (value_names or {}).get(x, {}).get(c, c) for c in categories])
    else:
        styles = _styles(list(series))
        for key, points in series.items():
            ax.plot([float(p[0]) * x_scale for p in points], [p[1] * y_scale for p in points],
                    label=_legend(hue, key, value_names, label_as), **styles[key])
        if logx:
            ax.set_xscale("log", base=2 if _powers_of_two(series) else 10)
        xs = sorted({float(p[0]) * x_scale for pts in series.values() for p in pts})
        if len(xs) <= 12:
            ax.set_xticks(xs, [f"{v:g}" for v in xs])
            ax.minorticks_off()
        elif logx and not _powers_of_two(series):   # a base-2 axis is labelled at its powers already
            plain_log_ticks(ax, "x")
    if logy:
        ax.set_yscale("log")
        plain_log_ticks(ax, "y")
    ax.set_xlabel(x_label)
    ax.set_ylabel(y_label)
    ax.grid(True, alpha=0.3)
    if hue:
        shown = [label_as.get(h, h) for h in hue]
        ax.legend(title=", ".join(axis_label(s)[0] if _labelled(s) else h for h, s in zip(hue, shown, strict=True)),
                  fontsize=8)
    experiments = sorted({r.get("experiment", "") for r in rows} - {""})
    title = ", ".join(experiments) or path.parent.name
    suffix = ", ".join(f"{k}={v}" for k, v in where.items())
    ax.set_title(title + (f" ({suffix})" if suffix else ""))
    figure.legend_clear_of_data(ax)   # after the title: the legend is placed on the laid-out axes
    if kind == "bar" or (kind != "scatter" and not numeric_x):   # turned as far as the axes left need
        category_ticks(ax)
    fit_axis_label(ax, "y")
    if labelled:   # last: the labels are placed on the laid-out figure, clear of each other and the legend
        place_labels(ax, *zip(*labelled, strict=True), fontsize=6)
    matplotlib.rcParams["svg.hashsalt"] = "sn40l_sim"
    metadata = {"Software": None} if out_path.suffix.lower() == ".png" else {"Date": None}
    return save_figure(fig, out_path, metadata=metadata)


#: the largest magnitude an axis (a logarithmic one: its decade ticks from about 1e220) shows: past it, ticks overflow
MAX_MAGNITUDE, MAX_LOG_MAGNITUDE = 1e300, 1e200


def _check_magnitude(path: Path, rows: list[dict[str, str]], column: str, option: str, log: bool = False) -> None:
    """Refuse a finite value too large for an axis (``log``: a logarithmic one) to span (``1e308`` beside ``-1e308``)."""
    limit, axis = (MAX_LOG_MAGNITUDE, "a logarithmic axis") if log else (MAX_MAGNITUDE, "an axis")
    big = [r.line for r in rows if abs(finite(r[column]) or 0.0) > limit]
    if big:
        raise InputError(f"{column} is beyond {limit:g} in magnitude (line {big[0]}): {axis} cannot span it",
                         file=path, field=option)


def _check_log_axis(path: Path, rows: list[dict[str, str]], column: str, option: str) -> None:
    """Refuse a log axis for ``column`` when a selected row's value is not positive: matplotlib
    would leave that point out of the plot without a word."""
    bad = [v for v in (finite(r[column]) for r in rows) if v is not None and v <= 0]
    if bad:
        raise InputError(f"a logarithmic axis cannot show {column} = {min(bad):g} in {len(bad)} selected row(s): "
                         f"drop {option} or leave those rows out with --where COLUMN=VALUE", file=path, field=option)
    _check_magnitude(path, rows, column, option, log=True)


def _scatter(ax, path: Path, rows: list[dict[str, str]], x: str, y: str, hue: list[str], label: str | None,
             x_scale: float, y_scale: float, names: Mapping[str, Mapping[str, str]] | None = None,
             label_as: Mapping[str, str] | None = None) -> list[tuple[float, float, str]]:
    """Unjoined points, one colour and marker per hue value; returns ``(x, y, label's value)`` of each
    point to label (none without ``label``)."""
    groups: dict[tuple[str, ...], list[dict[str, str]]] = {}
    for row in rows:
        if finite(row[x]) is not None and finite(row[y]) is not None:
            groups.setdefault(tuple(row[h] for h in hue), []).append(row)
    if not any(finite(row[x]) is not None for row in rows):   # text on x: not --y's fault, as this said
        raise InputError(f"column {x!r} has no numeric values in the selected rows: a scatter plot places points "
                         "by their numbers (--kind line or bar draws categories)", file=path, field="--x")
    if not groups:
        raise InputError(f"columns {x!r} and {y!r} have no numeric pair in the selected rows", file=path, field="--y")
    keys = sorted(groups, key=lambda k: tuple((finite(v) is None, finite(v) or 0, v) for v in k))
    styles = _styles(keys)
    labelled: list[tuple[float, float, str]] = []
    for key in keys:
        style = {k: v for k, v in styles[key].items() if k != "linestyle"}
        points = groups[key]
        xs = [float(r[x]) * x_scale for r in points]
        ys = [float(r[y]) * y_scale for r in points]
        ax.scatter(xs, ys, label=_legend(hue, key, names, label_as), s=28, c=[style.get("color", "C0")] * len(xs),
                   marker=style.get("marker", "o"))
        if label:
            labelled += [(px, py, r[label]) for r, px, py in zip(points, xs, ys, strict=True)]
    return labelled


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


def _styles(keys: list[tuple[str, ...]]) -> dict[tuple[str, ...], dict]:
    """Line styles: the first hue column (when there are two or more) picks the dash pattern and
    marker, the others together the colour (a sequential map when that is one column of numbers),
    so that ``--hue kv_policy prefill_len`` reads as one dash per policy and one colour per length,
    and with three columns no two series look alike (the middle one chose nothing when only the last
    picked the colour); past the cycle's colours, the dash and marker tell text values apart."""
    import matplotlib

    def rest(key: tuple[str, ...]) -> tuple[str, ...]:
        return key[1:] if len(key) > 1 else key

    def order(values: tuple[str, ...]) -> tuple:
        return tuple((finite(v) is None, finite(v) or 0, v) for v in values)

    colours = sorted({rest(k) for k in keys if k}, key=order)
    first = sorted({k[0] for k in keys if len(k) > 1})
    numeric = len(colours) > 2 and all(len(c) == 1 and finite(c[0]) is not None for c in colours)
    cmap = matplotlib.colormaps["viridis"]
    cycle = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
    dashes, markers = ["-", "--", ":", "-."], ["o", "s", "^", "D", "v"]
    out = {}
    for key in keys:
        if not key:
            out[key] = {"marker": "o"}
            continue
        j = colours.index(rest(key))
        colour = cmap(0.9 * j / max(1, len(colours) - 1)) if numeric else cycle[j % len(cycle)]
        k = (first.index(key[0]) if len(key) > 1 else 0) + (0 if numeric else j // len(cycle)) * max(1, len(first))
        out[key] = {"color": colour, "linestyle": dashes[k % len(dashes)], "marker": markers[k % len(markers)]}
    return out


def _legend(hue: list[str], key: tuple[str, ...], names: Mapping[str, Mapping[str, str]] | None = None,
            label_as: Mapping[str, str] | None = None) -> str:
    """A series' legend entry: its hue values in the unit the legend's title names (a bandwidth
    column titled in GB/s shows 25, not the CSV's 25000000000.0), or by the name ``names`` gives.

    >>> _legend(["kv_policy", "sweep.hardware.socket.p2p.bytes_per_s_per_port"], ("full", "25000000000.0"))
    'full, 25'
    >>> _legend(["sweep.model"], ("../graphs/llama3_1_8b.yaml",), {"sweep.model": {"../graphs/llama3_1_8b.yaml": "8B"}})
    '8B'
    >>> _legend(["sweep.serving.prefill_chunk", "decode_nodes"], ("", "2"))
    'none, 2'
    """
    names, label_as = names or {}, label_as or {}
    # an empty cell is a field left out or null (serving.prefill_chunk: whole prompts): "none", not blank
    return ", ".join(names.get(h, {}).get(v) or _hue_value(label_as.get(h, h), v) or "none"
                     for h, v in zip(hue, key, strict=True)) if hue else ""


def _hue_value(column: str, value: str) -> str:
    number = finite(value)
    if number is None or not _labelled(column):   # text, or a column the title shows by its bare name
        return value
    scale = axis_label(column)[1]
    # as many digits as the results files keep (nine), so that two hues the CSV tells apart read
    # apart, and no more: the scaling's float noise (25.000000000000004) stays out
    return value if scale == 1.0 else f"{number * scale:.9g}"


def _tick(value: str, scale: float) -> str:
    return f"{float(value) * scale:g}"


def _powers_of_two(series: dict) -> bool:
    xs = {float(p[0]) for pts in series.values() for p in pts}
    return all(v > 0 and math.log2(v).is_integer() for v in xs)
