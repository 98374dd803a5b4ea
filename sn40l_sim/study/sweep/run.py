"""Running a sweep: every run of :mod:`.plan` on an executor (:mod:`.executors`: this process, a
process pool or a Dask cluster), the records collected in run order into one ``results.json`` /
``results.csv`` (plus ``failures.json``, the section's plot and, with objectives, the Pareto front).

One loop drives every executor: it keeps a few runs submitted per worker, and as each finishes it
stores the outcome (:mod:`.store`: written at once, so ``--resume`` skips it) and advances the
progress bar, whether the run finished in this process or on a remote worker. Each task carries its
run's loaded specs; the records come back in run order whatever order the workers finish in. A run
that fails is reported with its name and one-line error; the others still run. A run that breaks a
physical invariant (:mod:`~sn40l_sim.study.invariants`) stops the sweep: it is a bug.
"""
from __future__ import annotations

import builtins
import concurrent.futures as cf
import json
import os
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

from tqdm import tqdm

from sn40l_sim.errors import InfeasibleError, InputError, InvariantError, shown
from sn40l_sim.report.outputs import write_text
from sn40l_sim.report.results import write_results
from sn40l_sim.study.plugins import plugin_failure
from sn40l_sim.study.preflight import check_assembly
from sn40l_sim.study.runner import simulate_assembly
from sn40l_sim.study.sweep.executors import SchedulerLost, check_jobs, open_executor, usable_jobs
from sn40l_sim.study.sweep.figures import plot_sweep, write_front
from sn40l_sim.study.sweep.load import Sweep, load_sweep
from sn40l_sim.study.sweep.plan import SweepRun, code_digest, expand_runs, installed, refuse_repeated_points
from sn40l_sim.study.sweep.stamps import axis_values, stamp
from sn40l_sim.study.sweep.store import Outcome, RunStore

#: the error of a run done by a worker whose sn40l_sim sources differ from this process's
OTHER_CODE = ("internal error: the worker runs other sn40l_sim code or libraries than this process (install the same versions "
              "on every worker: docs/distributed.md)")


#: the error of a run in flight when a worker process of the local pool died (executors.RenewedPool)
WORKER_DIED = ("internal error: a worker process ended abruptly (killed, out of memory, or crashed) while this run was "
               "in flight, and the runs in flight were lost with it; --resume runs it again")


class SweepRecords(list):
    """The records of a sweep (a ``list`` of dicts) plus ``failures``: ``(point name, one-line
    error)`` for every point that did not run and fails the sweep (``infeasible`` names those that
    did not fit), and ``skipped``, those that did not fit under ``infeasible: skip``."""

    def __init__(self, records: Iterable[dict] = (), failures: Iterable[tuple[str, str]] = (),
                 total: int | None = None) -> None:
        super().__init__(records)
        self.failures: list[tuple[str, str]] = list(failures)
        #: runs that did not fit, with ``infeasible: skip`` (name, one-line reason)
        self.skipped: list[tuple[str, str]] = []
        #: names of the runs of ``failures`` that did not fit (an :class:`InfeasibleError`: the model or
        #: the batch too large for the memory, a plan larger than the node): under ``infeasible: fail``
        #: they fail the sweep, but they are reported as infeasible, not as errors of the simulator
        self.infeasible: set[str] = set()
        #: names of the sweep points of ``failures`` whose experiment failed as a whole (a combination
        #: of values that passed one by one): each stands for all its runs, which never ran
        self.unassembled: set[str] = set()
        #: runs attempted (records + failures of runs + skipped)
        self.total = len(self) + len(self.failures) if total is None else total
        #: runs whose outcome a resumed sweep found stored
        self.resumed = 0
        #: the records on the Pareto front of the section's objectives (empty without objectives)
        self.front: list[dict] = []
        #: name of each failed or skipped run -> its axis values as a record's ``sweep`` holds them
        #: (a sweep point that did not assemble: as written), so that failures.json says which values
        #: failed whatever the point's labels, in the results' units
        self.values: dict[str, dict[str, Any]] = {}


