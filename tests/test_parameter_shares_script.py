"""``scripts/parameter_shares.py``: a parameter's share of the decode step, measured by simulating the
step again with that parameter at its ideal value, agrees with the step's breakdown of where the
time goes (two independent readings of the same model), and every ideal value is the faster end."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from sn40l_sim.study.calibration import fitted_names, parameter_bounds
from sn40l_sim.study.evaluation import LoadedExperiments

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
import parameter_shares  # noqa: E402

MAIN = REPO / "experiments" / "deepseek_tp16.yaml"


@pytest.fixture(scope="module")
def rows():
    return parameter_shares.shares(MAIN)


def test_the_configuration_share_is_at_least_the_breakdowns_configuration_time(rows):
    # with the configuration load at its fastest, the step loses at least what its breakdown gives to
    # configuration loads (the mapper may pick other plans then, so within two points). At the fitted
    # rate both steps keep their MLA loaded on one tile beside the MoE FFN (mapper/confined.py),
    # paying in attention what they save in configuration; with loads free that trade is off, so the
    # share is far above the breakdown's (docs/validation.md, the parameter-share table).
    breakdown = {r["name"]: r["decode_step_breakdown_s"]["configuration"] / r["decode_step_s"]
                 for r in LoadedExperiments().records(MAIN, serve=False, reads_prefill=())}
    config = {point: share for path, point, _, _, share in rows if path == "calibrated.config_load_bytes_per_s"}
    assert config.keys() == breakdown.keys() == {"full", "snapstream"}
    for point, share in config.items():
        assert share >= breakdown[point] - 0.02


def test_every_fitted_parameter_is_measured_at_the_faster_end_of_its_bounds(rows):
    node = LoadedExperiments().load(MAIN).node
    bounds = parameter_bounds(node.socket)
    assert {path for path, *_ in rows} == set(fitted_names(node.socket))
    for path in fitted_names(node.socket):
        low, high = bounds[path]
        assert parameter_shares.ideal_value(path, low, high) == (low if path.endswith("latency_s") or
                                                                 path.endswith("setup_s") else high)
    # no share is above 1 (the ideal step is never negative) and the shipped step is the same in every row
    assert all(share < 1 for *_, share in rows)
    assert len({(point, step) for _, point, step, _, _ in rows}) == 2


def test_a_sweep_skips_the_runs_that_do_not_fit_as_sweep_does(tmp_path, monkeypatch):
    # sweep skips such runs under infeasible: skip; the script refused the whole experiment (exit 2)
    # Which runs are kept is decided once, before the parameters are set to their ideal values, and
    # every parameter's rows are over those runs: one parameter shows the skip as all of them do
    # (the rows of every parameter are checked on the main experiment above), with 2 steps a run, not 7
    every = parameter_shares.fitted_names
    monkeypatch.setattr(parameter_shares, "fitted_names", lambda socket: list(every(socket))[:1])
    text = (REPO / "experiments" / "llama8b_node8.yaml").read_text().replace("../", f"{REPO}/")
    text = text.replace("prompt_len: 32768", "prompt_len: 1024")
    experiment = tmp_path / "skip.yaml"
    experiment.write_text(text + "sweep:\n  infeasible: skip\n  axes:\n    serving.batch: [1, 1048576]\n")
    rows = parameter_shares.shares(experiment)
    assert len({path for path, *_ in rows}) == 1
    assert rows and {point for _, point, *_ in rows} == {"full[batch=1]", "snapstream[batch=1]"}
