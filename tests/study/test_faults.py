"""Faults: outputs that are whole or absent, checked before simulating, one run per folder, a status
marker; Ctrl-C and SIGTERM that stop a run or a sweep promptly with its workers, keep finished runs
and exit 130 / 143 with one line; no worker outliving a killed sweep.

The runs are the small sweep experiment of ``sweep_helpers`` (a run takes a fraction of a second).
"""
from __future__ import annotations

import concurrent.futures as cf
import gc
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from sweep_helpers import REPO, write_experiment

from sn40l_sim.commands import cli
from sn40l_sim.commands.cli import main
from sn40l_sim.errors import InputError
from sn40l_sim.report import outputs
from sn40l_sim.report.outputs import OutputFolder, read_status
from sn40l_sim.study.sweep.executors import stop_workers

SWEEP = "axes:\n  serving.seed: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20]\n"


def experiment(tmp_path: Path) -> Path:
    """The small experiment without its sweep section (a plain run of two points)."""
    path = write_experiment(tmp_path, "axes: {serving.seed: [1]}\n", name="sweep.yaml")
    plain = tmp_path / "run.yaml"
    plain.write_text(path.read_text().split("sweep:\n")[0])
    return plain


def one_line(capsys, status: int, argv: list[str]) -> str:
    assert main(argv) == status
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def instead_of_simulating(monkeypatch: pytest.MonkeyPatch, stand_in) -> None:
    """Replace simulate_assembly for ``run`` and for ``sweep``'s workers. The sweep module binds its
    own name at import: patched on the runner alone while a command imported it first, it kept the
    stand-in for the rest of the process, and a later test's sweep got None for every run."""
    monkeypatch.setattr("sn40l_sim.study.sweep.run.simulate_assembly", stand_in)
    monkeypatch.setattr("sn40l_sim.study.runner.simulate_assembly", stand_in)


def test_out_onto_a_file_or_an_unsafe_name_is_refused_before_simulating(tmp_path, capsys, monkeypatch):
    path = experiment(tmp_path)
    simulated = []
    instead_of_simulating(monkeypatch, lambda *a, **k: simulated.append(1))
    afile = tmp_path / "afile"
    afile.write_text("x")
    assert "--out: " in one_line(capsys, 2, ["run", str(path), "--out", str(afile), "--quiet"])
    assert "--trace: " in one_line(capsys, 2, ["run", str(path), "--out", str(tmp_path / "o"), "--trace",
                                               str(tmp_path), "--quiet"])
    assert "--trace: " in one_line(capsys, 2, ["run", str(path), "--out", str(tmp_path / "o"), "--trace",
                                               str(afile / "t.json"), "--quiet"])
    # a trace viewer opens a Chrome trace by its suffix
    assert "--trace: expected a .json file" in one_line(capsys, 2, ["run", str(path), "--out", str(tmp_path / "o"),
                                                                    "--trace", str(tmp_path / "t.txt"), "--quiet"])
    unsafe = tmp_path / "unsafe.yaml"
    unsafe.write_text(path.read_text().replace("name: small_sweep", "name: ../../escaped"))
    assert "name: expected a plain name" in one_line(capsys, 2, ["run", str(unsafe), "--quiet"])
    absolute = tmp_path / "absolute.yaml"
    absolute.write_text(path.read_text().replace("name: small_sweep", f"name: {tmp_path / 'x'}"))
    assert "name: expected a plain name" in one_line(capsys, 2, ["check", str(absolute)])
    assert simulated == []


def test_out_on_a_symbolic_link_to_nothing_says_so(tmp_path, capsys, monkeypatch):
    # mkdir of a dangling link said only "cannot write into L: File exists"
    link = tmp_path / "L"
    link.symlink_to(tmp_path / "gone" / "d")
    instead_of_simulating(monkeypatch, lambda *a, **k: pytest.fail("simulated"))
    err = one_line(capsys, 2, ["run", str(experiment(tmp_path)), "--out", str(link), "--quiet"])
    assert err == (f"error: --out: {link} is a symbolic link to the missing {tmp_path / 'gone' / 'd'}; expected a "
                   "folder of its own for the outputs (e.g. out/NAME)\n"), err


