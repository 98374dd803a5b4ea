"""``compare`` reads numbers back only as ``run`` writes them: finite, or null (a figure that is not
finite is written as null). A NaN or Infinity in a results.json was compared as a figure (a ratio of
nan, exit status 0), and an integer past a float's range (400 digits) stopped compare with an
OverflowError traceback; each is one line naming the file, the record and the field, exit status 2."""
from __future__ import annotations

import json

import pytest

from sn40l_sim.commands.cli import main

BASE = {"name": "full", "model": "m", "hardware": "SN40L-16", "kv_policy": "full", "batch": 16, "kv_len": 4159,
        "decode_step_s": 0.0860849, "memory": {"hbm": {"weights": 40 * 2**30, "kv": 8 * 2**30}},
        "latency": {"ttft_s": {"p50": 0.5}}}


def _write(tmp_path, name, text):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "results.json").write_text(text)
    return folder


@pytest.mark.parametrize("field, written, words", [
    ("decode_step_s", "NaN", "decode_step_s: expected a finite number or null, got nan"),
    ("decode_step_s", "-Infinity", "decode_step_s: expected a finite number or null, got -inf"),
    ("batch", "9" * 400, "batch: expected a finite number or null, got 9999"),
    ("kv_len", "9" * 400, "kv_len: expected a finite number or null, got 9999"),
    ("memory", '{"hbm": {"kv": ' + "9" * 400 + "}}", "memory.hbm.kv: expected a finite number or null, got 9999"),
    ("latency", '{"ttft_s": {"p50": Infinity}}', "latency.ttft_s.p50: expected a finite number or null, got inf"),
])
def test_a_number_run_never_writes_is_one_line_naming_the_field(tmp_path, capsys, field, written, words):
    base = _write(tmp_path, "base", json.dumps([BASE]))
    other = _write(tmp_path, "other", json.dumps([dict(BASE, **{field: "@"})]).replace('"@"', written))
    assert main(["compare", str(base), str(other)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert f"other/results.json: records[0] ('full'): {words}" in err, err
    assert err.rstrip().endswith("(a results.json written by run or sweep)"), err


def test_finite_numbers_and_nulls_are_compared(tmp_path, capsys):
    base = _write(tmp_path, "base", json.dumps([BASE]))
    other = _write(tmp_path, "other", json.dumps([dict(BASE, decode_step_s=None, batch=32)]))
    assert main(["compare", str(base), str(other)]) == 0
    assert "batch" in capsys.readouterr().out
