"""Resumable sweeps: a sweep stopped after some runs and resumed writes the bytes of one that was
never stopped and runs only what was missing; runs are matched by what they simulate (not their
place in the sweep); each run's file is written whole or not at all; a sweep killed outright (SIGKILL,
workers and all) resumes to the same bytes too. (The sweeps here draw no
pareto.png: it is drawn from the records compared, and test_sweep.py looks at it.)"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from importlib import metadata
from pathlib import Path

import pytest
from sweep_helpers import REPO, write_experiment

from sn40l_sim.commands.cli import main
from sn40l_sim.errors import InputError
from sn40l_sim.kvcache import POLICIES
from sn40l_sim.report.outputs import read_status
from sn40l_sim.study import plugins
from sn40l_sim.study.sweep import run as run_module
from sn40l_sim.study.sweep.plan import installed
from sn40l_sim.study.sweep.run import run_sweep
from sn40l_sim.study.sweep.store import Outcome, RunStore, content_digest

#: 3 sweep points x 2 policies (full at batch 2048 fails: a stored failure), with a Pareto front
SWEEP = "axes:\n  serving.batch: [2, 2048, 8]\nobjectives: {decode_tokens_per_s: max, tpot_s: min}\n"
OUTPUTS = ("results.json", "results.csv", "failures.json", "pareto.json", "pareto.csv")


@pytest.fixture
def simulated(monkeypatch):
    """The batch of every run simulated in this process from now on."""
    batches: list[int] = []
    real = run_module.simulate_assembly

    def counting(asm, **kwargs):
        batches.append(asm.experiment.spec.serving.batch)
        return real(asm, **kwargs)

    monkeypatch.setattr(run_module, "simulate_assembly", counting)
    return batches


def stop_after(monkeypatch, count: int) -> None:
    """Make the sweep stop (as Ctrl-C or a kill would) right after its ``count``-th run is stored."""
    real, stored = RunStore.save, []

    def save_then_stop(self, key, name, outcome):
        real(self, key, name, outcome)
        stored.append(name)
        if len(stored) == count:
            raise KeyboardInterrupt

    monkeypatch.setattr(RunStore, "save", save_then_stop)


@pytest.fixture(scope="module")
def never_stopped(tmp_path_factory) -> tuple[Path, Path, int]:
    """:data:`SWEEP`'s experiment, the folder of its sweep run through once (in this process) and its
    runs: what the stopped sweeps of every job count below must resume to, so it is swept only once."""
    folder = tmp_path_factory.mktemp("never_stopped")
    path = write_experiment(folder, SWEEP)
    whole = run_sweep(path, folder / "whole", jobs=1, progress=False, plots=False)
    return path, folder / "whole", whole.total


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_stopped_sweep_resumes_to_the_same_bytes(tmp_path, monkeypatch, jobs, never_stopped):
    path, whole, total = never_stopped
    with monkeypatch.context() as patch:
        stop_after(patch, 3)
        with pytest.raises(KeyboardInterrupt) as stopped:
            run_sweep(path, tmp_path / "cut", jobs=jobs, progress=False, plots=False)
    runs = tmp_path / "cut" / "runs"
    # the line counts the runs kept, the third (stored as the interrupt came) among them: it said 2
    assert stopped.value.detail == f"3 of 6 run(s) had finished, kept in {runs} (resume with --resume)"
    assert len(list(runs.glob("*.json"))) == 3 and not (tmp_path / "cut" / "results.json").exists()
    (runs / ".deadbeef.tmp").write_text('{"format": 1, "rec')  # a write a kill cut short: ignored
    resumed = run_sweep(path, tmp_path / "cut", jobs=jobs, progress=False, resume=True, plots=False)
    assert resumed.resumed == 3 and len(list(runs.glob("*.json"))) == total == 6
    for name in OUTPUTS:
        assert (tmp_path / "cut" / name).read_bytes() == (whole / name).read_bytes(), name


def test_a_sweep_stopped_before_any_run_finished_says_nothing_was_kept(tmp_path, monkeypatch):
    # it said "0 of 6 run(s) had finished, kept in OUT/runs", a folder that did not exist
    path = write_experiment(tmp_path, SWEEP)

    def stopped(*_):
        raise KeyboardInterrupt
        yield

    monkeypatch.setattr(run_module, "execute", stopped)
    with pytest.raises(KeyboardInterrupt) as caught:
        run_sweep(path, tmp_path / "cut", jobs=1, progress=False, plots=False)
    assert caught.value.detail == "none of the 6 run(s) had finished; nothing kept"


def test_resume_runs_only_what_is_missing(tmp_path, simulated):
    path = write_experiment(tmp_path, SWEEP)
    run_sweep(path, tmp_path / "out", jobs=1, progress=False, plots=False)
    simulated.clear()
    again = run_sweep(path, tmp_path / "out", jobs=1, progress=False, resume=True, plots=False)
    assert simulated == [] and again.resumed == 6 and len(again) == 5
    run_sweep(path, tmp_path / "out", jobs=1, progress=False, plots=False)  # without --resume: from scratch
    assert len(simulated) == 6


#: every decode slot filled at 32K prompts: the batch that fits puts its KV in DDR, which the run warns of
SPILLING = f"""\
kind: experiment
name: spilling
hardware: {REPO / 'hw_configs/sn40l_node8.yaml'}
model: {REPO / 'graphs/llama3_1_8b.yaml'}
parallel: {{prefill: {{tp: 8}}, decode: {{tp: 8, attention_dp: 8}}}}
policies: [{{name: full, policy: full}}]
shape: {{prompt_len: 32768}}
memory: {{may_spill: [kv, activations]}}
workload: {{kind: fixed, count: 2, output_len: 2}}
serving: {{batch: max, max_new_tokens: 2}}
sweep: {{axes: {{serving.max_new_tokens: [2, 3]}}}}
"""


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_resumed_sweep_says_the_warnings_its_stored_runs_raised(tmp_path, jobs):
    # a warning raised while a run was simulated (here: the batch chosen spills its KV to DDR) was
    # said when the run was made and never again: a resumed sweep printed the same table without it
    path = tmp_path / "spilling.yaml"
    path.write_text(SPILLING)
    args = ["sweep", str(path), "--out", str(tmp_path / "out"), "--jobs", str(jobs), "--quiet", "--no-plot"]

    def said(*more: str) -> list[str]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("default")   # as outside pytest: each distinct warning once
            assert main([*args, *more]) == 0
        return [str(w.message) for w in caught if "whose KV puts" in str(w.message)]

    fresh = said()
    assert len(fresh) == 2   # one a run: their steps differ with the cache's length
    stored = [json.loads(f.read_text())["warnings"] for f in (tmp_path / "out" / "runs").glob("*.json")]
    assert sorted(message for ((category, message),) in stored if category == "UserWarning") == sorted(fresh)
    assert sorted(said("--resume")) == sorted(fresh)   # in run order; a pool says them as runs finish


def test_stored_runs_hold_no_wall_clock_and_a_resumed_run_reports_no_speed_of_its_own(tmp_path, capsys):
    """The wall-clock speed of a run is in status.json only: not in OUT/runs/, and a resumed sweep
    does not print the previous session's speed as if it had just simulated the run."""

    path = write_experiment(tmp_path, SWEEP)
    assert main(["sweep", str(path), "--out", str(tmp_path / "out"), "--jobs", "1", "--quiet", "--no-plot"]) == 1
    fresh = read_status(tmp_path / "out")["speed"]
    assert len(fresh) == 5 and all(s["wall_s"] > 0 for s in fresh)   # the failed run has no speed
    assert not any("wall_s" in f.read_text() for f in (tmp_path / "out" / "runs").glob("*.json"))
    again = run_sweep(path, tmp_path / "out", jobs=1, progress=False, resume=True, plots=False)
    assert again.resumed == 6 and not any("speed" in r for r in again)


