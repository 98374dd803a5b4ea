"""Text on a plot's axes that stays readable: categories in the order a reader expects, tick labels
that do not run into each other, axis labels that are not clipped.

A bar plot of points named ``budget_1024`` .. ``budget_14336`` put ``budget_10240`` first (text
order), wrote fourteen long names at 30 degrees centred on their ticks so that each ran into the
next, and cut its y label (``decode tokens/s (reported, x tokens per step)``) at the figure's top
edge. :func:`natural_key` orders such names by their numbers; :func:`category_ticks` turns the
labels only as far as they need, ending at their ticks; :func:`fit_axis_label` breaks a label over
lines until it fits beside its axes. The last two measure on the laid-out canvas, so call them
once the plot is drawn.

Examples
--------
>>> sorted(["b_10240", "b_1024", "b_2048", "a"], key=natural_key)
['a', 'b_1024', 'b_2048', 'b_10240']
>>> from sn40l_sim.report.figure import new_figure
>>> ax = new_figure((6, 3)).subplots()
>>> _ = ax.bar(range(3), range(3))
>>> category_ticks(ax, ["full", "snapstream", "h2o"]), category_ticks(ax, [f"budget_{i}" for i in range(3)])
(0, 0)
>>> _ = ax.bar(range(12), range(12))
>>> category_ticks(ax, [f"snapstream_budget_{1024 * i}" for i in range(12)])
30
>>> _ = ax.set_ylabel("decode tokens/s (reported, x tokens per step)")
>>> lines = fit_axis_label(ax, "y")
>>> renderer = ax.figure.canvas.get_renderer()
>>> lines > 1, bool(ax.yaxis.label.get_window_extent(renderer).height <= ax.get_window_extent(renderer).height)
(True, True)
"""
from __future__ import annotations

import math
import re
import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.axes import Axes

#: the angles category labels are tried at, in turn, until no two overlap
ANGLES = (0, 30, 90)
#: most lines an axis label is broken into
MAX_LABEL_LINES = 4


def natural_key(text: str) -> tuple[Any, ...]:
    """Sort key that reads each run of digits in ``text`` as a number (``b_2048`` before ``b_10240``).

    Splitting on the digit runs gives text at even places and numbers at odd ones, so two keys
    compare text with text and numbers with numbers.

    >>> natural_key("tp16_dp2")
    ('tp', 16, '_dp', 2, '')
    """
    return tuple(int(part) if i % 2 else part for i, part in enumerate(re.split(r"(\d+)", text)))


def category_ticks(ax: Axes, labels: Sequence[str] | None = None) -> int:
    """Label ``ax``'s x ticks ``0 .. len(labels) - 1`` with ``labels`` (None: keep the labels it
    has), level where they fit side by side, else turned to the first angle of :data:`ANGLES` at
    which no two overlap (ending at their tick, so that each label still points at its bar);
    returns the angle."""
    if labels is not None:
        ax.set_xticks(range(len(labels)), list(labels))
    for angle in ANGLES:
        for text in ax.get_xticklabels():
            text.set_rotation(angle)
            text.set_horizontalalignment("right" if angle else "center")
            text.set_rotation_mode("anchor" if angle else "default")
        if angle == ANGLES[-1] or not _overlapping(ax, angle):
            return angle
    return ANGLES[-1]


def _overlapping(ax: Axes, angle: float) -> bool:
    """Whether two of ``ax``'s x tick labels, turned by ``angle`` degrees, overlap on the laid-out
    canvas: level ones where their boxes meet; turned ones, each ending at its tick, are parallel
    strips a tick apart, clear of each other where that distance across them is at least a line."""
    fig = ax.figure
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    labels = [t for t in ax.get_xticklabels() if t.get_visible() and t.get_text()]
    if len(labels) < 2:
        return False
    if angle:
        ticks = sorted(ax.transData.transform([(t.get_position()[0], 0.0) for t in labels])[:, 0])
        gap = min(b - a for a, b in zip(ticks, ticks[1:], strict=False))
        line = max(t.get_size() for t in labels) * fig.dpi / 72.0 * 1.2
        return gap * math.sin(math.radians(angle)) < line
    boxes = sorted((t.get_window_extent(renderer) for t in labels), key=lambda box: box.x0)
    return any(a.x1 > b.x0 for a, b in zip(boxes, boxes[1:], strict=False))


def fit_axis_label(ax: Axes, which: str) -> int:
    """Break the ``which`` (``"x"`` or ``"y"``) axis label of ``ax`` over as many lines as it needs to
    be no longer than the axes beside it (at most :data:`MAX_LABEL_LINES`); returns the lines."""
    label = ax.xaxis.label if which == "x" else ax.yaxis.label
    words = " ".join(label.get_text().split())
    if not words:
        return 0
    fig = ax.figure
    for lines in range(1, MAX_LABEL_LINES + 1):
        wrapped = _wrapped(words, lines)
        label.set_text("\n".join(wrapped))
        fig.draw_without_rendering()
        renderer = fig.canvas.get_renderer()
        box, frame = label.get_window_extent(renderer), ax.get_window_extent(renderer)
        if (box.width <= frame.width) if which == "x" else (box.height <= frame.height):
            break
    return len(wrapped)


def _wrapped(words: str, lines: int) -> list[str]:
    """``words`` broken at spaces into at most ``lines`` lines as even as the words allow (the
    narrowest width giving that many; a word longer than it stays whole).

    >>> _wrapped("decode tokens/s (reported, x tokens per step)", 2)
    ['decode tokens/s (reported,', 'x tokens per step)']
    """
    width = -(-len(words) // lines)
    while len(wrapped := textwrap.wrap(words, width, break_long_words=False)) > lines:
        width += 1
    return wrapped
