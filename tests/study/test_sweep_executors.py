"""The local pool a sweep runs on (sn40l_sim/study/sweep/executors.py)."""
from __future__ import annotations

import pytest

from sn40l_sim.study.sweep import executors
from sn40l_sim.study.sweep.executors import SCHEDULER_ENV, open_executor


def test_more_jobs_than_cpus_run_one_process_per_cpu(monkeypatch):
    # --jobs 100000 on a sweep of 10,000 runs started a process per run, each importing the simulator
    monkeypatch.delenv(SCHEDULER_ENV, raising=False)
    monkeypatch.setattr(executors, "available_cpus", lambda: 2)
    with pytest.warns(UserWarning, match="--jobs 100000: this machine has 2 CPUs for this process; running 2 processes"):
        with open_executor(jobs=100_000, scheduler=None, runs=10_000) as (executor, window):
            assert executor._max_workers == 2 and window() == 4


def test_jobs_within_the_cpus_are_taken_as_given(monkeypatch, recwarn):
    monkeypatch.delenv(SCHEDULER_ENV, raising=False)
    monkeypatch.setattr(executors, "available_cpus", lambda: 8)
    with open_executor(jobs=3, scheduler=None, runs=10) as (executor, window):
        assert executor._max_workers == 3 and window() == 6
    assert not [w for w in recwarn if "--jobs" in str(w.message)]
