"""Sweeps: axis values, point expansion and names, located errors for bad sections, and runs on a
small model (Llama-3.1 8B on an 8-socket node) that check order, determinism across process
counts, failures that do not stop the others, and hardware axes that change the results."""
from __future__ import annotations

import json
import re

import pytest
from sweep_helpers import REPO, write_experiment

from sn40l_sim.commands.cli import main
from sn40l_sim.errors import InputError
from sn40l_sim.report.fields import RESULTS
from sn40l_sim.study.sweep.axes import AxisError, axis_values, combinations
from sn40l_sim.study.sweep.load import load_sweep
from sn40l_sim.study.sweep.plan import expand_runs
from sn40l_sim.study.sweep.run import run_sweep
from sn40l_sim.study.sweep.sets import parse_sets

# -- axis values -------------------------------------------------------------------------------

def test_ranges_include_both_ends_and_round_integers():
    assert axis_values({"start": 1, "stop": 512, "num": 10, "scale": "log"}) == [2**i for i in range(10)]
    assert axis_values({"start": 0, "stop": 100, "num": 5}) == [0, 25, 50, 75, 100]
    assert axis_values({"start": 0.0, "stop": 1.0, "num": 5}) == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert axis_values({"start": 2.0, "stop": 8.0, "num": 3, "scale": "log"}) == [2.0, 4.0, 8.0]
    assert axis_values({"start": 4, "stop": 4, "num": 1}) == [4]
    # ends of magnitude at most 2**53 (the error's words) are taken, that limit included
    assert axis_values({"start": -2**53, "stop": 2**53, "num": 3}) == [-2**53, 0, 2**53]


@pytest.mark.parametrize("spec, where", [
    ([], ()),
    ({"start": 1, "stop": 4}, ("num",)),
    ({"start": 1, "stop": 4, "num": 0}, ("num",)),
    ({"start": 0, "stop": 4, "num": 3, "scale": "log"}, ("start",)),
    ({"start": 1, "stop": 4, "num": 3, "scale": "cubic"}, ("scale",)),
    ({"start": 1, "stop": 3, "num": 5}, ("num",)),          # 1, 1.5, 2, 2.5, 3 repeat as integers
    ({"start": "a", "stop": 4, "num": 3}, ("start",)),
    ({"start": 1, "stop": 4, "num": 3, "step": 1}, ("step",)),
    ({"start": 1, "stop": 8, "num": 1}, ("num",)),          # one value cannot include both ends: 8 was dropped
    # an end of 400 digits stopped math.isfinite with an OverflowError traceback
    pytest.param({"start": 1, "stop": 10**400, "num": 3}, ("stop",), id="stop-of-401-digits"),
    pytest.param({"start": -10**400, "stop": 4, "num": 3}, ("start",), id="start-of-minus-401-digits"),
    pytest.param({"start": 1, "stop": 2**53 + 1, "num": 3}, ("stop",), id="stop-past-2**53"),
])
def test_bad_ranges_name_the_key(spec, where):
    with pytest.raises(AxisError) as info:
        axis_values(spec)
    assert info.value.where == where


def test_grid_is_the_product_and_zip_pairs(tmp_path):
    grid = load_sweep(write_experiment(tmp_path, """\
        axes:
          serving.batch: [1, 2, 4]
          shape.prompt_len: {start: 2048, stop: 8192, num: 3, scale: log}
        """))
    assert len(grid.points) == 9
    assert [p.name for p in grid.points[:4]] == ["batch=1,prompt_len=2048", "batch=1,prompt_len=4096",
                                                 "batch=1,prompt_len=8192", "batch=2,prompt_len=2048"]
    assert grid.points[4].data["serving"]["batch"] == 2 and grid.points[4].data["shape"]["prompt_len"] == 4096
    assert "sweep" not in grid.points[0].data
    zipped = load_sweep(write_experiment(tmp_path, """\
        mode: zip
        axes:
          serving.batch: [1, 2]
          policies.snap.params.sink: [4, 16]
        """))
    assert [p.name for p in zipped.points] == ["batch=1,sink=4", "batch=2,sink=16"]
    assert zipped.points[1].data["policies"][1]["params"] == {"sink": 16}
    assert zipped.points[1].data["policies"][0] == {"name": "full", "policy": "full"}
    assert combinations(zipped.axes, "grid") != combinations(zipped.axes, "zip")


def test_hardware_axes_and_sets(tmp_path):
    sweep = load_sweep(write_experiment(tmp_path, """\
        axes:
          hardware.socket.p2p.bytes_per_s_per_port: [50 GB/s, 100 GB/s]
        """), parse_sets(["serving.batch=8", "hardware.socket.memory.hbm.latency_s=200 ns"]))
    assert [p.name for p in sweep.points] == ["bytes_per_s_per_port=50GB/s", "bytes_per_s_per_port=100GB/s"]
    assert sweep.points[1].hardware_overrides == {"socket.memory.hbm.latency_s": "200 ns",
                                                  "socket.p2p.bytes_per_s_per_port": "100 GB/s"}
    assert all(p.data["serving"]["batch"] == 8 for p in sweep.points)


# -- located errors ----------------------------------------------------------------------------

