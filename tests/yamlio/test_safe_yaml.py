"""Safe reading of YAML files (``sn40l_sim.yamlio``): hostile or broken files stop with one line
naming the file and the line, quickly and in little memory, in every command and file kind; paths
in messages are the ones the user gave; a ``base:`` file's paths resolve against the base file.
"""
from __future__ import annotations

import math
import os
import time
from pathlib import Path

import pytest

from sn40l_sim.commands import cli
from sn40l_sim.errors import InputError
from sn40l_sim.study.assemble import assemble
from sn40l_sim.study.experiment import load_experiment
from sn40l_sim.study.sweep.sets import parse_sets
from sn40l_sim.yamlio import MAX_FILE_BYTES, load_document, parse_yaml

REPO = Path(__file__).resolve().parents[2]


def billion_laughs(head: str = "kind: socket\n") -> str:
    """About 700 bytes that expand to 9**9 strings when aliases are followed."""
    lines = [head.rstrip("\n"), 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    previous = "a"
    for name in "bcdefghi":
        lines.append(f"{name}: &{name} [" + ",".join([f"*{previous}"] * 9) + "]")
        previous = name
    lines.append("name: *i")
    return "\n".join(lines) + "\n"


def one_error_line(capsys, argv: list[str]) -> str:
    """Run the CLI in this process; assert exit status 2 and exactly one line on stderr."""
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("command", ["check", "describe"])
@pytest.mark.parametrize("head", ["kind: socket", "kind: experiment", "kind: model", "kind: kernels"])
def test_alias_bomb_stops_at_once(tmp_path, capsys, command, head):
    path = tmp_path / "bomb.yaml"
    path.write_text(billion_laughs(head + "\n"))
    start = time.perf_counter()
    err = one_error_line(capsys, [command, str(path)])
    assert time.perf_counter() - start < 5
    assert "aliases (*name) expand to more than" in err and f"{path}:" in err


@pytest.mark.parametrize("text, words", [
    ("kind: socket\nname: &a [*a]\n", "refers to a value that contains it"),
    ("kind: socket\nname: &a {x: *a}\n", "refers to a value that contains it"),
    ("kind: socket\nname: " + "[" * 5000 + "]" * 5000 + "\n", "nested more than 32 deep"),
    ("kind: socket\nname: " + "{a: " * 200 + "1" + "}" * 200 + "\n", "nested more than 32 deep"),
    ("kind: experiment\nname: x\ndate: !!timestamp 2024-13-45\n", "!!timestamp is not supported"),
    ("kind: experiment\nname: !!binary aGVsbG8=\n", "!!binary is not supported"),
    ("kind: experiment\nname: !!set {a, b}\n", "!!set is not supported"),
    ("kind: experiment\nname: !custom x\n", "is not supported"),
    ("kind: experiment\nname: !!python/object:os.system x\n", "is not supported"),
    ("kind: experiment\n1: x\n", "mapping keys must be text, got 1"),
    ("kind: experiment\ntrue: x\n", "mapping keys must be text, got true"),
    ("kind: experiment\n? [a, b]\n: x\n", "mapping keys must be text, got a list or mapping"),
    ("kind: experiment\nname: x\nname: y\n", "duplicate key 'name'"),
    ("kind: experiment\nx: &a {batch: 4}\nserving:\n  <<: *a\n", "merge keys (<<: *name) are not supported"),
    ("kind: experiment\n---\nkind: model\n", "YAML syntax error"),
    ("- a\n- b\n", "expected a YAML mapping at the top level"),
    ("", "the file is empty"),
    # a folder was said to be missing
    ("base: .\nname: x\n", "base: base file '.' is a folder, not a file"),
    ("base: nope.yaml\nname: x\n", "base: base file 'nope.yaml' not found"),
])
def test_refused_with_one_line(tmp_path, capsys, text, words):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    err = one_error_line(capsys, ["check", str(path)])
    assert words in err and str(path) in err


def test_binary_and_oversized_files(tmp_path, capsys):
    binary = tmp_path / "a.yaml"
    binary.write_bytes(bytes(range(256)) * 4)
    assert "not a text file" in one_error_line(capsys, ["check", str(binary)])
    big = tmp_path / "big.yaml"
    big.write_text("kind: socket\n" + "# padding\n" * (MAX_FILE_BYTES // 10 + 1))
    # the one list a configuration grows with has a file format without the limit: the line says so
    assert "a YAML configuration file of at most 4 MiB was expected (a long list of requests goes in a CSV or " \
           "JSONL trace: workload: {kind: trace, path: FILE}" in one_error_line(capsys, ["describe", str(big)])
    assert "is a folder" in one_error_line(capsys, ["check", str(tmp_path)])


@pytest.mark.skipif(not hasattr(os, "mkfifo") or not Path("/dev/zero").exists(), reason="POSIX devices and pipes")
def test_a_device_or_a_pipe_is_refused_before_it_is_read(tmp_path, capsys):
    # /dev/zero filled memory until the process was killed; a named pipe blocked for a writer
    pipe = tmp_path / "pipe.yaml"
    os.mkfifo(pipe)
    for path in ("/dev/zero", str(pipe)):
        assert one_error_line(capsys, ["check", path]) == \
            f"error: {path}: is not a regular file (a device or a pipe); expected a YAML file\n"
    experiment = tmp_path / "e.yaml"
    experiment.write_text("base: /dev/zero\n")
    assert "base: base file '/dev/zero' is not a regular file (a device or a pipe)" in \
        one_error_line(capsys, ["check", str(experiment)])
    trace = tmp_path / "pipe.csv"
    os.mkfifo(trace)
    assert one_error_line(capsys, ["check", str(trace)]) == \
        f"error: {trace}: is not a regular file (a device or a pipe); expected a CSV or JSONL trace\n"
    # check and describe first ask whether a .csv or .json is a run's results: that read blocked on a pipe
    pipe_json = tmp_path / "results.json"
    os.mkfifo(pipe_json)
    assert "is not a regular file (a device or a pipe)" in one_error_line(capsys, ["describe", str(pipe_json)])
    assert "expected a CSV file (a results.csv)" in \
        one_error_line(capsys, ["plot", "/dev/zero", "--x", "a", "--y", "b", "--out", str(tmp_path / "p.png")])


def test_values_are_what_they_look_like():
    data, _ = parse_yaml("a: 1e30\nb: on\nc: 2024-13-45\nd: 1:30\ne: 010\nf: -.inf\ng: 0x10\nh: 1_000\n"
                         "i: 'quoted 5'\nj: ~\nk: True\n", "x.yaml")
    assert data == {"a": 1e30, "b": "on", "c": "2024-13-45", "d": "1:30", "e": 10, "f": -math.inf, "g": 16,
                    "h": 1000, "i": "quoted 5", "j": None, "k": True}


def test_aliases_within_budget_are_read():
    data, origins = parse_yaml("x: &p {tp: 8}\ny: *p\n", "x.yaml")
    assert data == {"x": {"tp": 8}, "y": {"tp": 8}} and origins[("y", "tp")] == ("x.yaml", 1)


def test_messages_name_paths_as_given(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(REPO)
    err = one_error_line(capsys, ["check", "hw_configs/../graphs/nope.yaml"])
    assert err == "error: graphs/nope.yaml: file not found\n"
    doc = load_document("experiments/deepseek_tp16.yaml")
    assert str(doc.path) == "experiments/deepseek_tp16.yaml"
    assert str(doc.resolve("../hw_configs/sn40l_node16.yaml", ("hardware",))) == "hw_configs/sn40l_node16.yaml"


def test_base_paths_resolve_against_the_base_file_not_a_decoy(tmp_path):
    """An overlay in another folder inherits ``hardware:`` from its base; a file of the same name
    beside the overlay (a decoy: one socket instead of eight) must not be picked up."""
    real, other = tmp_path / "real", tmp_path / "other"
    real.mkdir()
    other.mkdir()
    (real / "node.yaml").write_text(f"base: {REPO / 'hw_configs' / 'sn40l_node8.yaml'}\n")
    (other / "node.yaml").write_text(f"base: {REPO / 'hw_configs' / 'sn40l.yaml'}\n")   # the decoy
    (real / "base.yaml").write_text((REPO / "experiments" / "llama8b_node8.yaml").read_text()
                                    .replace("../hw_configs/sn40l_node8.yaml", "node.yaml")
                                    .replace("../graphs/", f"{REPO / 'graphs'}/"))
    (other / "overlay.yaml").write_text("base: ../real/base.yaml\nname: overlay\n")
    asm = assemble(load_experiment(other / "overlay.yaml"))
    assert asm.node.sockets == 8 and asm.experiment.spec.name == "overlay"


def test_set_values_are_read_by_the_same_rules():

    assert parse_sets(["serving.batch=010", "a.b=2024-01-01", "c=1e3"]) == {"serving.batch": 10, "a.b": "2024-01-01",
                                                                             "c": 1000.0}
    with pytest.raises(InputError, match="--set: cannot read the value"):
        parse_sets(["x=&a [*a]"])
    # the later replaced the earlier unsaid; a field of a file --set names is not a clash
    for items in (["serving.seed=1", "serving.seed=2"], ["serving={seed: 3}", "serving.seed=2"],
                  ["serving.seed=2", "serving={seed: 3}"]):
        with pytest.raises(InputError, match="--set: serving.* (is set twice|and serving.* are both set): one would"):
            parse_sets(items)
    assert parse_sets(["hardware=n.yaml", "hardware.sockets=8"]) == {"hardware": "n.yaml", "hardware.sockets": 8}


@pytest.mark.parametrize("value", ["null", "5", "[1, 2]"])
def test_a_section_that_is_not_a_mapping_is_named_as_such(tmp_path, capsys, value):
    """``serving: null`` is answered in the file's terms, not with pydantic's class name."""
    path = tmp_path / "x.yaml"
    path.write_text(f"base: {REPO / 'experiments/llama8b_node8.yaml'}\nserving: {value}\n")
    err = one_error_line(capsys, ["check", str(path)])
    assert "serving: expected a mapping of keys" in err and "ServingSection" not in err
