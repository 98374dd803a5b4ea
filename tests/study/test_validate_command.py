"""What ``validate`` prints for reference files of the user's: no leave-one-out column (it is of
the shipped files' fit)."""
from __future__ import annotations

import json
from pathlib import Path

from sn40l_sim.commands.cli import main

REPO = Path(__file__).resolve().parents[2]
DEEPSEEK = REPO / "experiments" / "deepseek_tp16.yaml"


def test_a_reference_file_of_the_users_has_no_leave_one_out_column(tmp_path, capsys):
    # it printed an empty leave-one-out column, 'left out of the fit, 0 of 0 predicted within
    # tolerance' and the shipped column's method; with a shipped id in a copy, the shipped fit's
    # prediction beside a measured value that fit never saw
    mine = tmp_path / "mine.yaml"
    mine.write_text("kind: reference\nmeasurements:\n"
                    f"  - {{id: t5_128k_full_batch, quantity: max_batch, value: 8, tolerance: {{abs: 0}}, source: s, "
                    f"experiment: {DEEPSEEK}, point: full, calibration: true}}\n"
                    f"  - {{id: my_step, quantity: decode_step_s, value: 0.0885, tolerance: {{rel: 0.05}}, source: s, "
                    f"experiment: {DEEPSEEK}, point: full, calibration: false}}\n")
    assert main(["validate", "--quiet", str(mine)]) == 1   # the batch of 8 misses
    out = capsys.readouterr().out
    assert "leave-one-out" not in out and "left out of the fit" not in out, out
    assert "2 measurements, 1 within tolerance" in out


def test_the_shipped_files_named_keep_their_leave_one_out_column(capsys):
    assert main(["validate", "--quiet", str(REPO / "experiments" / "reference" / "kernel_looping.yaml")]) == 0
    out = capsys.readouterr().out
    assert "  left out of the fit, 6 of 6 predicted within tolerance" in out
    rows = [line for line in out.splitlines() if " calibration " in line]
    # these six are ranges ("up to 2.2x", "over 90%"): the column says where the refit's prediction lies
    assert len(rows) == 6 and all(line.split(" calibration ")[1].strip() == "in range" for line in rows)


def test_a_reference_file_given_twice_is_one_line_naming_it(capsys):
    # it was refused at its first measurement's id 'as the id of the measurement at' that very line
    looping = REPO / "experiments" / "reference" / "kernel_looping.yaml"
    for command in ("validate", "calibrate"):
        assert main([command, str(looping), str(looping)]) == 2
        err = capsys.readouterr().err
        assert err == f"error: REFERENCE.yaml: {looping} is given twice; expected each reference file once\n", err