def test_runs_are_matched_by_what_they_simulate_not_their_index(tmp_path, simulated):
    out = tmp_path / "out"
    run_sweep(write_experiment(tmp_path, "axes:\n  serving.batch: [2, 8]\n"), out, jobs=1, progress=False)
    simulated.clear()
    # other values, another order, another file: only batch 4 is new
    grown = write_experiment(tmp_path, "axes:\n  serving.batch: [8, 4, 2]\n", name="grown.yaml")
    records = run_sweep(grown, out, jobs=1, progress=False, resume=True)
    assert simulated == [4, 4] and records.resumed == 4
    assert [r["name"] for r in records] == ["full[batch=8]", "snap[batch=8]", "full[batch=4]", "snap[batch=4]",
                                            "full[batch=2]", "snap[batch=2]"]
    run_sweep(grown, tmp_path / "fresh", jobs=1, progress=False)
    for name in ("results.json", "results.csv"):
        assert (out / name).read_bytes() == (tmp_path / "fresh" / name).read_bytes()
    # a value that changes the simulation (here the hardware of every point) matches nothing stored;
    # the P2P links, which time the collectives but are no part of the socket as the mapper sees it
    # (mapper.keys.UNMAPPED_PARTS), so the runs reuse the mapped kernels (HBM bandwidth remapped 35)
    simulated.clear()
    faster = run_sweep(grown, out, jobs=1, progress=False, resume=True,
                       sets={"hardware.socket.p2p.bytes_per_s_per_port": "100 GB/s"})
    assert faster.resumed == 0 and len(simulated) == 6
    assert all(f["tpot_s"] != r["tpot_s"] for f, r in zip(faster, records, strict=True))   # it does change them


