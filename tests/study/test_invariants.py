"""Physical invariants checked on every run: each one broken on purpose (a fault injected into a
real point of the small experiment) stops ``run`` with exit status 3 and one line naming it; a
sweep stops too; the records of a sound run list every invariant checked.
"""
from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
from sweep_helpers import write_experiment

from sn40l_sim.commands.cli import main
from sn40l_sim.report.outputs import read_status
from sn40l_sim.serving import point as point_module
from sn40l_sim.study import invariants, runner

REAL = point_module.simulate_point


def broken_bytes(result):
    decode = result.decode
    tier_bytes = {**decode.tier_bytes, "hbm": decode.tier_bytes["hbm"] + 4096}
    link_bytes = {**decode.link_bytes, "tln": decode.link_bytes["tln"] + 4096}
    return dataclasses.replace(result, decode=dataclasses.replace(decode, tier_bytes=tier_bytes,
                                                                  link_bytes=link_bytes))


def broken_requests(result):
    result.log.requests.append(result.log.requests[0])    # one request served twice
    return result


def broken_memory(result):
    memory = result.memory
    first = memory.order[0]
    by_tier = {**memory.by_tier, first: {**memory.by_tier[first], "kv": memory.capacity[first]}}
    return dataclasses.replace(result, memory=dataclasses.replace(memory, by_tier=by_tier))


def broken_peak(result):
    decode = result.decode
    busy = {**decode.resource_busy_cycles, "compute": decode.cycles + 1}
    return dataclasses.replace(result, decode=dataclasses.replace(decode, resource_busy_cycles=busy))


def broken_utilisation(result):
    result.log.busy["decode"][0] = 10 * result.log.end_cycle   # a node busy ten times the run
    return result


def broken_finite(result):
    # a step of no known length: its breakdown would be written to the results as empty, as a figure
    # that does not exist
    return dataclasses.replace(result, decode=dataclasses.replace(result.decode, seconds=float("nan")))


FAULTS = {"bytes_conserved": broken_bytes, "requests_served_once": broken_requests,
          "memory_within_capacity": broken_memory, "units_within_peak": broken_peak,
          "utilisation_in_unit_interval": broken_utilisation, "finite_results": broken_finite}


def plain_experiment(tmp_path):
    sweep = write_experiment(tmp_path, "axes: {serving.seed: [1, 2]}\n", name="sweep.yaml")
    plain = tmp_path / "run.yaml"
    plain.write_text(sweep.read_text().split("sweep:\n")[0])
    return plain, sweep


def test_every_invariant_has_a_fault_here():
    assert sorted(FAULTS) == sorted(invariants.NAMES)


@pytest.mark.parametrize("name", list(FAULTS))
def test_a_broken_invariant_stops_the_run_with_exit_3(tmp_path, capsys, monkeypatch, name):
    path, _ = plain_experiment(tmp_path)
    monkeypatch.setattr(runner, "simulate_point", lambda *args, **options: FAULTS[name](REAL(*args, **options)))
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out), "--quiet"]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"error: invariant {name} violated at point full: ") and "a bug in the simulator" in err
    assert not (out / "results.json").exists() and read_status(out)["status"] == "failed"


