"""Figures drawn straight onto matplotlib's Agg canvas, without ``matplotlib.pyplot``.

The plots the commands write are files, never windows, so they need neither pyplot's figure
manager nor a backend chosen for the process: a :class:`matplotlib.figure.Figure` with a
:class:`~matplotlib.backends.backend_agg.FigureCanvasAgg` attached draws the same pixels. Not
importing pyplot spares its start-up work on every plotting run, and leaves the process's backend
to whoever else uses matplotlib in it (a notebook keeps its own). matplotlib itself is imported
only when a figure is made: a run with ``--no-plot`` never pays for it.

Examples
--------
>>> import tempfile, pathlib
>>> fig = new_figure((3, 2))
>>> _ = fig.subplots().plot([0, 1], [1, 0])
>>> path = save_figure(fig, pathlib.Path(tempfile.mkdtemp()) / "line.png")
>>> path.read_bytes()[:4] == b"\\x89PNG"
True
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from sn40l_sim.errors import InputError
from sn40l_sim.report.outputs import atomic_path, check_file

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

#: resolution of every written raster plot
DPI = 120
#: the formats a plot the user names may have (matplotlib picks the format by the suffix)
FIGURE_SUFFIXES = (".png", ".svg", ".pdf")


def check_figure_file(path: str | Path, option: str) -> Path:
    """``path`` as a plot the user names: :func:`~sn40l_sim.report.outputs.check_file`, and a
    suffix of :data:`FIGURE_SUFFIXES` (checked before anything is simulated, since matplotlib
    would only refuse another suffix when the figure is saved).

    >>> check_figure_file("notes.txt", "--plot")
    Traceback (most recent call last):
    ...
    sn40l_sim.errors.InputError: --plot: expected a .png, .svg or .pdf file, got 'notes.txt'
    """
    return check_file(check_figure_suffix(path, option), option)


def check_figure_suffix(path: str | Path, option: str) -> Path:
    """``path``, refused in one line unless its suffix is one of :data:`FIGURE_SUFFIXES`.

    >>> check_figure_suffix("plot.SVG", "--out").name
    'plot.SVG'
    """
    path = Path(path)
    if path.suffix.lower() not in FIGURE_SUFFIXES:
        raise InputError(f"expected a .png, .svg or .pdf file, got {path.name!r}", field=option)
    return path


def checked_columns(x: object, y: object, where: object) -> dict:
    """``where`` as a dict, once ``x`` and ``y`` are column names and ``where`` a mapping (or None):
    a Python caller's arguments to ``plot_csv``, which argparse never makes (``where`` written as the
    command line writes it, ``["batch=16"]``, raised a ValueError from ``dict()``, an ``x`` of None a
    TypeError), refused at their option as the command's are.

    >>> checked_columns("batch", "ttft_s", None), checked_columns("batch", "ttft_s", {"batch": 16})
    ({}, {'batch': 16})
    """
    for option, value in (("x", x), ("y", y)):
        if not isinstance(value, str):
            raise InputError(f"expected a column name, got {value!r}", field=f"--{option}")
    if where is not None and not isinstance(where, Mapping):
        raise InputError(f"expected a mapping of column to value, such as {{'batch': '16'}}, got {where!r}", field="--where")
    return dict(where or {})


def new_figure(figsize: tuple[float, float]) -> Figure:
    """An empty figure of ``figsize`` inches with constrained layout (labels never clipped),
    drawn by the Agg canvas."""
    # lazily: matplotlib is the heaviest import of a run and only plotting needs it
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


#: where a point's label may go, tried in turn: (offset right, offset up) in points and the side of
#: the text that touches the point
_LABEL_SPOTS = ((4, 3, "left", "bottom"), (4, -3, "left", "top"), (-4, 3, "right", "bottom"),
                (-4, -3, "right", "top"), (0, 7, "center", "bottom"), (0, -7, "center", "top"))
#: points closer than this on the canvas (pixels) share one label, their names joined
_SAME_SPOT_PX = 4.0


def place_labels(ax: Axes, xs: Sequence[float], ys: Sequence[float], names: Sequence[str],
                 fontsize: float = 7) -> int:
    """Write each point's name beside it where it overlaps no other label nor the legend and stays
    inside the axes, trying the spots of :data:`_LABEL_SPOTS` in turn, first those clear of every
    marker; points drawn on one spot share a label (``"snapkv, h2o"``); a label with no free spot is
    left out, and the title's last line then says how many. Call it once everything else is drawn (the spots are found on the laid-out
    canvas). Returns how many labels were left out.

    >>> fig = new_figure((3, 2))
    >>> ax = fig.subplots()
    >>> _ = ax.scatter([1, 1, 2], [1, 1, 2])
    >>> place_labels(ax, [1, 1, 2], [1, 1, 2], ["a", "b", "c"]), sorted(t.get_text() for t in ax.texts)
    (0, ['a, b', 'c'])
    """
    texts, left_out = _place(ax, xs, ys, names, fontsize)
    if left_out:   # a line under the title says so; the axes it shrinks need the labels placed anew
        for text in texts:
            text.remove()
        title = ax.get_title()
        ax.set_title(f"{title}\n{left_out} label(s) left out where they would overlap")
        _, left_out = _place(ax, xs, ys, names, fontsize)
        ax.set_title(f"{title}\n{left_out} label(s) left out where they would overlap" if left_out else title)
    return left_out


def _place(ax: Axes, xs: Sequence[float], ys: Sequence[float], names: Sequence[str],
           fontsize: float) -> tuple[list, int]:
    """:func:`place_labels`'s one pass: the labels written and how many were left out."""
    import math

    fig = ax.figure
    # lays the figure out (the canvas positions found below are final) without rasterising it: the
    # pixels are drawn once, when the figure is saved (~0.1 s a figure)
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    markers = _markers(ax)   # a label over another point hides it: the points are avoided where a spot allows
    taken = []
    legend = ax.get_legend()
    if legend is not None:   # kept where it was drawn: its "best" place would move to avoid the labels
        box = legend.get_window_extent(renderer)
        corner = ax.transAxes.inverted().transform((box.x0, box.y0))
        legend.set_bbox_to_anchor(None)   # the corner is in the axes' coordinates, also beside them
        (legend.set_loc if hasattr(legend, "set_loc") else legend._set_loc)(tuple(map(float, corner)))
        taken.append(box)
    # (data point, canvas point, names) per spot: coincident points wrote their labels over each other
    groups: list[tuple[tuple[float, float], tuple[float, float], list[str]]] = []
    for x, y, name in zip(xs, ys, names, strict=True):
        if not (math.isfinite(x) and math.isfinite(y)):
            continue
        px, py = ax.transData.transform((x, y))
        same = next((g for g in groups if math.hypot(g[1][0] - px, g[1][1] - py) < _SAME_SPOT_PX), None)
        if same is None:
            groups.append(((x, y), (px, py), [name]))
        elif name not in same[2]:
            same[2].append(name)
    written, left_out = [], 0
    for point, _, group in groups:
        # a spot clear of the points first; else one over a point (a label beats none), never over a label
        tries = [(spot, avoid) for avoid in (True, False) for spot in _LABEL_SPOTS]
        for (dx, dy, ha, va), avoid in tries:
            text = ax.annotate(", ".join(group), point, xytext=(dx, dy), textcoords="offset points", ha=ha, va=va,
                               fontsize=fontsize)
            box = text.get_window_extent(renderer)
            inside = frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1
            if inside and not any(box.overlaps(other) for other in taken + (markers if avoid else [])):
                taken.append(box)
                written.append(text)
                break
            text.remove()
        else:
            left_out += 1
    return written, left_out


