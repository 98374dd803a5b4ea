"""Print every reference measurement beside the simulated value and the error.

Measurements come from experiments/reference/*.yaml (or the files given). Calibration points are
marked as such; entries the paper measured but this project holds back are printed as
predictions. The leave-one-out column (calibrate --write, docs/validation.md) is shown for the
measurements of experiments/reference/ only: a file of your own was not part of that fit. Exit
status 1 when a calibration point is outside its tolerance.

example:
  python -m sn40l_sim validate
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from sn40l_sim.commands.argtypes import input_path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``validate``'s arguments."""
    parser.add_argument("references", nargs="*", type=input_path, metavar="REFERENCE.yaml",
                        help="reference files (default: experiments/reference/*.yaml)")
    parser.add_argument("--hardware", type=input_path, default=None,
                        help="socket YAML whose calibrated values the leave-one-out column must match "
                             "(default: the project's hw_configs/sn40l.yaml, from any folder); the experiments "
                             "run on the hardware they name, so one of another socket is refused")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def run(args: argparse.Namespace) -> int:
    """Simulate the referenced points, print the table; 1 if a calibration point misses."""
    from sn40l_sim.commands.calibrate import default_hardware
    from sn40l_sim.hardware.loader import load_hardware
    from sn40l_sim.hardware.spec import calibrated_parameters
    from sn40l_sim.study.calibration_hardware import check_validated_hardware
    from sn40l_sim.study.evaluation import LoadedExperiments
    from sn40l_sim.study.leave_one_out import LeaveOneOut, inputs_digest
    from sn40l_sim.study.validation import (
        DEFAULT_REFERENCE_DIR,
        compare,
        format_table,
        load_references,
        prefill_readers,
        record_readers,
    )

    given = args.hardware is not None
    if args.hardware is None:   # a path relative to the folder it runs from was 'file not found' elsewhere
        args.hardware = default_hardware()
    # the sweeps the reference check plans are simulated as planned, not planned again
    planned: dict = {}
    references = load_references(args.references, planned)
    loaded = LoadedExperiments(planned)
    loo = LeaveOneOut.read()
    # the hardware the leave-one-out column is checked against: a bad --hardware is refused before
    # the simulations, not after them
    socket = load_hardware(args.hardware).socket if loo is not None or given else None
    if given:   # ... and one the experiments do not run on, whose figures the table would seem to give
        check_validated_hardware(socket, args.hardware, loaded.sockets(sorted({r.experiment_path for r in references})))
    # a point is simulated only if a measurement reads it, and its prefill only if one reads that
    readers, prefill = record_readers(references), prefill_readers(references)

    def simulate(path):
        if not args.quiet:
            print(f"validate: simulating {path} ...", file=sys.stderr, flush=True)
        return loaded.records(path, serve=False, reads=readers[path], reads_prefill=prefill[path])

    comparisons = compare(references, simulate)
    if loo is not None:
        # the column is of the shipped reference files: a file of the user's (a copy of one, whose ids
        # are the shipped ones, too) was not fitted, and its measured values may differ
        shipped = {c.reference.measurement.id for c in comparisons
                   if Path(c.reference.origin[0]).resolve().parent == DEFAULT_REFERENCE_DIR}
        loo = replace(loo, predictions={k: v for k, v in loo.predictions.items() if k in shipped})
        if not loo.predictions:
            loo = None
    if loo is not None:
        # the refits were fitted to the shipped measurements as they read then: one edited since (a
        # value, a tolerance, a point added or held back) leaves every other point's prediction stale
        shipped_refs = [c.reference for c in comparisons
                        if Path(c.reference.origin[0]).resolve().parent == DEFAULT_REFERENCE_DIR]
        changed = loo.changed_measurement(shipped_refs)
        if not loo.current({k: p.value for k, p in calibrated_parameters(socket).items()}):
            print(f"note: the leave-one-out predictions are for other calibrated values than {args.hardware}'s; "
                  "rerun `python -m sn40l_sim calibrate --write`")
            loo = None
        elif loo.measurements is None or changed is not None:
            why = f"were fitted to other measurements than experiments/reference/'s now ({changed})" if changed else \
                "do not record the measurements they were fitted to"
            print(f"note: the leave-one-out predictions {why}; rerun `python -m sn40l_sim calibrate --write "
                  "--leave-one-out refit`")
            loo = None
        elif loo.inputs != inputs_digest(loaded, load_references([]) if args.references else references,
                                         list(loo.fitted)):
            # the calibrated values and measurements as they were, but a hardware, model or experiment
            # file of the calibration points (all of them: each refit fitted to the others) edited
            # since: the predictions are of another simulation
            why = "do not record the inputs they were made for" if loo.inputs is None else \
                "were made for other inputs than the calibration points' experiments now (their hardware, model " \
                "or experiment files)"
            print(f"note: the leave-one-out predictions {why}; rerun `python -m sn40l_sim calibrate --write "
                  "--leave-one-out refit`")
            loo = None
    print(format_table(comparisons, loo.predictions if loo is not None else None))
    if loo is not None and loo.method:
        print(f"leave-one-out: {loo.method}")
    missed = [c for c in comparisons if c.reference.measurement.calibration and c.ok is False]
    return 1 if missed else 0
