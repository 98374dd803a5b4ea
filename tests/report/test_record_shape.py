"""``compare`` reads a results.json back: a record whose figure is text, a list or a mapping, or
whose mapping field is not one, stopped the table with a TypeError or AttributeError traceback
(exit 1); a second record of one point name replaced the first unsaid. Each is one line naming the
file, the record and the field, exit status 2."""
from __future__ import annotations

import json

import pytest

from sn40l_sim.commands.cli import main
from sn40l_sim.report.fields import RESULTS
from sn40l_sim.report.record_shape import record_problem

BASE = {"name": "full", "model": "m", "hardware": "SN40L-16", "kv_policy": "full", "batch": 16,
        "decode_step_s": 0.0860849, "kv_policy_params": {"budget": 32768, "tier": "ddr"},
        "memory": {"hbm": {"weights": 40 * 2**30, "kv": 8 * 2**30}}, "invariants": ["bytes_conserved"],
        "latency": {"ttft_s": {"p50": 0.5}}, "sweep": {"batch": 8, "model": "llama3_1_8b"}}


def _write(tmp_path, name, records):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "results.json").write_text(json.dumps(records))
    return folder


@pytest.mark.parametrize("field, value, words", [
    ("decode_step_s", "fast", "decode_step_s: expected a number (s) or null, got 'fast'"),
    ("decode_step_s", [1, 2], "decode_step_s: expected a number (s) or null, got [1, 2]"),
    ("decode_step_s", {"a": 1}, "decode_step_s: expected a number (s) or null, got {'a': 1}"),
    ("batch", True, "batch: expected a number (sequences) or null, got True"),
    ("memory", "x", "memory: expected a mapping, got 'x'"),
    ("memory", {"hbm": [1]}, "memory.hbm: expected a mapping, got [1]"),
    ("memory", {"hbm": {"kv": "8 GiB"}}, "memory.hbm.kv: expected a number (B) or null, got '8 GiB'"),
    ("parallel", "tp8", "parallel: expected a mapping, got 'tp8'"),
    ("invariants", "ok", "invariants: expected a list, got 'ok'"),
    ("latency", [1], "latency: expected a mapping, got [1]"),
])
def test_a_record_of_another_shape_is_one_line_naming_the_field(tmp_path, capsys, field, value, words):
    base = _write(tmp_path, "base", [BASE])
    other = _write(tmp_path, "other", [dict(BASE, **{field: value})])
    assert main(["compare", str(base), str(other)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert f"other/results.json: records[0] ('full'): {words} (a results.json written by run or sweep)" in err, err


def test_a_point_name_twice_is_refused_rather_than_one_replacing_the_other(tmp_path, capsys):
    base = _write(tmp_path, "base", [BASE])
    other = _write(tmp_path, "other", [BASE, dict(BASE, decode_step_s=1.0)])
    assert main(["compare", str(base), str(other)]) == 2
    assert "records[1]: point name 'full' appears twice" in capsys.readouterr().err


def test_the_shapes_run_writes_are_taken(tmp_path, capsys):
    # a policy's parameters and a sweep point's values may be text (a store's tier, a model label);
    # a figure may be null (a point without it)
    assert record_problem(BASE) is None and record_problem(dict(BASE, decode_step_s=None)) is None
    other = _write(tmp_path, "other", [dict(BASE, decode_step_s=0.09)])
    assert main(["compare", str(_write(tmp_path, "base", [BASE])), str(other)]) == 0
    assert "decode step" in capsys.readouterr().out


def test_every_numeric_field_of_the_registry_is_checked():
    # a field declared with a unit and no key levels or parts takes a number
    numeric = [f.name for f in RESULTS if f.unit and not f.keys and not f.parts and not f.is_list]
    assert "decode_step_s" in numeric and "kv_transfer_bytes" in numeric
    for name in numeric:
        assert record_problem({"name": "x", name: "text"}) is not None, name