@pytest.mark.parametrize("body, field, line, words", [
    ("axes:\n  serving.batchh: [1, 2]\n", "sweep.axes.serving.batchh", 16, "unknown axis path"),
    ("axes:\n  servng.batch: [1, 2]\n", "sweep.axes.servng.batch", 16, "unknown axis path"),
    ("axes:\n  serving.batch: [1, -2]\n", "sweep.axes.serving.batch[1]", 16, "value -2"),
    ("axes:\n  serving.batch: {start: 1, stop: 8, num: 0}\n", "sweep.axes.serving.batch.num", 16, "positive"),
    ("axes:\n  policies.snapp.params.sink: [4]\n", "sweep.axes.policies.snapp.params.sink", 16, "no entry named 'snapp'"),
    ("axes:\n  policies.snap.params.sink: [-1]\n", "sweep.axes.policies.snap.params.sink[0]", 16, "sink"),
    ("axes:\n  hardware.socket.memory.hbm.bytes_per_s_per_unit: [fast]\n",
     "sweep.axes.hardware.socket.memory.hbm.bytes_per_s_per_unit[0]", 16, "bandwidth"),
    ("axes:\n  hardware.socket.memory.hbm.nope: [1]\n", "sweep.axes.hardware.socket.memory.hbm.nope", 16, "unknown axis path"),
    ("axes:\n  hardware.socket.nope.x: [1]\n", "sweep.axes.hardware.socket.nope.x", 16, "unknown axis path"),
    ("mode: zip\naxes:\n  serving.batch: [1, 2]\n  shape.prompt_len: [1024]\n", "sweep.axes.shape.prompt_len", 18,
     "equal length"),
    ("mode: spiral\naxes:\n  serving.batch: [1]\n", "sweep.mode", 15, "grid or zip"),
    ("axes:\n  serving.batch: [1]\nevery: 2\n", "sweep.every", 17, "unknown key"),
    ("axes: {}\n", "sweep.axes", 15, "mapping"),
    ("axes:\n  serving.batch: [1]\nplot: {x: batch}\n", "sweep.plot.y", 17, "column"),
    # a sweep.<axis> column of no axis: found before the runs, not when plotting after them
    ("axes:\n  serving.batch: [1]\nplot: {x: sweep.batchh, y: tpot_s}\n", "sweep.plot.x", 17,
     "'sweep.batchh' names no axis of this sweep (its axis columns: sweep.serving.batch)"),
    ("axes:\n  b: {path: serving.batch, values: [1]}\nplot: {x: sweep.b, y: tpot_s, hue: [kv_policy, sweep.c]}\n",
     "sweep.plot.hue[1]", 17, "'sweep.c' names no axis"),
    # the axis's own name, written as the plot's x, is told the column it is
    ("axes:\n  workload.output_len: [1, 2]\nplot: {x: workload.output_len, y: tpot_s}\n", "sweep.plot.x", 17,
     "the axis workload.output_len is the column sweep.workload.output_len"),
    ("axes:\n  serving.batch: [1]\nobjectives: {tpot: min}\n", "sweep.objectives.tpot", 17,
     "tpot is not a declared results field"),
    ("axes:\n  serving.batch: [1]\nobjectives: {kv_policy: max}\n", "sweep.objectives.kv_policy", 17, "text"),
    ("axes:\n  serving.batch: [1]\nobjectives: {tpot_s: least}\n", "sweep.objectives.tpot_s", 17, "max or min"),
    ("axes:\n  serving.batch: [1]\nobjectives: [tpot_s]\n", "sweep.objectives", 17, "mapping"),
    # a repeated value ran the same point twice: two identical rows of one name (a range already
    # refused values that repeat after rounding)
    ("axes:\n  serving.batch: [1, 2, 1]\n", "sweep.axes.serving.batch[2]", 16, "value 1 repeats [0]"),
    # the range's repeat is named, not its every value (10,000 of them made a 50 kB line)
    ("axes:\n  serving.batch: {start: 1, stop: 100, num: 10000}\n", "sweep.axes.serving.batch.num", 16,
     "10000 integer values from 1 to 100 repeat after rounding (1 is value 0 and value 1): lower num, or write "
     "the ends as 1.0 and 100.0"),
    ("mode: zip\naxes:\n  serving.batch: [1, 2, 1]\n  shape.prompt_len: [1024, 2048, 1024]\n",
     "sweep.axes.shape.prompt_len[2]", 18, "point 2 repeats point 0 (serving.batch=1, shape.prompt_len=1024)"),
    # the same quantity in two units sets the field to one value: compared as numbers, not as text
    ("axes:\n  hardware.socket.p2p.bytes_per_s_per_port: [50 GB/s, 0.05 TB/s]\n",
     "sweep.axes.hardware.socket.p2p.bytes_per_s_per_port[1]", 16, "value 0.05TB/s repeats [0]"),
    ("mode: zip\naxes:\n  serving.batch: [1, 1]\n  hardware.socket.memory.hbm.bytes_per_s_per_unit: [1.6 TB/s, 1600 GB/s]\n",
     "sweep.axes.hardware.socket.memory.hbm.bytes_per_s_per_unit[1]", 18, "point 1 repeats point 0"),
    # two values the results cannot tell apart (they keep 9 significant digits) are one point: they
    # ran as two, named apart, with one sweep.<axis> value and one result in both rows
    ("axes:\n  hardware.socket.clock_hz: [1.6e9, 1.6000000001e9]\n", "sweep.axes.hardware.socket.clock_hz[1]", 16,
     "value 1600000000.1 repeats [0] (equal at the 9 significant digits the results keep)"),
    # an axis of lists has no column in results.csv (lists stay in results.json): refused before the
    # runs, not after them with every column of the CSV listed
    ("axes:\n  prompt_lens: [[1024, 2048], [4096]]\nplot: {x: prefill_len, y: ttft_s, hue: sweep.prompt_lens}\n",
     "sweep.plot.hue", 17, "'sweep.prompt_lens' holds lists, which results.csv leaves out"),
    # an axis of prompt_lens replaces shape.prompt_len at every point: a shape.prompt_len axis beside it
    # had no effect while its column said 4096 beside a prefill_len of 1024
    ("axes:\n  prompt_lens: [[1024], [2048]]\n  shape.prompt_len: [4096, 8192]\n", "sweep.axes.shape.prompt_len",
     17, "the axis prompt_lens replaces shape.prompt_len at every point"),
    # fields run and sweep do not read here: the rows of every value were the same simulation
    ("axes:\n  shape.batch: [2, 8]\n", "sweep.axes.shape.batch", 16,
     "shape.batch is the batch of map's graph; run and sweep simulate serving.batch"),
    ("axes:\n  shape.max_new_tokens: [4, 16]\n", "sweep.axes.shape.max_new_tokens", 16,
     "the experiment's serving.max_new_tokens replaces shape.max_new_tokens"),
    # the published totals are not simulated: every point ran the file's socket under another name
    ("axes:\n  hardware.socket.stated.bf16_flops: [638 TFLOPS, 1276 TFLOPS]\n",
     "sweep.axes.hardware.socket.stated.bf16_flops[0]", 16,
     "the published totals under socket.stated are neither simulated nor checked"),
    # a range's ends are numbers: a unit is said to be the problem, with the number to write instead
    ("axes:\n  hardware.socket.memory.hbm.bytes_per_s_per_unit: {start: 400 GB/s, stop: 0.8 TB/s, num: 3}\n",
     "sweep.axes.hardware.socket.memory.hbm.bytes_per_s_per_unit.start", 16,
     "a range's ends take no unit; write 4e+11, or list the values with their units"),
    # one axis inside another's field: the later one replaced the earlier's value at every point,
    # while the name and sweep.<axis> column still gave it (batch=1 in the name, batch 4 simulated)
    ("axes:\n  serving.batch: [1, 2]\n  serving: [{batch: 4}, {batch: 8}]\n", "sweep.axes.serving", 17,
     "the axes serving.batch and serving both set serving.batch"),
    ("axes:\n  serving: [{batch: 4}, {batch: 8}]\n  serving.batch: [1, 2]\n", "sweep.axes.serving.batch", 17,
     "the axes serving and serving.batch both set serving.batch"),
    # one policy entry named by its name and by its index is one field
    ("axes:\n  policies.snap.params.sink: [4, 8]\n  policies.1.params.sink: [16, 32]\n",
     "sweep.axes.policies.1.params.sink", 17, "both set policies.snap.params.sink"),
    ("axes:\n  hardware.socket.memory.hbm: [{efficiency: 0.5}]\n"
     "  hardware.socket.memory.hbm.bytes_per_s_per_unit: [1 TB/s]\n",
     "sweep.axes.hardware.socket.memory.hbm.bytes_per_s_per_unit", 17, "both set hardware.socket.memory.hbm."),
    ("axes:\n  hardware.socket.memory.hbm.bytes_per_s_per_unit: [1 TB/s]\n"
     "  hardware.socket.hbm.bytes_per_s_per_unit: [2 TB/s]\n",    # the old-style path of the same field
     "sweep.axes.hardware.socket.hbm.bytes_per_s_per_unit", 17, "both set hardware.socket.memory.hbm."),
])
def test_bad_sections_are_located(tmp_path, body, field, line, words):
    path = write_experiment(tmp_path, body)
    with pytest.raises(InputError) as info:
        load_sweep(path)
    err = info.value
    assert (err.file, err.field, err.line) == (str(path), field, line), str(err)
    assert words in err.message