def run_sweep(experiment_path: str | Path, out_dir: str | Path, jobs: int | None = None, progress: bool = True,
              sets: dict[str, Any] | None = None, *, sweep: Sweep | None = None, scheduler: str | None = None,
              resume: bool = False, plots: bool = True) -> SweepRecords:
    """Load, run and write a sweep: ``OUT/results.json``, ``OUT/results.csv``, ``OUT/failures.json``
    (``[{"point", "kind": "error" | "infeasible", "error", "sweep": {axis: value as in results}}]``, empty
    when every run gave a record; ``infeasible`` is a run that does not fit, whether the section skips
    it or fails on it, and ``error`` its reason),
    when the section has ``plot:``, ``OUT/sweep.png``, and when it has ``objectives:``,
    ``OUT/pareto.json``, ``OUT/pareto.csv`` and (two objectives or more) ``OUT/pareto.png``. Each
    run's outcome is kept in ``OUT/runs/`` as it finishes. Failures are printed on stderr.

    Parameters
    ----------
    experiment_path : str or Path
        An experiment file with a ``sweep:`` section.
    out_dir : str or Path
        Output folder (created).
    jobs : int, optional
        Worker processes (default ``os.cpu_count()``; 1 runs in this process); with
        ``scheduler="local"``, the local cluster's workers.
    progress : bool
        Show a tqdm progress bar on stderr.
    sets : dict, optional
        Dotted path -> value applied to every point (see :func:`load_sweep`).
    sweep : Sweep, optional
        The already loaded sweep of ``experiment_path`` with ``sets`` (saves loading it twice).
    scheduler : str, optional
        ``local`` or a Dask scheduler's address (:mod:`.executors`); default: the
        ``SN40L_SIM_SCHEDULER`` environment variable, else the process pool.
    resume : bool
        Keep the runs already stored in ``OUT/runs/`` and run only the others (default: start
        afresh, removing them).
    plots : bool
        Draw ``sweep.png`` and ``pareto.png`` (default); False writes every other file the same and
        no plot (matplotlib takes a large share of a small sweep's time).

    Returns
    -------
    SweepRecords
        The records (a list of dicts, in point order) with ``.failures`` and ``.skipped``.

    Raises
    ------
    InputError
        For a bad experiment or sweep section (before anything runs), a scheduler that cannot be
        used, or a ``plot:`` naming a column the results do not have (after they are written, when
        the plots are drawn).
    """
    check_jobs(jobs)   # before anything runs, as the commands check --jobs
    if not isinstance(out_dir, (str, os.PathLike)):   # a TypeError from pathlib, after the sweep's loading
        raise InputError(f"expected the path of the output folder, got {shown(out_dir)}", field="out_dir")
    sweep = sweep if sweep is not None else load_sweep(experiment_path, sets)
    out_dir = Path(out_dir)
    store = RunStore(out_dir / "runs")
    if not resume:
        store.clear()
    records = run_points(sweep, jobs, progress, scheduler=scheduler, store=store)
    for name, error in records.failures:
        said = "did not fit (infeasible)" if name in records.infeasible else "failed"
        print(f"point {name} {said}: {error}", file=sys.stderr)
    out_dir.mkdir(parents=True, exist_ok=True)
    listed = [{"point": n, "kind": "infeasible" if n in records.infeasible else "error", "error": e,
               "sweep": records.values.get(n, {})} for n, e in records.failures]
    listed += [{"point": n, "kind": "infeasible", "error": e, "sweep": records.values.get(n, {})}
               for n, e in records.skipped]
    write_text(out_dir / "failures.json", json.dumps(listed, indent=2) + "\n")
    _, csv_path = write_results(records, out_dir)
    if sweep.objectives:
        records.front = write_front(records, sweep.objectives, out_dir, title=sweep.name, plot=plots)
    if plots and records and sweep.plot is not None:
        plot_sweep(sweep, csv_path, out_dir / "sweep.png")
    return records


#: what a worker sends back: the outcome, whether it is worth storing, its code's digest, its warnings
TaskResult = tuple[Outcome, bool, str, list[tuple[type[Warning], str]]]


def _identity() -> str:
    """What a worker's records depend on besides the run: its simulator code and its interpreter's
    and libraries' versions, both in a stored run's key (:func:`~.plan.run_parameters`), so a
    record made under another numpy is not stored under this process's key."""
    return code_digest() + "\n" + installed()