def test_a_broken_invariant_stops_a_sweep_with_exit_3(tmp_path, capsys, monkeypatch):
    _, sweep = plain_experiment(tmp_path)
    monkeypatch.setattr(runner, "simulate_point", lambda *args, **options: broken_peak(REAL(*args, **options)))
    assert main(["sweep", str(sweep), "--out", str(tmp_path / "out"), "--quiet", "--jobs", "1"]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "invariant units_within_peak violated at point full[seed=1]" in err, err
    assert not list((tmp_path / "out" / "runs").glob("*.json"))     # a run that broke one is not kept


def test_records_list_the_invariants_checked(tmp_path, capsys):
    path, _ = plain_experiment(tmp_path)
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet", "--no-plot"]) == 0
    records = json.loads((tmp_path / "out" / "results.json").read_text())
    assert [r["invariants"] for r in records] == [list(invariants.NAMES)] * 2
    assert "invariants" not in (tmp_path / "out" / "results.csv").read_text().splitlines()[0]


def test_the_checks_on_hand_made_values():
    invariants.check_bytes({"hbm": 10, "ddr": 0}, [{"hbm": 4}, {"hbm": 6}], {"p2p_staged": 0, "tln": 10})
    with pytest.raises(invariants.InvariantError, match="hbm moved 10 B, less than its kernels' streams"):
        invariants.check_bytes({"hbm": 10}, [{"hbm": 11}], {})
    with pytest.raises(invariants.InvariantError, match="the TLN carried 9 B"):
        invariants.check_bytes({"hbm": 10}, [{"hbm": 10}], {"tln": 9})
    with pytest.raises(invariants.InvariantError, match="sent 5 B over P2P"):
        invariants.check_bytes({}, [], {"p2p": 4, "p2p_sent": 5})
    invariants.check_fractions({"utilisation": {"nodes": {"decode": [0.5, 1.0]}}, "prefill_kernel_share": {"a": 1.0}})
    with pytest.raises(invariants.InvariantError, match="prefill_kernel_share adds up to 0.9"):
        invariants.check_fractions({"prefill_kernel_share": {"a": 0.4, "b": 0.5}})
    with pytest.raises(invariants.InvariantError, match="kv_occupancy.peak_fraction is nan"):
        invariants.check_fractions({"kv_occupancy": {"peak_fraction": float("nan"), "mean_fraction": 0.1}})


def test_a_colocated_node_is_not_busy_longer_than_the_run_over_its_roles():
    # each role within the run, but prefill, configuration loads and decode never overlap on a node
    nodes = {"prefill": [], "link": [], "decode": [0.5, 0.5], "colocated_prefill": [0.3, 0.3],
             "graph_switch": [0.1, 0.2]}
    invariants.check_fractions({"utilisation": {"nodes": nodes}})
    nodes["graph_switch"][1] = 0.26
    with pytest.raises(invariants.InvariantError, match="co-located node 1 is busy 1.06"):
        invariants.check_fractions({"utilisation": {"nodes": nodes}})


def test_a_decode_step_holding_more_kv_than_its_slots_is_named_by_node_and_cycle():
    from types import SimpleNamespace

    from sn40l_sim.serving.serving_log import StepLog
    from sn40l_sim.serving.step_table import StepTable
    steps = StepTable([StepLog(0, 0, 10, 2, 2, 500), StepLog(1, 0, 12, 2, 2, 1001), StepLog(0, 10, 20, 3, 2, 10)])
    log = SimpleNamespace(setup=SimpleNamespace(kv_capacity_bytes=1000, slots=4), steps=steps)
    with pytest.raises(invariants.InvariantError, match="decode node 1 at cycle 12: 1001 B of KV"):
        invariants.check_memory([], log)
    steps = StepTable([StepLog(0, 0, 10, 2, 2, 500), StepLog(0, 10, 20, 3, 2, 10)])   # 3 active in 2 slots
    with pytest.raises(invariants.InvariantError, match="cycle 20: 10 B of KV for 3 active sequences in 2 slots"):
        invariants.check_memory([], SimpleNamespace(setup=log.setup, steps=steps))
    invariants.check_memory([], SimpleNamespace(setup=log.setup, steps=StepTable(steps[:1])))


def test_docs_robustness_lists_every_invariant_once():
    # the page's table names the invariants a record lists; one added or renamed in INVARIANTS
    # must reach it (docs/robustness.md, "Invariants")
    text = (Path(__file__).resolve().parents[2] / "docs" / "robustness.md").read_text(encoding="utf-8")
    section = text[text.index("## Invariants"):text.index("\n## ", text.index("## Invariants") + 1)]
    assert re.findall(r"(?m)^\| `(\w+)` \|", section) == list(invariants.INVARIANTS)
