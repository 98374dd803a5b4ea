"""Why an output folder holds no results, as the run that wrote into it says: for ``compare`` and
``plot``, which were given the folder of a run that failed, was interrupted or gave no record, and
could otherwise only say that a file was missing or empty (the folder's ``status.json`` and
``failures.json``: :mod:`sn40l_sim.report.outputs`, docs/robustness.md, "Outputs").
"""
from __future__ import annotations

from pathlib import Path

from sn40l_sim.report.outputs import STATUS_FILE, read_status
from sn40l_sim.yamlio import parse_json


def run_outcome(folder: str | Path) -> str | None:
    """Why an output folder may lack a result, as its ``status.json`` says: ``"its run (run x.yaml)
    failed, as F says: ..."``, ``"... was interrupted, ..."``, ``"... is still running or was killed
    (pid N), ..."``; None when the folder has no status or its run completed. For ``compare`` and
    ``plot``, which were given the folder of a run that wrote nothing and could only say the file
    was missing.

    >>> import pathlib, tempfile
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / STATUS_FILE).write_text('{"status": "failed", "command": "run x.yaml", "error": "bad"}')
    >>> run_outcome(folder).replace(str(folder), "F"), run_outcome(folder / "none")
    ('its run (run x.yaml) failed, as F/status.json says: bad', None)
    """
    status = read_status(folder) or {}
    state, command = status.get("status"), status.get("command", "?")
    says = f"as {Path(folder) / STATUS_FILE} says"
    if state == "failed":
        return f"its run ({command}) failed, {says}" + (f": {status['error']}" if status.get("error") else "")
    if state == "interrupted":
        return f"its run ({command}) was interrupted, {says}"
    if state == "running":   # a run killed outright (SIGKILL, power) leaves this status too
        return f"its run ({command}) is still running or was killed (pid {status.get('pid', '?')}), {says}"
    return None


def no_records_reason(folder: str | Path) -> str:
    """Why a run's results file holds no record: a sweep whose every run failed or was skipped still
    writes an empty ``results.json`` and ``results.csv``, and lists the runs in ``failures.json``.

    >>> import pathlib, tempfile
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> no_records_reason(folder)
    'the run that wrote it gave no record'
    >>> _ = (folder / "failures.json").write_text('[{"point": "full[batch=1024]"}, {"point": "snap[batch=1024]"}]')
    >>> no_records_reason(folder).replace(str(folder), "F")
    'no run of its sweep gave a record: the 2 runs are in F/failures.json, with why each failed or was skipped'
    """
    failures = Path(folder) / "failures.json"
    try:
        listed = parse_json(failures.read_text(encoding="utf-8")) if failures.is_file() else None   # not a pipe
    except (OSError, ValueError):
        listed = None
    if isinstance(listed, list) and listed:
        runs = "the run is" if len(listed) == 1 else f"the {len(listed)} runs are"
        return f"no run of its sweep gave a record: {runs} in {failures}, with why each failed or was skipped"
    return "the run that wrote it gave no record"


__all__ = ["no_records_reason", "run_outcome"]
