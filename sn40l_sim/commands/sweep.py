"""Run an experiment's sweep: every point of its ``sweep:`` section in parallel processes, or on a
Dask cluster.

The section lists axes (dotted paths into the experiment, or hardware.<field> for the hardware)
with their values, combined as a grid or zipped (see sn40l_sim/study/sweep/axes.py). Each sweep point
runs the experiment's own points (KV policies x prompt lengths); the records of all points go into
OUT/results.json and OUT/results.csv in point order, with a progress bar on stderr. What `check` refuses of a run (a trace window holding no request,
say) is refused before any run starts, with exit status 2, but for two that `check` refuses and a sweep
runs around: a run that does not fit (unless the section says infeasible: skip) and a sweep point whose
values are invalid together (tp 4 with attention_dp 8). A point that fails is reported with its name
and error, also in OUT/failures.json, and the others still run (exit status 1). With a
`plot:` entry in the section, OUT/sweep.png is drawn as `python -m sn40l_sim plot` would; with
`objectives:`, the records on their Pareto front go to OUT/pareto.json/csv and OUT/pareto.png
(--no-plot writes every file but the two plots); a record without a number for an objective (an
SLO figure of an experiment without slo:) is left out of the front, and a warning says how many.

Each finished run is kept in OUT/runs/ at once: after a sweep is stopped (Ctrl-C or SIGTERM stop it
promptly, workers included, with exit status 130 or 143), `--resume` runs only the runs not kept yet
(matched by what they simulate) and writes the same results as an uninterrupted sweep. OUT/status.json
says whether the sweep is running, complete, failed or interrupted; a second sweep into the same OUT is
refused while one runs. `--scheduler local` runs on a Dask LocalCluster of --jobs workers, `--scheduler
tcp://host:8786` on a running Dask scheduler's workers (pip install -e ".[cluster]"; see
docs/distributed.md); the SN40L_SIM_SCHEDULER environment variable is read when --scheduler is not
given.

examples:
  python -m sn40l_sim sweep experiments/deepseek_sweep.yaml --out out/sweep --jobs 2
  python -m sn40l_sim sweep experiments/deepseek_sweep.yaml --out out/sweep --resume
  python -m sn40l_sim sweep experiments/deepseek_sweep.yaml --scheduler tcp://10.0.0.5:8786
  python -m sn40l_sim sweep experiments/deepseek_sweep.yaml --set serving.max_new_tokens=32
  python -m sn40l_sim sweep experiments/deepseek_sweep.yaml --set hardware.socket.memory.hbm.bytes_per_s_per_unit="819.2 GB/s"
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from sn40l_sim.commands.argtypes import input_path_text

#: the files a sweep writes into its output folder besides runs/ (a previous sweep's are removed when it
#: starts; runs/ is kept for --resume)
OUTPUTS = ("results.json", "results.csv", "failures.json", "pareto.json", "pareto.csv", "pareto.png", "sweep.png")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``sweep``'s arguments."""
    parser.add_argument("experiment", type=input_path_text, metavar="EXPERIMENT.yaml", help="experiment file with a sweep: section")
    parser.add_argument("--out", default=None, metavar="DIR",
                        help="output folder (default: out/<experiment name>)")
    parser.add_argument("--jobs", type=int, default=None, metavar="N",
                        help="worker processes (default: the number of CPUs; 1 runs in this process); with "
                             "--scheduler local, the local cluster's workers")
    parser.add_argument("--scheduler", default=None, metavar="ADDRESS",
                        help="run on Dask: 'local' (a LocalCluster on this machine) or a scheduler address such "
                             "as tcp://host:8786 (default: $SN40L_SIM_SCHEDULER, else local processes)")
    parser.add_argument("--resume", action="store_true",
                        help="keep the runs already finished in OUT/runs/ and run only the others (a stored "
                             "run changed after it was written is refused, exit status 2)")
    parser.add_argument("--set", action="append", default=[], metavar="PATH=VALUE", dest="sets",
                        help="set a field of the experiment (or hardware.<field>) for every point, not one an "
                             "axis sets (a file's path relative to the current folder); repeatable")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument("--no-plot", action="store_true",
                        help="draw neither sweep.png nor pareto.png (the other files are the same)")


def run(args: argparse.Namespace) -> int:
    """Run the sweep; 0 when every run gave a record (or was skipped as infeasible), 1 otherwise."""
    from sn40l_sim.report.outputs import output_path
    from sn40l_sim.study.sweep.sets import parse_sets

    check_jobs(args.jobs)
    args.out = output_path(args.out, "--out")
    return sweep_main(args.experiment, args.out, jobs=args.jobs, progress=not args.quiet, sets=parse_sets(args.sets),
                      scheduler=args.scheduler, resume=args.resume, plots=not args.no_plot, set_items=args.sets)


def check_jobs(jobs: int | None) -> None:
    """Refuse a ``--jobs`` below 1 (``sweep``'s, and ``run``'s, which is the sweep's process count),
    as ``run_sweep`` refuses its ``jobs``."""
    from sn40l_sim.study.sweep.executors import check_jobs as check

    check(jobs)


#: a sweep of at most this many records prints them side by side, as ``run`` prints an experiment's
TABLE_MAX_RECORDS = 8