def test_out_at_the_file_system_root_or_in_the_package_is_refused_before_simulating(tmp_path, capsys, monkeypatch):
    # run as root, --out / wrote results.json, status.json and .lock into /, and --out sn40l_sim
    # wrote them among the package's modules (a sub-folder of the package was created first). The
    # root is checked through check_folder alone, so that a regression leaves nothing in /
    package = Path(outputs.__file__).resolve().parents[1]
    for root in ("/", str(tmp_path / ".." / ".." / ".." / ".." / ".." / ".." / "..")):
        with pytest.raises(InputError, match="is the root of the file system; expected a folder of its own"):
            outputs.check_folder(root, "--out")
    with pytest.raises(InputError, match="^--trace: cannot write /trace.json: / is the root of the file"):
        outputs.check_file("/trace.json", "--trace")
    path = experiment(tmp_path)
    simulated = []
    instead_of_simulating(monkeypatch, lambda *a, **k: simulated.append(1))
    before = sorted(p.name for p in package.iterdir())
    inside = package / "report" / f"out_{tmp_path.name}"   # a name of this test's own, removed if made
    try:
        for out in (package, inside):
            err = one_line(capsys, 2, ["run", str(path), "--out", str(out), "--quiet"])
            assert err == (f"error: --out: {out} is in the simulator's own package folder ({package}); expected a "
                           "folder of its own for the outputs (e.g. out/NAME)\n"), err
        err = one_line(capsys, 2, ["sweep", str(write_experiment(tmp_path, SWEEP, name="sweep.yaml")), "--out",
                                   str(inside), "--quiet"])
        assert "is in the simulator's own package folder" in err, err
        assert simulated == [] and sorted(p.name for p in package.iterdir()) == before and not inside.exists()
    finally:
        for name in (".lock", "status.json", "results.json", "results.csv"):
            if name not in before:
                (package / name).unlink(missing_ok=True)
        if inside.is_dir():
            shutil.rmtree(inside)


@pytest.mark.parametrize("command, entry, is_file", [
    ("run", "results.json", False), ("run", "status.json", False), ("run", ".lock", False),
    ("sweep", "failures.json", False), ("sweep", "pareto.json", False), ("sweep", "runs", True),
])
def test_a_folder_where_an_output_file_goes_is_refused_before_simulating(tmp_path, capsys, command, entry, is_file):
    # the run simulated, then stopped in an IsADirectoryError (or FileExistsError) traceback
    path = experiment(tmp_path) if command == "run" else write_experiment(tmp_path, SWEEP, name="sweep.yaml")
    out = tmp_path / "out"
    out.mkdir()
    if is_file:
        (out / entry).write_text("x")
    else:
        (out / entry).mkdir()
    err = one_line(capsys, 2, [command, str(path), "--out", str(out), "--quiet"])
    assert f"--out: {out / entry} is a {'file' if is_file else 'folder'}, where the run " in err, err
    assert read_status(out) is None and not (out / "results.json").is_file()


def test_an_empty_output_path_is_refused_not_taken_for_the_current_folder(tmp_path, capsys, monkeypatch):
    # Path("") is ".": an unset shell variable (--out "$OUT") wrote results, status.json and a
    # sweep's runs/ into the current folder
    path = experiment(tmp_path)
    monkeypatch.chdir(tmp_path)
    for argv in (["run", str(path), "--out", "", "--quiet"], ["sweep", str(path), "--out", " ", "--quiet"],
                 ["run", str(path), "--out", str(tmp_path / "o"), "--trace", "", "--quiet"],
                 ["plot", str(path), "--x", "a", "--y", "b", "--out", ""],
                 ["map", str(path), "--phase", "decode", "--plot", ""]):
        err = one_line(capsys, 2, argv)
        assert "expected a path, got an empty one" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.yaml", "sweep.yaml"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_out_is_refused(tmp_path, capsys):  # pragma: no cover - CI does not run as root
    path = experiment(tmp_path)
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    assert "cannot write into" in one_line(capsys, 2, ["run", str(path), "--out", str(locked / "o"), "--quiet"])


