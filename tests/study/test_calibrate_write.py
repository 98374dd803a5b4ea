"""What ``calibrate --write`` writes besides the hardware file: validate's leave-one-out column
(experiments/reference/leave_one_out.json) only for the project's socket file, at the values as
written. The fit itself is replaced by a fixed result: these tests are of what is written, not of
the search (tests/study/test_calibration_fit.py)."""
from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from sn40l_sim.commands.cli import main
from sn40l_sim.errors import InputError
from sn40l_sim.hardware.loader import load_hardware
from sn40l_sim.hardware.spec import calibrated_parameters
from sn40l_sim.study import calibration
from sn40l_sim.study.calibration import FitResult, fitted_names
from sn40l_sim.study.leave_one_out import LEAVE_ONE_OUT, LeaveOneOut

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def fixed_fit(monkeypatch):
    """calibrate's fit replaced by one that moves the P2P efficiency to 0.30004 (a value the
    hardware file's line keeps to four decimals, 0.3000) and its leave-one-out by fixed predictions."""
    socket = load_hardware(REPO / "hw_configs" / "sn40l.yaml").socket
    names = tuple(fitted_names(socket))
    start = tuple(calibrated_parameters(socket)[n].value for n in names)
    fitted = tuple(0.30004 if n == "calibrated.p2p_efficiency" else v for n, v in zip(names, start, strict=True))

    def fake_fit(references, socket, evaluate, **kw):
        return FitResult(names, start, fitted, [], 0.0)

    monkeypatch.setattr(calibration, "fit", fake_fit)
    monkeypatch.setattr(calibration, "leave_one_out", lambda result, socket, evaluate=None: {"t4_mha": 0.7})
    return fitted


def test_a_fit_of_another_hardware_file_leaves_the_projects_leave_one_out_column(tmp_path, capsys, fixed_fit):
    # `calibrate --write --hardware my_copy.yaml` rewrote experiments/reference/leave_one_out.json
    # with predictions at my copy's values, replacing the shipped refit column
    mine = tmp_path / "sn40l.yaml"
    shutil.copy(REPO / "hw_configs" / "sn40l.yaml", mine)
    shipped = LEAVE_ONE_OUT.read_bytes()
    assert main(["calibrate", "--write", "--quiet", "--hardware", str(mine)]) == 0
    out = capsys.readouterr().out
    assert LEAVE_ONE_OUT.read_bytes() == shipped
    assert calibrated_parameters(load_hardware(mine).socket)["calibrated.p2p_efficiency"].value == 0.3
    assert f"wrote the fitted values into {mine} (not experiments/reference/leave_one_out.json: validate's " \
        "leave-one-out column is of the project's hw_configs/sn40l.yaml)" in out


def test_the_leave_one_out_column_records_the_values_as_written(tmp_path, monkeypatch, capsys, fixed_fit):
    # it recorded 0.30004 while the file's line said 0.3000, a relative difference of 1.3e-4, over
    # the 1e-4 validate allows: right after `calibrate --write` validate dropped the column as stale
    project = tmp_path / "sn40l.yaml"
    shutil.copy(REPO / "hw_configs" / "sn40l.yaml", project)
    column = tmp_path / "leave_one_out.json"
    monkeypatch.setattr("sn40l_sim.commands.calibrate.default_hardware", lambda: project)
    write = LeaveOneOut.write
    monkeypatch.setattr(LeaveOneOut, "write", lambda self, path=column: write(self, column))
    assert main(["calibrate", "--write", "--quiet"]) == 0
    assert f"wrote the fitted values into {project}, {column}\n" in capsys.readouterr().out
    written = LeaveOneOut.read(column)
    assert written is not None and written.predictions == {"t4_mha": 0.7}
    assert written.fitted["calibrated.p2p_efficiency"] == 0.3
    values = {k: p.value for k, p in calibrated_parameters(load_hardware(project).socket).items()}
    assert written.current(values)


def _ended_with_the_systolic_efficiency_at_its_bound() -> tuple[tuple[str, ...], tuple[float, ...]]:
    """The fitted parameters' names and the shipped values with the systolic efficiency at its upper
    bound, 1: a fit that starts and ends there (how the bound is reported, whatever the shipped value)."""
    socket = load_hardware(REPO / "hw_configs" / "sn40l.yaml").socket
    names = tuple(fitted_names(socket))
    return names, tuple(1.0 if n == "calibrated.systolic_efficiency" else calibrated_parameters(socket)[n].value
                        for n in names)


