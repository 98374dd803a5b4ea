"""A command that takes an experiment, given another of the project's files, says which kind of file
it was given and what it takes, in one line with exit status 2 (not the fields an experiment has and
the file lacks)."""
from __future__ import annotations

from pathlib import Path

import pytest

from sn40l_sim.commands.cli import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("command", "path", "kind"), [
    (["run"], "hw_configs/sn40l.yaml", "socket"),
    (["run"], "hw_configs/sn40l_node16.yaml", "node"),
    (["map", "--phase", "decode"], "graphs/deepseek_r1.yaml", "model"),
    (["run"], "graphs/kernels_deepseek.yaml", "kernels"),
    (["run"], "experiments/reference/snapstream_paper.yaml", "reference"),
])
def test_another_kind_of_file_is_named_as_such(command, path, kind, capsys):
    assert main([*command, str(ROOT / path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert f"kind: this is a {kind} file" in err and "takes an experiment file" in err
    assert "Input should be" not in err
