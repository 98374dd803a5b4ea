"""Finished runs of a sweep on disk, so that a sweep stopped midway can be resumed.

Each run that finishes is written at once to ``OUT/runs/<key>.json``, where ``key`` is the digest of
the run's resolved parameters (:attr:`~sn40l_sim.study.sweep.plan.SweepRun.key`): the file is
written under a temporary name in the same folder and renamed, so that a sweep killed at any moment
leaves each run's file either whole or absent, and loses only the runs in flight. ``--resume`` reads
the files of the runs it is about to start and skips those it finds; the runs are matched by what
they simulate, not by their place in the sweep, so a sweep whose axes gained values, or whose
values were reordered, reruns only what is new. A file holds the record as the worker returned it
(before the sweep point's name is written in, and without its wall-clock ``speed``, which belongs
to the session that ran it) or the run's one-line error, and the warnings the run raised, which a
resumed sweep says again: it writes the same ``results.json`` bytes as an uninterrupted one and
says the same warnings.

Runs that failed with an internal error (a bug, or a worker that died) are not stored: a resumed
sweep tries them again.

A file also holds a digest of what it stores (:func:`content_digest`): a file changed after it was
written (a number edited by hand, a record replaced by an error) is refused in one line naming it
(exit status 2) instead of going into ``results.json`` as a simulated record. The key already names
the inputs and the simulator's code (a changed sweep file or another version matches no stored run,
and only what changed runs again), so the digest guards the one thing the key does not: the stored
outcome itself. It is no signature: whoever edits a file on purpose can recompute it.

Examples
--------
>>> import pathlib, tempfile
>>> store = RunStore(pathlib.Path(tempfile.mkdtemp()) / "runs")
>>> store.save("ab12", "full[batch=1]", Outcome({"batch": 1}, None, False))
>>> store.load("ab12"), store.load("cd34")
(Outcome(record={'batch': 1}, error=None, infeasible=False, invariant=None, said=()), None)
>>> sorted(p.name for p in store.folder.iterdir())
['ab12.json']
"""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any, NamedTuple

from sn40l_sim.errors import InputError
from sn40l_sim.report.outputs import check_folder, write_text
from sn40l_sim.report.results import stable
from sn40l_sim.yamlio import parse_json

#: the file format's version (a file of another version is not read: its run runs again)
FORMAT = 2
#: a stored run (its key, a SHA-256 digest, in hexadecimal) or the temporary file it was written
#: through (:func:`~sn40l_sim.report.outputs.atomic_path`: ``.<name>.<random>.tmp.json``)
_RUN_FILE = re.compile(r"[0-9a-f]{64}\.json|\.[0-9a-f]{64}\.json\.\w+\.tmp\.json")


class Outcome(NamedTuple):
    """What one run gave: a record, or a one-line error (``infeasible`` when the run does not fit;
    ``invariant`` names the physical invariant the run broke, a bug: such an outcome is never stored),
    and the warnings it raised as ``(category name, message)``, stored with it so that a resumed
    sweep says them again (a batch whose KV spilled to DDR is as true of a stored run as of a new one)."""

    record: dict[str, Any] | None
    error: str | None
    infeasible: bool
    invariant: str | None = None
    said: tuple[tuple[str, str], ...] = ()


class RunStore:
    """One JSON file per finished run, named by the run's key, in ``folder``."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)

    def path(self, key: str) -> Path:
        """The file of the run with ``key``."""
        return self.folder / f"{key}.json"

    def load(self, key: str) -> Outcome | None:
        """The stored outcome of the run with ``key``, or None (not run, or a file of another
        format or key, which is then run again)."""
        try:   # a regular file only: a named pipe in its place stopped --resume for ever
            data = parse_json(self.path(key).read_text(encoding="utf-8")) if self.path(key).is_file() else None
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("key") != key:
            return None
        record, error, said = data.get("record"), data.get("error"), data.get("warnings", [])
        whole = (isinstance(record, dict) and error is None) or (record is None and isinstance(error, str))
        whole = whole and isinstance(said, list) and all(
            isinstance(w, list) and len(w) == 2 and all(isinstance(s, str) for s in w) for w in said)
        if not whole or data.get("digest") != content_digest(key, record, error, data.get("infeasible"), said):
            raise InputError("the stored run was changed after the sweep wrote it (its contents no longer match "
                             "its digest); expected the file as the sweep wrote it: delete it to run that point "
                             "again, or run without --resume", file=self.path(key), field="digest")
        # a stored run's wall-clock speed is another session's: a resumed sweep does not report it as its own
        return Outcome(stable(record) if isinstance(record, dict) else record, error, bool(data.get("infeasible")),
                       said=tuple((category, message) for category, message in said))

    def save(self, key: str, name: str, outcome: Outcome) -> None:
        """Write the outcome of the run with ``key`` (``name`` is for a reader of the file):
        to a temporary file, flushed to disk, then renamed over the final name."""
        self.folder.mkdir(parents=True, exist_ok=True)
        # without the wall-clock speed: stored runs hold only what the inputs determine; through JSON
        # and back, so that the digest is of what the file holds (number keys become text)
        record = json.loads(json.dumps(stable(outcome.record))) if outcome.record is not None else None
        said = [list(warning) for warning in outcome.said]
        digest = content_digest(key, record, outcome.error, outcome.infeasible, said)
        text = json.dumps({"format": FORMAT, "key": key, "name": name, "record": record, "error": outcome.error,
                           "infeasible": outcome.infeasible, "warnings": said, "digest": digest})
        write_text(self.path(key), text, sync=True)

    def clear(self) -> None:
        """Remove every stored run (and any temporary file a killed sweep left), and nothing else:
        ``--out`` may name a folder whose ``runs/`` holds the user's own files."""
        if self.folder.is_dir():
            for path in self.folder.iterdir():
                if _RUN_FILE.fullmatch(path.name) and path.is_file():
                    try:
                        path.unlink()
                    except OSError as exc:   # another user's runs/: a PermissionError traceback before
                        raise InputError(f"cannot remove {path}, a run the previous sweep into this folder stored: "
                                         f"{exc.strerror or exc}; expected a folder this sweep may write (or "
                                         "--resume, which keeps them)", field="--out") from None

    def check_writable(self) -> None:
        """Refuse, before any run, a folder the finished runs cannot be written into: the sweep
        stopped at the first run that finished, its simulation lost."""
        try:
            check_folder(self.folder, "--out")
        except InputError as exc:
            raise InputError(f"{exc.message}, the folder where the sweep keeps each finished run for --resume",
                             field="--out") from None


def content_digest(key: str, record: Any, error: Any, infeasible: Any, said: Any = ()) -> str:
    """SHA-256 of what a run file stores, as JSON (floats written as ``repr`` writes them, so the
    digest of a file read back equals the digest it was written with); ``said`` its warnings."""
    text = json.dumps({"key": key, "record": record, "error": error, "infeasible": infeasible,
                       "warnings": [list(warning) for warning in said]}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


__all__ = ["Outcome", "RunStore", "content_digest"]