@pytest.mark.parametrize("stopped, words, bound", [
    ("budget", "the fit stopped at its budget of 7 passes (--max-evaluations), before taking a step: the fitted "
               "values are its start; give a larger budget", "(at its upper bound, 1)\n"),
    ("converged", "the fit converged: on a Jacobian measured where it ended, no step lowers the cost; the fitted "
                  "values are its start", "(at its upper bound, 1: the fit would go further; docs/validation.md)\n"),
])
def test_calibrate_says_why_the_fit_stopped(monkeypatch, capsys, stopped, words, bound):
    # `calibrate --max-evaluations 7` spends its passes on the start and the Jacobian and printed the
    # start as 'fitted', with the systolic efficiency's 'the fit would go further', like a converged fit
    names, start = _ended_with_the_systolic_efficiency_at_its_bound()
    monkeypatch.setattr(calibration, "fit", lambda *a, **kw: FitResult(names, start, start, [], 0.0, stopped=stopped))
    monkeypatch.setattr(calibration, "leave_one_out", lambda result, socket, evaluate=None: {})
    assert main(["calibrate", "--quiet", "--max-evaluations", "7"]) == 0
    out = capsys.readouterr().out
    assert words in out
    systolic = next(line for line in out.splitlines() if line.startswith("calibrated.systolic_efficiency"))
    assert systolic.endswith(bound.rstrip("\n")), systolic


def test_calibrate_says_which_refits_spent_their_budget_before_a_step(monkeypatch, capsys):
    socket = load_hardware(REPO / "hw_configs" / "sn40l.yaml").socket
    names = tuple(fitted_names(socket))
    start = tuple(calibrated_parameters(socket)[n].value for n in names)
    monkeypatch.setattr(calibration, "fit", lambda *a, **kw: FitResult(names, start, start, [], 0.0))

    def refits(references, socket, evaluate, max_evaluations, progress):
        progress("t4_mha", 7, FitResult(names, start, start, [], 0.0, stopped="budget"))
        progress("t4_qkv", 9, FitResult(names, start, start, [], 0.0, stopped="resolution"))
        return {"t4_mha": 0.69, "t4_qkv": 0.04}

    monkeypatch.setattr("sn40l_sim.study.leave_one_out.refit_leave_one_out", refits)
    assert main(["calibrate", "--quiet", "--max-evaluations", "7", "--leave-one-out", "refit"]) == 0
    assert "leave-one-out: refit of the simulator without the point, every step simulated (study/leave_one_out.py, " \
        "refit_leave_one_out); 1 of 2 refits spent their budget of 7 passes before taking a step, so they predict " \
        "their point at the hardware file's values (a larger --max-evaluations)\n" in capsys.readouterr().out


@pytest.mark.parametrize("text, field, words", [
    ('{"fitted": {"calibrated.p2p_efficiency": "0.5489"}, "predictions": {}}', "fitted.calibrated.p2p_efficiency",
     "expected a finite number, got '0.5489'"),
    ('{"fitted": {}, "predictions": {"t4_mha": null}}', "predictions.t4_mha", "expected a finite number, got None"),
    ('{"fitted": {}, "predictions": {"t4_mha": NaN}}', "predictions.t4_mha", "expected a finite number, got nan"),
    ('{"fitted": {}, "predictions": {"t4_mha": true}}', "predictions.t4_mha", "expected a finite number, got True"),
    ('{"fitted": {}}', "predictions", "expected an object of numbers by name, got None"),
    ("[]", None, "expected a JSON object of fitted, predictions and method, got list"),
    ("{", None, "cannot read the leave-one-out predictions: Expecting property name"),
    # an integer past a float's range stopped math.isfinite with an OverflowError traceback
    pytest.param('{"fitted": {"calibrated.p2p_efficiency": ' + "9" * 400 + '}, "predictions": {}}',
                 "fitted.calibrated.p2p_efficiency", "got 99999999", id="integer-of-400-digits"),
    # a value of 10,000 entries was repeated whole in the message
    pytest.param('{"fitted": [' + ",".join(["1"] * 10000) + '], "predictions": {}}', "fitted",
                 "...] (10,000 items)", id="long-list"),
    # a misspelt key was ignored (the column read as no predictions); a method of another type was str()'d
    ('{"fitted": {}, "predictions": {}, "predictons": {"t4_mha": 0.5}}', None, "unknown key 'predictons'; expected"),
    ('{"fitted": {}, "predictions": {}, "method": ["refit"]}', "method", "expected the method as text, got ['refit']"),
])
def test_a_hand_edited_leave_one_out_file_is_one_located_error(tmp_path, text, field, words):
    # a string or null among the values was a TypeError traceback from validate
    path = tmp_path / "leave_one_out.json"
    path.write_text(text)
    with pytest.raises(InputError) as err:
        LeaveOneOut.read(path)
    assert err.value.file == str(path) and err.value.field == field and words in err.value.message, str(err.value)
    assert err.value.message.endswith("; rerun `python -m sn40l_sim calibrate --write`")


