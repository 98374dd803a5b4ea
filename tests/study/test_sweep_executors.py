"""The local pool a sweep runs on (sn40l_sim/study/sweep/executors.py)."""
from __future__ import annotations

import json
import multiprocessing
import os
import signal

import pytest
from sweep_helpers import write_experiment

from sn40l_sim.commands.cli import main
from sn40l_sim.study.runner import simulate_assembly
from sn40l_sim.study.sweep import executors
from sn40l_sim.study.sweep.executors import SCHEDULER_ENV, open_executor
from sn40l_sim.study.sweep.run import WORKER_DIED


def test_more_jobs_than_cpus_run_one_process_per_cpu(monkeypatch):
    # --jobs 100000 on a sweep of 10,000 runs started a process per run, each importing the simulator
    monkeypatch.delenv(SCHEDULER_ENV, raising=False)
    monkeypatch.setattr(executors, "available_cpus", lambda: 2)
    with pytest.warns(UserWarning, match="--jobs 100000: this machine has 2 CPUs for this process; running 2 processes"):
        with open_executor(jobs=100_000, scheduler=None, runs=10_000) as (executor, window):
            assert executor.current._max_workers == 2 and window() == 4


def test_jobs_within_the_cpus_are_taken_as_given(monkeypatch, recwarn):
    monkeypatch.delenv(SCHEDULER_ENV, raising=False)
    monkeypatch.setattr(executors, "available_cpus", lambda: 8)
    with open_executor(jobs=3, scheduler=None, runs=10) as (executor, window):
        assert executor.current._max_workers == 3 and window() == 6
    assert not [w for w in recwarn if "--jobs" in str(w.message)]


@pytest.mark.skipif(multiprocessing.get_start_method() != "fork", reason="the workers inherit the stand-in by fork")
def test_a_worker_killed_outright_fails_the_runs_in_flight_and_the_others_still_run(tmp_path, capsys, monkeypatch):
    # a worker killed by the out-of-memory killer (or kill -9) broke the pool for good: the next run
    # submitted stopped the sweep with a BrokenProcessPool traceback, nothing written but runs/
    monkeypatch.delenv(SCHEDULER_ENV, raising=False)

    def killed_at_seed_3(assembly, only):
        if assembly.experiment.spec.serving.seed == 3:
            os.kill(os.getpid(), signal.SIGKILL)
        return simulate_assembly(assembly, only=only)

    monkeypatch.setattr("sn40l_sim.study.sweep.run.simulate_assembly", killed_at_seed_3)
    path = write_experiment(tmp_path, "axes:\n  serving.seed: [1, 2, 3, 4, 5, 6, 7, 8]\n")
    out = tmp_path / "out"
    assert main(["sweep", str(path), "--out", str(out), "--jobs", "2", "--quiet", "--no-plot"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "BrokenProcessPool" not in err, err
    failed = json.loads((out / "failures.json").read_text())
    assert {f["error"] for f in failed} == {WORKER_DIED}
    assert {"full[seed=3]", "snap[seed=3]"} <= {f["point"] for f in failed}
    records = json.loads((out / "results.json").read_text())
    # the runs after the lost ones ran on a new pool
    assert len(records) + len(failed) == 16 and {"full[seed=8]", "snap[seed=8]"} <= {r["name"] for r in records}
