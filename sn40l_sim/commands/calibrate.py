"""Fit the hardware YAML's calibrated parameters to the calibration measurements.

The parameters are the calibrated: block and each memory tier's efficiency (memory.<tier>.efficiency),
fitted by bounded least squares within the physical bounds declared in the schema
(sn40l_sim/hardware/spec.py), with a weak pull towards the YAML's current values
(sn40l_sim/study/calibration.py says why), on the simulator linearised by finite differences from
the YAML's values (sn40l_sim/study/linear_fit.py: one pass per parameter, reused by the fit and by
the leave-one-out refits). Each calibration point is also predicted by a fit without it, for
validate's leave-one-out column: on that linearisation (the default, no more simulation), or, with
--leave-one-out refit, by fitting the simulator itself again without each point (minutes; the
refits share the passes they repeat). Prints the fitted values, why the fit stopped (converged, its
budget spent, or a jump it cannot resolve) and every residual; with --write,
rewrites each value on the line it was read from (in the socket file, a base: file it starts from,
or a node file's socket_overrides), with a provenance note. With --starts K the fit also runs from
K-1 points spread over the parameters' bounds (a seeded Latin hypercube; the prior stays the YAML's
values) and keeps the lowest cost, since a fit from one point can stop where a mapper plan
switches. Each simulation pass of the fit is reported on stderr as it ends (--quiet: none). No
parameter is specific to one experiment: the same values serve every experiment on that hardware.

example:
  python -m sn40l_sim calibrate                 # fit and print
  python -m sn40l_sim calibrate --write         # and write the values into hw_configs/sn40l.yaml
  python -m sn40l_sim calibrate --starts 8      # fit from the YAML's values and 7 more starts, keep the best
  python -m sn40l_sim calibrate --write --leave-one-out refit   # and the leave-one-out column by true refits
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

from sn40l_sim.commands.argtypes import input_path

#: most starting points --starts takes: each start is a fit of its own (the default 40 passes of a
#: few CPU seconds each, so 1,024 starts are about a day of CPU), and the starts are drawn as one
#: Latin hypercube up front (a billion asked for held the run at its first step, allocating it)
MAX_STARTS = 1024


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``calibrate``'s arguments."""
    parser.add_argument("references", nargs="*", type=input_path, metavar="REFERENCE.yaml",
                        help="reference files (default: experiments/reference/*.yaml)")
    parser.add_argument("--hardware", type=input_path, default=None,
                        help="socket or node YAML whose calibrated values are fitted and written; its socket must be the "
                             "one the calibration experiments run on, but for the calibrated values (default: the "
                             "project's hw_configs/sn40l.yaml, from any folder)")
    parser.add_argument("--max-evaluations", type=int, default=40,
                        help="simulation budget of the fit, in passes over the calibration points, the finite "
                             "differences' included (default: %(default)s)")
    parser.add_argument("--starts", type=int, default=1,
                        help=f"fit from this many starting points (at most {MAX_STARTS:,}), the YAML's values first, and keep the lowest "
                             "cost; --max-evaluations is each start's budget (default: %(default)s)")
    parser.add_argument("--leave-one-out", choices=("linearised", "refit"), default="linearised",
                        help="how each calibration point is predicted without it: by a refit on the fit's "
                             "linearisation (no more simulation), or by refitting the simulator itself without "
                             "it, every proposed step simulated (minutes) (default: %(default)s)")
    parser.add_argument("--write", action="store_true",
                        help="write the fitted values back into --hardware and, for a fit of the project's "
                             "hw_configs/sn40l.yaml to every reference file, validate's leave-one-out column into "
                             "experiments/reference/leave_one_out.json (a column of true refits made at the same "
                             "values and measurements is kept unless --leave-one-out refit)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def default_hardware() -> Path:
    """The project's SN40L socket file: as the relative path when run from the repository (as the
    messages print it), else by its absolute path, so calibrate works from any folder."""
    from sn40l_sim.study.validation import DEFAULT_REFERENCE_DIR

    project = DEFAULT_REFERENCE_DIR.parents[1] / "hw_configs" / "sn40l.yaml"
    local = Path("hw_configs/sn40l.yaml")
    return local if local.is_file() and local.resolve() == project.resolve() else project


def _every_reference(given: list[Path]) -> bool:
    """Whether the reference files given are the default set (none given, or all of them and no
    other: a fit that also used a file of the user's is not the one validate's leave-one-out column
    and the hardware file's provenance describe)."""
    from sn40l_sim.study.validation import DEFAULT_REFERENCE_DIR

    return not given or {p.resolve() for p in given} == {p.resolve() for p in DEFAULT_REFERENCE_DIR.glob("*.yaml")}


def _refits_of(column) -> bool:
    """Whether experiments/reference/leave_one_out.json already holds a column of true refits made at
    ``column``'s calibrated values, measurements and inputs: ``calibrate --write`` from the shipped values
    (the documented way to refit) replaced it with the linearised guess, which can predict what no
    simulation gives. An unreadable file is replaced."""
    from sn40l_sim.errors import InputError
    from sn40l_sim.study.leave_one_out import REFIT_METHOD, LeaveOneOut

    try:
        shipped = LeaveOneOut.read()
    except InputError:
        return False
    return shipped is not None and shipped.method.startswith(REFIT_METHOD) and shipped.current(column.fitted) \
        and shipped.measurements == column.measurements and set(shipped.fitted) == set(column.fitted) \
        and shipped.inputs == column.inputs


def _stopped(result, budget: int) -> str:
    """One line saying why the (kept) fit stopped: a fit its budget stopped is no optimum, and one
    that took no step prints its start as 'fitted'."""
    moved = result.fitted != result.start
    if result.stopped == "budget":
        return (f"the fit stopped at its budget of {budget} passes (--max-evaluations), "
                + ("after moving: a larger budget may lower the cost further" if moved else
                   "before taking a step: the fitted values are its start; give a larger budget"))
    if result.stopped == "resolution":
        return ("the fit stopped where the simulator jumps on a scale finer than its finite differences (a mapper "
                "plan switching): no step it could resolve lowers the cost" + ("" if moved else
                                                                             "; the fitted values are its start"))
    return ("the fit converged: on a Jacobian measured where it ended, no step lowers the cost"
            + ("" if moved else "; the fitted values are its start"))


def run(args: argparse.Namespace) -> int:
    """Fit, print, and optionally write back."""
    from sn40l_sim.errors import InputError
    from sn40l_sim.hardware.loader import load_hardware
    from sn40l_sim.hardware.spec import calibrated_parameters
    from sn40l_sim.study.calibration import (
        bound_reached,
        calibration_references,
        fit,
        fitted_names,
        fixed_parameters,
        leave_one_out,
    )
    from sn40l_sim.study.calibration_file import check_writable, write_back, write_targets
    from sn40l_sim.study.calibration_hardware import check_fitted_hardware
    from sn40l_sim.study.evaluation import LoadedExperiments
    from sn40l_sim.study.leave_one_out import (
        LEAVE_ONE_OUT,
        REFIT_METHOD,
        LeaveOneOut,
        fitted_measurements,
        inputs_digest,
        refit_leave_one_out,
    )
    from sn40l_sim.study.validation import compare, format_table, load_references, prefill_readers, record_readers

    references = load_references(args.references)
    if args.hardware is None:
        args.hardware = default_hardware()
    node = load_hardware(args.hardware)
    socket = node.socket
    start = calibrated_parameters(socket)
    # the fit's own limits, checked before any simulation pass is spent
    if args.starts < 1:
        raise InputError(f"expected at least 1 starting point, got {args.starts}", field="--starts")
    if args.starts > MAX_STARTS:
        raise InputError(f"expected at most {MAX_STARTS:,} starting points, got {args.starts:,} (each start is a fit of up "
                         "to --max-evaluations simulation passes, a few CPU seconds each)", field="--starts")
    if not calibration_references(references):   # a fit to nothing would keep the prior and rewrite files
        named = ", ".join(map(str, args.references)) or "experiments/reference/"
        raise InputError(f"no calibration measurement (calibration: true, with a value) in {named}: nothing to "
                         "fit to", field="REFERENCE.yaml")
    needed = 1 + len(fitted_names(socket))   # the start and one finite difference per parameter
    if args.max_evaluations < needed:
        raise InputError(f"a fit of {needed - 1} parameters needs at least {needed} passes, got "
                         f"{args.max_evaluations}", field="--max-evaluations")

    if args.write:
        # what --write will write, checked before any pass is spent: a read-only file (or a value the
        # file does not write) was refused only after the fit, minutes of it with --leave-one-out refit
        targets = list(write_targets(args.hardware, fitted_names(socket)))
        writes_column = _every_reference(args.references) and \
            default_hardware().resolve() in {f.resolve() for f in targets}
        check_writable(targets + ([LEAVE_ONE_OUT] if writes_column else []))

    loaded = LoadedExperiments()  # each experiment parsed and assembled once for the whole fit
    # the fit simulates the experiments' own hardware: it must be the one whose values are fitted
    experiments = sorted({r.experiment_path for r in references if r.measurement.calibration})
    check_fitted_hardware(socket, args.hardware, loaded.sockets(experiments))
    # ... but for the calibrated values: one whose node overrides one (socket_overrides), or that runs on
    # another copy of the file, is fitted at the values tried in its place, and --write does not reach it
    for experiment, sockets in loaded.sockets(experiments).items():
        other = next(((n, theirs[n].value) for theirs in map(calibrated_parameters, sockets)
                      for n in fitted_names(socket) if theirs[n].value != start[n].value), None)
        if other is not None:
            print(f"note: {experiment} runs on {other[0]} {other[1]:g}, not {start[other[0]].value:g} as "
                  f"{args.hardware} says: the fit simulates it at the values it tries, but what --write writes "
                  "will not reach it (its node's socket_overrides, or another socket file, set its own)")

    def evaluate(refs, calibrated):
        overrides = {f"socket.{path}": v for path, v in calibrated.items()}
        # a point is simulated only if a measurement reads it, and its prefill only if one reads that
        readers, prefill = record_readers(refs), prefill_readers(refs)
        return compare(refs, lambda path: loaded.records(path, serve=False, hardware_overrides=overrides,
                                                         reads=readers[path], reads_prefill=prefill[path]))

    started = time.perf_counter()
    budget = args.max_evaluations * args.starts

    def progress(passes: int, cost: float) -> None:
        if not args.quiet:
            print(f"calibrate: simulation pass {passes} of at most {budget}, cost {cost:.4g}, "
                  f"{time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)

    if not args.quiet:
        used = [r for r in references if r.measurement.calibration and r.measurement.value is not None]
        names = fitted_names(socket)
        print(f"calibrate: fitting {len(names)} parameters of {args.hardware} to {len(used)} calibration "
              f"measurements; each pass simulates {len({r.experiment_path for r in used})} experiment(s): the "
              f"start, {len(names)} finite differences, then the steps they propose"
              + (f"; from {args.starts} starting points" if args.starts > 1 else ""), file=sys.stderr, flush=True)
    result = fit(references, socket, evaluate, max_evaluations=args.max_evaluations, progress=progress,
                 starts=args.starts)
    print(f"{'parameter':34s} {'start':>12} {'fitted':>12}")
    for i, (name, s, f) in enumerate(zip(result.names, result.start, result.fitted, strict=True)):
        low, high = start[name].low, start[name].high
        side = bound_reached(f, low, high)
        # a fit its budget stopped has not found that it would go further; one that stopped at a jump
        # has, only if the cost falls past the bound (a parameter the measurements leave alone would not)
        pressing = result.falling[i] == side if result.falling else result.stopped == "converged"
        further = ": the fit would go further; docs/validation.md" if result.stopped != "budget" and pressing else ""
        note = f"  (at its {side} bound, {low if side == 'lower' else high:g}{further})" if side else ""
        print(f"{name:34s} {s:12.6g} {f:12.6g}{note}")
    for name, why in fixed_parameters(socket).items():
        print(f"{name:34s} {start[name].value:12.6g} (not fitted: {why})")
    print(_stopped(result, args.max_evaluations))
    if not args.quiet and len(result.start_costs) > 1:
        ended = ", ".join(f"{i}: {cost:.4g}" for i, cost in enumerate(result.start_costs))
        print(f"calibrate: cost at the end of each start (0: the YAML's values) {ended}; kept start "
              f"{result.kept_start}", file=sys.stderr, flush=True)
    fitted = dict(zip(result.names, result.fitted, strict=True))
    if args.leave_one_out == "refit":
        if not args.quiet:
            print(f"calibrate: {result.passes} passes, {time.perf_counter() - started:.0f} s; leave one out, fitting "
                  "the simulator again without each calibration point", file=sys.stderr, flush=True)
        # every refit starts from the values the full fit started from and is pulled towards them, as
        # it was: the fitted values were fitted to the point left out, so a refit pulled towards them
        # read it (without other points it predicted the point at the fit to it, within tolerance
        # whatever was measured)

        spent: list[str] = []   # refits their budget stopped before any step: they predict at the start

        def refitted(point: str, simulated: int, refit) -> None:
            if refit.stopped == "budget" and refit.fitted == refit.start:
                spent.append(point)
            if not args.quiet:
                print(f"calibrate: refitted without {point}; {simulated} passes simulated, "
                      f"{time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)

        predictions = refit_leave_one_out(references, socket, evaluate, args.max_evaluations, refitted)
        caveat = "" if not spent else (
            f"; {len(spent)} of {len(predictions)} refits spent their budget of {args.max_evaluations} passes before "
            "taking a step, so they predict their point at the hardware file's values (a larger --max-evaluations)")
        loo = LeaveOneOut(fitted, predictions, method=f"{REFIT_METHOD}, every step simulated (study/leave_one_out.py, "
                          "refit_leave_one_out)" + caveat)
    else:
        if not args.quiet:
            print(f"calibrate: {result.passes} passes, {time.perf_counter() - started:.0f} s; leave one out, "
                  "refitting without each calibration point on the fit's Jacobian (no more passes)",
                  file=sys.stderr, flush=True)
        loo = LeaveOneOut(fitted, leave_one_out(result, socket, evaluate), method="refit without the point on the "
                          "simulator linearised by the fit (its Jacobian; study/calibration.py, leave_one_out)")
    if len(calibration_references(references)) == 1:   # else '1 of 1 predicted' reads as a test passed
        loo = replace(loo, method=loo.method + "; the only calibration point: a fit without it has no measurement, "
                      f"so it keeps {args.hardware}'s values, where the point is predicted")
    print()
    print(format_table(result.comparisons, loo.predictions))
    print(f"leave-one-out: {loo.method}")
    if args.write:
        every = _every_reference(args.references)
        source = ("the calibration points of experiments/reference/ (SnapStream Tables 4 and 5, prefill overhead, "
                  "kernel looping); see docs/validation.md") if every else \
            f"the calibration points of {', '.join(map(str, args.references))}"
        files = write_back(args.hardware, result, f"fitted by `python -m sn40l_sim calibrate` to {source}")
        project = default_hardware().resolve() in {f.resolve() for f in files}
        kept = ""
        if every and project:
            # validate's leave-one-out column is of the whole reference set and of the project's socket
            # file; it is shown while that file holds the values it was computed at, so it records them
            # as written (rounded to the digits a line keeps), not as fitted
            written = calibrated_parameters(load_hardware(args.hardware).socket)
            column = replace(loo, fitted={k: written[k].value for k in loo.fitted},
                             measurements=fitted_measurements(references),
                             inputs=inputs_digest(loaded, references, list(loo.fitted)))
            if args.leave_one_out == "linearised" and _refits_of(column):
                kept = (" (experiments/reference/leave_one_out.json keeps its column of true refits, made at these "
                        "values and measurements, rather than the linearised guess; --leave-one-out refit makes it "
                        "again)")
            else:
                files.append(column.write())
        why = "validate's leave-one-out column is of every reference file" if not every else \
            "validate's leave-one-out column is of the project's hw_configs/sn40l.yaml"
        print(f"\nwrote the fitted values into {', '.join(map(str, files))}"
              + (kept if every and project else f" (not experiments/reference/leave_one_out.json: {why})"))
    return 0