def test_a_fit_simulates_only_the_points_its_measurements_read(tmp_path, monkeypatch, capsys):
    # each pass simulated every point of a calibration point's experiment: all six of
    # snapstream_table5.yaml's for a measurement of one
    from sn40l_sim.study.evaluation import LoadedExperiments

    table5 = REPO / "experiments" / "snapstream_table5.yaml"
    mine = tmp_path / "mine.yaml"
    mine.write_text("kind: reference\nmeasurements:\n"
                    f"  - {{id: b, quantity: max_batch, value: 64, tolerance: {{abs: 0}}, source: s, experiment: {table5}, "
                    "point: full@32K, calibration: true}\n")
    socket = load_hardware(REPO / "hw_configs" / "sn40l.yaml").socket
    names = tuple(fitted_names(socket))
    start = tuple(calibrated_parameters(socket)[n].value for n in names)

    def one_pass(references, socket, evaluate, **kw):
        return FitResult(names, start, start, evaluate(calibration.calibration_references(references), {}), 0.0)

    monkeypatch.setattr(calibration, "fit", one_pass)
    monkeypatch.setattr(calibration, "leave_one_out", lambda result, socket, evaluate=None: {})
    simulated: list[str] = []
    records = LoadedExperiments.records

    def counted(self, path, **kw):
        out = records(self, path, **kw)
        simulated.extend(r["name"] for r in out)
        return out

    monkeypatch.setattr(LoadedExperiments, "records", counted)
    assert main(["calibrate", "--quiet", str(mine)]) == 0
    assert simulated == ["full@32K"]
    assert "b   max_batch  64        64         +0     yes  calibration" in capsys.readouterr().out


def _no_fit(*args, **kwargs):
    raise AssertionError("the fit ran before calibrate --write's files were checked")