def test_a_run_writes_whole_files_and_a_complete_status(tmp_path, capsys):
    path = experiment(tmp_path)
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out), "--quiet", "--trace", str(tmp_path / "t" / "trace.json")]) == 0
    status = read_status(out)
    assert status["status"] == "complete" and status["outputs"] == ["results.csv", "results.json", "throughput.png"]
    assert sorted(p.name for p in out.iterdir()) == [".lock", "results.csv", "results.json", "status.json",
                                                    "throughput.png"]
    assert json.loads((tmp_path / "t" / "trace.json").read_text())["traceEvents"]


def test_a_trace_in_the_output_folder_is_an_output_and_goes_with_its_run(tmp_path, capsys):
    # a run with --trace OUT/trace.json, then one without: the first run's trace stayed beside the
    # second's results, and its point names (full, snapstream) could not tell the two runs apart
    path = experiment(tmp_path)
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out), "--quiet", "--no-plot", "--trace", str(out / "trace.json")]) == 0
    assert read_status(out)["outputs"] == ["results.csv", "results.json", "trace.json"]
    assert main(["run", str(path), "--out", str(out), "--quiet", "--no-plot"]) == 0
    assert sorted(p.name for p in out.iterdir()) == [".lock", "results.csv", "results.json", "status.json"]


@pytest.mark.parametrize("name", ["results.json", "status.json"])
def test_a_trace_named_as_one_of_the_run_s_own_files_is_refused(tmp_path, capsys, name):
    # --trace OUT/results.json wrote the trace over the results it had just written, exit 0
    path = experiment(tmp_path)
    out = tmp_path / "out"
    err = one_line(capsys, 2, ["run", str(path), "--out", str(out), "--quiet", "--trace", str(out / name)])
    assert err == f"error: --trace: {out / name} is where run writes its own {name}; expected another file name " \
        "(e.g. trace.json)\n"
    assert not (out / "results.json").exists()


def test_a_kill_while_writing_leaves_no_truncated_or_stale_file(tmp_path, capsys, monkeypatch):
    """A previous run's files are in the folder; the new run is killed (Ctrl-C) once results.json is
    written and while results.csv is being written: no half file, nothing of the previous run beside
    the new results.json, and the status says interrupted."""
    path = experiment(tmp_path)
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out), "--quiet"]) == 0
    old_json = (out / "results.json").read_text()
    real_replace = outputs.os.replace

    def killed_at_csv(source, target):
        if str(target).endswith("results.csv"):
            Path(source).write_text("arrival")    # the half-written temporary file
            raise KeyboardInterrupt
        return real_replace(source, target)

    monkeypatch.setattr(outputs.os, "replace", killed_at_csv)
    assert main(["run", str(path), "--out", str(out), "--quiet"]) == 130
    assert "interrupted (Ctrl-C)" in capsys.readouterr().err
    names = sorted(p.name for p in out.iterdir())
    assert names == [".lock", "results.json", "status.json"], names      # no .tmp, no old results.csv / png
    json.loads((out / "results.json").read_text())                        # whole
    assert len((out / "results.json").read_text()) == len(old_json)
    assert read_status(out)["status"] == "interrupted" and read_status(out)["outputs"] == ["results.json"]


