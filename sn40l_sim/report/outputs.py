"""Writing outputs safely: whole files or none, checked destinations, one run per folder, a status.

- :func:`write_text` and :func:`atomic_path`: every output is written under a temporary name in its
  own folder and renamed over the final name when complete, so a run killed at any moment leaves
  each file either whole (new or old) or absent, never truncated.
- :func:`check_folder` and :func:`check_file`: ``--out``, ``--trace`` and the other destinations are
  checked (and their folders created) before anything is simulated; a file where a folder is wanted
  or the reverse, or a place that cannot be written, is one InputError naming the option.
- :class:`OutputFolder`: a run's output folder, locked for the run (a second run into the same folder
  is refused while the first runs; the lock dies with its process), with ``status.json`` saying
  whether the run is ``running``, ``complete``, ``failed`` or ``interrupted``, and the outputs of the
  previous run into the folder removed when a new run starts (so the files in a folder always
  belong to one run, the one ``status.json`` describes).

Examples
--------
>>> import pathlib, tempfile
>>> folder = pathlib.Path(tempfile.mkdtemp())
>>> with OutputFolder(folder / "run", command="run demo.yaml", outputs=("results.json",)) as out:
...     _ = write_text(out.path / "results.json", "[]\\n")
...     read_status(out.path)["status"]
'running'
>>> read_status(folder / "run")["status"], sorted(p.name for p in (folder / "run").iterdir())
('complete', ['.lock', 'results.json', 'status.json'])
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import re
import stat
import tempfile
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from sn40l_sim.errors import InputError
from sn40l_sim.yamlio import parse_json

try:  # advisory locks: POSIX; elsewhere a second run is not detected (the status file still says running)
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

STATUS_FILE = "status.json"
LOCK_FILE = ".lock"
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)   # POSIX


@contextlib.contextmanager
def atomic_path(path: str | Path, mode: int | None = None) -> Iterator[Path]:
    """A temporary path beside ``path`` (same suffix, so writers that go by the suffix, such as
    matplotlib, pick the right format) that becomes ``path`` when the block ends without an error;
    on an error (or Ctrl-C) the temporary file is removed and ``path`` is left as it was. The file
    gets ``mode`` (default: the mode any new file gets under the umask).

    >>> import pathlib, tempfile
    >>> target = pathlib.Path(tempfile.mkdtemp()) / "x.txt"
    >>> with atomic_path(target) as tmp:
    ...     _ = tmp.write_text("done")
    >>> target.read_text()
    'done'
    """
    path = Path(path)
    try:
        handle, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=f".tmp{path.suffix}")
    except OSError as exc:
        raise _unwritable(path, exc) from None
    os.close(handle)
    temporary = Path(name)
    try:
        yield temporary
        # mkstemp makes the file private (0600); an output gets the mode any new file gets under the
        # user's umask, so that results shared with a group (or served by CI) stay readable
        os.chmod(temporary, 0o666 & ~_umask() if mode is None else mode)
        os.replace(temporary, path)
    except OSError as exc:
        # a disk filled (or a folder made read-only) while the run went: one line naming the file,
        # after the checks of --out and --trace before the run could not foresee it
        temporary.unlink(missing_ok=True)
        raise _unwritable(path, exc) from None
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def _unwritable(path: Path, exc: OSError) -> InputError:
    return InputError(f"cannot write {path}: {_problem(exc)}")


def _umask() -> int:
    """The process's umask: from ``/proc/self/status`` where Linux gives it, else read by setting
    it and setting it straight back (which a thread creating a file meanwhile could see)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_text(path: str | Path, text: str, *, sync: bool = False) -> Path:
    """Write ``text`` to ``path`` whole or not at all (``sync``: flushed to the disk before the rename,
    for files a later run relies on)."""
    path = Path(path)
    with atomic_path(path) as temporary:
        with open(temporary, "w", encoding="utf-8") as file:
            file.write(text)
            if sync:
                file.flush()
                os.fsync(file.fileno())
    return path


