"""Regression tests on simulated timings: every experiment's key results (decode step cycles,
TTFT, tokens/s, per-kernel cycles, max batch) against tests/golden/*.json with tight tolerances.

If a result moved on purpose, regenerate with ``python -m sn40l_sim golden --update`` (it prints
the diff) and commit the new goldens with the change that moved them.
"""
from __future__ import annotations

import importlib

import pytest

from sn40l_sim.commands.cli import main
from sn40l_sim.mapper import disk_cache
from sn40l_sim.mapper.graph import clear_memo
from sn40l_sim.study import golden

EXPERIMENTS = golden.experiments()


@pytest.fixture
def fresh_mapper_memo():
    # the mapper memoises placed kernels across calls (keyed by everything they are computed from,
    # so the other tests share them); a test that perturbs a unit model must not see (or leave
    # behind) placements made with the other model, in the memo or in the session's disk cache
    clear_memo()
    with disk_cache.cache_in(None):
        yield
    clear_memo()


def test_every_runnable_experiment_has_a_golden():
    assert EXPERIMENTS, "no runnable experiment found"
    missing = [e.name for e in EXPERIMENTS if golden.load(e) is None]
    assert not missing, f"no golden for {missing}: run `python -m sn40l_sim golden --update`"


@pytest.mark.parametrize("experiment", EXPERIMENTS, ids=[e.stem for e in EXPERIMENTS])
def test_results_match_golden(experiment):
    old = golden.load(experiment)
    assert old is not None
    moved = golden.diff(old, golden.collect(experiment))
    assert not moved, ("simulated results moved; if on purpose, run `python -m sn40l_sim golden --update`:\n"
                       + "\n".join(moved))


def _scaled(function, factor):
    def wrapper(*args, **kwargs):
        return int(round(function(*args, **kwargs) * factor))
    return wrapper


def test_a_one_percent_change_to_a_unit_model_fails_the_goldens(monkeypatch, fresh_mapper_memo):
    # 1% more cycles for every off-chip transfer (the AGCU/HBM unit model), patched wherever the
    # mapper imported it by name
    from sn40l_sim.hardware.units import memory

    slower = _scaled(memory.offchip_cycles, 1.01)
    for name in ("sn40l_sim.mapper.kernel", "sn40l_sim.mapper.stages"):
        module = importlib.import_module(name)
        if hasattr(module, "offchip_cycles"):
            monkeypatch.setattr(module, "offchip_cycles", slower)
    experiment = golden.EXPERIMENTS_DIR / "llama8b_node8.yaml"
    moved = golden.diff(golden.load(experiment), golden.collect(experiment))
    assert any("decode_step_cycles" in line for line in moved), moved


def test_diff_tolerances():
    assert golden.diff({"x": 1.0}, {"x": 1.0 + 1e-9}) == []
    assert golden.diff({"x": 1.0}, {"x": 1.01}) != []
    assert golden.diff({"n": 3}, {"n": 4}) == ["n: 3 -> 4"]


@pytest.mark.parametrize("text", ["{oops", "[]"])
def test_an_unreadable_golden_is_one_line_and_update_replaces_it(tmp_path, monkeypatch, capsys, text):
    experiment = golden.EXPERIMENTS_DIR / "llama8b_node8.yaml"
    monkeypatch.setattr(golden, "GOLDEN_DIR", tmp_path)
    monkeypatch.setattr(golden, "survey", lambda: [(experiment, None)])
    (tmp_path / "llama8b_node8.json").write_text(text)
    assert main(["golden", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {tmp_path / 'llama8b_node8.json'}: ") and "--update" in err[0]
    assert main(["golden", "--quiet", "--update"]) == 0
    assert "unreadable golden, replaced" in capsys.readouterr().out
    assert sorted(golden.load(experiment)) == ["full", "snapstream"]


def test_a_folder_where_a_golden_goes_is_one_line_with_or_without_update(tmp_path, monkeypatch, capsys):
    # it was read as no golden yet, and --update stopped in a traceback writing over it
    experiment = golden.EXPERIMENTS_DIR / "llama8b_node8.yaml"
    monkeypatch.setattr(golden, "GOLDEN_DIR", tmp_path)
    monkeypatch.setattr(golden, "survey", lambda: [(experiment, None)])
    (tmp_path / "llama8b_node8.json").mkdir()
    for argv in (["golden", "--quiet"], ["golden", "--quiet", "--update"]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"error: {tmp_path / 'llama8b_node8.json'}: is a folder; expected the experiment's golden file "
                       "(remove or rename the folder)"]