def test_a_second_run_into_the_same_folder_is_refused(tmp_path, capsys):
    path = experiment(tmp_path)
    out = tmp_path / "out"
    with OutputFolder(out, command="run another.yaml", outputs=("results.json",)):
        err = one_line(capsys, 2, ["run", str(path), "--out", str(out), "--quiet"])
        assert "another run is writing into" in err and f"(pid {os.getpid()}: run another.yaml)" in err
        sweep = write_experiment(tmp_path, SWEEP)
        assert "another run is writing into" in one_line(capsys, 2, ["sweep", str(sweep), "--out", str(out),
                                                                     "--quiet", "--jobs", "1"])
    assert main(["run", str(path), "--out", str(out), "--quiet", "--no-plot"]) == 0   # free again once the first is done


def test_a_trace_written_over_a_previous_output_of_the_folder_is_refused_not_removed(tmp_path, capsys):
    # the previous run's requests.csv rewritten as a trace and served into the same folder: the new
    # run removed it as a stale output, then stopped at 'trace file not found', the user's file gone
    out = tmp_path / "out"
    trace = out / "requests.csv"
    plain = experiment(tmp_path)
    assert main(["run", str(plain), "--out", str(out), "--requests", str(trace), "--quiet", "--no-plot"]) == 0
    capsys.readouterr()
    trace.write_text("arrival_s,prompt_len,output_len\n0.0,4096,2\n0.5,4096,2\n")
    served = plain.read_text().replace("{kind: fixed, count: batch, output_len: 2}", f"{{kind: trace, path: {trace}}}")
    replay = tmp_path / "replay.yaml"
    replay.write_text(served)
    err = one_line(capsys, 2, ["run", str(replay), "--out", str(out), "--quiet", "--no-plot"])
    assert f"--out: {trace} is the experiment's workload.path, which the run reads" in err and trace.is_file()
    swept = tmp_path / "replay_sweep.yaml"
    swept.write_text(served + "sweep:\n  axes: {serving.seed: [1, 2]}\n")
    err = one_line(capsys, 2, ["sweep", str(swept), "--out", str(out), "--quiet", "--no-plot", "--jobs", "1"])
    assert "which the run reads" in err and trace.is_file()


@pytest.mark.parametrize("where", ["--out", "--out inside", "--trace", "--requests", "experiment", "check"])
def test_a_loop_of_symbolic_links_is_one_line_not_a_traceback(tmp_path, capsys, where):
    # Python 3.11's Path.resolve() raises RuntimeError at a loop: a 30-line traceback, exit status 1
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    looped = tmp_path / "loop.yaml"
    looped.symlink_to(looped)
    plain, out = str(experiment(tmp_path)), str(tmp_path / "out")
    argv = {"--out": ["run", plain, "--out", str(loop)], "--out inside": ["run", plain, "--out", str(loop / "x")],
            "--trace": ["run", plain, "--out", out, "--trace", str(loop / "t.json")],
            "--requests": ["run", plain, "--out", out, "--requests", str(loop / "r.csv")],
            "experiment": ["run", str(looped), "--out", out], "check": ["check", str(looped)]}[where]
    err = one_line(capsys, 2, [*argv, "--quiet"] if argv[0] == "run" else argv)
    assert "a loop of symbolic links" in err and str(tmp_path) in err, err


def test_sigterm_stops_a_run_with_143_and_marks_it(tmp_path, capsys, monkeypatch):
    path = experiment(tmp_path)
    out = tmp_path / "out"

    def slow(*args, **kwargs):
        threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM)).start()
        time.sleep(30)

    instead_of_simulating(monkeypatch, slow)
    start = time.perf_counter()
    assert one_line(capsys, 143, ["run", str(path), "--out", str(out), "--quiet"]).startswith("terminated (SIGTERM)")
    assert time.perf_counter() - start < 10
    assert read_status(out)["status"] == "interrupted"
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL    # the CLI's handler is gone


def _stopped_while_loading(monkeypatch, stop) -> None:
    """``stop()`` while the CLI imports the mapper (the libraries' first second of a run)."""
    real = cli.importlib.import_module

    def loading(name, *args):
        if name == "sn40l_sim.mapper.graph":
            stop()
        return real(name, *args)

    monkeypatch.setattr(cli.importlib, "import_module", loading)


