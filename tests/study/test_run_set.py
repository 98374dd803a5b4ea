"""``run --set``: one field of the experiment or of its hardware changed for one run, checked and
named as ``sweep --set`` checks them, and the same records as the experiment file edited."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from sweep_helpers import write_experiment

from sn40l_sim.commands.cli import main


def _experiment(tmp_path, *, batch: int = 4, extra: str = "", name: str = "e.yaml"):
    """The sweep tests' small experiment (Llama-3.1-8B on 8 sockets, two KV policies), without a sweep section."""
    return write_experiment(tmp_path, None, extra=extra, name=name, batch=batch)


def _records(out):
    return json.loads((out / "results.json").read_text())


def test_a_set_experiment_field_gives_the_records_of_the_edited_file(tmp_path):
    base = _experiment(tmp_path)
    edited = _experiment(tmp_path, batch=8, name="edited.yaml")
    assert main(["run", str(base), "--set", "serving.batch=8", "--out", str(tmp_path / "set"), "--no-plot",
                 "--quiet"]) == 0
    assert main(["run", str(edited), "--out", str(tmp_path / "edited"), "--no-plot", "--quiet"]) == 0
    got, want = _records(tmp_path / "set"), _records(tmp_path / "edited")
    assert [r["batch"] for r in got] == [8, 8]
    drop = ("speed",)
    assert [{k: v for k, v in r.items() if k not in drop} for r in got] == \
        [{k: v for k, v in r.items() if k not in drop} for r in want]
    status = json.loads((tmp_path / "set" / "status.json").read_text())
    assert status["command"].endswith("--set serving.batch=8")


def test_a_set_hardware_field_changes_the_node_and_names_it(tmp_path):
    path = _experiment(tmp_path)
    assert main(["run", str(path), "--out", str(tmp_path / "base"), "--no-plot", "--quiet"]) == 0
    assert main(["run", str(path), "--set", "hardware.socket.memory.hbm.bytes_per_s_per_unit=819.2 GB/s",
                 "--out", str(tmp_path / "fast"), "--no-plot", "--quiet"]) == 0
    (base, _), (fast, _) = _records(tmp_path / "base"), _records(tmp_path / "fast")
    assert fast["hardware"] == f"{base['hardware']} (socket.memory.hbm.bytes_per_s_per_unit 819.2 GB/s)"
    # the batch-4 decode step streams the 8B's weights: more HBM bandwidth, a shorter step
    assert fast["decode_step_s"] < base["decode_step_s"]