def test_a_mapping_axis_is_plotted_by_its_fields_columns(tmp_path):
    # results.csv writes a mapping axis as sweep.<axis>.<field>: the refusal of sweep.serving says
    # so, and the plot of sweep.serving.batch was then refused as naming no axis of the sweep
    body = "axes:\n  serving: [{batch: 4}, {batch: 8}]\nplot: {x: %s, y: tpot_s}\n"
    sweep = load_sweep(write_experiment(tmp_path, body % "sweep.serving.batch"))
    assert sweep.plot["x"] == "sweep.serving.batch"
    with pytest.raises(InputError, match="'sweep.serving' holds mappings, whose fields are the columns"):
        load_sweep(write_experiment(tmp_path, body % "sweep.serving"))
    with pytest.raises(InputError, match="'sweep.batch' names no axis of this sweep"):
        load_sweep(write_experiment(tmp_path, body % "sweep.batch"))


def test_values_that_agree_in_six_digits_name_two_points(tmp_path):
    # %g named both 0.25 and 0.2500001 "0.25": two points, and their records, of one name
    sweep = load_sweep(write_experiment(tmp_path, "axes:\n  policies.snap.prompt_fraction.budget: [0.25, 0.2500001]\n"))
    assert [p.name for p in sweep.points] == ["budget=0.25", "budget=0.2500001"]


