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
    assert labels[1:] == ["SLOs hold", "SLOs fail (or the rate is above\nwhat the decode slots sustain)",
                          "highest rate under the SLOs"]
    assert ax.get_title() == "max_rate: SLO attainment"