@pytest.mark.parametrize("item, words", [
    ("serving.batchh=3", "--set serving.batchh: 3: unknown key; did you mean 'batch'?"),   # the field named once
    ("hardware.socket.memory.hbm.bytes_per_s_per_unit=fast", "expected a bandwidth quantity"),
    ("serving.batch", "expected path=value"),
    ("serving.batch=-1", "serving.batch"),
    # an empty value was read as null, and the error spoke of "None"
    ("serving.batch=", "--set serving.batch: expected a value after '='"),
    # the published totals are neither simulated nor checked for a changed node: the run was the file's
    # socket named "(socket.stated.pcus 2080)"
    ("hardware.socket.stated.pcus=2080", "--set hardware.socket.stated.pcus: the published totals under "
                                         "socket.stated are neither simulated nor checked for a changed node"),
    # a message that quotes the value already is not led by it ("'abc': expected an integer, got 'abc'")
    ("shape.prompt_len=abc", "--set shape.prompt_len: expected an integer, got 'abc'"),
    # ... but one quoting another field's value that reads alike still is: a prompt of 1 token gives
    # SnapStream a budget of 1, and "got 1" (the budget) dropped the prompt length set
    ("shape.prompt_len=1", "--set shape.prompt_len: 1: policies[1].prompt_fraction.budget: KV policy 'snapstream': "
                           "expected budget >= sink + recent = 5, got 1"),
    # a node check blaming one of several fields names the one set, not topology.kind, which it lists first
    ("hardware.topology.links_per_pair=4", "--set hardware.topology.links_per_pair: 4: a full_mesh of 8 sockets "
                                           "with 4 link(s) per pair needs 28 P2P ports"),
])
def test_a_bad_set_is_one_line_naming_it_with_exit_status_2(tmp_path, capsys, item, words):
    path = _experiment(tmp_path)
    assert main(["run", str(path), "--set", item, "--out", str(tmp_path / "out"), "--no-plot"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --set") and words in err[0], err
    assert not (tmp_path / "out").exists()


def test_other_bad_fields_are_counted_by_field_not_by_union_alternative(tmp_path, capsys):
    # serving.batch takes an integer or 'max': pydantic refuses 'xyz' once per alternative, and the
    # message counted "2 more problem(s) in this file" for one field, set on the command line
    path = _experiment(tmp_path)
    sets = ["--set", "shape.prompt_len=abc", "--set", "serving.batch=xyz"]
    assert main(["run", str(path), *sets, "--out", str(tmp_path / "out"), "--no-plot"]) == 2
    (err,) = capsys.readouterr().err.strip().splitlines()
    assert err == "error: --set shape.prompt_len: expected an integer, got 'abc' (and 1 more field with a problem)"


def test_a_sweep_run_passes_its_sets_to_the_sweep(tmp_path):
    path = write_experiment(tmp_path, "axes:\n  serving.max_new_tokens: [2, 3]\n")
    assert main(["run", str(path), "--set", "serving.batch=2", "--out", str(tmp_path / "out"), "--no-plot",
                 "--quiet"]) == 0
    assert {r["batch"] for r in _records(tmp_path / "out")} == {2}
    # the records do not say a set experiment field (a trace's workload.rate_scale would leave no
    # trace in them): the folder's status.json named the sweep alone, as if the file's own values ran
    status = json.loads((tmp_path / "out" / "status.json").read_text())
    assert status["command"] == f"sweep {path} --set serving.batch=2"
    assert main(["sweep", str(path), "--set", "serving.batch=2", "--set", "serving.seed=3", "--out",
                 str(tmp_path / "swept"), "--no-plot", "--quiet"]) == 0
    status = json.loads((tmp_path / "swept" / "status.json").read_text())
    assert status["command"] == f"sweep {path} --set serving.batch=2 --set serving.seed=3"


def test_hardware_sets_that_only_hold_together_are_kept(tmp_path):
    # 280 PCUs need a grid of 28 columns: neither set alone is a consistent tile, both together are
    path = _experiment(tmp_path)
    sets = ["--set", "hardware.socket.tile.pcus=280", "--set", "hardware.socket.tile.grid_cols=28"]
    assert main(["run", str(path), *sets, "--out", str(tmp_path / "out"), "--no-plot", "--quiet"]) == 0
    record = _records(tmp_path / "out")[0]
    assert "socket.tile.pcus 280" in record["hardware"] and "socket.tile.grid_cols 28" in record["hardware"]


def test_a_hardware_set_that_fails_with_the_others_too_names_itself(tmp_path, capsys):
    path = _experiment(tmp_path)
    sets = ["--set", "hardware.socket.tile.pcus=280", "--set", "hardware.socket.tile.grid_cols=27"]
    assert main(["run", str(path), *sets, "--out", str(tmp_path / "out"), "--no-plot"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    # 27 columns hold 270 PCUs at most, and alone leave a column to spare for the file's 260: both
    # sets fail alone, and the first is named with the error of the two together
    assert len(err) == 1 and err[0].startswith("error: --set hardware.socket.tile.grid_cols: 27: "), err
    assert "cannot hold 280 PCUs" in err[0], err
    # the message is about the tile asked for (27 columns), not the file's 26
    assert "a 20 x 27 checkerboard" in err[0], err


def test_a_topology_and_too_few_ports_are_refused_for_the_topology_asked_for(tmp_path, capsys):
    # 2 ports alone fail the file's full mesh of 8 sockets (7 ports); with a torus they fail too,
    # and the message was the full mesh's, not the 2 x 4 torus's need of 3 ports (two neighbours
    # on its ring of 4, one on its ring of 2)
    path = _experiment(tmp_path)
    sets = ["--set", "hardware.topology.kind=torus2d", "--set", "hardware.socket.p2p.ports=2"]
    assert main(["run", str(path), *sets, "--out", str(tmp_path / "out"), "--no-plot"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --set hardware.topology.kind: 'torus2d': "), err
    assert "a torus2d of 8 sockets with 1 link(s) per pair needs 3 P2P ports per socket, but socket.p2p.ports is 2" \
        in err[0], err


def test_hardware_sets_that_hold_one_by_one_but_not_together_are_named_together(tmp_path, capsys):
    # 40 GiB reserved of the socket's 64 GiB of HBM, or 8 GiB modules: each is a socket, both are not
    path = _experiment(tmp_path)
    sets = ["--set", "hardware.socket.memory.hbm.reserved_bytes=40 GiB",
            "--set", "hardware.socket.memory.hbm.capacity_bytes_per_unit=8 GiB"]
    assert main(["run", str(path), *sets, "--out", str(tmp_path / "out"), "--no-plot"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        "error: --set hardware.socket.memory.hbm.capacity_bytes_per_unit, hardware.socket.memory.hbm.reserved_bytes: "
        "the hardware sets hold one by one but not together: "), err
    assert "reserves 40.0 GiB but the socket has only 32.0 GiB of HBM" in err[0], err
    assert not (tmp_path / "out").exists()


def test_map_takes_the_same_sets(tmp_path, capsys):
    path = _experiment(tmp_path)
    assert main(["map", str(path), "--phase", "decode", "--set", "hardware.socket.tile.pcus=280",
                 "--set", "hardware.socket.tile.grid_cols=28", "--set", "shape.batch=2"]) == 0
    out = capsys.readouterr().out
    assert "SN40L-8 (socket.tile.grid_cols 28, socket.tile.pcus 280)" in out.splitlines()[0], out.splitlines()[0]
    assert "shape: batch 2," in out.splitlines()[1], out.splitlines()[1]


def test_map_sets_an_experiment_with_a_sweep_as_it_maps_it_without(tmp_path, capsys):
    # map maps the experiment a sweep starts from; its --set was refused for having a sweep section
    path = write_experiment(tmp_path, "axes:\n  serving.max_new_tokens: [2, 3]\n")
    assert main(["map", str(path), "--phase", "decode", "--set", "shape.batch=2"]) == 0
    assert "shape: batch 2," in capsys.readouterr().out


def test_experiment_sets_that_only_hold_together_are_kept(tmp_path):
    # attention_dp=3 alone fails beside the file's tp 8, tp=3 alone beside its attention_dp 8; the
    # plan tp 3, attention_dp 3 is consistent (it failed, naming attention_dp and "tp (8)")
    path = _experiment(tmp_path)
    sets = ["--set", "parallel.decode.tp=3", "--set", "parallel.decode.attention_dp=3"]
    with pytest.warns(UserWarning, match="uses 3 of the 8 sockets"):
        assert main(["run", str(path), *sets, "--out", str(tmp_path / "out"), "--no-plot", "--quiet"]) == 0
    assert [r["parallel"]["decode"] for r in _records(tmp_path / "out")] == [{"attention_dp": 3, "tp": 3}] * 2


def test_experiment_sets_that_fail_together_name_the_set_with_the_values_set(tmp_path, capsys):
    # attention_dp 3 does not divide tp 4: the message gives the tp that was set, not the file's 8
    path = _experiment(tmp_path)
    sets = ["--set", "parallel.decode.tp=4", "--set", "parallel.decode.attention_dp=3"]
    assert main(["run", str(path), *sets, "--out", str(tmp_path / "out"), "--no-plot"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --set parallel.decode.attention_dp: 3: "), err
    assert "attention_dp (3) must divide tp (4)" in err[0], err
    assert not (tmp_path / "out").exists()


def test_paths_inside_a_set_section_are_relative_to_the_current_folder(tmp_path, monkeypatch):
    # --set model=PATH was read from the current folder, but a path inside a whole section set at
    # once (or a served model of multi_model) from the experiment's folder: 'not found'
    (tmp_path / "exp").mkdir()
    (tmp_path / "traces").mkdir()
    path = _experiment(tmp_path / "exp")
    (tmp_path / "traces" / "t.csv").write_text("arrival_s,prompt_len,output_len\n0.0,4096,2\n0.5,4096,1\n")
    monkeypatch.chdir(tmp_path)
    assert main(["run", str(path), "--set=workload={kind: trace, path: traces/t.csv}", "--out", "out",
                 "--no-plot", "--quiet"]) == 0
    assert [r["throughput"]["requests"] for r in _records(tmp_path / "out")] == [2, 2]


@pytest.mark.parametrize("command, item, words", [
    # run simulated serving.batch's 4 and wrote it without a word
    (["run"], "shape.batch=2", "shape.batch is the batch of map's graph; run and sweep simulate serving.batch"),
    (["run"], "shape.max_new_tokens=8", "the experiment's serving.max_new_tokens replaces shape.max_new_tokens"),
    (["map", "--phase", "decode"], "shape.max_new_tokens=8", "serving.max_new_tokens replaces"),
])
def test_a_set_of_a_field_another_replaces_is_refused(tmp_path, capsys, command, item, words):
    path = _experiment(tmp_path)
    out = ["--out", str(tmp_path / "out"), "--no-plot"] if command == ["run"] else []
    assert main([command[0], str(path), *command[1:], "--set", item, *out]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: --set {item.split('=')[0]}: ") and words in err[0], err
    assert not (tmp_path / "out").exists()


def test_a_sweep_set_of_a_field_another_replaces_is_refused_as_its_axis_is(tmp_path, capsys):
    path = write_experiment(tmp_path, "axes:\n  serving.max_new_tokens: [2, 3]\n")
    assert main(["sweep", str(path), "--set", "shape.batch=2", "--out", str(tmp_path / "out")]) == 2
    assert "error: --set shape.batch: shape.batch is the batch of map's graph" in capsys.readouterr().err


def test_an_error_found_after_the_set_is_checked_names_the_set(tmp_path, capsys):
    # a batch that does not fit is found when the run builds its graphs, after the set passed its own
    # checks: the error named the file's line of serving: (where 2048 is not), as if the file said it
    path = _experiment(tmp_path)
    assert main(["run", str(path), "--set", "serving.batch=2048", "--out", str(tmp_path / "out"), "--no-plot",
                 "--quiet"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("error: --set serving.batch: a batch of 2048 does not fit"), line
    # a sweep's set likewise: a trace window past the trace's end is found when the trace is read
    (tmp_path / "trace.csv").write_text("arrival_s,prompt_len,output_len\n0,100,2\n1.5,100,2\n")
    sweep = write_experiment(tmp_path, "axes:\n  serving.batch: [2, 4]\n", name="s.yaml")
    sweep.write_text(sweep.read_text().replace("workload: {kind: fixed, count: batch, output_len: 2}",
                                               "workload: {kind: trace, path: trace.csv}"))
    assert main(["sweep", str(sweep), "--set", "workload.start_s=60", "--out", str(tmp_path / "s")]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("error: --set workload.start_s: the window starts 60 s after "), line


@pytest.mark.parametrize("sets, words", [
    ([("serving.batch", 8)], "expected the sets as a mapping of dotted field paths to values"),
    ({3: 8}, "set keys must be dotted field paths such as 'serving.batch', got 3"),
])
def test_sets_from_python_of_the_wrong_shape_are_input_errors(sets, words):
    # experiment_with_sets is run --set from Python: a list of pairs or a number as a key gave an
    # AttributeError from inside, where every other bad set is an InputError naming the file
    from sn40l_sim.errors import InputError
    from sn40l_sim.study.sweep.base import experiment_with_sets
    path = Path(__file__).resolve().parents[2] / "experiments" / "llama8b_node8.yaml"
    with pytest.raises(InputError, match=re.escape(words)) as info:
        experiment_with_sets(path, sets)
    assert info.value.file == str(path)


def _run_warnings(path: Path, *args: str) -> list[str]:
    """The UserWarnings of one ``run`` (every one, not Python's once per place)."""
    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(["run", str(path), *args, "--out", str(path.parent / "out"), "--no-plot", "--quiet"]) == 0
    return [str(w.message) for w in caught if issubclass(w.category, UserWarning)]


def test_a_set_that_is_warned_of_is_warned_of_once_at_its_set(tmp_path):
    # a value written by --set that the run warns of was said twice: first at the file's line of
    # its parent section (where the value is not), then at the --set
    path = _experiment(tmp_path, extra="slo: {ttft: {max_s: 2 s, percentile: 90}}\n")
    (warning,) = _run_warnings(path, "--set", "slo.ttft.percentile=0.9")
    assert warning.startswith("--set slo.ttft.percentile: 0.9 is the 0.9th percentile")


def test_a_files_value_that_a_set_replaces_is_not_warned_of(tmp_path):
    # the file's percentile 0.9 is not run when --set gives 90: it was warned of all the same; one
    # the sets leave is warned of at its line
    path = _experiment(tmp_path, extra="slo: {ttft: {max_s: 2 s, percentile: 0.9}, tpot: {max_s: 1 s, percentile: 0.5}}\n")
    (warning,) = _run_warnings(path, "--set", "slo.ttft.percentile=90")
    assert warning.startswith(f"{path}:14: slo.tpot.percentile: 0.5 is the 0.5th percentile"), warning
    assert _run_warnings(path, "--set", "slo.ttft.percentile=90", "--set", "slo.tpot.percentile=50") == []