def test_a_path_an_axis_gives_is_relative_to_the_file_that_wrote_the_axis(tmp_path):
    # the sweep file starts from a base: file in another folder; its axis's model path was resolved
    # from the base's folder, which ran another model file (or failed) without a word
    base = write_experiment(tmp_path, "axes:\n  serving.batch: [2]\n", name="base.yaml")
    (tmp_path / "a" / "deep").mkdir(parents=True)
    base.rename(tmp_path / "a" / "deep" / "base.yaml")
    (tmp_path / "m").mkdir()
    model = (REPO / "graphs/llama3_1_8b.yaml").read_text()
    (tmp_path / "m" / "mine.yaml").write_text(model.replace("name: llama-3.1-8b", "name: mine-8b").replace(
        "kernels: kernels_llama.yaml", f"kernels: {REPO / 'graphs/kernels_llama.yaml'}"))
    (tmp_path / "b").mkdir()
    sweep_file = tmp_path / "b" / "s.yaml"
    sweep_file.write_text("base: ../a/deep/base.yaml\nsweep:\n  axes:\n    model: [../m/mine.yaml]\n")
    runs, failures = expand_runs(load_sweep(sweep_file))
    assert failures == [] and {run.assembly.model.name for run in runs} == {"mine-8b"}


def test_prompt_lens_replace_shape_prompt_len(tmp_path):
    path = write_experiment(tmp_path, "axes:\n  shape.prompt_len: [1024, 2048]\n", extra="prompt_lens: [4096]\n")
    with pytest.raises(InputError, match="sweep prompt_lens instead"):
        load_sweep(path)


