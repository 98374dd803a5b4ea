"""A category plot that a reader can read (sn40l_sim/report/axis_text.py): names in their numbers'
order, tick labels that do not run into each other and end at their bars, an axis label inside the
figure.

Fourteen points named ``snapstream_budget_1024_...`` .. ``snapstream_budget_14336_...`` were drawn
``10240`` first (text order), their names turned 30 degrees about their centres so that each ran
into the next, and the y label ``decode tokens/s (reported, x tokens per step)`` cut at the figure's
top edge.
"""
from __future__ import annotations

import math

import matplotlib
import numpy as np

matplotlib.use("Agg")  # noqa: E305

from sn40l_sim.report import plot_csv as plot_module  # noqa: E402
from sn40l_sim.report.axis_text import natural_key  # noqa: E402
from sn40l_sim.report.plot_csv import plot_csv  # noqa: E402

NAMES = [f"snapstream_budget_{1024 * (i + 1)}_sink4_recent{512 * i}" for i in range(14)]


def drawn(tmp_path, monkeypatch, names, y="decode_tokens_per_s_reported"):
    """The axes ``plot --kind bar`` of one row per name draws, and the figure."""
    (tmp_path / "results.csv").write_text(f"experiment,name,{y}\n" + "".join(
        f"demo,{name},{100 + 10 * i}\n" for i, name in enumerate(reversed(names))))
    figures = []
    real_save = plot_module.save_figure
    monkeypatch.setattr(plot_module, "save_figure", lambda fig, path, **kw: figures.append(fig) or
                        real_save(fig, path, **kw))
    plot_csv(tmp_path / "results.csv", x="name", y=y, kind="bar", out=tmp_path / "p.png")
    (ax,) = figures[0].axes
    return ax, figures[0]


def _corners(text, renderer) -> np.ndarray:
    """The four canvas corners of a tick label as drawn (turned about its anchor)."""
    angle = math.radians(text.get_rotation())
    turned = text.get_rotation()
    text.set_rotation(0)
    box = text.get_window_extent(renderer)   # the upright box, anchored as drawn
    text.set_rotation(turned)
    anchor = np.array([box.x1, box.y1]) if turned else np.array([(box.x0 + box.x1) / 2, box.y1])
    corners = np.array([[box.x0, box.y0], [box.x1, box.y0], [box.x1, box.y1], [box.x0, box.y1]]) - anchor
    turn = np.array([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]])
    return corners @ turn.T + anchor


def _apart(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two convex quadrilaterals are disjoint (an axis separating them: one of their edges' normals)."""
    for shape in (a, b):
        for i in range(4):
            edge = shape[(i + 1) % 4] - shape[i]
            normal = np.array([-edge[1], edge[0]])
            pa, pb = a @ normal, b @ normal
            if pa.max() <= pb.min() + 1e-6 or pb.max() <= pa.min() + 1e-6:
                return True
    return False


def test_categories_are_in_the_order_of_their_numbers():
    assert sorted(NAMES, key=natural_key) == NAMES
    assert sorted(NAMES) != NAMES   # text order put 10240 before 1024's neighbours
    assert sorted(["h2o", "full", "arkvale"], key=natural_key) == ["arkvale", "full", "h2o"]


def test_long_names_are_turned_apart_and_end_at_their_bars(tmp_path, monkeypatch):
    ax, fig = drawn(tmp_path, monkeypatch, NAMES)
    labels = ax.get_xticklabels()
    assert [t.get_text() for t in labels] == NAMES
    assert {t.get_rotation() for t in labels} == {30.0}   # turned, not stood on end
    assert {t.get_horizontalalignment() for t in labels} == {"right"}
    renderer = fig.canvas.get_renderer()
    quads = [_corners(t, renderer) for t in labels]
    assert all(_apart(a, b) for a, b in zip(quads, quads[1:], strict=False))
    # the label's upper right corner is at its bar's centre, under the axes
    ticks = ax.transData.transform([(i, 0) for i in range(len(NAMES))])[:, 0]
    assert np.allclose([q[2][0] for q in quads], ticks, atol=1.0)


def test_short_names_stay_level(tmp_path, monkeypatch):
    ax, _ = drawn(tmp_path, monkeypatch, ["full", "snapstream", "h2o"])
    assert [t.get_text() for t in ax.get_xticklabels()] == ["full", "h2o", "snapstream"]
    assert {t.get_rotation() for t in ax.get_xticklabels()} == {0.0}


def test_a_long_axis_label_is_broken_to_fit_beside_its_axes(tmp_path, monkeypatch):
    ax, fig = drawn(tmp_path, monkeypatch, NAMES)
    renderer = fig.canvas.get_renderer()
    label = ax.yaxis.label
    assert label.get_text().count("\n") >= 1
    assert " ".join(label.get_text().split()) == "decode tokens/s (reported, x tokens per step)"
    assert label.get_window_extent(renderer).height <= ax.get_window_extent(renderer).height
    # inside the figure: it was cut at the top edge
    box = label.get_window_extent(renderer)
    assert 0 <= box.y0 and box.y1 <= fig.bbox.height
