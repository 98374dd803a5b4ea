"""The plot a sweep draws from its ``plot:`` section (sn40l_sim/study/sweep/run.py)."""
from __future__ import annotations

from pathlib import Path

from sn40l_sim.study.sweep.figures import _value_names
from sn40l_sim.study.sweep.load import load_sweep

REPO = Path(__file__).resolve().parents[2]


def test_a_labelled_axis_of_files_is_named_by_its_labels_in_the_legend():
    # experiments/socket_scaling.yaml's legend read "../graphs/llama3_1_70b.yaml, 8": the CSV's
    # sweep.model holds the path as written; its axis's labels name each file
    names = _value_names(load_sweep(REPO / "experiments" / "socket_scaling.yaml"))
    assert names["sweep.model"] == {"../graphs/llama3_1_70b.yaml": "llama3_1_70b",
                                    "../graphs/llama3_1_8b.yaml": "llama3_1_8b"}
    # numbers are shown in the legend's unit, not renamed
    assert names.get("sweep.sockets", {}) == {}


def test_an_axis_named_apart_from_its_path_is_labelled_by_its_path(tmp_path, monkeypatch):
    """axes.py's own example, ``hbm: {path: hardware.socket.memory.hbm.bytes_per_s_per_unit, ...}``:
    the plot's axis read "hbm" and its legend 409600000000.0, the CSV's bytes/s with no unit; the
    sweep knows the path, and labels the column as the path's field, in GB/s."""
    import matplotlib.axes
    from sweep_helpers import write_experiment

    from sn40l_sim.study.sweep.run import run_sweep

    seen: dict[str, list] = {"xlabel": [], "legend": []}
    monkeypatch.setattr(matplotlib.axes.Axes, "set_xlabel", lambda self, text, *a, **k: seen["xlabel"].append(text))
    original = matplotlib.axes.Axes.legend

    def legend(self, *args, **kwargs):
        drawn = original(self, *args, **kwargs)
        seen["legend"].append((drawn.get_title().get_text(), [t.get_text() for t in drawn.get_texts()]))
        return drawn

    monkeypatch.setattr(matplotlib.axes.Axes, "legend", legend)
    path = write_experiment(tmp_path, """\
        axes:
          hbm: {path: hardware.socket.memory.hbm.bytes_per_s_per_unit, values: [409.6 GB/s, 0.8192 TB/s]}
          serving.batch: [1, 2]
        plot: {x: sweep.hbm, y: decode_step_s, hue: [kv_policy, sweep.serving.batch]}
        """)
    run_sweep(path, tmp_path / "out", jobs=1, progress=False)
    assert seen["xlabel"] == ["HBM bandwidth per module/channel (GB/s)"]
    path.write_text(path.read_text().replace("x: sweep.hbm", "x: batch").replace("sweep.serving.batch]", "sweep.hbm]"))
    run_sweep(path, tmp_path / "out", jobs=1, progress=False)
    assert seen["legend"][-1] == ("KV policy, HBM bandwidth per module/channel (GB/s)",
                                  ["full, 409.6", "full, 819.2", "snapstream, 409.6", "snapstream, 819.2"])


def test_an_objective_no_record_has_is_named_not_left_as_an_empty_front(tmp_path, capsys):
    # objectives {slo.attainment: max} on an experiment without slo: printed "Pareto front: 0 of 4
    # records" and wrote an empty pareto.json with nothing saying why
    from sweep_helpers import write_experiment

    from sn40l_sim.commands.cli import main

    path = write_experiment(tmp_path, "axes:\n  serving.batch: [2, 8]\n"
                            "objectives: {decode_tokens_per_s: max, slo.attainment: max}\n")
    assert main(["sweep", str(path), "--out", str(tmp_path / "out"), "--jobs", "1", "--quiet", "--no-plot"]) == 0
    out, err = capsys.readouterr()
    assert "Pareto front: 0 of 4 records" in out
    warnings = [line for line in err.splitlines() if "sweep.objectives.slo.attainment" in line]
    assert len(warnings) == 1 and warnings[0].startswith(f"warning: {path}:")
    assert "4 of 4 records have no value for it" in warnings[0]
    assert "decode_tokens_per_s" not in err   # every record has the other objective


def test_objectives_missing_counts_the_records_without_a_number():
    from sn40l_sim.report.pareto import objectives_missing

    records = [{"tpot_s": 0.1, "slo": {"attainment": 1.0}}, {"tpot_s": None, "slo": {"attainment": 0.5}}]
    assert objectives_missing(records, {"tpot_s": "min", "slo.attainment": "max"}) == {"tpot_s": 1}
    assert objectives_missing([], {"tpot_s": "min"}) == {}


def test_a_labelled_null_value_is_named_by_its_label_in_the_legend():
    # experiments/chunked_prefill.yaml's axis [null, 4096, ...] labelled [whole, ...]: the CSV holds
    # an empty cell for null, and the legend showed ", 1" where it meant "whole, 1"
    names = _value_names(load_sweep(REPO / "experiments" / "chunked_prefill.yaml"))
    assert names["sweep.prefill_chunk"] == {"": "whole"}   # the numbers keep their unit, not renamed