def test_cli_reports_a_bad_sweep_in_one_line(tmp_path, capsys):
    path = write_experiment(tmp_path, "axes:\n  serving.batchh: [1, 2]\n")
    assert main(["sweep", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {path}:16: sweep.axes.serving.batchh:")
    assert not (tmp_path / "out").exists()  # nothing ran


# -- runs --------------------------------------------------------------------------------------

def test_failing_runs_are_reported_and_the_rest_complete(tmp_path, capsys):
    path = write_experiment(tmp_path, "axes:\n  serving.batch: [2, 2048, 8]\n")
    assert main(["sweep", str(path), "--out", str(tmp_path / "a"), "--jobs", "2", "--quiet"]) == 1
    captured = capsys.readouterr()
    records = json.loads((tmp_path / "a" / "results.json").read_text())
    failures = json.loads((tmp_path / "a" / "failures.json").read_text())
    # full at batch 2048 does not fit in HBM; SnapStream's 4:1 cache does
    assert [f["point"] for f in failures] == ["full[batch=2048]"]
    # a run that does not fit is infeasible, not an error of the simulator, even when it fails the sweep
    assert failures[0]["kind"] == "infeasible" and "does not fit" in failures[0]["error"]
    assert failures[0]["sweep"] == {"serving.batch": 2048}   # the values, whatever the point's name
    assert "point full[batch=2048] did not fit (infeasible): " in captured.err
    assert "1 run(s) did not fit (infeasible;" in captured.out and "failed with an error" not in captured.out
    assert [r["name"] for r in records] == ["full[batch=2]", "snap[batch=2]", "snap[batch=2048]",
                                            "full[batch=8]", "snap[batch=8]"]
    assert [r["batch"] for r in records] == [2, 2, 2048, 8, 8]
    assert all(r["sweep"] == {"serving.batch": r["batch"]} and r["sweep_point"] == f"batch={r['batch']}"
               for r in records)
    assert all(RESULTS.mismatches(r) == [] for r in records)  # sweep records hold the declared fields
    # the same sweep in one process writes the same bytes
    assert main(["sweep", str(path), "--out", str(tmp_path / "b"), "--jobs", "1", "--quiet"]) == 1
    for name in ("results.json", "results.csv", "failures.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_an_error_is_told_apart_from_a_run_that_does_not_fit(tmp_path, capsys, monkeypatch):
    # failures.json said "error" for a batch over the KV capacity as for a bad value: a reader could
    # not tell a design point that does not fit from a run that broke
    import sn40l_sim.study.sweep.run as run_module
    real = run_module.simulate_assembly

    def broken_at_batch_8(assembly, only):
        if assembly.experiment.spec.serving.batch == 8 and only[0].name == "snap":
            raise InputError("a bad value", file="x.yaml", field="serving.batch")
        return real(assembly, only=only)

    monkeypatch.setattr(run_module, "simulate_assembly", broken_at_batch_8)
    path = write_experiment(tmp_path, "axes:\n  serving.batch: [2048, 8]\n")
    assert main(["sweep", str(path), "--out", str(tmp_path / "a"), "--jobs", "1", "--quiet", "--no-plot"]) == 1
    captured = capsys.readouterr()
    failures = json.loads((tmp_path / "a" / "failures.json").read_text())
    assert [(f["point"], f["kind"]) for f in failures] == [("full[batch=2048]", "infeasible"),
                                                           ("snap[batch=8]", "error")]
    assert "full[batch=2048] did not fit (infeasible): " in captured.err
    assert "point snap[batch=8] failed: x.yaml: serving.batch: a bad value" in captured.err
    assert "1 run(s) did not fit (infeasible;" in captured.out
    assert "1 run(s) failed with an error" in captured.out


def test_a_sweep_point_invalid_as_a_whole_is_counted_as_a_point_not_as_one_run(tmp_path, capsys):
    # tp 4 with attention_dp 8 (each value valid alone) has no runs: the summary counted it as one
    # run, "6 of 7 runs gave a record" for 4 points of 2 policies, and "1 run(s) failed"
    path = write_experiment(tmp_path, "axes: {parallel.decode.tp: [8, 4], parallel.decode.attention_dp: [8, 4]}\n")
    assert main(["sweep", str(path), "--out", str(tmp_path / "a"), "--jobs", "1", "--quiet", "--no-plot"]) == 1
    out = capsys.readouterr().out
    failures = json.loads((tmp_path / "a" / "failures.json").read_text())
    assert [(f["point"], f["kind"]) for f in failures] == [("tp=4,attention_dp=8", "error")]
    assert "6 of 6 runs gave a record, and 1 sweep point(s) failed before any of their runs, in " in out
    assert "1 sweep point(s) failed with an error before any of their runs" in out and "run(s) failed" not in out


def test_infeasible_runs_can_be_skipped(tmp_path):
    path = write_experiment(tmp_path, "axes:\n  serving.batch: [2048]\ninfeasible: skip\n"
                            "plot: {x: batch, y: decode_tokens_per_s, hue: kv_policy}\n")
    records = run_sweep(path, tmp_path / "out", jobs=1, progress=False)
    assert records.failures == [] and [name for name, _ in records.skipped] == ["full[batch=2048]"]
    assert records.total == 2 and [r["name"] for r in records] == ["snap[batch=2048]"]
    assert (tmp_path / "out" / "sweep.png").stat().st_size > 0


def test_a_node_smaller_than_the_plan_is_skipped_as_infeasible(tmp_path):
    # a socket-count sweep at a fixed TP8: the 4-socket node cannot hold the plan, which is an
    # expected outcome of such a sweep, not a failure of it
    path = write_experiment(tmp_path, "axes:\n  hardware.sockets: [4, 8]\ninfeasible: skip\n")
    records = run_sweep(path, tmp_path / "out", jobs=1, progress=False, plots=False)
    assert records.failures == []
    assert [name for name, _ in records.skipped] == ["full[sockets=4]", "snap[sockets=4]"]
    assert all("the prefill plan needs 8 sockets" in error for _, error in records.skipped)
    assert [r["name"] for r in records] == ["full[sockets=8]", "snap[sockets=8]"]


def test_an_axis_written_with_units_is_a_number_in_the_results(tmp_path):
    # "10 ms", "100 ms", "20 ms" were text in results.csv: a plot ordered them as words, under "(s)"
    path = write_experiment(tmp_path, "axes:\n  workload.interval_s: [20 ms, 100 ms]\n  serving.batch: [2]\n")
    path.write_text(path.read_text().replace("workload: {kind: fixed, count: batch, output_len: 2}",
                                             "workload: {kind: fixed, count: 2, output_len: 2, interval_s: 0}"))
    records = run_sweep(path, tmp_path / "out", jobs=1, progress=False, plots=False)
    assert [r["sweep"] for r in records] == [{"workload.interval_s": 0.02, "serving.batch": 2}] * 2 + \
        [{"workload.interval_s": 0.1, "serving.batch": 2}] * 2
    assert [r["sweep_point"] for r in records][::2] == ["interval_s=20ms,batch=2", "interval_s=100ms,batch=2"]


def test_objectives_write_the_pareto_front(tmp_path):
    path = write_experiment(tmp_path, "axes:\n  serving.batch: [2, 8, 32]\n"
                            "objectives: {decode_tokens_per_s: max, tpot_s: min}\n")
    records = run_sweep(path, tmp_path / "out", jobs=1, progress=False)
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    front = json.loads((tmp_path / "out" / "pareto.json").read_text())
    assert [r["name"] for r in records.front] == [r["name"] for r in front]
    assert front == [r for r in results if r["name"] in {f["name"] for f in front}]  # a subset, in order

    def beats(a, b):
        ge = a["decode_tokens_per_s"] >= b["decode_tokens_per_s"] and a["tpot_s"] <= b["tpot_s"]
        return ge and (a["decode_tokens_per_s"] > b["decode_tokens_per_s"] or a["tpot_s"] < b["tpot_s"])

    assert 0 < len(front) < len(results)
    assert all(any(beats(f, r) for f in front) for r in results if r not in front)
    assert not any(beats(r, f) for f in front for r in results)
    csv_lines = (tmp_path / "out" / "pareto.csv").read_text().splitlines()
    assert len(csv_lines) == len(front) + 1
    assert (tmp_path / "out" / "pareto.png").stat().st_size > 0
    # without the plot, every other file is the same
    run_sweep(path, tmp_path / "no_plot", jobs=1, progress=False, plots=False)
    assert not list((tmp_path / "no_plot").glob("*.png"))
    for name in ("results.json", "results.csv", "failures.json", "pareto.json", "pareto.csv"):
        assert (tmp_path / "no_plot" / name).read_bytes() == (tmp_path / "out" / name).read_bytes(), name


def test_no_plot_writes_every_file_but_the_plots(tmp_path, capsys):
    # sweep --no-plot, and run --no-plot on an experiment with a sweep: section, which runs it as a
    # sweep (that the files equal a plotted sweep's: test_objectives_write_the_pareto_front)
    path = write_experiment(tmp_path, "axes:\n  serving.batch: [2, 8]\nplot: {x: batch, y: tpot_s, hue: kv_policy}\n"
                            "objectives: {decode_tokens_per_s: max, tpot_s: min}\n")
    for command in ("sweep", "run"):
        out = tmp_path / command
        assert main([command, str(path), "--out", str(out), "--jobs", "1", "--quiet", "--no-plot"]) == 0
        wrote = capsys.readouterr().out
        assert "pareto.csv" in wrote and ".png" not in wrote
        assert {p.name for p in out.iterdir()} >= {"results.json", "pareto.json"} and not list(out.glob("*.png"))
    for name in ("results.json", "results.csv", "failures.json", "pareto.json", "pareto.csv"):
        assert (tmp_path / "sweep" / name).read_bytes() == (tmp_path / "run" / name).read_bytes(), name


@pytest.mark.parametrize("kwargs, named", [
    (dict(jobs=0), "--jobs: expected a positive number of processes, got 0"),
    (dict(jobs=-1), "--jobs: expected a positive number of processes, got -1"),
    (dict(jobs="2"), "--jobs: expected a positive number of processes, got '2'"),
    (dict(jobs=1.5), "--jobs: expected a positive number of processes, got 1.5"),
    (dict(out_dir=None), "out_dir: expected the path of the output folder, got None"),
    (dict(sets=["serving.batch=4"]), "expected the sets as a mapping of dotted field paths to values"),
    (dict(sets={3: 4}), "set keys must be dotted field paths such as 'serving.batch', got 3"),
])
def test_run_sweep_refuses_what_the_commands_refuse_from_python(tmp_path, kwargs, named):
    """run_sweep(jobs=0) and (jobs=-1) ran the sweep in this process where sweep --jobs 0 is refused,
    jobs="2" or 1.5 raised a TypeError, out_dir=None another, and sets given as a list or with a key
    that is not a path an AttributeError, each from inside."""
    path = write_experiment(tmp_path, "axes:\n  serving.batch: [2, 8]\n")
    out = tmp_path / "out"
    with pytest.raises(InputError, match=re.escape(named)):
        run_sweep(path, **{"out_dir": out, "jobs": 1, "progress": False, "plots": False, **kwargs})
    assert not out.exists()


def test_run_points_refuses_jobs_and_a_sweep_it_cannot_run(tmp_path):
    """design_space.ipynb calls run_points(load_sweep(path), jobs=1): jobs=0 ran unsaid, "2" raised a
    TypeError, and the sweep's path given for the Sweep an AttributeError."""
    from sn40l_sim.study.sweep.run import run_points
    path = write_experiment(tmp_path, "axes:\n  serving.batch: [2, 8]\n")
    sweep = load_sweep(path)
    for jobs in (0, "2"):
        with pytest.raises(InputError, match=rf"^--jobs: expected a positive number of processes, got {jobs!r}$"):
            run_points(sweep, jobs=jobs, progress=False)
    with pytest.raises(InputError, match=r"^sweep: expected a Sweep \(load_sweep\(path\)\), got PosixPath$"):
        run_points(path, jobs=1, progress=False)


@pytest.mark.parametrize("command, has_sweep", [("run", False), ("run", True), ("sweep", True)])
@pytest.mark.parametrize("jobs", ["0", "-2"])
def test_jobs_below_one_are_refused_by_run_and_sweep_alike(tmp_path, capsys, command, has_sweep, jobs):
    # run's --jobs is the sweep's process count: refused as sweep refuses it, sweep: section or not,
    # before anything is simulated (0 ran on every CPU, a negative count in one process)
    path = write_experiment(tmp_path, "axes:\n  serving.batch: [2, 8]\n")
    if not has_sweep:
        path.write_text(path.read_text().split("sweep:\n")[0])
    out = tmp_path / "out"
    assert main([command, str(path), "--out", str(out), "--jobs", jobs, "--quiet", "--no-plot"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: --jobs: expected a positive number of processes, got {jobs}"]
    assert not out.exists()


@pytest.mark.parametrize("plot, field, words", [
    ("{x: batch, y: tpot_s}", "sweep.plot.x", "2 rows have batch=2 (all rows)"),
    ("{x: batch, y: tpot_s, hue: kv_policy, where: {batch: 64}}", "sweep.plot.where", "no row matches"),
])
def test_a_plot_section_that_fails_on_the_results_names_the_experiment_field(tmp_path, capsys, plot, field, words):
    # what only the results show (rows that share an x, a where no row matches) is the plot: section's
    # to fix, not the plot command's options
    path = write_experiment(tmp_path, f"axes:\n  serving.batch: [2, 8]\nplot: {plot}\n")
    assert main(["sweep", str(path), "--out", str(tmp_path / "out"), "--jobs", "1", "--quiet"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: {path}:17: {field}: ") and words in line, line
    assert "--" not in line.replace(str(tmp_path), ""), line
    assert f"plotting {tmp_path / 'out' / 'results.csv'}" in line


def test_hardware_axis_changes_the_simulation(tmp_path):
    path = write_experiment(tmp_path, """\
        axes:
          hbm: {path: hardware.socket.memory.hbm.bytes_per_s_per_unit, values: [204.8 GB/s, 409.6 GB/s, 819.2 GB/s]}
        """)
    records = [r for r in run_sweep(path, tmp_path / "out", jobs=1, progress=False) if r["kv_policy"] == "full"]
    assert [r["sweep"]["hbm"] for r in records] == [204.8e9, 409.6e9, 819.2e9]
    steps = [r["decode_step_s"] for r in records]
    # a decode step streams the weights and the cache from HBM: more bandwidth, strictly shorter step,
    # but never more than proportionally shorter
    assert steps[0] > steps[1] > steps[2]
    assert steps[0] / steps[1] <= 2.0 + 1e-9 and steps[1] / steps[2] <= 2.0 + 1e-9
    assert "sweep.hbm" in (tmp_path / "out" / "results.csv").read_text().splitlines()[0].split(",")


def test_demo_sweep_has_fifty_points():
    sweep = load_sweep(REPO / "experiments/deepseek_sweep.yaml")
    assert len(sweep.points) == 50 and [a.label for a in sweep.axes] == ["batch", "prompt_len"]
    assert sweep.axes[0].values == tuple(2**i for i in range(10))
    assert sweep.infeasible == "skip" and sweep.plot["x"] == "batch"


def test_coupled_axes_are_checked_together(tmp_path):
    # 32 sockets in a full mesh need 31 P2P ports: invalid with the socket's 16 alone, valid zipped with 32
    sweep = load_sweep(write_experiment(tmp_path, """\
        mode: zip
        axes:
          hardware.sockets: [8, 32]
          hardware.socket.p2p.ports: [16, 32]
        """))
    assert sweep.points[1].hardware_overrides == {"sockets": 32, "socket.p2p.ports": 32}
    path = write_experiment(tmp_path, """\
        axes:
          hardware.sockets: [8, 32]
          hardware.socket.p2p.ports: [16, 20]
        """)
    with pytest.raises(InputError) as info:
        load_sweep(path)  # no point makes 32 sockets valid
    assert info.value.field == "sweep.axes.hardware.sockets[1]" and "31 P2P ports" in info.value.message


def test_a_hardware_file_set_takes_the_hardware_axes_on_top(tmp_path):
    # the set swaps the file and the axis changes one of its fields: both have an effect
    path = write_experiment(tmp_path, "axes:\n  hardware.socket.memory.hbm.bytes_per_s_per_unit: [409.6 GB/s, 1 TB/s]\n")
    node16 = str(REPO / "hw_configs/sn40l_node16.yaml")
    sweep = load_sweep(path, {"hardware": node16})
    assert [p.data["hardware"] for p in sweep.points] == [node16, node16]
    assert sweep.points[1].hardware_overrides == {"socket.memory.hbm.bytes_per_s_per_unit": "1 TB/s"}


@pytest.mark.parametrize("item, words", [
    ("serving.batchh=8", "serving.batchh: 8: unknown key"),   # the field named once
    ("serving.batch=-1", "serving.batch:"),
    ("hardware.socket.memory.hbm.bytes_per_s_per_unit=fast", "bandwidth"),
])
def test_bad_sets_name_the_set(tmp_path, capsys, item, words):
    path = write_experiment(tmp_path, "axes:\n  serving.batch: [1, 2]\n")
    assert main(["sweep", str(path), "--set", item, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: --set {item.split('=')[0]}: ") and words in err[0], err


@pytest.mark.parametrize("axis, item, words", [
    ("serving.batch", "serving.batch=8", "the axis serving.batch sets it at every sweep point"),
    ("serving.batch", "serving={batch: 8}", "the axis serving.batch sets serving.batch at every sweep point"),
    ("policies.snap.params.sink", "policies.snap.params.sink=8", "the axis policies.snap.params.sink sets it"),
    ("hardware.sockets", "hardware.sockets=8", "the axis hardware.sockets sets it"),
    ("serving.batch", "sweep.mode=zip", "the sweep: section is not set with --set"),
])
def test_a_set_that_an_axis_overrides_is_refused(tmp_path, capsys, axis, item, words):
    # it was accepted and had no effect: the axis (or the section, read before the sets) won
    path = write_experiment(tmp_path, f"axes:\n  {axis}: [4, 8]\n")
    assert main(["sweep", str(path), "--set", item, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: --set {item.split('=')[0]}: ") and words in err[0], err


def test_a_missing_file_given_as_an_axis_value_is_refused_before_any_run(tmp_path, capsys):
    # the other points ran and the sweep ended with exit 1, where check refused it
    path = tmp_path / "sweep.yaml"
    path.write_text(f"base: {REPO / 'experiments' / 'llama8b_node8.yaml'}\nname: miss\nsweep:\n  axes:\n"
                    f"    model: [{REPO / 'graphs' / 'llama3_1_8b.yaml'}, nosuch.yaml]\n")
    assert main(["sweep", str(path), "--out", str(tmp_path / "out"), "--no-plot"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {path}:5: sweep.axes.model[1]: value 'nosuch.yaml': model: "
                                               "model file 'nosuch.yaml' not found"), err
    assert not (tmp_path / "out" / "results.json").exists()


def test_failures_give_axis_values_in_the_units_of_the_results(tmp_path):
    # a value written with a unit is the results column's number in failures.json too, so the two
    # files can be plotted together
    path = write_experiment(tmp_path, "axes:\n  serving.batch: [2048]\n"
                                      "  hardware.socket.memory.hbm.bytes_per_s_per_unit: [409.6 GB/s]\n")
    assert main(["sweep", str(path), "--out", str(tmp_path / "a"), "--quiet", "--no-plot"]) == 1
    (failure,) = json.loads((tmp_path / "a" / "failures.json").read_text())
    (record,) = json.loads((tmp_path / "a" / "results.json").read_text())
    assert failure["point"].startswith("full[") and record["name"].startswith("snap[")
    assert failure["sweep"] == record["sweep"] == {"serving.batch": 2048,
                                                   "hardware.socket.memory.hbm.bytes_per_s_per_unit": 409.6e9}


def test_a_path_set_on_the_command_line_is_relative_to_the_folder_it_was_typed_in(tmp_path, monkeypatch):
    # it was resolved from the base file's folder: the repository's graphs/, not the user's
    (tmp_path / "graphs").mkdir()
    mine = tmp_path / "graphs" / "mine.yaml"
    mine.write_text((REPO / "graphs" / "llama3_1_8b.yaml").read_text().replace(
        "kernels: kernels_llama.yaml", f"kernels: {REPO / 'graphs' / 'kernels_llama.yaml'}"))
    path = write_experiment(tmp_path, "axes:\n  serving.batch: [4]\n")
    monkeypatch.chdir(tmp_path)
    sweep = load_sweep(path, parse_sets(["model=graphs/mine.yaml"]))
    assert [p.data["model"] for p in sweep.points] == [str(mine)]


@pytest.mark.parametrize("axis, field, first", [
    ("model: [{repo}/graphs/llama3_1_8b.yaml, {repo}/graphs/../graphs/llama3_1_8b.yaml]", "sweep.axes.model[1]",
     "model={repo}/graphs/llama3_1_8b.yaml"),
    ("m: {{path: hardware, values: [{repo}/hw_configs/sn40l_node8.yaml, copy/sn40l_node8.yaml]}}", "sweep.axes.m.values[1]",
     "m={repo}/hw_configs/sn40l_node8.yaml"),
])
def test_two_values_that_simulate_one_point_are_refused_before_any_run(tmp_path, capsys, axis, field, first):
    # two spellings of one file, or a copy of it, passed the repeated-value check (which compares
    # values as written): the grid ran each point twice, under two names
    (tmp_path / "copy").mkdir()
    for name in ("sn40l.yaml", "sn40l_node16.yaml", "sn40l_node8.yaml"):   # the node file and its bases
        (tmp_path / "copy" / name).write_text((REPO / "hw_configs" / name).read_text())
    path = write_experiment(tmp_path, "axes:\n  serving.batch: [2, 4]\n  " + axis.format(repo=REPO) + "\n")
    for command in (["sweep", str(path), "--out", str(tmp_path / "out"), "--jobs", "1"], ["check", str(path)]):
        assert main(command) == 2
        (line,) = capsys.readouterr().err.splitlines()
        assert line.startswith(f"error: {path}:17: {field}: value ") and "simulates what [0] " in line, line
        assert line.endswith(f"the sweep would run point batch=2,{first.format(repo=REPO)} twice"), line
    assert not (tmp_path / "out" / "runs").exists()


def test_a_file_an_axis_names_that_does_not_load_is_refused_before_any_run(tmp_path, capsys):
    # a model file that is there but does not load passed the axis check (which only looked for the
    # file): sweep ran the other points and listed its points as failed (exit 1), while check refused it
    (tmp_path / "kernels_llama.yaml").write_text((REPO / "graphs" / "kernels_llama.yaml").read_text())
    broken = (REPO / "graphs" / "llama3_1_8b.yaml").read_text().replace("\nlayers: 32 ", "\nlayers: -3 ")
    (tmp_path / "broken.yaml").write_text(broken)
    path = write_experiment(tmp_path, f"axes:\n  model: [{REPO / 'graphs/llama3_1_8b.yaml'}, broken.yaml]\n")
    lines = []
    for command in (["sweep", str(path), "--out", str(tmp_path / "out"), "--jobs", "1"], ["check", str(path)]):
        assert main(command) == 2
        lines += capsys.readouterr().err.splitlines()
    assert lines == [f"error: {path}:16: sweep.axes.model[1]: value 'broken.yaml': {tmp_path / 'broken.yaml'}:6: "
                     "layers: expected a positive integer from 1 to 2147483647 (2**31 - 1), got -3"] * 2
    assert not (tmp_path / "out" / "runs").exists()


def test_a_bad_value_of_a_policy_axis_is_not_located_in_the_base_file(tmp_path):
    # an axis naming a policy entry by its name: the entry's validation error (which names it by its
    # index) cited the base file's line, where the value is 0.25, as if the 2.0 stood there
    base = write_experiment(tmp_path, None, name="base.yaml")
    path = tmp_path / "sweep.yaml"
    path.write_text(f"base: {base}\nsweep:\n  axes:\n    policies.snap.prompt_fraction.budget: [0.25, 2.0]\n")
    with pytest.raises(InputError) as info:
        load_sweep(path)
    assert str(info.value) == (f"{path}:4: sweep.axes.policies.snap.prompt_fraction.budget[1]: value 2.0: "
                               "policies[1].prompt_fraction.budget: expected a fraction greater than 0 and at most "
                               "1, got 2")
