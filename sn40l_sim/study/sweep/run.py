"""Running a sweep: every run of :mod:`.plan` in parallel processes, the records collected in run
order into one ``results.json`` / ``results.csv`` (plus ``failures.json`` and the section's plot).

Runs go to a :class:`concurrent.futures.ProcessPoolExecutor`; each task carries its run's loaded
specs, and the records come back in run order whatever order the processes finish in. A run that
fails is reported with its name and one-line error; the others still run.
"""
from __future__ import annotations

import concurrent.futures as cf
import json
import os
import sys
from pathlib import Path
from typing import Any

from tqdm import tqdm

from sn40l_sim.errors import InfeasibleError, InputError
from sn40l_sim.hardware.legacy import upgrade_dotted
from sn40l_sim.hardware.spec import NodeSpec
from sn40l_sim.report.plot_csv import plot_csv
from sn40l_sim.report.results import write_results
from sn40l_sim.study.assemble import Assembly
from sn40l_sim.study.runner import simulate_assembly
from sn40l_sim.study.sweep.load import Sweep, load_sweep
from sn40l_sim.study.sweep.plan import SweepRun, expand_runs


class SweepRecords(list):
    """The records of a sweep (a ``list`` of dicts) plus ``failures``: ``(point name, one-line
    error)`` for every point that did not run."""

    def __init__(self, records=(), failures=(), total: int | None = None) -> None:
        super().__init__(records)
        self.failures: list[tuple[str, str]] = list(failures)
        #: runs that did not fit, with ``infeasible: skip`` (name, one-line reason)
        self.skipped: list[tuple[str, str]] = []
        #: runs attempted (records + failures + skipped)
        self.total = len(self) + len(self.failures) if total is None else total




def run_sweep(experiment_path: str | Path, out_dir: str | Path, jobs: int | None = None, progress: bool = True,
              sets: dict[str, Any] | None = None, *, sweep: Sweep | None = None) -> SweepRecords:
    """Load, run and write a sweep: ``OUT/results.json``, ``OUT/results.csv``, ``OUT/failures.json``
    (``[{"point", "kind": "error" | "infeasible", "error"}]``, empty when every run gave a record)
    and, when the section has ``plot:``, ``OUT/sweep.png``. Failures are printed on stderr.

    Parameters
    ----------
    experiment_path : str or Path
        An experiment file with a ``sweep:`` section.
    out_dir : str or Path
        Output folder (created).
    jobs : int, optional
        Worker processes (default ``os.cpu_count()``; 1 runs in this process).
    progress : bool
        Show a tqdm progress bar on stderr.
    sets : dict, optional
        Dotted path -> value applied to every point (see :func:`load_sweep`).
    sweep : Sweep, optional
        The already loaded sweep of ``experiment_path`` with ``sets`` (saves loading it twice).

    Returns
    -------
    SweepRecords
        The records (a list of dicts, in point order) with ``.failures`` and ``.skipped``.

    Raises
    ------
    InputError
        For a bad experiment or sweep section (before anything runs), or a ``plot:`` naming a
        column the results do not have (after they are written).
    """
    sweep = sweep if sweep is not None else load_sweep(experiment_path, sets)
    out_dir = Path(out_dir)
    records = run_points(sweep, jobs, progress)
    for name, error in records.failures:
        print(f"point {name} failed: {error}", file=sys.stderr)
    out_dir.mkdir(parents=True, exist_ok=True)
    listed = [{"point": n, "kind": "error", "error": e} for n, e in records.failures]
    listed += [{"point": n, "kind": "infeasible", "error": e} for n, e in records.skipped]
    (out_dir / "failures.json").write_text(json.dumps(listed, indent=2) + "\n", encoding="utf-8")
    _, csv_path = write_results(records, out_dir)
    if records and sweep.plot is not None:
        _plot(sweep, csv_path, out_dir / "sweep.png")
    return records


def _plot(sweep: Sweep, csv_path: Path, out: Path) -> Path:
    spec = sweep.plot or {}
    hue = spec.get("hue")
    where = spec.get("where") or {}
    return plot_csv(csv_path, x=spec["x"], y=spec["y"], hue=[hue] if isinstance(hue, str) else hue,
                    out=out, kind=spec.get("kind", "line"), logx=bool(spec.get("logx", False)),
                    logy=bool(spec.get("logy", False)),
                    where={str(k): str(v) for k, v in where.items()}, label=spec.get("label"))


def _node_field(node: NodeSpec, dotted: str) -> Any:
    out: Any = node
    for part in upgrade_dotted(dotted).split("."):
        out = out[part] if isinstance(out, dict) else getattr(out, part)   # memory tiers are a mapping
    return out


def simulate_run(run: SweepRun, on_result=None) -> dict:
    """The record of one run (what a worker process does).

    Raises
    ------
    InputError
        For an infeasible point (a batch that does not fit, ...), located in the experiment file.
    """
    sp = run.sweep_point
    asm = Assembly(run.experiment, run.node, run.model)
    (record,) = simulate_assembly(asm, only=[run.point], on_result=on_result)
    record["name"] = run.name
    record["sweep_point"] = sp.name
    # hardware axes as the node holds them (numbers in bytes/s, Hz, counts), others as written
    record["sweep"] = {k: _node_field(run.node, sp.hardware_axes[k]) if k in sp.hardware_axes else v
                       for k, v in sp.values.items()}
    return record


def _task(args: tuple) -> tuple[int, dict | None, str | None, bool]:
    """``(index, record, error, infeasible)`` of one run; never raises."""
    index, run = args
    try:
        return index, simulate_run(run), None, False
    except InfeasibleError as exc:
        return index, None, str(exc), True
    except InputError as exc:
        return index, None, str(exc), False
    except Exception as exc:  # noqa: BLE001 - a bug at one point must not lose the others
        return index, None, f"internal error {type(exc).__name__}: {exc}", False


def run_points(sweep: Sweep, jobs: int | None = None, progress: bool = True) -> SweepRecords:
    """Run every point of ``sweep`` in ``jobs`` processes (default ``os.cpu_count()``; 1 runs in
    this process) with a progress bar on stderr; the records in point order, with the failures."""
    runs, failures = expand_runs(sweep)
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(runs) or 1))
    tasks = list(enumerate(runs))
    results: dict[int, tuple] = {}
    bar = tqdm(total=len(tasks), desc=f"sweep {sweep.name}", unit="run", file=sys.stderr,
               disable=not progress, dynamic_ncols=True)
    try:
        if jobs == 1:
            for task in tasks:
                index, *result = _task(task)
                results[index] = tuple(result)
                bar.update(1)
        else:
            with cf.ProcessPoolExecutor(max_workers=jobs) as pool:
                for future in cf.as_completed([pool.submit(_task, task) for task in tasks]):
                    index, *result = future.result()
                    results[index] = tuple(result)
                    bar.update(1)
    finally:
        bar.close()
    out = SweepRecords()
    for i, run in enumerate(runs):
        record, error, infeasible = results[i]
        if error is None:
            out.append(record)
        elif infeasible and sweep.infeasible == "skip":
            out.skipped.append((run.name, error))
        else:
            failures.append((run.sweep_point.index, run.name, error))
    # sorted() is stable: a sweep point's own runs keep their order
    out.failures = [(name, error) for _, name, error in sorted(failures, key=lambda f: f[0])]
    out.total = len(out) + len(out.failures) + len(out.skipped)
    return out