def test_a_read_only_hardware_file_is_refused_before_the_fit(tmp_path, monkeypatch, capsys):
    # `calibrate --write --hardware` into a read-only folder ran the whole fit (30 s; minutes with
    # --leave-one-out refit), printed its table, then stopped at 'cannot write'
    import errno
    import tempfile

    mine = tmp_path / "ro" / "sn40l.yaml"
    mine.parent.mkdir()
    shutil.copy(REPO / "hw_configs" / "sn40l.yaml", mine)
    temporary = tempfile.TemporaryFile

    def read_only(*args, dir=None, **kwargs):   # the tests may run as root, whom chmod does not stop
        if dir is not None and Path(dir) == mine.parent:
            raise PermissionError(errno.EROFS, "Read-only file system")
        return temporary(*args, dir=dir, **kwargs)

    monkeypatch.setattr("sn40l_sim.study.calibration_file.tempfile.TemporaryFile", read_only)
    monkeypatch.setattr(calibration, "fit", _no_fit)
    assert main(["calibrate", "--write", "--quiet", "--hardware", str(mine)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (f"error: --write: cannot write {mine}: Read-only file system (checked before the fit, "
                            "which would write it at its end)\n")


def test_a_value_on_a_line_calibrate_cannot_rewrite_is_refused_before_the_fit(tmp_path, monkeypatch, capsys):
    # a calibrated: block in flow style loads, but --write cannot rewrite one value of it: that was
    # found after the fit
    mine = tmp_path / "sn40l.yaml"
    text = (REPO / "hw_configs" / "sn40l.yaml").read_text()
    socket = load_hardware(REPO / "hw_configs" / "sn40l.yaml").socket
    block = ", ".join(f"{k}: {getattr(socket.calibrated, k)!r}" for k in type(socket.calibrated).model_fields)
    start = text.index("\ncalibrated:")
    end = text.index("\n", text.index("systolic_efficiency:", start))
    mine.write_text(text[:start] + f"\ncalibrated: {{{block}}}" + text[end:])
    assert load_hardware(mine).socket.calibrated == socket.calibrated
    monkeypatch.setattr(calibration, "fit", _no_fit)
    assert main(["calibrate", "--write", "--quiet", "--hardware", str(mine)]) == 2
    err = capsys.readouterr().err
    line = text[:start].count("\n") + 2   # the flow-style calibrated: line
    assert err.startswith(f"error: {mine}:{line}: calibrated.") and "its line is not a plain" in err, err
    assert err.count("\n") == 1


def test_the_measurements_a_leave_one_out_column_was_fitted_to_are_compared_as_the_fit_reads_them():
    from sn40l_sim.study.leave_one_out import fitted_measurements
    from sn40l_sim.study.validation import load_references

    references = load_references([REPO / "experiments" / "reference" / "snapstream_paper.yaml"])
    column = LeaveOneOut({}, {}, measurements=fitted_measurements(references))
    assert column.changed_measurement(references) is None
    assert set(column.measurements) == {r.measurement.id for r in references if r.measurement.calibration}

    def edited(id_, **fields):
        return [replace(r, measurement=r.measurement.model_copy(update=fields)) if r.measurement.id == id_ else r
                for r in references]

    # its source text is not read by the fit: no change
    assert column.changed_measurement(edited("t4_mha", source="another citation")) is None
    changed = column.changed_measurement(edited("t5_128k_full_tps", value=480.0))
    assert changed.startswith("t5_128k_full_tps: was {") and '"value": 434.0' in changed and '"value": 480.0' in changed
    held_back = column.changed_measurement(edited("t4_mha", calibration=False))
    assert held_back.startswith("t4_mha: was {") and held_back.endswith(", now not a calibration point")
    from sn40l_sim.study.reference_schema import Tolerance

    added = column.changed_measurement(edited("t5_64k_full_tps", value=900.0, tolerance=Tolerance(rel=0.05),
                                              calibration=True))
    assert added.startswith("t5_64k_full_tps: was not a calibration point, now {")


@pytest.mark.parametrize("falling, bound", [
    ("upper", "(at its upper bound, 1: the fit would go further; docs/validation.md)"),
    # the cost rises (or stays) past the bound on the fit's Jacobian: nothing says the fit would go on
    ("", "(at its upper bound, 1)"),
    ("lower", "(at its upper bound, 1)"),
])
def test_at_a_bound_the_fit_would_go_further_only_if_the_cost_falls_past_it(monkeypatch, capsys, falling, bound):
    # a refit without t4_mha stopped at a jump with the systolic efficiency at 1 and said 'the fit
    # would go further' whichever way the cost went there
    names, start = _ended_with_the_systolic_efficiency_at_its_bound()
    sides = tuple(falling if n == "calibrated.systolic_efficiency" else "" for n in names)
    monkeypatch.setattr(calibration, "fit", lambda *a, **kw: FitResult(names, start, start, [], 0.0,
                                                                       stopped="resolution", falling=sides))
    monkeypatch.setattr(calibration, "leave_one_out", lambda result, socket, evaluate=None: {})
    assert main(["calibrate", "--quiet"]) == 0
    systolic = next(line for line in capsys.readouterr().out.splitlines()
                    if line.startswith("calibrated.systolic_efficiency"))
    assert systolic.endswith(bound), systolic


@pytest.mark.parametrize("option, measurements_edited, inputs_edited, keeps", [
    ((), False, False, True),
    # a refit column of other measurements or other inputs (a hardware, model or experiment file of
    # the calibration points edited since), or a refit asked for, is replaced
    ((), True, False, False),
    ((), False, True, False),
    (("--leave-one-out", "refit"), False, False, False),
])
def test_a_linearised_write_keeps_a_refit_column_of_the_same_values_and_measurements(
        tmp_path, monkeypatch, capsys, option, measurements_edited, inputs_edited, keeps):
    # `calibrate --write` from the shipped values (the fit writes them back unchanged) replaced the
    # shipped column of true refits (15 of 18 within tolerance) with the linearised one (13 of 18, and
    # kl_8b_16_speedup at a ratio below one that no simulation gives)
    from sn40l_sim.study.evaluation import LoadedExperiments
    from sn40l_sim.study.leave_one_out import REFIT_METHOD, fitted_measurements, inputs_digest
    from sn40l_sim.study.validation import load_references

    project = tmp_path / "sn40l.yaml"
    shutil.copy(REPO / "hw_configs" / "sn40l.yaml", project)
    socket = load_hardware(project).socket
    names = tuple(fitted_names(socket))
    start = tuple(calibrated_parameters(socket)[n].value for n in names)
    monkeypatch.setattr(calibration, "fit", lambda *a, **kw: FitResult(names, start, start, [], 0.0))
    monkeypatch.setattr(calibration, "leave_one_out", lambda result, socket, evaluate=None: {"t4_mha": 0.5})
    monkeypatch.setattr("sn40l_sim.study.leave_one_out.refit_leave_one_out",
                        lambda references, socket, evaluate, max_evaluations, progress: {"t4_mha": 0.6})
    monkeypatch.setattr("sn40l_sim.commands.calibrate.default_hardware", lambda: project)
    column = tmp_path / "leave_one_out.json"
    write, read = LeaveOneOut.write, LeaveOneOut.read.__func__
    monkeypatch.setattr(LeaveOneOut, "write", lambda self, path=column: write(self, column))
    monkeypatch.setattr(LeaveOneOut, "read", classmethod(lambda cls, path=column: read(cls, column)))
    measured = fitted_measurements(load_references([]))
    if measurements_edited:
        measured["t4_mha"] = {**measured["t4_mha"], "value": 0.7}
    inputs = inputs_digest(LoadedExperiments(), load_references([]), names)
    LeaveOneOut(dict(zip(names, start, strict=True)), {"t4_mha": 0.698}, f"{REFIT_METHOD}, every step simulated",
                measured, "0" * 64 if inputs_edited else inputs).write(column)
    before = column.read_bytes()
    assert main(["calibrate", "--write", "--quiet", *option]) == 0
    out = capsys.readouterr().out
    assert (column.read_bytes() == before) is keeps
    assert ("keeps its column of true refits" in out) is keeps, out
    if not keeps:
        assert LeaveOneOut.read(column).predictions == {"t4_mha": 0.6 if option else 0.5}


def test_calibrate_says_when_an_experiment_runs_on_other_calibrated_values(tmp_path, monkeypatch, capsys):
    # an experiment on a node whose socket_overrides set the sync latency (5 us) was fitted at the
    # values tried in place of it and printed within tolerance; --write into the socket file then
    # did not reach it, and validate gave the node's 5 us (-49.7% where calibrate had said -1.8%)
    socket = load_hardware(REPO / "hw_configs" / "sn40l.yaml").socket
    names = tuple(fitted_names(socket))
    start = tuple(calibrated_parameters(socket)[n].value for n in names)
    monkeypatch.setattr(calibration, "fit", lambda *a, **kw: FitResult(names, start, start, [], 0.0))
    monkeypatch.setattr(calibration, "leave_one_out", lambda result, socket, evaluate=None: {})
    node = tmp_path / "slow_sync.yaml"
    node.write_text(f"base: {REPO / 'hw_configs' / 'sn40l_node8.yaml'}\nname: slow sync\n"
                    "socket_overrides:\n  calibrated:\n    sync_latency_s: 5 us\n")
    experiment = tmp_path / "mine.yaml"
    experiment.write_text((REPO / "experiments" / "llama8b_node8.yaml").read_text()
                          .replace("../hw_configs/sn40l_node8.yaml", str(node)).replace("../", f"{REPO}/"))
    mine = tmp_path / "refs.yaml"
    mine.write_text("kind: reference\nmeasurements:\n"
                    f"  - {{id: m, quantity: decode_step_s, value: 0.02, tolerance: {{rel: 0.05}}, source: s, "
                    f"experiment: {experiment}, point: full, calibration: true}}\n")
    assert main(["calibrate", "--quiet", str(mine)]) == 0
    out = capsys.readouterr().out
    shipped = calibrated_parameters(socket)["calibrated.sync_latency_s"].value
    assert f"note: {experiment} runs on calibrated.sync_latency_s 5e-06, not {shipped:g} as " in out, out
    assert main(["calibrate", "--quiet", str(REPO / "experiments" / "reference" / "kernel_looping.yaml")]) == 0
    assert "note:" not in capsys.readouterr().out
