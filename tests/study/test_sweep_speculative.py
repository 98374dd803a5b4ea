"""A sweep axis that gives speculative drafts to a model without an MTP module is refused as run
refuses it (at serving.speculative.drafts, naming the model), not later by the graph builder with
the error located at graph_options."""
from __future__ import annotations

from sweep_helpers import REPO, write_experiment

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


#: drafts DeepSeek's MTP module makes and Llama's missing one cannot: the value passes (a point uses it
#: validly), and the point pairing it with Llama fails
MODEL_AND_SPECULATIVE_AXES = f"""\
mode: grid
axes:
  model: [{REPO / 'graphs/llama3_1_8b.yaml'}, {REPO / 'graphs/deepseek_r1.yaml'}]
  speculative:
    path: serving.speculative
    values: [null, {{drafts: 1, acceptance: 0.5}}]
"""


def test_drafts_for_a_model_without_mtp_fail_the_sweep_point_at_the_speculative_field(tmp_path):
    runs, failures = expand_runs(load_sweep(write_experiment(tmp_path, MODEL_AND_SPECULATIVE_AXES)))
    assert {run.sweep_point.index for run in runs} == {0, 2, 3}    # every point but Llama's with drafts
    [(index, _, error)] = failures
    assert index == 1
    assert "serving.speculative.drafts" in error and "'llama-3.1-8b' has no mtp section" in error
    assert "graph_options" not in error


def test_sweep_refuses_drafts_no_point_can_make_before_running(tmp_path, capsys):
    # Llama alone: every point with the value fails, so the value is refused, as check refuses it
    out = tmp_path / "out"
    assert main(["sweep", str(write_experiment(tmp_path, SPECULATIVE_AXIS)), "--out", str(out), "--quiet"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "sweep.axes.speculative.values[1]: value" in line and "'llama-3.1-8b' has no mtp section" in line
    assert not list((out / "runs").glob("*.json"))


def test_check_refuses_it_in_one_line_with_exit_2(tmp_path, capsys):
    path = write_experiment(tmp_path, SPECULATIVE_AXIS)
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "serving.speculative.drafts" in err and "no mtp section" in err and "graph_options" not in err