def _task(run: SweepRun) -> TaskResult:
    """What a worker does: the run's outcome, whether it is worth storing (an internal error is
    not: a resumed sweep tries it again), the digest of the worker's simulator code (a remote
    worker may have another version installed), and the warnings the run raised, as (category,
    message), for the main process to say (a worker's own stderr is not the user's: a pool's
    workers said each warning once per process, Dask's in Python's two-line format); never raises."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            (record,) = simulate_assembly(run.assembly, only=[run.point])
            outcome, keep = Outcome(record, None, False), True
        except InfeasibleError as exc:
            outcome, keep = Outcome(None, str(exc), True), True
        except InputError as exc:
            outcome, keep = Outcome(None, str(exc), False), True
        except InvariantError as exc:   # a bug: the sweep stops (exit status 3) and the run is not stored
            outcome, keep = Outcome(None, exc.detail, False, exc.invariant), False
        except Exception as exc:  # noqa: BLE001 - a bug at one point must not lose the others
            # a plug-in's own failure is the experiment's bad input, named at its line, not "internal error"
            plugin = plugin_failure(exc)
            outcome, keep = (Outcome(None, plugin, False), True) if plugin else \
                (Outcome(None, f"internal error {type(exc).__name__}: {exc}", False), False)
    said = list(dict.fromkeys((w.category, str(w.message)) for w in caught))
    return outcome, keep, _identity(), said


def _say(category: type[Warning] | str, message: str, seen: set[tuple[str, str]]) -> None:
    """Warn ``message`` unless ``seen`` holds it: each said once, however many runs raise it. A
    stored run names its category (a builtin warning class, else a plain warning)."""
    if isinstance(category, str):
        found = getattr(builtins, category, None)
        category = found if isinstance(found, type) and issubclass(found, Warning) else UserWarning
    if (category.__name__, message) not in seen:
        seen.add((category.__name__, message))
        warnings.warn(message, category, stacklevel=2)


def execute(executor: cf.Executor, tasks: Sequence[tuple[int, SweepRun]],
            window: Callable[[], int], seen: set[tuple[str, str]] | None = None) -> Iterator[tuple[int, Outcome, bool]]:
    """``(index, outcome, worth storing)`` of each task as it finishes, on any executor: at most
    ``window()`` tasks are submitted at a time, and each is submitted when a slot frees. A task
    whose worker fails (a process or a cluster worker that dies), or whose worker runs other
    simulator code than this process, gives an internal error. Each warning a task raised is said
    once (``seen``: those already said) and kept in its outcome's ``said``."""
    ours = _identity()
    seen = set() if seen is None else seen
    pending = iter(tasks)
    in_flight: dict[cf.Future, int] = {}

    def fill() -> None:
        target = max(1, window())  # asked once per fill: a cluster's answer is a round trip
        while len(in_flight) < target:
            task = next(pending, None)
            if task is None:
                return
            in_flight[executor.submit(_task, task[1])] = task[0]

    fill()
    try:
        while in_flight:
            done, _ = cf.wait(in_flight, return_when=cf.FIRST_COMPLETED)
            for future in sorted(done, key=in_flight.__getitem__):
                index = in_flight.pop(future)
                try:
                    outcome, keep, theirs, said = future.result()
                except cf.CancelledError:
                    # a task this loop did not cancel: Dask cancels every task when it loses its
                    # scheduler, which the window then says (SchedulerLost) rather than an error per run
                    window()
                    outcome, keep, theirs, said = Outcome(None, "internal error: the task was cancelled", False), \
                        False, ours, []
                except BrokenProcessPool:   # every run in flight is lost with the pool; a new one runs the rest
                    outcome, keep, theirs, said = Outcome(None, WORKER_DIED, False), False, ours, []
                except Exception as exc:  # noqa: BLE001 - the worker, not the run, failed
                    error = f"internal error {type(exc).__name__}: {exc}"
                    outcome, keep, theirs, said = Outcome(None, error, False), False, ours, []
                for category, message in said:
                    _say(category, message, seen)
                outcome = outcome._replace(said=tuple((category.__name__, message) for category, message in said))
                if theirs != ours:
                    outcome, keep = Outcome(None, OTHER_CODE, False), False
                yield index, outcome, keep
            fill()
    finally:
        for future in in_flight:
            future.cancel()


def preflight(run: SweepRun) -> None:
    """Refuse, before anything runs, a run that ``check`` refuses (a trace window holding no
    request, a request longer than the model's context: bad input, exit status 2, as ``run`` refuses
    it), but not one that does not fit, which the sweep lists as infeasible.

    Raises
    ------
    InputError
        The run's first problem, with the run's name.
    """
    try:
        with warnings.catch_warnings():   # the run says its warnings once, where it runs
            warnings.simplefilter("ignore")
            check_assembly(run.assembly, [run.point])
    except InfeasibleError:
        return
    except InputError as exc:
        exc.message += f" (sweep run {run.name})"
        raise