def sweep_main(experiment: str | Path, out: Path | None = None, jobs: int | None = None, progress: bool = True,
               sets: dict | None = None, scheduler: str | None = None, resume: bool = False,
               plots: bool = True, set_items: list[str] | None = None) -> int:
    """Run a sweep, print its summary and return the exit status (``run`` delegates here when the
    experiment has a ``sweep:`` section; ``plots=False`` draws no plot, as ``--no-plot``).
    ``set_items`` are the ``--set`` arguments as given, which ``OUT/status.json``'s ``command``
    names: a field changed for every run leaves no other trace in the records (a trace's
    ``workload.rate_scale``), so without them the folder read as the file's own sweep."""
    from sn40l_sim.report.fields import RESULTS
    from sn40l_sim.report.outputs import OutputFolder
    from sn40l_sim.report.pareto import objectives_missing
    from sn40l_sim.study.sweep.base import point_sources, point_traces
    from sn40l_sim.study.sweep.executors import check_scheduler, resolve_scheduler
    from sn40l_sim.study.sweep.load import load_sweep
    from sn40l_sim.study.sweep.run import run_sweep

    chosen, field = resolve_scheduler(scheduler)
    check_scheduler(chosen, field)  # a missing extra or a malformed address is said before anything is loaded
    sweep = load_sweep(experiment, sets)  # checked (and named) before anything runs
    out = Path(out) if out is not None else Path("out") / sweep.name
    start = time.perf_counter()
    command = " ".join([f"sweep {experiment}", *(f"--set {item}" for item in set_items or ())])
    with OutputFolder(out, command=command, outputs=OUTPUTS, folders=("runs",),
                      reads=point_traces(sweep.points, sweep.doc)) as folder:
        records = run_sweep(experiment, out, jobs=jobs, progress=progress, sets=sets, sweep=sweep,
                            scheduler=scheduler, resume=resume, plots=plots)
        # the wall-clock speed of the runs simulated now, kept where run keeps it (not in the results)
        folder.note(speed=[{"name": r["name"], **r["speed"]} for r in records if "speed" in r])
        # the traces the points served (after --set and the axes): a licence may ask for the
        # attribution beside the results
        sources = point_sources(sweep.points, sweep.doc)
        if sources:
            folder.note(trace="; ".join(sources))
    wall = time.perf_counter() - start
    axes = ", ".join(a.name for a in sweep.axes)
    where = f" on Dask ({chosen})" if chosen else ""
    # a sweep point whose experiment is invalid as a whole has no runs to count: said apart
    unassembled = len(records.unassembled)
    lost = f", and {unassembled} sweep point(s) failed before any of their runs" if unassembled else ""
    print(f"{sweep.name}: {len(sweep.points)} sweep points ({sweep.mode} over {axes}); "
          f"{len(records)} of {records.total} runs gave a record{lost}, in {wall:.1f} s{where}")
    if resume:
        print(f"resumed: {records.resumed} run(s) were already done in {out / 'runs'}")
    if 0 < len(records) <= TABLE_MAX_RECORDS:
        from sn40l_sim.commands.run import capping_notes
        from sn40l_sim.report.table import side_by_side
        print(side_by_side(list(records)))
        for line in capping_notes(list(records)):
            print(line)
    for source in sources:
        print(f"note: requests from {source}")
    written = [out / "results.json", out / "results.csv"]
    if sweep.objectives:
        goals = ", ".join(f"{d}imise {c} ({_unit(RESULTS, c)})" for c, d in sweep.objectives.items())
        print(f"Pareto front: {len(records.front)} of {len(records)} records ({goals})")
        for column, empty in objectives_missing(list(records), sweep.objectives).items():
            where = sweep.doc.error(("sweep", "objectives", column),
                                    f"{empty} of {len(records)} records have no value for it and are left out of "
                                    "the Pareto front (docs/results.md says what gives it)")
            print(f"warning: {where}", file=sys.stderr)
        written += [out / "pareto.json", out / "pareto.csv"]
        if plots and records.front and len(sweep.objectives) >= 2:
            written.append(out / "pareto.png")
    if plots and records and sweep.plot is not None:
        written.append(out / "sweep.png")
    print("wrote " + ", ".join(str(p) for p in written))
    if records.skipped:
        print(f"{len(records.skipped)} run(s) did not fit and were skipped (infeasible: skip; see "
              f"{out / 'failures.json'})")
    # a run that does not fit is an outcome of the design point, not a crash: said apart from errors
    infeasible = sum(1 for name, _ in records.failures if name in records.infeasible)
    if infeasible:
        print(f"{infeasible} run(s) did not fit (infeasible; the section's infeasible: fail makes that a failure, "
              f"infeasible: skip would not; listed above and in {out / 'failures.json'})")
    if len(records.failures) > infeasible + unassembled:
        print(f"{len(records.failures) - infeasible - unassembled} run(s) failed with an error (listed above and in "
              f"{out / 'failures.json'})")
    if unassembled:
        print(f"{unassembled} sweep point(s) failed with an error before any of their runs (their experiment is "
              f"invalid as a whole; listed above and in {out / 'failures.json'})")
    if records.failures:
        return 1
    return 0


def _unit(fields, column: str) -> str:
    """The declared unit of a results column."""
    found = fields.resolve(column)
    return found[0].unit if found is not None else ""