def test_a_run_file_is_whole_or_absent(tmp_path, monkeypatch):
    store = RunStore(tmp_path / "runs")
    outcome = Outcome({"name": "full", "tpot_s": 0.25}, None, False)
    store.save("k1", "full[batch=2]", outcome)
    assert store.load("k1") == outcome
    assert json.loads(store.path("k1").read_text())["name"] == "full[batch=2]"

    def killed(*_):
        raise KeyboardInterrupt

    monkeypatch.setattr("os.replace", killed)  # stopped between the write and the rename
    with pytest.raises(KeyboardInterrupt):
        store.save("k2", "snap[batch=2]", outcome)
    assert store.load("k2") is None and sorted(p.name for p in store.folder.iterdir()) == ["k1.json"]
    store.path("k3").write_text('{"format": 1, "key": "k3", "rec')  # not written by save: read as absent
    assert store.load("k3") is None
    store.path("k4").write_text(store.path("k1").read_text())  # another run's file under this key
    assert store.load("k4") is None


def test_a_fresh_sweep_removes_only_the_runs_it_stored(tmp_path):
    # --out may name a folder of the user's whose runs/ holds files of their own
    out = tmp_path / "project"
    (out / "runs").mkdir(parents=True)
    (out / "runs" / "training_2019.json").write_text('{"precious": true}')
    (out / "runs" / "notes.tmp").write_text("draft")
    key = "0123456789abcdef" * 4
    stale = RunStore(out / "runs")
    stale.save(key, "full[batch=2]", Outcome({"batch": 2}, None, False))
    (out / "runs" / f".{key}.json.k9_x.tmp.json").write_text("{")   # left by a killed sweep
    run_sweep(write_experiment(tmp_path, "axes:\n  serving.batch: [2]\n"), out, jobs=1, progress=False, plots=False)
    left = sorted(p.name for p in (out / "runs").iterdir())
    assert "training_2019.json" in left and "notes.tmp" in left
    assert f"{key}.json" not in left and not any(name.startswith(f".{key}") for name in left)
    assert len(left) == 4   # the user's two files and this sweep's two runs