def _kept(store: RunStore | None, tasks: Sequence[tuple[int, SweepRun]], finished: int) -> str:
    """What a stopped sweep kept of its ``tasks``, for its last line."""
    # the files, not the outcomes gathered: a run stored as the interrupt came is kept all the same
    kept = finished if store is None else sum(store.path(r.key).is_file() for _, r in tasks)
    where = f"kept in {store.folder} (resume with --resume)" if store is not None else "not kept (no store)"
    return (f"{kept} of {len(tasks)} run(s) had finished, {where}" if kept
            else f"none of the {len(tasks)} run(s) had finished; nothing kept")


def run_points(sweep: Sweep, jobs: int | None = None, progress: bool = True, *, scheduler: str | None = None,
               store: RunStore | None = None) -> SweepRecords:
    """Run every point of ``sweep`` (:func:`~.executors.open_executor` chooses where from ``jobs``
    and ``scheduler``) with a progress bar on stderr counting finished runs; the records in point
    order, with the failures. With ``store``, the runs stored there are not run again, and each
    run is stored as it finishes."""
    runs, failures = expand_runs(sweep)
    refuse_repeated_points(sweep, runs)
    outcomes: dict[int, Outcome] = {}
    if store is not None:
        for index, run in enumerate(runs):
            found = store.load(run.key)
            if found is not None:
                outcomes[index] = found
    resumed, seen = len(outcomes), set()
    for index in sorted(outcomes):   # a stored run's warnings, as when it ran
        for category, message in outcomes[index].said:
            _say(category, message, seen)
    tasks = [(index, run) for index, run in enumerate(runs) if index not in outcomes]
    for _, run in tasks:
        preflight(run)
    if tasks and store is not None:
        store.check_writable()
    jobs = usable_jobs(jobs, scheduler) if tasks else jobs   # its warning before the bar, not on it
    bar = tqdm(total=len(runs), initial=resumed, desc=f"sweep {sweep.name}", unit="run", file=sys.stderr,
               disable=not progress, dynamic_ncols=True)
    try:
        if tasks:
            with open_executor(jobs, scheduler, len(tasks), say=lambda line: bar.write(line, file=sys.stderr)) \
                    as (executor, window):
                for index, outcome, keep in execute(executor, tasks, window, seen):
                    if outcome.invariant is not None:
                        raise InvariantError(outcome.invariant, outcome.error or "", point=runs[index].name)
                    if keep and store is not None:
                        store.save(runs[index].key, runs[index].name, outcome)
                    outcomes[index] = outcome
                    bar.update(1)
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: the workers are stopped; say what is kept
        bar.leave = False
        exc.detail = _kept(store, tasks, len(outcomes) - resumed)  # type: ignore[attr-defined]
        raise
    except SchedulerLost as exc:   # the cluster went away: what finished is kept, as on Ctrl-C
        bar.leave = False
        exc.message += f"; {_kept(store, tasks, len(outcomes) - resumed)}"
        raise
    except Exception:  # a scheduler that does not answer, an invariant broken: the bar is cleared,
        bar.leave = False  # so the error's one line stands alone (docs/robustness.md)
        raise
    finally:
        bar.close()
    out = SweepRecords()
    by_index = {sp.index: sp for sp in sweep.points}
    out.values = {name: dict(by_index[index].values) for index, name, _ in failures}
    out.unassembled = {name for _, name, _ in failures}
    for i, run in enumerate(runs):
        record, error, infeasible = outcomes[i].record, outcomes[i].error, outcomes[i].infeasible
        if error is None:
            out.append(stamp(run, record))
            continue
        out.values[run.name] = axis_values(run)
        if infeasible and sweep.infeasible == "skip":
            out.skipped.append((run.name, error))
        else:
            if infeasible:
                out.infeasible.add(run.name)
            failures.append((run.sweep_point.index, run.name, error))
    # sorted() is stable: a sweep point's own runs keep their order
    out.failures = [(name, error) for _, name, error in sorted(failures, key=lambda f: f[0])]
    out.total = len(out) + len(out.failures) - len(out.unassembled) + len(out.skipped)
    out.resumed = resumed
    return out