def rewrite_text(path: str | Path, text: str) -> Path:
    """Replace the text of a file the user keeps (the hardware file ``calibrate --write`` edits, a
    golden), whole or not at all, as an edit in place would: through a symbolic link to the file it
    names, and keeping the file's mode. Renamed over the link, the new text replaced the link
    itself, leaving the file it named (a hardware file shared by several checkouts) unchanged, and
    a group-writable file became the umask's 0644. Returns the file written."""
    target = Path(path).resolve() if Path(path).is_symlink() else Path(path)
    try:
        mode = stat.S_IMODE(target.stat().st_mode)
    except OSError:   # a new file: the umask's mode
        mode = None
    with atomic_path(target, mode) as temporary:
        temporary.write_text(text, encoding="utf-8")
    return target


def _problem(exc: OSError) -> str:
    return exc.strerror or str(exc)


def output_path(text: str | None, option: str) -> Path | None:
    """An output path as the user typed it (None when the option was not given).

    Options keep their text rather than ``Path`` it in argparse, because ``Path("")`` is ``.``: an
    unset shell variable (``--out "$OUT"``) would otherwise write into the current folder.

    >>> output_path("out/x", "--out"), output_path(None, "--out")
    (PosixPath('out/x'), None)
    >>> output_path("", "--out")
    Traceback (most recent call last):
    ...
    sn40l_sim.errors.InputError: --out: expected a path, got an empty one
    """
    if text is None:
        return None
    if not str(text).strip():
        raise InputError("expected a path, got an empty one", field=option)
    return Path(text)


# the simulator's own source folder: outputs written there sit among its modules (and a run's
# removal of the previous run's outputs would act on files beside them)
_PACKAGE_DIR = Path(__file__).resolve().parents[1]


def _reserved_folder(path: Path) -> str | None:
    """What ``path`` is when it is no place for a run's outputs, else None: the root of the file
    system (writable by root, where ``results.json`` and ``.lock`` would land in ``/``) or the
    simulator's package folder or a folder inside it, or a symbolic link to nothing.

    >>> _reserved_folder(Path("/"))
    'the root of the file system'
    >>> _reserved_folder(_PACKAGE_DIR / "report") == f"in the simulator's own package folder ({_PACKAGE_DIR})"
    True
    >>> _reserved_folder(Path("out/x")) is None
    True
    """
    if path.is_symlink() and not os.path.lexists(target := os.path.realpath(path)):   # mkdir: "File exists"
        return f"a symbolic link to the missing {target}"
    resolved = path.resolve()   # follows symbolic links and "..": /tmp/.. is the root too
    if resolved == Path(resolved.anchor):
        return "the root of the file system"
    if resolved == _PACKAGE_DIR or _PACKAGE_DIR in resolved.parents:
        return f"in the simulator's own package folder ({_PACKAGE_DIR})"
    return None


def check_folder(path: str | Path, option: str = "--out") -> Path:
    """``path`` as an output folder: created if missing, and writable.

    Raises
    ------
    InputError
        At ``option`` when ``path`` is a file, the root of the file system or inside the package's
        own folder, or cannot be created or written.
    """
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise InputError(f"{path} is a file; expected a folder for the outputs", field=option)
    reserved = _reserved_folder(path)
    if reserved is not None:   # checked before mkdir: a refused folder is not created either
        raise InputError(f"{path} is {reserved}; expected a folder of its own for the outputs "
                         "(e.g. out/NAME)", field=option)
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        raise InputError(f"cannot write into {path}: {_problem(exc)}", field=option) from None
    return path