def legend_clear_of_data(ax: Axes) -> bool:
    """Move ``ax``'s legend beside the axes (right, top) when, where matplotlib placed it, it covers
    a drawn point, line or bar; returns whether it moved. With ten series ("best" finds no empty
    corner) the legend hid the ends of two sweep curves. Call it once everything is drawn.

    >>> fig = new_figure((3, 2))
    >>> ax = fig.subplots()
    >>> for i in range(8):
    ...     _ = ax.plot([0, 1], [i, i], marker="o", label=f"series {i}")
    >>> _ = ax.legend()
    >>> legend_clear_of_data(ax)
    True
    """
    from matplotlib.path import Path as CanvasPath

    legend = ax.get_legend()
    if legend is None:
        return False
    fig = ax.figure
    fig.draw_without_rendering()   # the legend's "best" place is only known on the laid-out canvas
    renderer = fig.canvas.get_renderer()
    box = legend.get_window_extent(renderer)
    covered = any(box.overlaps(marker) for marker in _markers(ax))
    covered = covered or any(patch.get_window_extent(renderer).overlaps(box) for patch in ax.patches)
    for line in ax.lines:
        if covered:
            break
        if line.get_linestyle() not in ("None", "", " ") and len(line.get_xydata()) > 1:
            covered = CanvasPath(line.get_transform().transform(line.get_xydata())).intersects_bbox(box, filled=False)
    if covered:
        if hasattr(legend, "set_loc"):
            legend.set_loc("upper left")
        else:   # matplotlib 3.7 has no set_loc; 2 is "upper left"
            legend._set_loc(2)
        legend.set_bbox_to_anchor((1.01, 1.0), transform=ax.transAxes)
    return covered


