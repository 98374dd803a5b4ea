"""``execution.collective_algorithm: tree`` on a plan whose groups recursive doubling cannot pair
(tp 6) is refused by run and map at the option, exit status 2, not a traceback
(sn40l_sim/engine/collective_sizes.py), and by check, which finds the collectives in the graphs it
builds to size the activations."""
from __future__ import annotations

from pathlib import Path

import pytest

from sn40l_sim.commands.cli import main

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("command", [["run", "--quiet", "--no-plot"], ["map", "--phase", "decode"], ["check"]])
def test_a_tree_over_six_sockets_is_refused_at_the_option(tmp_path, capsys, command):
    path = tmp_path / "tree.yaml"
    path.write_text(f"kind: experiment\nname: tree\nhardware: {REPO}/hw_configs/sn40l_node8.yaml\n"
                    f"model: {REPO}/graphs/llama3_1_8b.yaml\nparallel:\n  prefill: {{tp: 6}}\n  decode: {{tp: 6}}\n"
                    "policies:\n  - {name: full, policy: full}\nshape: {prompt_len: 1024, max_new_tokens: 16}\n"
                    "workload: {kind: fixed, count: 1, output_len: 16}\nserving: {batch: 1, max_new_tokens: 16}\n"
                    "execution: {collective_algorithm: tree}\n")
    extra = ["--out", str(tmp_path / "out")] if command[0] == "run" else []
    assert main([command[0], str(path), *command[1:], *extra]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("warning")]
    assert len(err) == 1 and "Traceback" not in err[0], err
    assert "tree.yaml:13: execution.collective_algorithm: the tree algorithm (recursive doubling) needs a " \
           "power-of-two group and no all-to-all; the plan has a collective (all_reduce) among 6 sockets " \
           "(expected auto, ring or direct)" in err[0]


def test_a_map_experiment_with_a_tree_map_cannot_run_is_refused_by_check(tmp_path, capsys):
    # no workload: check held the experiment to what map needs of it and said "ok", and map then
    # refused the tree at the first collective it timed (an all-to-all of attention DP2 over TP8)
    path = tmp_path / "tree.yaml"
    path.write_text(f"kind: experiment\nname: tree\nhardware: {REPO}/hw_configs/sn40l_node8.yaml\n"
                    f"model: {REPO}/graphs/llama3_1_8b.yaml\nparallel:\n  prefill: {{tp: 8}}\n"
                    "  decode: {tp: 8, attention_dp: 2}\npolicies:\n  - {name: full, policy: full}\n"
                    "shape: {prompt_len: 1024, batch: 8}\nexecution: {collective_algorithm: tree}\n")
    assert main(["map", str(path), "--phase", "prefill"]) == 0
    capsys.readouterr()
    assert main(["map", str(path), "--phase", "decode"]) == 2
    expected = capsys.readouterr().err
    assert "tree.yaml:11: execution.collective_algorithm: the tree algorithm (recursive doubling) needs a " \
           "power-of-two group and no all-to-all; the plan has a collective (all_to_all) among 8 sockets" in expected
    assert main(["check", str(path)]) == 2
    assert capsys.readouterr().err == expected
