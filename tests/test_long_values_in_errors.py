"""Long values in error messages: a 5,000-character text or a list of 2,000 numbers given to a field
was repeated whole in the one line that says what was wrong (5,000 to 6,000 characters); the line
now quotes the value's start and its length. A path longer than the file system takes was a
traceback (OSError: File name too long)."""
from __future__ import annotations

from pathlib import Path

import pytest

from sn40l_sim.commands.cli import main
from sn40l_sim.errors import QUOTE_LIMIT, shown

REPO = Path(__file__).resolve().parents[1]
LONG = "x" * 5000
NUMBERS = "[" + ", ".join(["1"] * 2000) + "]"


#: an error line quoting a 5,000-character value short: the value cut to 80 characters, plus the
#: file path, the field and what was expected (a policy's names and how a plug-in is loaded, ~420)
SHORT_LINE = 600

def test_shown_keeps_a_short_value_whole_and_shortens_a_long_one_with_its_length():
    assert shown("max") == "'max'" and shown([1, 2]) == "[1, 2]" and shown(4.5) == "4.5"
    assert shown("y" * (QUOTE_LIMIT - 2)) == repr("y" * (QUOTE_LIMIT - 2))   # a value that fits is quoted whole
    assert shown("y" * (QUOTE_LIMIT - 1)) == f"'{'y' * (QUOTE_LIMIT // 2)}...' ({QUOTE_LIMIT - 1} characters)"
    assert shown(LONG) == f"'{'x' * (QUOTE_LIMIT // 2)}...' (5,000 characters)"
    assert shown(["a"] * 2000).endswith(", ...] (2,000 items)") and len(shown(["a"] * 2000)) <= QUOTE_LIMIT + 20
    assert shown(("a",) * 100).startswith("('a', ") and shown(("a",) * 100).endswith("...) (100 items)")
    nested = shown({"kind": LONG, "rate_per_s": 4})
    assert nested.startswith("{'kind': 'xxxx") and "(5,000 characters)" in nested and nested.endswith("(2 items)")
    assert len(nested) < 2 * QUOTE_LIMIT
    assert shown(["z" * 500]) == f"['{'z' * (QUOTE_LIMIT // 4)}...' (500 characters)] (1 item)"
    # a text long only by its escapes has nothing to cut
    assert shown("\x00" * 30) == repr("\x00" * 30)
    # a long value of another type: its representation, cut, with that representation's length
    assert shown(range(10**100)).endswith(f"... ({len(repr(range(10**100))):,} characters)")


def _experiment(tmp_path: Path, old: str, new: str) -> Path:
    text = (REPO / "experiments" / "llama8b_node8.yaml").read_text().replace("../", f"{REPO}/")
    assert old in text
    path = tmp_path / "long.yaml"
    path.write_text(text.replace(old, new, 1))
    return path


@pytest.mark.parametrize("old, new, expected", [
    ("policy: full}", f"policy: {LONG}}}",
     "policies[0].policy: unknown KV policy 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...' (5,000 characters); "
     "expected one of"),
    ("rate_per_s: 4", f"rate_per_s: {LONG}", "workload.rate_per_s: expected a number, got 'xxxx"),
    ("rate_per_s: 4", f"rate_per_s: {NUMBERS}", "workload.rate_per_s: expected a number, got [1, 1, "),
    ("prompt_len: 32768", f"prompt_len: {NUMBERS}", "shape.prompt_len: expected an integer, got [1, 1, "),
    ("batch: max", f"batch: {LONG}", "serving.batch: expected an integer or 'max', got 'xxxx"),
    ("name: llama8b_node8", f"name: {LONG}", "name: expected a plain name"),
    ("mode: disaggregated", f"mode: {LONG}", "serving.mode: Input should be 'disaggregated' or 'colocated' (got"),
    ("kind: poisson", f"kind: {LONG}", "workload: expected a mapping with kind: fixed | poisson | trace (got {'kind'"),
    ("hardware: ", f"hardware: {LONG}.yaml #", "hardware: hardware file 'xxxx"),
], ids=["policy", "number", "number_list", "integer_list", "batch", "name", "mode", "kind", "hardware_file"])
def test_a_long_value_in_an_experiment_is_quoted_short_with_its_length(tmp_path, capsys, old, new, expected):
    path = _experiment(tmp_path, old, new)
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and len(err) < SHORT_LINE, (len(err), err[:300])
    assert expected in err, err
    assert "(5,000 characters)" in err or "(5,005 characters)" in err or "(2,000 items)" in err, err


