"""A map experiment (no workload) is held to the graph options as a served one is: an option that
would change nothing on the model is refused by ``check`` and ``map`` with run's message, not mapped
as if it were not there (sn40l_sim/study/preflight.py)."""
from __future__ import annotations

from pathlib import Path

import pytest

from sn40l_sim.commands.cli import main

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("option", ["expert_loading: all", "routing_skew: 1.0"])
@pytest.mark.parametrize("command", [["check"], ["map", "--phase", "decode"]])
def test_an_moe_option_on_a_dense_model_is_refused_without_a_workload(tmp_path, capsys, command, option):
    path = tmp_path / "m.yaml"
    path.write_text(f"kind: experiment\nname: m\nhardware: {REPO}/hw_configs/sn40l_node8.yaml\n"
                    f"model: {REPO}/graphs/llama3_1_8b.yaml\nparallel:\n  prefill: {{tp: 8}}\n  decode: {{tp: 8}}\n"
                    f"policies:\n  - {{name: full, policy: full}}\nshape: {{prompt_len: 1024, batch: 1}}\n"
                    f"graph_options: {{{option}}}\n")
    assert main([command[0], str(path), *command[1:]]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    name = option.split(":")[0]
    assert f"m.yaml:11: graph_options.{name}: model 'llama-3.1-8b' has no MoE layers, so {name} (which experts " \
           "a MoE call streams) has nothing to act on; remove it" in err
