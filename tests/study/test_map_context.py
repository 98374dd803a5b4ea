"""A map experiment (no workload) is held to the model's maximum context with the prompt and the
``max_new_tokens`` its decode graph generates; a served one request by request, each prompt with its
own output (sn40l_sim/study/preflight.py, sn40l_sim/serving/workload.py)."""
from __future__ import annotations

from pathlib import Path

import pytest

from sn40l_sim.commands.cli import main

REPO = Path(__file__).resolve().parents[2]


def map_experiment(tmp_path: Path, prompt_len: int, max_new_tokens: int | None) -> Path:
    new = "" if max_new_tokens is None else f", max_new_tokens: {max_new_tokens}"
    path = tmp_path / "m.yaml"
    path.write_text(f"kind: experiment\nname: m\nhardware: {REPO}/hw_configs/sn40l_node8.yaml\n"
                    f"model: {REPO}/graphs/llama3_1_8b.yaml\nparallel:\n  prefill: {{tp: 8}}\n  decode: {{tp: 8}}\n"
                    f"policies:\n  - {{name: full, policy: full}}\n"
                    f"shape: {{prompt_len: {prompt_len}, batch: 1{new}}}\n")
    return path


@pytest.mark.parametrize("command", [["check"], ["map", "--phase", "decode"]])
def test_a_map_experiment_whose_output_passes_the_context_is_refused_as_run_refuses_it(tmp_path, capsys, command):
    # Llama-3.1-8B holds 131,072 positions: 130,816 prompt tokens leave room for 256, not 1,024
    path = map_experiment(tmp_path, 130816, 1024)
    assert main([command[0], str(path), *command[1:]]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "m.yaml:10: shape.max_new_tokens: a prompt of 130816 tokens and 1024 new ones make 131840, beyond the " \
           "maximum context of llama-3.1-8b, 131072 tokens: generate at most 256 after such a prompt" in err


def test_a_map_experiment_within_the_context_passes_check(tmp_path, capsys):
    assert main(["check", str(map_experiment(tmp_path, 130816, 256))]) == 0
    # without max_new_tokens, the one token a prefill gives
    assert main(["check", str(map_experiment(tmp_path, 131071, None))]) == 0
    assert main(["check", str(map_experiment(tmp_path, 131072, None))]) == 2
    assert "fills the maximum context of llama-3.1-8b, 131072 tokens" in capsys.readouterr().err


def test_a_served_workload_is_held_to_the_context_request_by_request(tmp_path, capsys):
    # a poisson workload whose longest prompt and longest output together pass the context is refused
    # at the output's bound by check and run alike; a trace whose requests each fit runs, though its
    # longest prompt and longest output together would not
    base = (REPO / "experiments" / "llama8b_node8.yaml").read_text().replace("../", f"{REPO}/")
    over = tmp_path / "over.yaml"
    over.write_text(base.replace("shape: {prompt_len: 32768}", "shape: {prompt_len: 130800}"))
    lines = []
    for argv in (["check", str(over)], ["run", str(over), "--out", str(tmp_path / "o"), "--quiet", "--no-plot"]):
        assert main(argv) == 2
        lines.append(capsys.readouterr().err)
    assert lines[0] == lines[1] and lines[0].count("\n") == 1, lines
    assert "workload.output_len.high: a request: a prompt of 130800 tokens and 512 generated after it make 131312, " \
           "beyond the model's maximum context of 131072 tokens: at most 272 after such a prompt" in lines[0]
    (tmp_path / "t.csv").write_text("arrival_s,prompt_len,output_len\n0,130800,64\n0.5,1000,512\n")
    mixed = tmp_path / "mixed.yaml"
    poisson = base[base.index("workload:"):base.index("serving:")]
    mixed.write_text(base.replace("shape: {prompt_len: 32768}", "shape: {prompt_len: 130800}")
                     .replace(poisson, "workload: {kind: trace, path: t.csv}\n"))
    assert main(["check", str(mixed)]) == 0, capsys.readouterr().err


@pytest.mark.parametrize("command", [["check"], ["map", "--phase", "prefill"], ["map", "--phase", "decode"]])
def test_a_map_experiment_compiling_its_prefill_beyond_the_context_is_refused_as_run_refuses_it(tmp_path, capsys,
                                                                                                 command):
    # a 1,024-token prompt on a 262,144-token graph of a 131,072-token model: check passed it and map
    # timed the prefill as that graph (5.4 s instead of the 1,024-token graph's 15 ms)
    path = map_experiment(tmp_path, 1024, None)
    path.write_text(path.read_text() + "serving: {prefill_lens: [262144]}\n")
    assert main([command[0], str(path), *command[1:]]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "m.yaml:11: serving.prefill_lens: a prompt of 1024 tokens runs on the compiled prefill length 262144, " \
           "beyond the maximum context of llama-3.1-8b, 131072 tokens (compile lengths up to 131072)" in err


def test_map_holds_a_served_experiment_to_the_context_request_by_request_as_run_does(tmp_path, capsys):
    # 131,009 prompt tokens leave room for 63 generated ones: requests of 63 run under a
    # max_new_tokens of 64 (run's decode slot stops at the context), and map refused the file at
    # serving.max_new_tokens as if it were a map experiment; requests of 64 are refused by all alike
    base = (REPO / "experiments" / "llama8b_node8.yaml").read_text().replace("../", f"{REPO}/")
    poisson = base[base.index("workload:"):base.index("serving:")]
    text = base.replace("shape: {prompt_len: 32768}", "shape: {prompt_len: 131009}") \
        .replace(poisson, "workload: {kind: fixed, count: 2, output_len: OUT}\n").replace("max_new_tokens: 512",
                                                                                         "max_new_tokens: 64")
    fits, over = tmp_path / "fits.yaml", tmp_path / "over.yaml"
    fits.write_text(text.replace("OUT", "63"))
    over.write_text(text.replace("OUT", "64"))
    commands = (["check"], ["map", "--phase", "decode"], ["map", "--phase", "prefill"])
    for command in commands:
        assert main([command[0], str(fits), *command[1:]]) == 0, (command, capsys.readouterr().err)
    capsys.readouterr()
    lines = []
    for command in commands:
        assert main([command[0], str(over), *command[1:]]) == 2
        lines.append(capsys.readouterr().err)
    assert len(set(lines)) == 1 and lines[0].count("\n") == 1, lines
    assert "workload.output_len: request 0: a prompt of 131009 tokens and 64 generated after it make 131073" in lines[0]


@pytest.mark.parametrize("command", [["map", "--phase", "decode"], ["map", "--phase", "prefill"]])
def test_a_served_experiment_without_max_new_tokens_is_refused_by_map_as_run_refuses_it(tmp_path, capsys, command):
    # a workload and neither serving.max_new_tokens nor shape.max_new_tokens: run and check name the
    # missing field, and map refused the file at the workload's output_len, against a max_new_tokens
    # of 1 the file never wrote (the one token a map experiment without a workload generates)
    base = (REPO / "experiments" / "llama8b_node8.yaml").read_text().replace("../", f"{REPO}/")
    path = tmp_path / "unbounded.yaml"
    path.write_text(base.replace("  max_new_tokens: 512\n", ""))
    assert "max_new_tokens" not in path.read_text()
    assert main(["check", str(path)]) == 2
    expected = capsys.readouterr().err
    assert "serving.max_new_tokens: required" in expected
    assert main([command[0], str(path), *command[1:]]) == 2
    assert capsys.readouterr().err == expected