def test_a_long_value_given_with_set_is_quoted_short(tmp_path, capsys):
    path = _experiment(tmp_path, "seed: 7", "seed: 7")
    for item, length in ((f"serving.batch={LONG}", "(5,000 characters)"),
                         (f"hardware.socket.clock_hz={LONG}", "(5,000 characters)"),
                         (f"serving.batch={NUMBERS}", "(2,000 items)")):
        assert main(["run", str(path), "--set", item, "--out", str(tmp_path / "o"), "--quiet"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and len(err) < SHORT_LINE and length in err, err[:300]


@pytest.mark.parametrize("command", [["check"], ["describe"], ["validate"]])
def test_a_path_longer_than_the_file_system_takes_is_one_line_not_a_traceback(tmp_path, capsys, monkeypatch,
                                                                             command):
    monkeypatch.chdir(tmp_path)   # relative: pathlib's is_file raised ENAMETOOLONG in a traceback
    assert main([*command, f"{LONG}.yaml"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and len(err) < SHORT_LINE, err[:300]
    assert "5,005 characters" in err and "File name too long" in err, err
    # absolute: the file read said so, with the whole path as the message's prefix
    assert main([*command, str(tmp_path / f"{LONG}.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and len(err) < SHORT_LINE and "characters)" in err, err[:300]


@pytest.mark.parametrize("old, new, expected", [
    ("  blocks:\n    head: [embedding]", f"  blocks:\n    head: [{LONG}]",
     "prefill.blocks.head[0]: kernel 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...' (5,000 characters) is not defined"),
    ("operators: [sample]", f"operators: [{LONG}]", "unknown operator formula 'xxxx"),
    ("{size: hidden, kind: all_reduce", f"{{size: {LONG}, kind: all_reduce", "unknown collective size formula 'xxxx"),
    ("attention: gqa", f"attention: {LONG}", "attention: unknown attention kind 'xxxx"),
], ids=["block_kernel", "operator", "collective_size", "attention"])
def test_a_long_value_in_a_kernel_template_is_quoted_short(tmp_path, capsys, old, new, expected):
    # a 5,000-character kernel id in a block was repeated whole in the line that refused it
    text = (REPO / "graphs" / "kernels_llama.yaml").read_text()
    assert old in text
    path = tmp_path / "kernels_llama.yaml"
    path.write_text(text.replace(old, new, 1))
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and len(err) < 3 * SHORT_LINE, (len(err), err[:300])
    assert expected in err and "(5,000 characters)" in err, err[:300]


def test_a_long_graph_option_is_quoted_short(tmp_path, capsys):
    # graph_options.expert_loading of 5,000 characters was repeated whole in the line refusing it
    path = _experiment(tmp_path, "seed: 7", f"seed: 7\ngraph_options: {{expert_loading: {LONG}}}")
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and len(err) < SHORT_LINE, (len(err), err[:300])
    assert "graph_options.expert_loading: expected 'touched' or 'all', got 'xxxx" in err
    assert "(5,000 characters)" in err, err


@pytest.mark.parametrize("file, old, new, field", [
    ("kv_policies.yaml", "hue: [model, prefill_len]", f"hue: [model, {LONG}]", "sweep.plot.hue[1]"),
    ("deepseek_sweep.yaml", "infeasible: skip", f"infeasible: {LONG}", "sweep.infeasible"),
    ("deepseek_sweep.yaml", "mode: grid", f"mode: {LONG}", "sweep.mode"),
], ids=["hue", "infeasible", "mode"])
def test_a_long_value_in_a_sweep_section_is_quoted_short(tmp_path, capsys, file, old, new, field):
    # a 5,000-character plot column or infeasible: value was repeated whole in the line refusing it
    text = (REPO / "experiments" / file).read_text()
    assert old in text
    for name in ("deepseek_tp16.yaml", file):   # the sweep's base: beside it
        (tmp_path / name).write_text((REPO / "experiments" / name).read_text().replace("../", f"{REPO}/"))
    (tmp_path / file).write_text(text.replace("../", f"{REPO}/").replace(old, new, 1))
    assert main(["check", str(tmp_path / file)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and len(err) < 2 * SHORT_LINE, (len(err), err[:300])
    assert f": {field}: " in err and "(5,000 characters)" in err, err[:400]
