"""The benchmarks refuse a file of the wrong kind in one line with exit 2 before starting a child
(benchmarks/measure.py, ``loaded``), as they refuse a missing one: a child's failure is a traceback
in the parent."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("args, option", [
    (["bench_step.py", "--hardware", "hw_configs/sn40l.yaml"], "--hardware"),        # a socket file
    (["bench_step.py", "--hardware", "hw_configs/sn40l_node8.yaml"], "--hardware"),  # the cases need 16 sockets
    (["bench_step.py", "--model", "graphs/kernels_llama.yaml"], "--model"),          # a kernel template
    (["bench_run.py", "hw_configs/sn40l.yaml"], "experiments"),
    (["bench_build.py", "graphs/llama3_1_8b.yaml"], "experiment"),
])
def test_a_file_of_the_wrong_kind_is_one_line_and_exit_2(args, option):
    env = dict(os.environ, PYTHONPATH=str(REPO), SN40L_SIM_CACHE="off")
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / args[0]), *args[1:]], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-500:]
    assert "Traceback" not in done.stderr and f"argument {option}" in done.stderr


def test_bench_sockets_reports_a_refused_run_instead_of_its_seconds():
    # DeepSeek-R1 does not fit 4 sockets: the run exits 2 in a fraction of a second, which was
    # printed as the case's CPU seconds (and on 64 sockets would have met the goal)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_sockets.py"), "--sockets", "4"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stdout
    assert "exited 2" in done.stderr and "Traceback" not in done.stderr
    assert len(done.stdout.strip().splitlines()) == 1   # the header only, no row of a run that did not run


def test_bench_sweep_does_not_time_a_sweep_whose_runs_failed(tmp_path):
    # from --points 22 the zipped batches reach 1,024 sequences of 4K tokens, which do not fit: the
    # failed runs took a fraction of a second each and were counted in points/s
    sys.path.insert(0, str(REPO / "benchmarks"))
    import bench_sweep
    path = bench_sweep.write_sweep(tmp_path, 2)
    path.write_text(path.read_text().replace("serving.batch: [1, 1]", "serving.batch: [4096, 4096]"))
    with pytest.raises(bench_sweep.SweepFailed, match="of the sweep's runs failed"):
        bench_sweep.best_seconds(path, 1, None, 1)


def test_run_all_says_when_a_benchmark_it_is_asked_for_has_no_figures(capsys):
    # bench_sweep prints its own table and has no goal_figures: --only sweep printed an empty table
    sys.path.insert(0, str(REPO / "benchmarks"))
    import run_all
    assert run_all.main(["--only", "sweep"]) == 0
    assert "python benchmarks/bench_sweep.py prints its own" in capsys.readouterr().out


def test_a_folder_given_for_a_file_is_called_a_folder():
    sys.path.insert(0, str(REPO / "benchmarks"))
    import argparse

    import measure
    with pytest.raises(argparse.ArgumentTypeError, match=r"\(a folder\)"):
        measure.existing_file("experiments")
    with pytest.raises(argparse.ArgumentTypeError, match=r"\(no such file\)"):
        measure.existing_file("experiments/nope.yaml")
