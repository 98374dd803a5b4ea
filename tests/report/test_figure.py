"""Labels beside scatter points (:func:`place_labels`): the labelled Pareto and scatter plots wrote
every name at one offset, so names of close points overlapped into an unreadable smear, and a Pareto
front of more than six points lost every name."""
from __future__ import annotations

import itertools

import pytest

import sn40l_sim.report.pareto as pareto_module
from sn40l_sim.report.figure import new_figure, place_labels


def _boxes(ax):
    renderer = ax.figure.canvas.get_renderer()
    ax.figure.canvas.draw()
    return [t.get_window_extent(renderer) for t in ax.texts], ax.get_window_extent(renderer)


def _crowded_axes(n):
    fig = new_figure((5, 3.5))
    ax = fig.subplots()
    xs = [1.0 + 0.01 * i for i in range(n)]          # a dense cluster: every name at (3, 3) collided
    ys = [float(i % 5) for i in range(n)]
    ax.scatter(xs, ys, label="points")
    ax.legend()
    ax.set_title("crowded")
    return ax, xs, ys, [f"point-{i}-with-a-long-name" for i in range(n)]


@pytest.mark.parametrize("n", [3, 12, 40])
def test_labels_never_overlap_each_other_the_legend_or_the_frame(n):
    ax, xs, ys, names = _crowded_axes(n)
    left_out = place_labels(ax, xs, ys, names)
    boxes, frame = _boxes(ax)
    legend = ax.get_legend().get_window_extent(ax.figure.canvas.get_renderer())
    assert len(boxes) + left_out == n
    for a, b in itertools.combinations(boxes, 2):
        assert not a.overlaps(b)
    assert not any(box.overlaps(legend) for box in boxes)
    assert all(frame.x0 <= b.x0 and b.x1 <= frame.x1 and frame.y0 <= b.y0 and b.y1 <= frame.y1 for b in boxes)
    # what is left out is said, not silently dropped
    title = ax.get_title()
    assert (f"{left_out} label(s) left out where they would overlap" in title) == (left_out > 0)
    if n == 3:
        assert left_out == 0


def test_points_on_one_spot_share_one_label():
    fig = new_figure((4, 3))
    ax = fig.subplots()
    ax.scatter([1.0, 2.0], [1.0, 2.0])
    assert place_labels(ax, [1.0, 1.0, 1.0, 2.0], [1.0, 1.0, 1.0, 2.0], ["snapkv", "h2o", "snapkv", "full"]) == 0
    assert sorted(t.get_text() for t in ax.texts) == ["full", "snapkv, h2o"]


def test_a_pareto_front_of_seven_points_names_every_point(tmp_path, monkeypatch):
    # deepseek_sweep's front has seven records: more than six were all left unnamed
    drawn = {}
    real = pareto_module.save_figure

    def keep(fig, path, *args, **kwargs):
        drawn["fig"] = fig
        return real(fig, path, *args, **kwargs)

    monkeypatch.setattr(pareto_module, "save_figure", keep)
    records = [{"name": f"full[batch={2 ** i},prompt_len=8192]", "decode_tokens_per_s": 20.0 * 2 ** i,
                "tpot_s": 0.02 + 0.006 * i} for i in range(7)]
    records.append({"name": "dominated", "decode_tokens_per_s": 30.0, "tpot_s": 0.1})
    pareto_module.pareto_plot(records, {"decode_tokens_per_s": "max", "tpot_s": "min"}, tmp_path / "p.png")
    (ax,) = drawn["fig"].axes
    assert sorted(t.get_text() for t in ax.texts) == sorted(r["name"] for r in records[:7])
    boxes, _ = _boxes(ax)
    assert not any(a.overlaps(b) for a, b in itertools.combinations(boxes, 2))


def test_a_short_log_axis_has_plain_labels_that_do_not_collide(tmp_path, monkeypatch):
    # decode tokens/s from 17 to 700 on --logx: the minor ticks were labelled 3x10^1, 4x10^1, 2x10^2,
    # 3x10^2, 4x10^2 and ran into each other
    import sn40l_sim.report.plot_csv as plot_module

    path = tmp_path / "results.csv"
    path.write_text("decode_tokens_per_s,tpot_s,batch\n" + "".join(
        f"{t},{0.03 + 0.005 * i},{2 ** i}\n" for i, t in enumerate([17.5, 33.0, 61.0, 120.0, 240.0, 390.0, 700.0])))
    drawn = {}
    real = plot_module.save_figure
    monkeypatch.setattr(plot_module, "save_figure", lambda fig, out, **kw: drawn.setdefault("fig", fig) and
                        real(fig, out, **kw))
    plot_module.plot_csv(path, x="decode_tokens_per_s", y="tpot_s", kind="scatter", label="batch", logx=True,
                         out=tmp_path / "p.png")
    (ax,) = drawn["fig"].axes
    renderer = ax.figure.canvas.get_renderer()
    low, high = ax.get_xlim()
    shown = [t for t in ax.get_xticklabels() + ax.get_xticklabels(minor=True)
             if t.get_text() and low <= t.get_position()[0] <= high]
    assert [t.get_text() for t in shown] == ["20", "50", "100", "200", "500"]
    boxes = [t.get_window_extent(renderer) for t in shown]
    assert not any(a.overlaps(b) for a, b in itertools.combinations(boxes, 2))


def test_a_label_keeps_off_a_neighbouring_point_where_a_spot_allows():
    # the name written up and to the right of the first point covered the second point's marker
    from sn40l_sim.report.figure import _markers

    fig = new_figure((5, 3.5))
    ax = fig.subplots()
    ax.scatter([0.0, 0.25], [0.0, 0.03])
    ax.set_xlim(-1, 5)
    ax.set_ylim(-1, 1)
    assert place_labels(ax, [0.0, 0.25], [0.0, 0.03], ["first-point-long-name", "second"]) == 0
    boxes, _ = _boxes(ax)
    markers = _markers(ax)
    assert len(boxes) == 2 and not any(b.overlaps(m) for b in boxes for m in markers)