def test_check_refuses_an_id_another_file_of_the_reference_folder_has(tmp_path, monkeypatch, capsys):
    # `check experiments/reference/mine.yaml` said ok, and validate, reading the folder's files
    # together, refused mine.yaml's id as the id of a kernel_looping.yaml measurement
    folder = tmp_path / "reference"
    folder.mkdir()
    shipped = (REPO / "experiments" / "reference" / "kernel_looping.yaml").read_text()
    (folder / "kernel_looping.yaml").write_text(shipped.replace("experiment: ../", f"experiment: {REPO}/experiments/"))
    mine = folder / "mine.yaml"
    mine.write_text("kind: reference\nmeasurements:\n"
                    f"  - {{id: kl_70b_8_roofline, quantity: max_batch, source: s, experiment: {DEEPSEEK}, "
                    "point: full, calibration: false}\n")
    assert main(["check", str(mine)]) == 0   # read alone, it is a good file
    capsys.readouterr()
    monkeypatch.setattr("sn40l_sim.study.validation.DEFAULT_REFERENCE_DIR", folder)
    assert main(["check", str(mine)]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {mine}:3: measurements[0].id: id 'kl_70b_8_roofline' is also the id of the measurement " \
        f"at {folder / 'kernel_looping.yaml'}:16; expected each id once (leave-one-out predictions are kept by id)\n", err


def test_check_of_several_reference_files_refuses_an_id_two_of_them_share(tmp_path, capsys):
    # each was checked alone and passed, and validate, reading the files it is given together,
    # refused the second's id
    files = []
    for name, step in (("a.yaml", 0.0885), ("b.yaml", 0.09)):
        files.append(tmp_path / name)
        files[-1].write_text("kind: reference\nmeasurements:\n"
                             f"  - {{id: my_step, quantity: decode_step_s, value: {step}, tolerance: {{rel: 0.05}}, "
                             f"source: s, experiment: {DEEPSEEK}, point: full, calibration: false}}\n")
    assert main(["check", str(files[0])]) == 0 and main(["check", str(files[1])]) == 0
    capsys.readouterr()
    assert main(["check", *map(str, files)]) == 2
    captured = capsys.readouterr()
    assert captured.out.count("ok: ") == 2
    assert captured.err == f"error: {files[1]}:3: measurements[0].id: id 'my_step' is also the id of the measurement " \
        f"at {files[0]}:3; expected each id once (leave-one-out predictions are kept by id)\n"


def test_a_miss_by_a_hair_shows_the_digits_that_put_it_past_its_band():
    # the output projection's share, 0.0784309 against 0.0584 +- 0.02, read '+2.00 pp' beside 'NO'
    from sn40l_sim.study.validation import Comparison, Measurement, Reference, format_table

    def row(value, simulated, tolerance, id="m", quantity="prefill_kernel_share", key="o_proj"):
        m = Measurement(id=id, quantity=quantity, key=key, value=value, tolerance=tolerance, source="s",
                        experiment="e.yaml", point="p", calibration=True)
        return Comparison(Reference(m, Path("e.yaml")), simulated)

    table = format_table([row(0.0584, 0.0784309, {"abs": 0.02}, "o_proj"),
                          row(0.0584, 0.0783, {"abs": 0.02}, "inside"),
                          row(1832, 1923.69, {"rel": 0.05}, "tps", "decode_tokens_per_s_reported", None),
                          row(1832, 1760.0, {"rel": 0.05}, "near", "decode_tokens_per_s_reported", None)])
    lines = {line.split()[0]: line.split() for line in table.splitlines()[2:6]}
    assert lines["o_proj"][4:7] == ["+2.003", "pp", "NO"]
    assert lines["inside"][4:7] == ["+1.99", "pp", "yes"]
    assert lines["tps"][4:6] == ["+5.005%", "NO"]   # 5.0049%: "+5.0%" and "+5.00%" would read as the band
    assert lines["near"][4:6] == ["-3.9%", "yes"]
    # the summary's worst miss as its row shows it, not rounded back to the band ('worst 2.00pp')
    summary = {line.split()[0]: line for line in table.splitlines() if "worst" in line}
    assert "worst 2.003pp (2 measurements)" in summary["pp"]
    assert "worst 5.005% (2 measurements)" in summary["%"]


def test_check_of_a_reference_file_checks_the_experiments_it_names(tmp_path, capsys):
    # check said ok, then validate stopped at a batch of the experiment that does not fit in memory
    experiment = tmp_path / "big.yaml"
    experiment.write_text(DEEPSEEK.read_text().replace("../", f"{REPO}/").replace("  batch: max", "  batch: 4096"))
    mine = tmp_path / "mine.yaml"
    mine.write_text("kind: reference\nmeasurements:\n"
                    f"  - {{id: m, quantity: decode_step_s, source: s, experiment: {experiment}, point: full, "
                    "calibration: false}\n")
    assert main(["check", str(mine)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {experiment}:") and "serving.batch: a batch of 4096 does not fit" in err, err
    assert err.count("\n") == 1


def test_check_of_a_reference_file_checks_only_the_points_validate_simulates(tmp_path, capsys):
    # check refused a reference to SnapStream's point at a batch of 32 because the full cache's
    # point of the same experiment does not fit it, while validate simulated the point and printed it
    experiment = tmp_path / "batch32.yaml"
    experiment.write_text(DEEPSEEK.read_text().replace("../", f"{REPO}/").replace("  batch: max", "  batch: 32"))
    mine = tmp_path / "mine.yaml"
    mine.write_text("kind: reference\nmeasurements:\n"
                    f"  - {{id: m, quantity: decode_step_s, source: s, experiment: {experiment}, point: snapstream, "
                    "calibration: false}\n")
    assert main(["check", str(mine)]) == 0, capsys.readouterr().err
    assert main(["validate", "--quiet", str(mine)]) == 0
    capsys.readouterr()
    mine.write_text(mine.read_text().replace("point: snapstream", "point: full"))
    assert main(["check", str(mine)]) == main(["validate", "--quiet", str(mine)]) == 2
    assert "serving.batch: a batch of 32 does not fit" in capsys.readouterr().err


def test_the_summary_lines_align_whatever_the_units():
    # 'tokens/s mean |error|' stood three columns right of '%     mean |error|'
    from sn40l_sim.study.validation import Comparison, Measurement, Reference, format_table

    def row(id, quantity, value, simulated, tolerance):
        m = Measurement(id=id, quantity=quantity, value=value, tolerance=tolerance, source="s",
                        experiment="e.yaml", point="p", calibration=False)
        return Comparison(Reference(m, Path("e.yaml")), simulated)

    table = format_table([row("a", "decode_tokens_per_s", 180, 185.9, {"abs": 10}),
                          row("b", "decode_step_s", 0.0885, 0.0861, {"rel": 0.05})])
    summary = [line for line in table.splitlines() if "mean |error|" in line]
    assert [line.index("mean |error|") for line in summary] == [11, 11], summary


def test_the_shipped_leave_one_out_column_records_the_measurements_as_they_read():
    from sn40l_sim.study.leave_one_out import LeaveOneOut, fitted_measurements
    from sn40l_sim.study.validation import load_references

    shipped = LeaveOneOut.read()
    references = load_references([])
    assert shipped is not None and shipped.measurements == fitted_measurements(references)
    assert shipped.changed_measurement(references) is None


def test_the_shipped_leave_one_out_column_records_the_inputs_it_was_made_for():
    # made by `calibrate --write --leave-one-out refit`, which reproduced every prediction bit for bit
    from sn40l_sim.study.leave_one_out import LeaveOneOut

    assert LeaveOneOut.read().inputs == _current_inputs()


def test_an_edited_measurement_drops_the_leave_one_out_column_naming_it(monkeypatch, capsys):
    # a measured value or tolerance edited in experiments/reference/ kept the column of refits fitted
    # to the old one, every other point's prediction with it, and counted it 'predicted within tolerance'
    from dataclasses import replace

    from sn40l_sim.study.leave_one_out import LeaveOneOut

    shipped = LeaveOneOut.read()
    assert shipped is not None and shipped.measurements is not None
    was = shipped.measurements["kl_8b_8_speedup"]
    edited = replace(shipped, measurements={**shipped.measurements, "kl_8b_8_speedup": {**was, "tolerance": {"range": [1.0, 2.5]}}})
    assert edited.measurements["kl_8b_8_speedup"] != was
    monkeypatch.setattr(LeaveOneOut, "read", classmethod(lambda cls, path=None: edited))
    assert main(["validate", "--quiet", str(REPO / "experiments" / "reference" / "kernel_looping.yaml")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("note: the leave-one-out predictions were fitted to other measurements than "
                          "experiments/reference/'s now (kl_8b_8_speedup: was ")
    assert f", now {json.dumps(was, sort_keys=True, separators=(', ', ': '))}); rerun `python -m sn40l_sim calibrate --write --leave-one-out refit`\n" in out
    assert "left out of the fit" not in out and "leave-one-out" not in out.split("\n", 1)[1]


def test_a_leave_one_out_column_that_does_not_record_its_measurements_is_not_shown(monkeypatch, capsys):
    from dataclasses import replace

    from sn40l_sim.study.leave_one_out import LeaveOneOut

    shipped = LeaveOneOut.read()
    monkeypatch.setattr(LeaveOneOut, "read", classmethod(lambda cls, path=None: replace(shipped, measurements=None)))
    assert main(["validate", "--quiet", str(REPO / "experiments" / "reference" / "kernel_looping.yaml")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("note: the leave-one-out predictions do not record the measurements they were fitted "
                          "to; rerun `python -m sn40l_sim calibrate --write --leave-one-out refit`\n")
    assert "left out of the fit" not in out


def _current_inputs() -> str:
    from sn40l_sim.study.evaluation import LoadedExperiments
    from sn40l_sim.study.leave_one_out import LeaveOneOut, inputs_digest
    from sn40l_sim.study.validation import load_references

    shipped = LeaveOneOut.read()
    return inputs_digest(LoadedExperiments(), load_references([]), list(shipped.fitted))


def test_a_hardware_file_edited_since_the_refits_drops_the_leave_one_out_column(monkeypatch, capsys):
    # the column was checked against the calibrated values and the measurements only: with HBM at half
    # its bandwidth in hw_configs/sn40l.yaml, Table 5's throughputs simulated 20% and 26% lower, and the
    # column still gave the refits' +9.2% and -8.4% made on the machine as it was
    from dataclasses import replace

    from sn40l_sim.hardware.loader import with_overrides
    from sn40l_sim.study.assemble import Assembly
    from sn40l_sim.study.evaluation import LoadedExperiments
    from sn40l_sim.study.leave_one_out import LeaveOneOut

    shipped = replace(LeaveOneOut.read(), inputs=_current_inputs())
    monkeypatch.setattr(LeaveOneOut, "read", classmethod(lambda cls, path=None: shipped))
    looping = str(REPO / "experiments" / "reference" / "kernel_looping.yaml")
    assert main(["validate", "--quiet", looping]) == 0
    assert "left out of the fit, 6 of 6" in capsys.readouterr().out   # the inputs as recorded: shown

    real = LoadedExperiments.load

    def edited(self, path):   # every experiment as if the socket file said 204.8 GB/s per HBM module
        got = real(self, path)
        slower = {"socket.memory.hbm.bytes_per_s_per_unit": 204.8e9}
        if isinstance(got, Assembly):
            return replace(got, node=with_overrides(got.node, slower))
        return [replace(run, assembly=replace(run.assembly, node=with_overrides(run.assembly.node, slower))) for run in got]

    monkeypatch.setattr(LoadedExperiments, "load", edited)
    assert main(["validate", "--quiet", looping]) == 0
    out = capsys.readouterr().out
    assert out.startswith("note: the leave-one-out predictions were made for other inputs than the calibration "
                          "points' experiments now (their hardware, model or experiment files); rerun "
                          "`python -m sn40l_sim calibrate --write --leave-one-out refit`\n"), out
    assert "left out of the fit" not in out


def test_the_inputs_a_leave_one_out_column_records_leave_out_the_fitted_values():
    # the fitted values are checked, to a tolerance, by LeaveOneOut.current; a calibration that
    # moves them is that check's to judge, and the digest holds no path (a copy of the project
    # elsewhere reads the same)
    from sn40l_sim.hardware.loader import with_overrides
    from sn40l_sim.study.evaluation import LoadedExperiments
    from sn40l_sim.study.leave_one_out import inputs_digest
    from sn40l_sim.study.validation import load_references

    references = load_references([])
    fitted = ["calibrated.sync_latency_s", "memory.hbm.efficiency"]

    def digest(overrides):
        loaded = LoadedExperiments()
        real = loaded.load

        def load(path):
            from dataclasses import replace

            from sn40l_sim.study.assemble import Assembly
            got = real(path)
            if isinstance(got, Assembly):
                return replace(got, node=with_overrides(got.node, overrides))
            return [replace(run, assembly=replace(run.assembly, node=with_overrides(run.assembly.node, overrides)))
                    for run in got]

        loaded.load = load
        return inputs_digest(loaded, references, fitted)

    base = digest({})
    assert digest({"socket.calibrated.sync_latency_s": 3e-6, "socket.memory.hbm.efficiency": 0.8}) == base
    assert digest({"socket.memory.hbm.latency_s": 200e-9}) != base
