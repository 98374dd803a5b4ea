"""Output files: written whole under a temporary name, then given the mode a new file gets; a file that
cannot be written is one line naming it."""
from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from sn40l_sim.commands.cli import main
from sn40l_sim.errors import InputError
from sn40l_sim.report.outputs import OutputFolder, read_status, write_text


@pytest.mark.skipif(os.name != "posix", reason="file modes are POSIX")
@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_an_output_gets_the_mode_of_a_new_file_under_the_umask_not_mkstemps_0600(tmp_path, umask):
    previous = os.umask(umask)
    try:
        path = write_text(tmp_path / "results.json", "[]\n")
        with open(tmp_path / "plain.txt", "w", encoding="utf-8") as handle:
            handle.write("x")
    finally:
        os.umask(previous)
    assert path.stat().st_mode & 0o777 == (tmp_path / "plain.txt").stat().st_mode & 0o777 == 0o666 & ~umask


def _disk_full_for(name):
    """``os.replace`` that fails as a full disk does when the file renamed into place is ``name``."""
    replace = os.replace

    def failing(source, target):
        if os.path.basename(target) == name:
            raise OSError(errno.ENOSPC, "No space left on device")
        replace(source, target)
    return failing


def test_a_full_disk_is_one_error_naming_the_file_and_leaves_nothing_behind(tmp_path, monkeypatch):
    monkeypatch.setattr("sn40l_sim.report.outputs.os.replace", _disk_full_for("results.json"))
    with pytest.raises(InputError, match="cannot write .*results.json: No space left on device"):
        write_text(tmp_path / "results.json", "[]\n")
    assert list(tmp_path.iterdir()) == []   # no temporary file left


def test_run_onto_a_full_disk_exits_2_in_one_line_and_says_so_in_its_status(tmp_path, monkeypatch, capsys):
    # the disk filled while the run went: a traceback (exit 1) after the table, where --out had passed
    experiment = Path(__file__).resolve().parents[2] / "experiments" / "llama8b_node8.yaml"
    monkeypatch.setattr("sn40l_sim.report.outputs.os.replace", _disk_full_for("results.csv"))
    out = tmp_path / "out"
    assert main(["run", str(experiment), "--out", str(out), "--quiet", "--no-plot"]) == 2
    err = capsys.readouterr().err
    assert err == f"error: cannot write {out / 'results.csv'}: No space left on device\n"
    status = read_status(out)
    assert status["status"] == "failed" and "No space left on device" in status["error"]


