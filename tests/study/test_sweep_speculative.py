"""A sweep axis that gives speculative drafts to a model without an MTP module is refused as run
refuses it (at serving.speculative.drafts, naming the model), not later by the graph builder with
the error located at graph_options."""
from __future__ import annotations

from sweep_helpers import write_experiment

from sn40l_sim.commands.cli import main
from sn40l_sim.study.sweep.load import load_sweep
from sn40l_sim.study.sweep.plan import expand_runs

SPECULATIVE_AXIS = """\
mode: grid
axes:
  speculative:
    path: serving.speculative
    values: [null, {drafts: 1, acceptance: 0.5}]
"""


def test_drafts_for_a_model_without_mtp_fail_the_sweep_point_at_the_speculative_field(tmp_path):
    runs, failures = expand_runs(load_sweep(write_experiment(tmp_path, SPECULATIVE_AXIS)))
    assert {run.sweep_point.index for run in runs} == {0}    # the point without drafts runs
    [(index, _, error)] = failures
    assert index == 1
    assert "serving.speculative.drafts" in error and "'llama-3.1-8b' has no mtp section" in error
    assert "graph_options" not in error


def test_check_refuses_it_in_one_line_with_exit_2(tmp_path, capsys):
    path = write_experiment(tmp_path, SPECULATIVE_AXIS)
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "serving.speculative.drafts" in err and "no mtp section" in err and "graph_options" not in err