def _edit_stored(out, name: str, edit) -> None:
    """Apply ``edit`` to the parsed file of the stored run called ``name`` and write it back, as a
    hand edit would (without going through RunStore.save)."""
    path = next(p for p in (out / "runs").glob("*.json") if json.loads(p.read_text())["name"] == name)
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


@pytest.mark.parametrize("edit", [
    lambda d: d["record"].update(decode_step_s=1.0),                 # a number changed by hand
    lambda d: d.update(record=None, error=None),                     # neither a record nor an error
    lambda d: d.update(record=[1, 2]),                               # a record that is not a mapping
    lambda d: d.update(error="it failed", infeasible=True),          # a record turned into a skip
], ids=["number", "empty", "list", "to_failure"])
def test_resume_refuses_a_stored_run_changed_after_it_was_written(tmp_path, capsys, edit):
    """A run file changed after the sweep wrote it is one line naming the file and exit status 2: a
    resumed sweep neither puts the edited numbers into results.json as simulated ones nor fails in a
    traceback on a file that is no longer a run."""
    path = write_experiment(tmp_path, "axes:\n  serving.batch: [2]\n")
    out = tmp_path / "out"
    run_sweep(path, out, jobs=1, progress=False, plots=False)
    _edit_stored(out, "full[batch=2]", edit)
    argv = ["sweep", str(path), "--out", str(out), "--jobs", "1", "--quiet", "--no-plot", "--resume"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "runs/" in err[0] and "changed after the sweep wrote it" in err[0], err
    assert "Traceback" not in err[0] and read_status(out)["status"] == "failed"
    # without --resume the sweep starts afresh and runs it again
    assert main(argv[:-1]) == 0
    assert json.loads((out / "results.json").read_text())[0]["decode_step_s"] < 0.1


def test_a_record_with_number_keys_reads_back_as_written(tmp_path):
    """JSON writes number keys as text, which sort otherwise ({2, 10} -> {"10", "2"}): the digest is
    of what the file holds, so a record keyed by numbers is not refused as changed."""
    store = RunStore(tmp_path / "runs")
    store.save("k1", "full[batch=2]", Outcome({"by_batch": {2: 0.5, 10: 0.25}}, None, False))
    assert store.load("k1") == Outcome({"by_batch": {"2": 0.5, "10": 0.25}}, None, False)


def test_a_stored_failure_whose_kind_or_warnings_were_changed_is_refused(tmp_path):
    """The digest covers whether a failed run did not fit (a skip) or failed, and a warnings list of
    the wrong shape is refused in one line even under a digest recomputed to match it."""
    store = RunStore(tmp_path / "runs")
    store.save("k1", "full[batch=2048]", Outcome(None, "needs 90 GiB", True, said=(("UserWarning", "spilled"),)))
    written = json.loads(store.path("k1").read_text())
    store.path("k1").write_text(json.dumps({**written, "infeasible": False}))
    with pytest.raises(InputError, match="changed after the sweep wrote it"):
        store.load("k1")
    said = [["UserWarning", "spilled", "a third part"]]
    store.path("k1").write_text(json.dumps({**written, "warnings": said,
                                            "digest": content_digest("k1", None, "needs 90 GiB", True, said)}))
    with pytest.raises(InputError, match="changed after the sweep wrote it"):
        store.load("k1")


def _running_in_group(pgid: int) -> bool:
    """Whether a thread of a process of group ``pgid`` still runs. A zombie holds no lock (its files
    are closed, and a container's init may never reap it), but a process's files are closed only
    when its last thread ends: a killed process whose main thread has ended shows "Z" in its own
    ``stat`` while its other threads (the pool's manager, a worker's watchdog) are still exiting
    with the output folder's lock, so every thread is looked at."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    for stat in Path("/proc").glob("[0-9]*/task/[0-9]*/stat"):
        try:
            # pid (comm) state ppid pgrp ...: comm may hold spaces, so split after its closing bracket
            state, _, pgrp = stat.read_text().rpartition(")")[2].split()[:3]
        except (OSError, ValueError):
            continue
        if int(pgrp) == pgid and state not in ("Z", "X"):
            return True
    return not Path("/proc/self/stat").exists()


#: a process whose main thread ends (the exit system call, not exit_group) while a second thread
#: lives on for a few seconds, holding the process's files
MAIN_THREAD_ENDS_FIRST = """import ctypes, os, threading, time
threading.Thread(target=time.sleep, args=(5,)).start()
print(os.getpid(), flush=True)
time.sleep(0.3)
ctypes.CDLL(None).syscall(60, 0)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux") or os.uname().machine != "x86_64",
                    reason="the exit system call's number (60) is x86-64 Linux's")