def check_file(path: str | Path, option: str) -> Path:
    """``path`` as an output file: not a folder, its folder created if missing and writable.

    Raises
    ------
    InputError
        At ``option`` when ``path`` is a folder or its folder cannot be created or written.
    """
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{path} is a folder; expected a file name", field=option)
    try:
        check_folder(path.parent, option)
    except InputError as exc:
        raise InputError(f"cannot write {path}: {exc.message}", field=option) from None
    return path


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def read_status(folder: str | Path) -> dict[str, Any] | None:
    """The ``status.json`` of an output folder (None when there is none or it cannot be read; a named
    pipe there, read, stopped a run into the folder for ever)."""
    try:
        path = Path(folder) / STATUS_FILE
        data = parse_json(path.read_text(encoding="utf-8")) if path.is_file() else None
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _previous_outputs(folder: Path) -> list[str]:
    """The files the folder's previous run listed as its outputs in ``status.json`` (plain names of
    regular files in the folder only): a ``run --trace`` into the folder wrote a trace.json that a
    later run without ``--trace`` would otherwise leave beside its own results. ``outputs`` (at the
    end) and ``writes`` (from the start: a sweep killed outright while writing its files listed none)."""
    status = read_status(folder) or {}
    listed = [name for key in ("outputs", "writes") if isinstance(status.get(key), list) for name in status[key]]
    return [name for name in dict.fromkeys(n for n in listed if isinstance(n, str))
            if name == Path(name).name and name not in ("", ".", "..", STATUS_FILE, LOCK_FILE)
            and (folder / name).is_file()]


def _leftover_temporaries(folder: Path, names: Sequence[str]) -> list[Path]:
    """The temporary files :func:`atomic_path` made for ``names`` in ``folder`` and a run killed
    outright (SIGKILL, a power cut) left there: a rerun into the folder replaced the outputs and kept
    ``.throughput.png.ksllpmvu.tmp.png`` beside them, a file of no run ``status.json`` describes. Only
    while the folder's lock is held: no other run is writing one of them then."""
    found = []
    for name in names:
        # mkstemp's random part has no dot: the pattern cannot reach another output's file
        pattern = re.compile(rf"\.{re.escape(name)}\.[A-Za-z0-9_]+\.tmp{re.escape(Path(name).suffix)}")
        found += [path for path in folder.iterdir() if pattern.fullmatch(path.name) and path.is_file()]
    return found