def test_printed_output_onto_a_full_device_is_one_line_exit_2(tmp_path, monkeypatch, capsys):
    # `check FILE > /dev/full`: the table or the "ok" line cannot be printed
    from sn40l_sim.commands import check

    def full(args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(check, "run", full)
    assert main(["check", str(tmp_path / "any.yaml")]) == 2
    assert capsys.readouterr().err.strip() == "error: cannot write the output: No space left on device"


def test_other_os_errors_are_not_taken_for_a_full_device(tmp_path, monkeypatch):
    from sn40l_sim.commands import check

    def denied(args):
        raise OSError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(check, "run", denied)
    with pytest.raises(OSError):
        main(["check", str(tmp_path / "any.yaml")])


def test_a_new_run_removes_the_previous_run_s_listed_outputs_and_nothing_else(tmp_path):
    # the previous run's status.json lists what it wrote (a trace.json among them); a name that is a
    # path, the folder's own files or a file the run did not write stays
    out = tmp_path / "out"
    out.mkdir()
    for name in ("trace.json", "notes.txt"):
        (out / name).write_text("x")
    (tmp_path / "outside.json").write_text("x")
    write_text(out / "status.json", json.dumps({"status": "complete", "outputs": [
        "trace.json", "../outside.json", ".lock", "status.json", "", 7]}))
    with OutputFolder(out, command="run x.yaml", outputs=("results.json",)):
        pass
    assert sorted(p.name for p in out.iterdir()) == [".lock", "notes.txt", "status.json"]
    assert (tmp_path / "outside.json").is_file()


def test_a_new_run_removes_the_temporary_files_a_killed_run_left_and_nothing_else(tmp_path):
    # a run killed outright while writing its plot left ``.throughput.png.<random>.tmp.png``, and every
    # later run into the folder kept it beside its own outputs
    out = tmp_path / "out"
    out.mkdir()
    left = [".throughput.png.ksllpmvu.tmp.png", ".results.json.a_1b2c3d.tmp.json", ".status.json.x9y8z7w6.tmp.json"]
    kept = [".throughput.png.notes", "throughput.png.ksllpmvu.tmp.png", ".other.png.ksllpmvu.tmp.png",
            ".results.json.a.b.tmp.json"]
    for name in (*left, *kept):
        (out / name).write_text("x")
    with OutputFolder(out, command="run x.yaml", outputs=("results.json", "throughput.png")):
        pass
    assert sorted(p.name for p in out.iterdir()) == sorted([".lock", "status.json", *kept])


def test_a_previous_output_that_cannot_be_removed_is_one_line_and_frees_the_folder(tmp_path, monkeypatch, capsys):
    # another user's results.json in a shared folder (or one made immutable) stopped run and sweep
    # with a PermissionError traceback, exit status 1
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.json").write_text("[]\n")
    real_unlink = Path.unlink

    def refused(self, *args, **kwargs):
        if self.name == "results.json":
            raise PermissionError(errno.EPERM, "Operation not permitted")
        return real_unlink(self, *args, **kwargs)

    monkeypatch.setattr(Path, "unlink", refused)
    with pytest.raises(InputError) as refusal:
        with OutputFolder(out, command="run x.yaml", outputs=("results.json",)):
            pass
    assert str(refusal.value) == f"--out: cannot remove {out / 'results.json'}: Operation not permitted"
    with OutputFolder(out, command="run y.yaml", outputs=("other.json",)):   # the lock was released
        pass


def _lock_not_writable(monkeypatch):
    """Opening ``.lock`` for writing fails as it does for another user's lock file in a shared
    folder (the tests may run as root, whom file modes do not stop)."""
    import builtins

    def denied(path):
        return PermissionError(errno.EACCES, "Permission denied", str(path))

    def guarded_open(file, mode="r", *args, **kwargs):
        if str(file).endswith(".lock") and any(c in mode for c in "wa+x"):
            raise denied(file)
        return builtins.open(file, mode, *args, **kwargs)

    real_os_open = os.open

    def guarded_os_open(path, flags, *args, **kwargs):
        if str(path).endswith(".lock") and flags & (os.O_WRONLY | os.O_RDWR):
            raise denied(path)
        return real_os_open(path, flags, *args, **kwargs)

    monkeypatch.setattr("sn40l_sim.report.outputs.open", guarded_open, raising=False)
    monkeypatch.setattr("sn40l_sim.report.outputs.os.open", guarded_os_open)


@pytest.mark.skipif(os.name != "posix", reason="advisory locks are POSIX")
def test_another_user_s_lock_file_still_locks_the_folder(tmp_path, monkeypatch):
    # a shared folder where another user ran before holds their .lock, readable but not writable:
    # opening it to append stopped run and sweep with a PermissionError traceback, exit status 1
    out = tmp_path / "out"
    out.mkdir()
    (out / ".lock").write_text("")
    _lock_not_writable(monkeypatch)
    with OutputFolder(out, command="run x.yaml", outputs=("results.json",)):
        with pytest.raises(InputError, match="another run is writing into"):
            with OutputFolder(out, command="run y.yaml", outputs=("results.json",)):
                pass
    assert read_status(out)["status"] == "complete"


def test_a_lock_file_that_cannot_be_opened_is_one_line(tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    (out / ".lock").symlink_to(tmp_path / "gone" / "lock")   # a dangling link: nothing to open
    with pytest.raises(InputError) as refusal:
        with OutputFolder(out, command="run x.yaml", outputs=("results.json",)):
            pass
    assert str(refusal.value).startswith(f"--out: cannot open {out / '.lock'}, the lock")


def test_a_new_run_removes_what_a_run_killed_outright_was_writing(tmp_path):
    # a sweep killed outright (SIGKILL) while writing its files left status.json "running" with no
    # list of outputs, and a later run into the folder kept the sweep's failures.json and pareto.json
    # beside its own results, under a status.json that described the run alone
    out = tmp_path / "out"
    killed = OutputFolder(out, command="sweep x.yaml", outputs=("results.json", "failures.json", "pareto.json"))
    killed.__enter__()
    for name in ("results.json", "failures.json", "pareto.json"):
        write_text(out / name, "[]\n")
    killed._release()   # the process died: its lock went with it, its status stayed "running"
    (out / "notes.txt").write_text("x")
    with OutputFolder(out, command="run y.yaml", outputs=("results.json",)):
        pass
    assert sorted(p.name for p in out.iterdir()) == [".lock", "notes.txt", "status.json"]


@pytest.mark.skipif(os.name != "posix", reason="advisory locks are POSIX")
def test_a_file_system_without_locks_runs_unlocked_with_a_warning(tmp_path, monkeypatch):
    # Lustre mounted without -o flock answers flock with ENOSYS: every run into such a folder was
    # refused as "another run is writing into it"
    import fcntl

    def no_locks(fd, operation):
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    out = tmp_path / "out"
    with pytest.warns(UserWarning, match="cannot lock .*Function not implemented.*not refused"):
        with OutputFolder(out, command="run x.yaml", outputs=("results.json",)):
            write_text(out / "results.json", "[]\n")
    assert read_status(out)["status"] == "complete"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_a_named_pipe_for_the_previous_status_is_no_status_not_a_hang(tmp_path):
    # reading it as the previous run's status.json waited for a writer: the run never started
    import threading

    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / "status.json")
    entered = threading.Event()

    def start():
        with OutputFolder(out, command="run x.yaml", outputs=("results.json",)):
            entered.set()

    threading.Thread(target=start, daemon=True).start()
    if not entered.wait(timeout=10):
        os.close(os.open(out / "status.json", os.O_WRONLY | os.O_NONBLOCK))   # let the blocked read go
        pytest.fail("the run waited on a named pipe")
    assert read_status(out) is not None and read_status(out)["status"] in ("running", "complete")
