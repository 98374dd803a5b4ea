"""Sweeps on Dask distributed (the optional cluster extra): a two-worker LocalCluster writes the
bytes a two-process pool writes, and the progress bar counts the runs either way; without the extra,
or with a scheduler that does not answer, ``--scheduler`` is one line on stderr and exit status 2; a
worker running other simulator code gives no record."""
from __future__ import annotations

import sys

import pytest
from sweep_helpers import write_experiment

from sn40l_sim.commands.cli import main
from sn40l_sim.study.sweep import executors
from sn40l_sim.study.sweep import run as run_module
from sn40l_sim.study.sweep.plan import installed

#: 3 sweep points x 2 policies; full at batch 2048 does not fit (exit status 1)
SWEEP = "axes:\n  serving.batch: [2, 2048, 8]\n"
OUTPUTS = ("results.json", "results.csv", "failures.json")


def test_without_the_extra_scheduler_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # `import distributed` now fails
    path = write_experiment(tmp_path, SWEEP)
    assert main(["sweep", str(path), "--scheduler", "local", "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.splitlines() == [
        'error: --scheduler: running on a Dask scheduler needs the cluster extra, which is not installed: '
        'pip install -e ".[cluster]" (or pip install distributed)']
    monkeypatch.setenv(executors.SCHEDULER_ENV, "tcp://127.0.0.1:8786")
    assert main(["sweep", str(path), "--out", str(tmp_path / "out")]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("error: SN40L_SIM_SCHEDULER: running on a Dask scheduler needs the cluster extra")
    assert not (tmp_path / "out").exists()  # nothing ran


def test_a_scheduler_that_does_not_answer_is_one_line(tmp_path, capsys, monkeypatch):
    pytest.importorskip("distributed", reason="Dask distributed is not installed (pip install -e '.[cluster]')")
    monkeypatch.setattr(executors, "CONNECT_TIMEOUT_S", 0.2)
    path = write_experiment(tmp_path, SWEEP)
    # port 1 on the loopback: nothing listens there
    assert main(["sweep", str(path), "--scheduler", "tcp://127.0.0.1:1", "--out", str(tmp_path / "out"),
                 "--quiet"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("error: --scheduler: cannot reach the Dask scheduler at 'tcp://127.0.0.1:1'")


def shown_on_a_terminal(err: str) -> list[str]:
    """The non-blank lines a terminal shows for ``err``: each line as its last carriage return left it
    (tqdm redraws and clears its bar with ``\\r``)."""
    return [shown for line in err.split("\n") if (shown := line.rsplit("\r", 1)[-1]).strip()]


def test_a_scheduler_that_does_not_answer_leaves_one_line_under_the_progress_bar(tmp_path, capsys, monkeypatch):
    # the bar is drawn while the scheduler is asked (up to 20 s); when it does not answer the bar is
    # cleared, so the error stands alone, as docs/distributed.md promises
    pytest.importorskip("distributed", reason="Dask distributed is not installed (pip install -e '.[cluster]')")
    monkeypatch.setattr(executors, "CONNECT_TIMEOUT_S", 0.2)
    path = write_experiment(tmp_path, SWEEP)
    assert main(["sweep", str(path), "--scheduler", "tcp://127.0.0.1:1", "--out", str(tmp_path / "out")]) == 2
    (line,) = shown_on_a_terminal(capsys.readouterr().err)
    assert line.startswith("error: --scheduler: cannot reach the Dask scheduler at 'tcp://127.0.0.1:1'")


# a port no socket can have was 20 s of connection attempts before the line
@pytest.mark.parametrize("scheduler", ["bogus", "tcp://host", "foo://host:8786", "tcp://127.0.0.1:99999",
                                       "tcp://127.0.0.1:0"])
def test_a_scheduler_that_is_no_address_is_refused_before_anything_starts(tmp_path, capsys, monkeypatch, scheduler):
    pytest.importorskip("distributed", reason="Dask distributed is not installed (pip install -e '.[cluster]')")
    path = write_experiment(tmp_path, SWEEP)
    # progress on: no bar is drawn, no output folder made, before the one line
    assert main(["sweep", str(path), "--scheduler", scheduler, "--out", str(tmp_path / "out")]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: --scheduler: expected local or a Dask scheduler address such as "
                           f"tcp://host:8786, got {scheduler!r}")
    monkeypatch.setenv(executors.SCHEDULER_ENV, scheduler)
    assert main(["sweep", str(path), "--out", str(tmp_path / "out")]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("error: SN40L_SIM_SCHEDULER: expected local or a Dask scheduler address")
    assert not (tmp_path / "out").exists()


def test_local_cluster_writes_the_bytes_of_the_process_pool(tmp_path, capsys):
    pytest.importorskip("distributed", reason="Dask distributed is not installed (pip install -e '.[cluster]')")
    path = write_experiment(tmp_path, SWEEP)
    assert main(["sweep", str(path), "--out", str(tmp_path / "pool"), "--jobs", "2"]) == 1
    pool = capsys.readouterr()
    assert main(["sweep", str(path), "--out", str(tmp_path / "dask"), "--jobs", "2", "--scheduler", "local"]) == 1
    dask = capsys.readouterr()
    for name in OUTPUTS:
        assert (tmp_path / "pool" / name).read_bytes() == (tmp_path / "dask" / name).read_bytes(), name
    assert "5 of 6 runs gave a record" in dask.out and "on Dask (local)" in dask.out
    # the bar counted every run as it came back, from the processes and from the cluster's workers
    for err in (pool.err, dask.err):
        assert "6/6" in err and "point full[batch=2048] did not fit (infeasible)" in err


def test_a_worker_with_other_code_gives_no_record(tmp_path, monkeypatch):
    # a remote worker with another sn40l_sim installed reports another code digest with its outcome
    real = run_module._task
    monkeypatch.setattr(run_module, "_task", lambda run: (*real(run)[:2], "another version", []))
    records = run_module.run_sweep(write_experiment(tmp_path, "axes:\n  serving.batch: [2]\n"), tmp_path / "out",
                                   jobs=1, progress=False)
    assert len(records) == 0 and [e for _, e in records.failures] == [run_module.OTHER_CODE] * 2
    assert list((tmp_path / "out" / "runs").glob("*.json")) == []  # not kept: a resume runs them again


def test_a_worker_with_other_libraries_gives_no_record(tmp_path, monkeypatch):
    # a worker with the same sn40l_sim but another numpy computed records that the main process would
    # store under its own libraries' key (the run key holds them), mixing two installations
    real, ours = run_module._task, installed()

    def worker_with_another_numpy(run):
        # the worker's own libraries, seen only while it runs the task
        monkeypatch.setattr(run_module, "installed", lambda: ours.replace("numpy==", "numpy==0.0+"), raising=False)
        try:
            return real(run)
        finally:
            monkeypatch.setattr(run_module, "installed", installed, raising=False)

    monkeypatch.setattr(run_module, "_task", worker_with_another_numpy)
    records = run_module.run_sweep(write_experiment(tmp_path, "axes:\n  serving.batch: [2]\n"), tmp_path / "out",
                                   jobs=1, progress=False)
    assert len(records) == 0 and [e for _, e in records.failures] == [run_module.OTHER_CODE] * 2
    assert "other sn40l_sim code or libraries" in run_module.OTHER_CODE


def test_a_scheduler_lost_mid_sweep_is_one_line_naming_the_runs_kept(tmp_path, capsys, monkeypatch):
    # a scheduler stopped (or crashed) while a sweep ran on it was a page of Dask's client traceback,
    # exit status 1; it is one line naming it and the runs kept, and --resume finishes the sweep
    distributed = pytest.importorskip("distributed", reason="Dask distributed is not installed "
                                                            "(pip install -e '.[cluster]')")
    path = write_experiment(tmp_path, "axes:\n  serving.batch: [1, 2, 4]\n")
    out = tmp_path / "out"
    # a real scheduler with one in-process worker thread, closed as the first run is stored
    cluster = distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None,
                                       protocol="tcp", host="127.0.0.1")
    address = cluster.scheduler_address
    save = run_module.RunStore.save

    def save_then_lose_the_scheduler(self, *args):
        save(self, *args)
        if not cluster.status.name == "closed":
            cluster.close()

    monkeypatch.setattr(run_module.RunStore, "save", save_then_lose_the_scheduler)
    monkeypatch.setattr(executors, "CONNECT_TIMEOUT_S", 2)   # the client's reconnection attempts, as at the start
    try:
        status = main(["sweep", str(path), "--scheduler", address, "--out", str(out)])
    finally:
        cluster.close()
    err = capsys.readouterr().err
    (line,) = shown_on_a_terminal(err)
    assert "Traceback" not in err and status == 2, err
    kept = len(list((out / "runs").glob("*.json")))
    assert 1 <= kept < 6
    assert line.startswith(f"error: --scheduler: lost the Dask scheduler at {address!r} mid-sweep (")
    assert line.endswith(f"; {kept} of 6 run(s) had finished, kept in {out / 'runs'} (resume with --resume)")
    assert '"status": "failed"' in (out / "status.json").read_text()
    monkeypatch.undo()
    # the rest on this machine: the results of an uninterrupted sweep
    assert main(["sweep", str(path), "--out", str(out), "--resume", "--jobs", "1", "--quiet"]) == 0
    assert f"resumed: {kept} run(s) were already done" in capsys.readouterr().out
    assert main(["sweep", str(path), "--out", str(tmp_path / "whole"), "--jobs", "1", "--quiet"]) == 0
    for name in OUTPUTS:
        assert (out / name).read_bytes() == (tmp_path / "whole" / name).read_bytes(), name


def test_a_scheduler_without_workers_is_said_not_left_as_a_still_bar(tmp_path):
    # a scheduler with no worker left the bar at 0% with no word: the sweep waits (workers may
    # join), and says so once, with the command that starts one
    distributed = pytest.importorskip("distributed", reason="Dask distributed is not installed "
                                                            "(pip install -e '.[cluster]')")
    said: list[str] = []
    with distributed.LocalCluster(n_workers=0, threads_per_worker=1, processes=False, dashboard_address=None, protocol="tcp",
                                  host="127.0.0.1") as cluster:
        address = cluster.scheduler_address
        with executors.open_executor(jobs=None, scheduler=address, runs=4, say=said.append) as (_, window):
            assert window() == 2
        assert said == [f"warning: --scheduler: the Dask scheduler at {address!r} has no worker yet: the sweep waits "
                        f"for one to join (dask worker {address} --nthreads 1; docs/distributed.md)"]
        cluster.scale(1)
        cluster.wait_for_workers(1)
        said.clear()
        with executors.open_executor(jobs=None, scheduler=address, runs=4, say=said.append) as (_, window):
            assert window() == 2
        assert said == []