#: a log axis spanning at most this many decades is labelled at 1, 2 and 5 times each power of ten
_PLAIN_LOG_DECADES = 3.0


def plain_log_ticks(ax: Axes, which: str) -> None:
    """Label the log ``which`` axis (``"x"`` or ``"y"``) of ``ax`` at 1, 2 and 5 times each power of
    ten, written plainly (``20``, ``500``), without minor labels, when it spans at most
    :data:`_PLAIN_LOG_DECADES` decades. Matplotlib labels the minor ticks of such a short axis as
    ``3×10^1``, ``4×10^1``, which ran into each other; a longer axis keeps its labelled decades.

    >>> fig = new_figure((4, 3))
    >>> ax = fig.subplots()
    >>> _ = ax.scatter([17, 700], [1, 2])
    >>> ax.set_xscale("log")
    >>> plain_log_ticks(ax, "x")
    >>> [t.get_text() for t in ax.get_xticklabels() if 17 <= t.get_position()[0] <= 700]
    ['20', '50', '100', '200', '500']
    """
    import math

    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axis = ax.xaxis if which == "x" else ax.yaxis
    low, high = sorted(ax.get_xlim() if which == "x" else ax.get_ylim())
    if low <= 0 or math.log10(high / low) > _PLAIN_LOG_DECADES:
        return
    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axis.set_minor_formatter(NullFormatter())


def _markers(ax: Axes) -> list:
    """The canvas box of every scatter marker (and line marker) drawn on ``ax``."""
    import math

    import numpy as np
    from matplotlib.transforms import Bbox

    scale = ax.figure.dpi / 72.0   # marker sizes are in points
    centres: list[tuple[float, float, float]] = []
    for collection in ax.collections:
        offsets = np.asarray(collection.get_offsets(), dtype=float)
        if not len(offsets):
            continue
        sizes = collection.get_sizes() if len(collection.get_sizes()) else [36.0]
        placed = collection.get_offset_transform().transform(offsets)
        for i, (px, py) in enumerate(placed):
            centres.append((px, py, math.sqrt(sizes[i % len(sizes)]) / 2 * scale))
    for line in ax.lines:
        if line.get_marker() in (None, "", "None", " "):
            continue
        placed = line.get_transform().transform(np.column_stack(line.get_data()).astype(float))
        centres += [(px, py, line.get_markersize() / 2 * scale) for px, py in placed]
    return [Bbox([[px - r, py - r], [px + r, py + r]]) for px, py, r in centres
            if math.isfinite(px) and math.isfinite(py)]


def save_figure(fig: Figure, path: Path, metadata: dict[str, str | None] | None = None) -> Path:
    """Write ``fig`` to ``path`` (the format from its suffix, at :data:`DPI`), whole or not at all
    (never a truncated image), creating the folder; returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as temporary:
        fig.savefig(temporary, dpi=DPI, metadata=metadata)
    return path
