"""How much of a decode step each calibrated parameter accounts for: the fraction of the step that
vanishes when that parameter alone goes to its ideal value (a latency to 0, an efficiency or a
bandwidth to its upper bound), the others kept at their fitted values. This is the table of
docs/validation.md ("How much of the step each fitted parameter accounts for") and the check of the
project's aim that no fitted parameter carries more than 25% of the main experiment's step.

    python scripts/parameter_shares.py                      # the main experiment, about 10 s cold
    python scripts/parameter_shares.py --experiment experiments/snapstream_table5.yaml --limit 0.25

Every point of the experiment (every run of a sweep) is simulated once at the fitted values and
once per parameter (steps only, no serving), in this process. Parameters no calibration measurement informs are left out, as
``calibrate`` leaves them (``study.calibration.fixed_parameters``). Prints one row per parameter and
point; exits with status 1 if a share is above ``--limit``, 0 otherwise. Nothing is read from a file
of expected values.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from sn40l_sim.errors import InfeasibleError, InputError  # noqa: E402
from sn40l_sim.study.assemble import Assembly  # noqa: E402
from sn40l_sim.study.calibration import fitted_names, parameter_bounds  # noqa: E402
from sn40l_sim.study.evaluation import LoadedExperiments  # noqa: E402
from sn40l_sim.study.sweep.load import load_sweep  # noqa: E402

#: the project's aim for the largest share of one fitted parameter (docs/validation.md)
LIMIT = 0.25


def ideal_value(path: str, low: float, high: float) -> float:
    """The value of the calibrated parameter at ``path`` that makes the machine fastest: its lower
    bound (0) for a latency (``..._s``), its upper bound for a bandwidth (``..._per_s``) or an
    efficiency.

    >>> ideal_value("calibrated.sync_latency_s", 0.0, 1e-4), ideal_value("memory.hbm.efficiency", 0.3, 1.0)
    (0.0, 1.0)
    >>> ideal_value("calibrated.config_load_bytes_per_s", 1e9, 1.6e12)
    1600000000000.0
    """
    return low if path.endswith("_s") and not path.endswith("_per_s") else high


def shares(experiment: Path) -> list[tuple[str, str, float, float, float]]:
    """``(parameter, point, step at the fitted values, step at the ideal value, share)`` for every
    fitted parameter and every point of ``experiment`` (seconds; share = 1 - ideal / fitted)."""
    loaded = LoadedExperiments()
    assembled = loaded.load(experiment)      # an Assembly, or a sweep's runs (each with its own)
    reads = None
    if not isinstance(assembled, Assembly) and load_sweep(experiment).infeasible == "skip":
        # as `sweep` runs it: a run that does not fit is skipped, not the end of the table
        reads = []
        for run in assembled:
            try:
                loaded.records(experiment, serve=False, reads_prefill=(), reads=[run.name])
            except InfeasibleError:
                continue
            reads.append(run.name)
        if not reads:
            raise InputError(f"{experiment}: no run of the sweep fits (infeasible: skip skipped them all)")
    base = loaded.records(experiment, serve=False, reads_prefill=(), reads=reads)
    node = assembled.node if isinstance(assembled, Assembly) else assembled[0].assembly.node
    bounds = parameter_bounds(node.socket)
    rows = []
    for path in fitted_names(node.socket):
        ideal = ideal_value(path, *bounds[path])
        records = loaded.records(experiment, serve=False, reads_prefill=(), reads=reads,
                                 hardware_overrides={f"socket.{path}": ideal})
        for fitted, faster in zip(base, records, strict=True):
            step, ideal_step = fitted["decode_step_s"], faster["decode_step_s"]
            rows.append((path, fitted["name"], step, ideal_step, 1 - ideal_step / step))
    return rows


def _share(text: str) -> float:
    """An argparse type: a share above 0 and at most 1 (NaN would compare false and pass everything)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"expected a share above 0 and at most 1, got {text!r}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--experiment", type=Path, default=REPO / "experiments" / "deepseek_tp16.yaml",
                        help="an experiment (a sweep's runs each count as a point); default: the main experiment")
    parser.add_argument("--limit", type=_share, default=LIMIT, help="largest share allowed (default 0.25)")
    args = parser.parse_args(argv)
    try:
        rows = shares(args.experiment)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    width = max(14, *(len(point) for _, point, *_ in rows))
    print(f"{'parameter':38s} {'point':{width}s} {'step ms':>9s} {'ideal ms':>9s} {'share':>7s}")
    for path, point, step, ideal_step, share in rows:
        print(f"{path:38s} {point:{width}s} {step * 1e3:9.2f} {ideal_step * 1e3:9.2f} {share:7.1%}")
    worst = max(rows, key=lambda r: r[4])
    over = worst[4] > args.limit
    print(f"largest share: {worst[0]} at {worst[1]}, {worst[4]:.1%} ({'above' if over else 'within'} "
          f"the {args.limit:.0%} aimed for)")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
