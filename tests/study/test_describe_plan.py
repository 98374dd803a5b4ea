"""``describe`` of an experiment states its plan: each phase's TP and attention DP, the shape, the
policies' parameters and the memory placement (it listed only the files and the policies' names, so
two SnapStream entries with different budgets read alike and the plan was nowhere)."""
from __future__ import annotations

from sweep_helpers import REPO

from sn40l_sim.commands.cli import main


def _describe(path, capsys) -> list[str]:
    assert main(["describe", str(path)]) == 0
    return capsys.readouterr().out.splitlines()


def test_the_shipped_experiment_states_its_plan_shape_and_budgets(capsys):
    path = REPO / "experiments" / "deepseek_tp16.yaml"
    lines = _describe(path, capsys)
    assert "  policies   full (full), snapstream (snapstream, budget 32,768)" in lines
    assert "  plan       prefill TP16; decode TP16, attention DP16" in lines
    assert "  shape      prompt 131,072 tokens, batch 1, up to 2,048 new tokens; serving batch max" in lines
    assert "  memory     placed in the hardware file's tiers, fastest first; may spill: activations" in lines
    assert f"             bytes per socket: python -m sn40l_sim map {path} --phase decode" in lines


def test_a_derived_plan_and_memory_order_are_the_files_own(tmp_path, capsys):
    derived = tmp_path / "derived.yaml"
    derived.write_text(f"base: {REPO / 'experiments' / 'llama8b_node8.yaml'}\nname: derived\n"
                       "parallel: {prefill: {tp: 4}, decode: {tp: 2, attention_dp: 1}}\n"
                       "prompt_lens: [1024, 2048]\nmemory: {order: [ddr, hbm], may_spill: []}\n")
    lines = _describe(derived, capsys)
    assert "  plan       prefill TP4; decode TP2" in lines       # DP1 is not worth a word
    assert "  shape      prompt 1,024, 2,048 tokens, batch 1; serving batch max" in lines   # no new tokens: none said
    assert "  memory     placed in ddr, hbm; may spill: nothing" in lines