class OutputFolder:
    """A run's output folder for the length of a ``with`` block: checked, locked, previous outputs
    removed, ``status.json`` written at the start and at the end.

    Parameters
    ----------
    path : str or Path
        The folder (created).
    command : str
        What runs, for ``status.json`` (e.g. ``run experiments/x.yaml``).
    outputs : sequence of str
        The names of the files this command writes into the folder; those left by a previous run
        are removed at the start.
    folders : sequence of str
        The names of the folders this command writes into inside it (a sweep's ``runs``).
    option : str
        The option that named the folder, for errors.
    reads : mapping of Path to str
        The files the command reads (resolved) and the fields naming them: one that is an output
        due for removal is refused.

    Raises
    ------
    InputError
        When the folder cannot be used (a folder where a file of the run goes, a file where a
        folder goes), or another run holds it.
    """

    def __init__(self, path: str | Path, *, command: str, outputs: Sequence[str] = (), folders: Sequence[str] = (),
                 option: str = "--out", reads: Mapping[Path, str] | None = None) -> None:
        self.path = Path(path)
        self.command, self.outputs, self.folders, self.option = command, tuple(outputs), tuple(folders), option
        self.reads = dict(reads or {})
        self._lock: Any = None
        self._status: dict[str, Any] = {}

    def __enter__(self) -> OutputFolder:
        check_folder(self.path, self.option)
        # before anything is simulated: writing over them failed after the whole run, in a traceback
        for name in (LOCK_FILE, STATUS_FILE, *self.outputs):
            if (self.path / name).is_dir():
                raise InputError(f"{self.path / name} is a folder, where the run writes its file {name}; remove or "
                                 "rename it, or choose another folder", field=self.option)
        for name in self.folders:
            if (self.path / name).exists() and not (self.path / name).is_dir():
                raise InputError(f"{self.path / name} is a file, where the run keeps its folder {name}; remove or "
                                 "rename it, or choose another folder", field=self.option)
        self._take_lock()
        try:
            stale = [self.path / n for n in (*self.outputs, *_previous_outputs(self.path))]
            for path in stale:   # a trace rewritten over the previous run's requests.csv was deleted, then not found
                if path.is_file() and path.resolve() in self.reads:
                    raise InputError(f"{path} is the experiment's {self.reads[path.resolve()]}, which the run reads, "
                                     "and an output of the previous run into the folder, which a new run removes "
                                     "first; move it out of the folder or choose another folder", field=self.option)
            for path in stale + _leftover_temporaries(self.path, (*self.outputs, STATUS_FILE)):
                try:
                    path.unlink(missing_ok=True)
                except OSError as exc:   # another user's file in a shared folder: a traceback before
                    raise InputError(f"cannot remove {path}: {_problem(exc)}", field=self.option) from None
            self._status = {"status": "running", "command": self.command, "pid": os.getpid(), "started": _now(),
                            "writes": sorted(self.outputs)}
            self._write_status()
        except BaseException:
            self._release()
            raise
        return self

    def _take_lock(self) -> None:
        path = self.path / LOCK_FILE
        try:   # O_NONBLOCK: a named pipe there would wait for a writer; no effect on a regular file
            try:   # read-write where it can (NFS emulates flock by locks that need it)
                handle = os.fdopen(os.open(path, os.O_RDWR | os.O_CREAT | _NONBLOCK, 0o666), "r+b")
            except PermissionError:   # another user's .lock in a shared folder: a traceback before;
                handle = os.fdopen(os.open(path, os.O_RDONLY | _NONBLOCK), "rb")   # flock takes it read-only
        except OSError as exc:
            raise InputError(f"cannot open {path}, the lock that keeps a second run out of the folder: "
                             f"{_problem(exc)}; remove it, or choose another folder", field=self.option) from None
        if fcntl is not None:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if not isinstance(exc, BlockingIOError):   # no flock here (Lustre without -o flock: ENOSYS),
                    # not a lock held: every run was refused as "another run is writing"; run unlocked
                    warnings.warn(f"cannot lock {self.path} ({_problem(exc)}): a second run into it is not refused",
                                  stacklevel=2)
                    self._lock = handle
                    return
                handle.close()
                other = read_status(self.path) or {}
                who = f" (pid {other['pid']}: {other.get('command', '?')})" if "pid" in other else ""
                raise InputError(f"another run is writing into {self.path}{who}; wait for it to finish or choose "
                                 "another folder", field=self.option) from None
        self._lock = handle

    def _release(self) -> None:
        if self._lock is not None:
            self._lock.close()   # closing the file releases the lock
            self._lock = None

    def _write_status(self) -> None:
        write_text(self.path / STATUS_FILE, json.dumps(self._status, indent=2) + "\n")

    def note(self, **fields: Any) -> None:
        """Add ``fields`` to the ``status.json`` written at the end (figures that are not results,
        such as how fast the simulator ran)."""
        self._status.update(fields)

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        try:
            if kind is None:
                state = "complete"
            elif issubclass(kind, (KeyboardInterrupt, SystemExit)) or getattr(exc, "interrupted", False):
                state = "interrupted"
            else:
                state = "failed"
            self._status.update(status=state, finished=_now(),
                                outputs=sorted(n for n in self.outputs if (self.path / n).is_file()))
            if exc is not None and state == "failed":
                self._status["error"] = " ".join(str(exc).split()) or type(exc).__name__
            with contextlib.suppress(OSError, InputError):   # the run's own error is the one to report
                self._write_status()
        finally:
            self._release()


__all__ = ["LOCK_FILE", "OutputFolder", "atomic_path", "check_file", "check_folder", "read_status", "rewrite_text",
           "write_text", "STATUS_FILE"]
