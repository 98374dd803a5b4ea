"""The plots ``run`` writes: the SLO attainment plot tells a probe that failed from one that held."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

from sn40l_sim.report import plot as plot_module  # noqa: E402

#: max_rate.yaml's SnapStream search (rounded): at 3.08 requests/s every request met the SLOs, but the
#: rate is above the 3.01 the decode slots sustain, so the probe fails and the answer is 2.957
PROBES = [{"rate_per_s": 2.711, "attainment": 1.0, "holds": True},
          {"rate_per_s": 2.957, "attainment": 1.0, "holds": True},
          {"rate_per_s": 3.08, "attainment": 1.0, "holds": False},
          {"rate_per_s": 3.203, "attainment": 0.651, "holds": False}]


def _drawn(tmp_path, monkeypatch):
    figures = []
    original = plot_module.save_figure
    monkeypatch.setattr(plot_module, "save_figure", lambda fig, path, **kw: (figures.append(fig),
                                                                           original(fig, path, **kw))[1])
    rec = {"name": "snapstream", "max_rate_per_s": 2.957, "rate_probes": PROBES}
    assert plot_module.slo_attainment_plot([rec], tmp_path / "slo.png", title="max_rate: SLO attainment").is_file()
    (ax,) = figures[0].axes
    return ax


def test_a_probe_that_failed_is_hollow_though_its_attainment_is_full(tmp_path, monkeypatch):
    ax = _drawn(tmp_path, monkeypatch)
    marked = {(x, y): line.get_markerfacecolor() for line in ax.lines if line.get_marker() == "o"
              for x, y in zip(line.get_xdata(), line.get_ydata(), strict=True)}
    assert sorted(marked) == sorted((p["rate_per_s"], p["attainment"]) for p in PROBES)
    hollow = sorted(xy for xy, face in marked.items() if face == "white")
    assert hollow == [(3.08, 1.0), (3.203, 0.651)]


def test_the_legend_says_what_markers_and_dotted_lines_mean_under_run_s_title(tmp_path, monkeypatch):
    ax = _drawn(tmp_path, monkeypatch)
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[0] == "snapstream"
    # a probe also fails above the rate the prefilling nodes sustain (rate_search.prefill_sustained_rate):
    # the legend named only the decode slots beside a probe run printed as "above the 12.41 requests/s
    # the prefilling nodes sustain"
    assert labels[1:] == ["SLOs hold", "SLOs fail (or the rate is above what\nthe decode slots or prefill sustain)",
                          "highest rate under the SLOs"]
    assert ax.get_title() == "max_rate: SLO attainment"


def _throughput_legend(tmp_path, monkeypatch, tokens_per_forward, **fields):
    figures = []
    original = plot_module.save_figure
    monkeypatch.setattr(plot_module, "save_figure", lambda fig, path, **kw: (figures.append(fig),
                                                                           original(fig, path, **kw))[1])
    rec = {"name": "full", "batch": 64, "decode_tokens_per_s": 944.0, "tokens_per_forward": tokens_per_forward,
           "decode_tokens_per_s_reported": 944.0 * tokens_per_forward, "kv_occupancy": None, **fields}
    plot_module.throughput_plot([rec], tmp_path / "throughput.png")
    # the bars are the record's rates whatever the legend says of them
    assert [bar.get_height() for bar in figures[0].axes[0].patches] == [944.0, rec["decode_tokens_per_s_reported"]]
    return [t.get_text() for t in figures[0].axes[0].get_legend().get_texts()]


def test_the_reported_bar_says_when_there_is_no_speculative_decoding(tmp_path, monkeypatch):
    """max_rate.yaml decodes one token per step: its legend read "reported (x 1 tokens / step)"."""
    assert _throughput_legend(tmp_path, monkeypatch, 1.0)[1] == "reported (= raw: no speculative decoding)"
    assert _throughput_legend(tmp_path, monkeypatch, 2.44)[1] == "reported (x 2.44 tokens / step)"


def test_drafts_never_accepted_are_still_speculative_decoding(tmp_path, monkeypatch):
    """Two drafts at acceptance 0 (run warns of them): the step was timed verifying them, one token a
    step came of it, and the legend read "no speculative decoding"."""
    legend = _throughput_legend(tmp_path, monkeypatch, 1.0, speculative_drafts=2)[1]
    assert legend == "reported (= raw: 2 drafts a step, none accepted)"
    # an acceptance so small its tokens per step print as 1: not "x 1 tokens / step"
    legend = _throughput_legend(tmp_path, monkeypatch, 1 + 1e-9, speculative_drafts=1)[1]
    assert legend == "reported (= raw: 1 draft a step, none accepted)"
    assert _throughput_legend(tmp_path, monkeypatch, 1.0, speculative_drafts=0)[1] == \
        "reported (= raw: no speculative decoding)"


def test_many_points_lie_on_their_side_one_name_a_line(tmp_path, monkeypatch):
    # kv_policies.yaml run by run draws 52 points: their names, turned 20 degrees under the bars, were
    # written into each other, the batches over each other, and the occupancy legend ran off the figure
    import warnings
    figures = []
    original = plot_module.save_figure
    monkeypatch.setattr(plot_module, "save_figure", lambda fig, path, **kw: (figures.append(fig),
                                                                           original(fig, path, **kw))[1])
    records = [{"name": f"policy{i}@32K[model=../graphs/deepseek_r1.yaml]", "batch": 2 ** (i % 8),
                "decode_tokens_per_s": 100.0 * (i + 1), "decode_tokens_per_s_reported": 100.0 * (i + 1),
                "kv_occupancy": {"capacity_bytes_per_node": 10, "series": [
                    {"node": 0, "t_s": t, "kv_bytes": t % 10, "slots_in_use": 1} for t in range(5)]}}
               for i in range(52)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # "constrained_layout not applied because axes sizes collapsed to zero"
        plot_module.throughput_plot(records, tmp_path / "throughput.png", title="kv_policies")
    fig = figures[0]
    ax_bar, ax_kv = fig.axes
    assert [t.get_text() for t in ax_bar.get_yticklabels()] == [r["name"] for r in records]
    assert ax_bar.get_legend() is None and ax_kv.get_legend() is None and len(fig.legends) == 1
    renderer = fig.canvas.get_renderer()
    names = [t.get_window_extent(renderer) for t in ax_bar.get_yticklabels()]
    assert all(not a.overlaps(b) for a, b in zip(names, names[1:], strict=False))
    batches = [t.get_window_extent(renderer) for t in ax_bar.texts]
    assert len(batches) == 52 and all(not a.overlaps(b) for a, b in zip(batches, batches[1:], strict=False))
    # every name inside the figure
    assert all(box.x0 >= 0 and box.y0 >= 0 and box.y1 <= fig.bbox.height for box in names)



def test_a_notebooks_str_path_is_drawn_to_and_no_record_is_named(tmp_path):
    """From Python, a str path was an AttributeError ('str' object has no attribute 'suffix') after
    the figure was drawn, and no record an IndexError."""
    import pytest

    from sn40l_sim.errors import InputError
    rec = {"name": "full", "batch": 4, "decode_tokens_per_s": 10.0, "decode_tokens_per_s_reported": 10.0,
           "max_rate_per_s": 2.957, "rate_probes": PROBES}
    for draw in (plot_module.throughput_plot, plot_module.slo_attainment_plot):
        drawn = draw([rec], str(tmp_path / f"{draw.__name__}.png"))
        assert drawn == tmp_path / f"{draw.__name__}.png" and drawn.is_file()
    with pytest.raises(InputError, match=r"^records: expected at least one result record"):
        plot_module.throughput_plot([], tmp_path / "none.png")
    assert not (tmp_path / "none.png").exists()
