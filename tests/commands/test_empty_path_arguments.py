"""An empty path argument is refused by name. ``Path('')`` is the current folder, so
``compare out/a ""`` (an unset shell variable) compared with whatever results.json the working folder
held, and every other command read ``.`` and said "is a folder"."""
from __future__ import annotations

import json

import pytest

from sn40l_sim.commands.cli import main


@pytest.mark.parametrize("argv, argument", [
    (["check", ""], "FILE"),
    (["check", "hw_configs/sn40l.yaml", " "], "FILE"),
    (["describe", ""], "file"),
    (["run", ""], "EXPERIMENT.yaml"),
    (["map", "", "--phase", "decode"], "EXPERIMENT.yaml"),
    (["sweep", ""], "EXPERIMENT.yaml"),
    (["validate", ""], "REFERENCE.yaml"),
    (["validate", "--hardware", ""], "--hardware"),
    (["calibrate", "--hardware", ""], "--hardware"),
    (["plot", "", "--x", "batch", "--y", "ttft_s"], "RESULTS.csv"),
    (["compare", "a", ""], "OTHER"),
])
def test_an_empty_path_is_refused_naming_the_argument(capsys, argv, argument):
    with pytest.raises(SystemExit) as stop:
        main(argv)
    err = capsys.readouterr().err
    assert stop.value.code == 2
    assert f"error: argument {argument}: expected a path, got " in err, err


def test_compare_with_an_empty_path_does_not_read_the_working_folder(tmp_path, monkeypatch, capsys):
    record = {"name": "full", "decode_step_s": 0.08}
    (tmp_path / "results.json").write_text(json.dumps([record]))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit):
        main(["compare", str(tmp_path / "results.json"), ""])
    assert "expected a path, got an empty one" in capsys.readouterr().err
