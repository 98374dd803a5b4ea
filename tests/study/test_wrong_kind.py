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


def test_a_file_of_another_kind_through_its_base_is_named_not_its_base(tmp_path, capsys):
    # sn40l_node8.yaml has no kind of its own: its base, sn40l_node16.yaml, was the file named
    path = tmp_path / "mine.yaml"
    path.write_text(f"base: {ROOT / 'hw_configs/sn40l_node8.yaml'}\nname: mine\n")
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {path}: base: this is a node file through its base: ("), err
    assert "takes an experiment file" in err[0], err


def test_an_experiment_over_a_base_of_another_kind_names_its_base_line(tmp_path, capsys):
    # it was refused for the node's keys ("socket: unknown key"), located in sn40l_node16.yaml
    path = tmp_path / "mine.yaml"
    path.write_text(f"kind: experiment\nbase: {ROOT / 'hw_configs/sn40l_node8.yaml'}\nname: mine\n")
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {path}:2: base: base file '{ROOT / 'hw_configs/sn40l_node8.yaml'}' is a node file "
                   "(kind: node); expected a base of this file's kind, experiment"], err


def test_a_node_over_an_experiment_base_says_an_experiment_file(tmp_path, capsys):
    # the kind came after a fixed "a": "is a experiment file"
    path = tmp_path / "node.yaml"
    path.write_text(f"kind: node\nbase: {ROOT / 'experiments/deepseek_tp16.yaml'}\nname: mine\n")
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is an experiment file (kind: experiment); expected a base of this file's kind, node" \
        in err[0], err
