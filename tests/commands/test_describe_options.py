"""``describe`` of an experiment states the simulation options run applies and results' ``options``
records (``graph_options``, ``execution``, ``memory`` settings that are not their defaults). It
said nothing of them: deepseek_tp16.yaml streams all 256 experts of every MoE layer
(``graph_options.expert_loading: all``) and an experiment with kernel looping off decodes 1.6
times slower (docs/validation.md), with nothing in describe's account to tell either apart."""
from __future__ import annotations

from pathlib import Path

from sn40l_sim.commands.describe import describe_experiment
from sn40l_sim.study.experiment import load_experiment
from sn40l_sim.study.experiment_rules import options_summary

REPO = Path(__file__).resolve().parents[2]


def _lines(text: str, label: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip().startswith(label)]


def test_the_graph_options_are_described_as_results_record_them():
    path = REPO / "experiments" / "deepseek_tp16.yaml"
    assert _lines(describe_experiment(path), "options") == \
        [f"options    {options_summary(load_experiment(path).spec)} (as results' options give them)"]


def test_execution_settings_are_described(tmp_path):
    text = (REPO / "experiments" / "llama8b_node8.yaml").read_text().replace("../", f"{REPO}/")
    path = tmp_path / "slow.yaml"
    path.write_text(text + "execution: {kernel_looping: false, collective_algorithm: ring}\n")
    assert _lines(describe_experiment(path), "options") == \
        ["options    execution.collective_algorithm=ring, execution.kernel_looping=False (as results' options give them)"]


def test_an_experiment_at_the_default_options_has_no_options_line():
    assert _lines(describe_experiment(REPO / "experiments" / "llama8b_node8.yaml"), "options") == []