def test_ctrl_c_while_the_libraries_load_is_one_line_and_130(tmp_path, capsys, monkeypatch):
    # a Ctrl-C in the first second of a run printed a 30-line KeyboardInterrupt traceback
    def ctrl_c():
        raise KeyboardInterrupt

    _stopped_while_loading(monkeypatch, ctrl_c)
    out = tmp_path / "out"
    try:
        err = one_line(capsys, 130, ["run", str(experiment(tmp_path)), "--out", str(out), "--quiet"])
    except KeyboardInterrupt:
        pytest.fail("the Ctrl-C left main as a KeyboardInterrupt: a traceback")
    assert err.startswith("interrupted (Ctrl-C): stopped") and not out.exists()


def test_sigterm_while_the_libraries_load_is_one_line_and_143(tmp_path, capsys, monkeypatch):
    # SIGTERM then met Python's default action: the process ended with no line
    def sigterm():
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL, "SIGTERM would end the process unsaid"
        signal.raise_signal(signal.SIGTERM)

    _stopped_while_loading(monkeypatch, sigterm)
    out = tmp_path / "out"
    assert one_line(capsys, 143, ["run", str(experiment(tmp_path)), "--out", str(out), "--quiet"]).startswith(
        "terminated (SIGTERM)")
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start_sweep(tmp_path: Path) -> tuple[subprocess.Popen, Path, list[int]]:
    """A two-worker sweep in its own process group, once one run is stored; its worker pids."""
    sweep = write_experiment(tmp_path, SWEEP)
    out = tmp_path / "out"
    err = open(tmp_path / "stderr.txt", "wb")  # noqa: SIM115 - a file, not a pipe a stray worker could hold
    proc = subprocess.Popen([sys.executable, "-m", "sn40l_sim", "sweep", str(sweep), "--out", str(out), "--jobs", "2",
                             "--quiet"], cwd=REPO, stdout=subprocess.DEVNULL,
                            # no disk cache: its runs must still be going when the test interrupts them
                            env=dict(os.environ, PYTHONPATH=str(REPO), SN40L_SIM_CACHE="off"),
                            # Ctrl-C as in a terminal, even when pytest itself was started with SIGINT
                            # ignored (a background job of a shell without job control): Python keeps
                            # an inherited SIG_IGN, and the sweep would then run to its end
                            preexec_fn=_default_sigint,
                            stderr=err, start_new_session=True)
    runs = out / "runs"
    deadline = time.monotonic() + 120
    while not (runs.is_dir() and any(p.suffix == ".json" and not p.name.startswith(".") for p in runs.iterdir())):
        assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "stderr.txt").read_text()
        time.sleep(0.1)
    workers = [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
    assert len(workers) == 2
    return proc, out, workers


def _gone(pids: list[int], within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        if not alive:
            return True
        time.sleep(0.1)
    for pid in alive:  # do not leave them behind if the test fails
        os.kill(pid, signal.SIGKILL)
    return False


def test_ctrl_c_stops_a_sweep_and_its_workers_and_keeps_finished_runs(tmp_path):
    proc, out, workers = _start_sweep(tmp_path)
    start = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)          # what Ctrl-C in a terminal does: the whole group
    assert proc.wait(timeout=30) == 130
    assert time.monotonic() - start < 10
    err = (tmp_path / "stderr.txt").read_text()
    assert err.count("\n") == 1 and err.startswith("interrupted (Ctrl-C): stopped; ") and "Traceback" not in err, err
    assert _gone(workers, 5)
    kept = [p for p in (out / "runs").iterdir() if p.suffix == ".json" and not p.name.startswith(".")]
    assert kept and f"kept in {out / 'runs'}" in err
    assert read_status(out)["status"] == "interrupted"


def test_no_worker_outlives_a_killed_sweep(tmp_path):
    proc, _, workers = _start_sweep(tmp_path)
    os.kill(proc.pid, signal.SIGKILL)           # no handler runs: the workers must notice alone
    proc.wait(timeout=10)
    assert _gone(workers, 10)


def test_sigterm_stops_a_sweep_and_its_workers(tmp_path):
    proc, out, workers = _start_sweep(tmp_path)
    start = time.monotonic()
    os.kill(proc.pid, signal.SIGTERM)           # to the main process only, as a job scheduler sends it
    assert proc.wait(timeout=30) == 143
    assert time.monotonic() - start < 10
    err = (tmp_path / "stderr.txt").read_text()
    assert err.count("\n") == 1 and err.startswith("terminated (SIGTERM)") and "Traceback" not in err, err
    assert _gone(workers, 5)
    assert read_status(out)["status"] == "interrupted"


def test_a_command_collects_garbage_less_often_and_restores_the_callers_thresholds(tmp_path, capsys, monkeypatch):
    seen = []
    real = cli._sigterm_raises

    def spy():
        seen.append(gc.get_threshold())
        return real()

    monkeypatch.setattr(cli, "_sigterm_raises", spy)
    caller = (700, 10, 10)
    before = gc.get_threshold()
    gc.set_threshold(*caller)
    try:
        assert main(["check", str(REPO / "experiments" / "deepseek_tp16.yaml")]) == 0
        assert main(["run", str(tmp_path / "missing.yaml")]) == 2   # an error path restores them too
        assert gc.get_threshold() == caller
    finally:
        gc.set_threshold(*before)
    assert seen == [cli.GC_THRESHOLDS, cli.GC_THRESHOLDS]


def test_stopping_a_pool_leaves_no_management_thread_for_the_exit_to_wake():
    # at interpreter exit concurrent.futures wakes each pool's management thread; one still closing
    # its pipe then (Python 3.11) printed an "OSError: Bad file descriptor" traceback under the
    # one-line message of an interrupted sweep, so stop_workers waits for the thread to end
    pool = cf.ProcessPoolExecutor(max_workers=2)
    futures = [pool.submit(time.sleep, 30) for _ in range(4)]
    manager = pool._executor_manager_thread
    assert manager.is_alive()
    start = time.monotonic()
    stop_workers(pool)
    assert not manager.is_alive() and time.monotonic() - start < 10
    assert all(f.done() for f in futures)


@pytest.mark.parametrize("argv", [["golden", "extra"], ["validate", "--nope"], ["check", "x.yaml", "--bogus"]])
def test_an_unknown_argument_is_named_with_the_commands_own_usage(capsys, argv):
    with pytest.raises(SystemExit) as info:
        main(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2
    assert f"usage: python -m sn40l_sim {argv[0]} " in err and "unrecognized arguments" in err


@pytest.mark.parametrize("backend", ["bogus", "TkAgg"])
def test_a_run_draws_its_plot_whatever_mplbackend_says(tmp_path, backend):
    # the commands draw files on the Agg canvas; MPLBACKEND=bogus made `import matplotlib` raise after
    # the whole simulation (a traceback, exit 1), and TkAgg without a display must not matter either
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    done = subprocess.run([sys.executable, "-m", "sn40l_sim", "run", str(experiment(tmp_path)), "--out",
                           str(tmp_path / "out")], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env=dict(env, PYTHONPATH=str(REPO), MPLBACKEND=backend))
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert (tmp_path / "out" / "throughput.png").read_bytes()[:4] == b"\x89PNG"


def test_the_cli_puts_mplbackend_back_for_its_caller(tmp_path, monkeypatch):
    # a notebook or a test calling main() keeps its own backend setting
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    seen = []
    monkeypatch.delitem(sys.modules, "matplotlib", raising=False)   # as in a process yet to plot
    monkeypatch.setattr("sn40l_sim.commands.check.run", lambda args: seen.append(os.environ["MPLBACKEND"]) or 0)
    assert main(["check", str(experiment(tmp_path))]) == 0
    assert seen == ["agg"] and os.environ["MPLBACKEND"] == "module://matplotlib_inline.backend_inline"