def test_a_process_whose_main_thread_ended_still_runs_while_another_thread_does():
    """The wait below once looked at each process's main thread only: a killed sweep whose main
    thread had ended looked gone while its other threads still held the folder's lock, and the
    resume that followed was told another run was writing."""
    proc = subprocess.Popen([sys.executable, "-c", MAIN_THREAD_ENDS_FIRST], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        pid = int(proc.stdout.readline())
        deadline = time.monotonic() + 4
        while Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z" \
                and time.monotonic() < deadline:
            time.sleep(0.02)
        assert Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"
        assert _running_in_group(pid)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert not _running_in_group(proc.pid)


def test_a_sweep_killed_by_sigkill_resumes_to_the_bytes_of_one_never_stopped(tmp_path):
    # the stop above is an exception the sweep sees; a SIGKILL gives it no say: the runs stored before
    # it are all --resume has, and a write it cut short must not count as a run
    sweep = "axes:\n  serving.batch: [1, 2, 4, 8, 16, 32, 64, 2048]\n" \
            "objectives: {decode_tokens_per_s: max, tpot_s: min}\ninfeasible: skip\n"
    path = write_experiment(tmp_path, sweep)
    # a cache of its own: the killed sweep computes its steps, as slowly as a first sweep does
    env = {**os.environ, "PYTHONPATH": str(REPO), "SN40L_SIM_CACHE": str(tmp_path / "cache")}
    runs = tmp_path / "cut" / "runs"
    proc = subprocess.Popen([sys.executable, "-m", "sn40l_sim", "sweep", str(path), "--out", str(tmp_path / "cut"),
                             "--jobs", "2", "--no-plot", "--quiet"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    while len(list(runs.glob("*.json"))) < 2 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)  # the workers too, as a lost machine would lose them
    assert proc.wait() == -signal.SIGKILL
    # the workers die a moment after the sweep on a loaded machine, holding the output folder's lock
    # until then ("another run is writing", rightly): resume once every process of the group is gone
    gone_by = time.monotonic() + 30
    while _running_in_group(proc.pid) and time.monotonic() < gone_by:
        time.sleep(0.02)
    kept = len(list(runs.glob("*.json")))
    assert 2 <= kept < 16 and not (tmp_path / "cut" / "results.json").exists()
    assert main(["sweep", str(path), "--out", str(tmp_path / "cut"), "--jobs", "2", "--no-plot", "--quiet",
                 "--resume"]) == 0
    assert main(["sweep", str(path), "--out", str(tmp_path / "whole"), "--jobs", "1", "--no-plot", "--quiet"]) == 0
    for name in OUTPUTS:
        assert (tmp_path / "cut" / name).read_bytes() == (tmp_path / "whole" / name).read_bytes(), name
    assert len(json.loads((tmp_path / "whole" / "failures.json").read_text())) == 1  # full at 2048 does not fit


#: a KV-policy plug-in keeping the last WINDOW tokens (the policy of tests/study/test_plugins.py)
PLUGIN = """from dataclasses import dataclass
from sn40l_sim.kvcache import KVFootprint, KVPolicy, register

@register
@dataclass(frozen=True)
class Window(KVPolicy):
    name = "window_resumed"
    window: int = WINDOW
    def cache_len(self, prompt_len, generated):
        return min(prompt_len + generated, self.window)
    def static_cache_len(self, prompt_len, max_new_tokens):
        return self.window
    def prefill_kernels(self, model, prompt_len, tp):
        return []
    def footprint(self, model, prompt_len, max_new_tokens):
        return KVFootprint(slots=self.window)
"""


@pytest.fixture
def plugin_experiment(tmp_path):
    """A sweep over the batch of a policy a plug-in beside it defines (``plug.py``, importing its
    window from ``helper.py`` beside it); the registry and the loaded plug-ins as they were after."""
    policies, loaded, modules = dict(POLICIES), dict(plugins._LOADED), set(sys.modules)
    (tmp_path / "helper.py").write_text("WINDOW = 4096\n")
    (tmp_path / "plug.py").write_text("from helper import WINDOW\n" + PLUGIN)
    path = tmp_path / "e.yaml"
    path.write_text(f"kind: experiment\nname: plugged\nplugins: [plug.py]\n"
                    f"hardware: {REPO / 'hw_configs/sn40l_node8.yaml'}\nmodel: {REPO / 'graphs/llama3_1_8b.yaml'}\n"
                    "parallel: {prefill: {tp: 8}, decode: {tp: 8, attention_dp: 8}}\n"
                    "policies: [{name: w, policy: window_resumed}]\nshape: {prompt_len: 8192}\n"
                    "workload: {kind: fixed, count: batch, output_len: 2}\nserving: {batch: 2, max_new_tokens: 2}\n"
                    "sweep:\n  axes:\n    serving.batch: [2, 4]\n")
    yield path
    POLICIES.clear()
    POLICIES.update(policies)
    plugins._LOADED.clear()
    plugins._LOADED.update(loaded)
    for name in set(sys.modules) - modules:
        if name.startswith("sn40l_sim_plugin_") or name == "helper":
            del sys.modules[name]


def test_a_plugin_edited_since_the_runs_were_stored_runs_them_again(plugin_experiment, simulated):
    """The run key held the plug-in's path, not its code: after an edit, --resume served the
    records of the code as it was (the old window's kv_len and step) as simulated ones."""
    out = plugin_experiment.parent / "out"
    first = run_sweep(plugin_experiment, out, jobs=1, progress=False, plots=False)
    assert [r["kv_len"] for r in first] == [4096, 4096]
    simulated.clear()
    assert run_sweep(plugin_experiment, out, jobs=1, progress=False, resume=True, plots=False).resumed == 2
    plug = plugin_experiment.parent / "plug.py"
    plug.write_text(plug.read_text().replace("window: int = WINDOW", "window: int = WINDOW // 2"))
    edited = run_sweep(plugin_experiment, out, jobs=1, progress=False, resume=True, plots=False)
    assert edited.resumed == 0 and simulated == [2, 4] and [r["kv_len"] for r in edited] == [2048, 2048]
    # a module beside it, which it may import (here its window), is part of its code too
    helper = plugin_experiment.parent / "helper.py"
    helper.write_text("WINDOW = 1024\n")
    # an edit a user makes later: Python checks a module's cached bytecode by its source's size and
    # mtime in whole seconds, and this edit keeps the size, so within the second of the first
    # import (with bytecode written, as in CI) the stale WINDOW = 4096 was imported
    os.utime(helper, (helper.stat().st_mtime + 2,) * 2)
    plugins._LOADED.clear()           # as a new process finds them: a process imports each once
    sys.modules.pop("helper", None)
    helped = run_sweep(plugin_experiment, out, jobs=1, progress=False, resume=True, plots=False)
    assert helped.resumed == 0 and [r["kv_len"] for r in helped] == [512, 512]


def test_runs_stored_under_other_libraries_run_again(tmp_path, simulated, monkeypatch):
    """The key held the package's sources but not the interpreter's and libraries' versions, which
    the disk cache keys its entries by (an upgraded numpy may compute otherwise): a sweep resumed
    after an upgrade mixed records of both."""
    path = write_experiment(tmp_path, "axes:\n  serving.batch: [2, 8]\n")
    run_sweep(path, tmp_path / "out", jobs=1, progress=False, plots=False)
    simulated.clear()
    real = metadata.version
    monkeypatch.setattr(metadata, "version", lambda name: "0.0" if name == "numpy" else real(name))   # an upgrade
    installed.cache_clear()   # read once per process: a new process after the upgrade
    again = run_sweep(path, tmp_path / "out", jobs=1, progress=False, resume=True, plots=False)
    installed.cache_clear()
    assert again.resumed == 0 and len(simulated) == 4



def test_a_runs_folder_the_sweep_cannot_write_is_one_line_before_any_run(tmp_path, capsys, monkeypatch, simulated):
    # runs/ of another user (or made immutable): the stored runs of the previous sweep could not be
    # removed (a PermissionError traceback), and a runs/ that takes no file stopped the sweep at its
    # first finished run, that run's simulation lost
    path = write_experiment(tmp_path, "axes:\n  serving.batch: [2, 8]\n")
    out = tmp_path / "out"
    argv = ["sweep", str(path), "--out", str(out), "--jobs", "1", "--quiet", "--no-plot"]
    assert main(argv) == 0
    stored = sorted((out / "runs").glob("*.json"))
    real_unlink, real_temporary = Path.unlink, tempfile.TemporaryFile

    def no_removal(self, *args, **kwargs):
        if self.parent.name == "runs":
            raise PermissionError(1, "Operation not permitted")
        return real_unlink(self, *args, **kwargs)

    def no_new_file(*args, dir=None, **kwargs):
        if dir is not None and Path(dir).name == "runs":
            raise PermissionError(1, "Operation not permitted")
        return real_temporary(*args, dir=dir, **kwargs)

    simulated.clear()
    with monkeypatch.context() as patched:
        patched.setattr(Path, "unlink", no_removal)
        assert main(argv) == 2
    err = capsys.readouterr().err
    named = err.removeprefix("error: --out: cannot remove ").partition(",")[0]
    assert Path(named) in stored and err.endswith(
        ", a run the previous sweep into this folder stored: Operation not permitted; expected a folder this sweep "
        "may write (or --resume, which keeps them)\n"), err
    stored[-1].unlink()   # one run left to do on --resume
    with monkeypatch.context() as patched:
        patched.setattr(tempfile, "TemporaryFile", no_new_file)
        assert main([*argv, "--resume"]) == 2
    assert capsys.readouterr().err == (f"error: --out: cannot write into {out / 'runs'}: Operation not permitted, "
                                       "the folder where the sweep keeps each finished run for --resume\n")
    assert simulated == []   # both refused before simulating


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_a_named_pipe_in_place_of_a_stored_run_is_run_again_not_waited_on(tmp_path):
    # --resume read it as the stored run and waited for a writer for ever
    import threading

    store = RunStore(tmp_path / "runs")
    store.save("ab12", "full", Outcome({"batch": 1}, None, False))
    store.path("ab12").unlink()
    os.mkfifo(store.path("ab12"))
    found = []
    reader = threading.Thread(target=lambda: found.append(store.load("ab12")), daemon=True)
    reader.start()
    reader.join(timeout=10)
    if reader.is_alive():
        os.close(os.open(store.path("ab12"), os.O_WRONLY | os.O_NONBLOCK))   # let the blocked read go
        pytest.fail("load waited on a named pipe")
    assert found == [None]
    store.save("ab12", "full", Outcome({"batch": 1}, None, False))   # run again: written over it
    assert store.load("ab12").record == {"batch": 1}
