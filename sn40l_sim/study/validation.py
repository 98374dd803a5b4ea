"""Measured vs simulated: the reference measurements of ``experiments/reference/`` as data, and
their comparison with the simulator (``python -m sn40l_sim validate``).

Each measurement names a results field (``quantity``, with ``key`` for mapping fields such as
``prefill_kernel_share``), the experiment and point whose record holds it, a tolerance, its source,
and whether it is a calibration point. Points are simulated once each, whatever the number of
measurements that read them.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sn40l_sim.errors import InputError, shown, with_article
from sn40l_sim.report.fields import RESULTS
from sn40l_sim.report.records import PREFILL_STEP_FIELDS
from sn40l_sim.schema import validate
from sn40l_sim.study.experiment import load_experiment
from sn40l_sim.study.points import points
from sn40l_sim.study.preflight import require_workload
from sn40l_sim.study.reference_schema import Measurement, ReferenceFile, check_quantity
from sn40l_sim.study.reference_schema import Tolerance as Tolerance  # re-exported: tests and notebooks name it here
from sn40l_sim.study.sweep.load import load_sweep
from sn40l_sim.study.sweep.plan import SweepRun, expand_runs
from sn40l_sim.yamlio import load_document, not_a_file, shown_path

DEFAULT_REFERENCE_DIR = Path(__file__).resolve().parents[2] / "experiments" / "reference"

#: units of results fields that count things (an absolute error in them is a whole number)
COUNT_UNITS = frozenset({"sequences", "requests", "tokens", "steps", "loads", "switches", "nodes"})


@dataclass(frozen=True)
class Reference:
    """A measurement with its experiment resolved to an absolute path."""

    measurement: Measurement
    experiment_path: Path
    #: (file, line) of the measurement in its reference file, for errors
    origin: tuple[str, int | None] = ("", None)


@dataclass(frozen=True)
class Comparison:
    """A measurement beside its simulated value."""

    reference: Reference
    simulated: float

    @property
    def measured(self) -> float | None:
        return self.reference.measurement.value

    @property
    def error_kind(self) -> str:
        """How the error is given: with an absolute band, ``pp`` for a fraction (a field of unit
        1, a ratio of two records), ``count`` for a count of things, else the field's unit (``s``,
        ``tokens/s``, ...); with a relative band or a range, ``%``."""
        m = self.reference.measurement
        if m.tolerance is None or m.tolerance.abs is None:
            return "%"
        unit = "1" if m.relative_to is not None else RESULTS[m.quantity].unit
        if unit == "1":
            return "pp"
        return "count" if unit in COUNT_UNITS else unit

    @property
    def error(self) -> float | None:
        """Signed error in the unit of :attr:`error_kind` (percentage points, a count, percent, or
        the field's unit); for a range, the percent outside it (0 inside)."""
        m = self.reference.measurement
        if m.value is None:
            return None
        if self.error_kind == "pp":
            return (self.simulated - m.value) * 100
        if m.tolerance is not None and m.tolerance.range is not None:
            # a range is the values the measurement accepts ("up to 2.2x", "over 90%"): the error is
            # how far outside it the simulation lies, in percent of the nearer end (as the fit's
            # residual counts only the part outside it, study/calibration.py); its value is nominal
            low, high = m.tolerance.range
            end = low if self.simulated < low else high if self.simulated > high else None
            return 0.0 if end is None else (self.simulated - end) / end * 100 if end else float("inf")
        if self.error_kind == "%":
            # a measured 0 with a relative band is refused when the reference file is read
            return (self.simulated - m.value) / m.value * 100 if m.value else float("inf")
        return self.simulated - m.value

    @property
    def ok(self) -> bool | None:
        m = self.reference.measurement
        if m.value is None or m.tolerance is None:
            return None
        return m.tolerance.accepts(m.value, self.simulated)


def load_references(paths: list[Path] | None = None,
                    planned: dict[Path, list[SweepRun]] | None = None) -> list[Reference]:
    """Every measurement in the given reference files (default: all of ``experiments/reference``).

    ``planned``, when given, receives the runs of each sweep experiment the measurements name (by
    its resolved path), planned here to check the names they give: ``validate`` simulates them
    without planning them again (:class:`~sn40l_sim.study.evaluation.LoadedExperiments`).

    Raises
    ------
    InputError
        For a malformed reference file, located at the field.
    """
    # one path given for the list was read letter by letter ("e: file not found"), a number raised a TypeError
    if isinstance(paths, (str, os.PathLike)) or any(not isinstance(p, (str, os.PathLike)) for p in paths or ()):
        raise InputError(f"paths: expected a list of reference files, such as [Path('experiments/reference/"
                         f"snapstream_paper.yaml')], got {shown(paths)}")
    files = paths if paths else [shown_path(os.path.relpath(p)) if p.is_relative_to(Path.cwd()) else p
                                 for p in sorted(DEFAULT_REFERENCE_DIR.glob("*.yaml"))]
    out: list[Reference] = []
    ids: dict[str, str] = {}   # id -> where: leave_one_out.json and the tables key measurements by id
    read: set[Path] = set()
    for path in files:
        if Path(path).resolve() in read:   # else refused at its first id, as the id of the measurement itself
            raise InputError(f"{path} is given twice; expected each reference file once", field="REFERENCE.yaml")
        read.add(Path(path).resolve())
        doc = load_document(path)
        if doc.data.get("kind") != "reference":
            raise doc.error(("kind",), f"expected 'kind: reference' in a reference file, got {doc.data.get('kind')!r}")
        spec = validate(ReferenceFile, doc)
        if not spec.measurements:   # validate printed "0 measurements, 0 within tolerance" and exit status 0
            raise doc.error(("measurements",), "expected at least one measurement, got an empty list")
        point_names: dict[Path, list[str]] = {}
        for i, m in enumerate(spec.measurements):
            at = ("measurements", i)
            if m.id in ids:
                raise doc.error(at + ("id",), f"id {m.id!r} is also the id of the measurement at {ids[m.id]}; "
                                "expected each id once (leave-one-out predictions are kept by id)")
            ids[m.id] = "{}:{}".format(*doc.where(at + ("id",)))
            check_quantity(m, lambda field, message, at=at, doc=doc: doc.error(at + field, message))
            if m.value == 0 and m.tolerance is not None and m.tolerance.abs is None:
                raise doc.error(at + ("value",), f"measurement {m.id!r}: a measured value of 0 has no relative error "
                                "to judge or print; give an abs tolerance for it (or measure a nonzero value)")
            exp_path = doc.resolve(m.experiment, at + ("experiment",))
            if not exp_path.is_file():
                raise doc.error(at + ("experiment",), f"experiment file {m.experiment!r} {not_a_file(exp_path, m.experiment)} (looked for "
                                f"{exp_path})")
            if exp_path not in point_names:
                data = load_document(exp_path).data
                if data.get("kind") != "experiment":   # else an error located in that other file
                    raise doc.error(at + ("experiment",), f"{m.experiment!r} is {with_article(data.get('kind') or 'kind-less')} "
                                    "file; expected an experiment file (kind: experiment, as in experiments/)")
                if "multi_model" in data:   # else its top-level model simulated alone, a record run never gives
                    raise doc.error(at + ("experiment",), f"{m.experiment!r} serves several models (multi_model:), "
                                    "which validate does not simulate (one model's memory, prefill and decode "
                                    "step); expected an experiment of one model")
                point_names[exp_path] = _point_names(exp_path, planned)
            if m.relative_to is not None and m.relative_to == m.point:
                raise doc.error(at + ("relative_to",), f"measurement {m.id!r} is relative to its own point "
                                f"{m.point!r}: the ratio is 1 whatever is simulated; expected another point")
            for field, name in (("point", m.point), ("relative_to", m.relative_to)):
                if name is not None and name not in point_names[exp_path]:
                    raise doc.error(at + (field,), f"measurement {m.id!r} names point {name!r}, but "
                                    f"{exp_path.name} has {point_names[exp_path]}")
            if m.calibration and (m.value is None or m.tolerance is None):   # else the fit left it out unsaid
                missing = "value" if m.value is None else "tolerance"
                raise doc.error(at + (missing,), f"measurement {m.id!r} is a calibration point: the fit needs its "
                                f"{missing} (or set calibration: false for a held-back prediction)")
            if m.value is not None and m.tolerance is not None and m.tolerance.range is not None and \
                    not m.tolerance.range[0] <= m.value <= m.tolerance.range[1]:   # its own band refuses it
                raise doc.error(at + ("value",), f"measurement {m.id!r}: the value {m.value:g} is outside its own "
                                f"tolerance range [{m.tolerance.range[0]:g}, {m.tolerance.range[1]:g}]; expected a "
                                "value within it (the range is the values accepted)")
            if m.value is not None and m.tolerance is None:   # else its error printed, but never judged or counted
                raise doc.error(at + ("tolerance",), f"measurement {m.id!r} has a value but no tolerance to judge it "
                                "by; expected one of abs, rel or range (or no value: a held-back prediction)")
            out.append(Reference(m, exp_path, doc.where(at + ("point",))))
    return out


def _point_names(path: Path, planned: dict[Path, list[SweepRun]] | None = None) -> list[str]:
    """The names of the records the experiment at ``path`` gives: its points, or for a sweep, its
    runs (``full[model=llama3_1_70b,sockets=8,...]``), as :mod:`~sn40l_sim.study.evaluation` names them;
    a sweep's runs are kept in ``planned`` when it is given."""
    exp = load_experiment(path)
    if exp.spec.sweep is not None:
        runs, failures = expand_runs(load_sweep(path))
        if failures:
            _, name, error = failures[0]
            raise exp.error(("sweep",), f"sweep point {name} does not assemble: {error}")
        if planned is not None:
            planned[Path(path).resolve()] = runs
        return sorted(run.name for run in runs)
    require_workload(exp)
    return sorted(p.name for p in points(exp))




def extract(record: dict[str, Any], measurement: Measurement) -> float:
    """The simulated value a measurement compares with, read from a results record (a key the
    record's mapping lacks is 0: a kernel kind the point does not run takes no time).

    Raises
    ------
    InputError
        When the record has no value for the quantity (a served-workload field, which ``validate``
        does not simulate).
    """
    check_quantity(measurement)
    value = record.get(measurement.quantity)
    if measurement.key is not None and isinstance(value, dict):
        value = value.get(measurement.key, 0.0)
    if value is None or isinstance(value, (dict, list, str, bool)):
        raise InputError(f"measurement {measurement.id!r}: {measurement.quantity} has no value in this evaluation "
                         "(validate simulates memory and one prefill and decode step, not the served workload)",
                         field="quantity")
    return float(value)


def prefill_readers(references: list[Reference]) -> dict[Path, frozenset[str]]:
    """For each experiment the references name, the records whose prefill fields a measurement
    reads (its point, or the point it is relative to): the prefill steps a steps-only evaluation
    needs (``validate`` and ``calibrate`` simulate no other).

    >>> m = dict(source="s", experiment="e.yaml", calibration=True)
    >>> refs = [Reference(Measurement(id="a", quantity="prefill_kernel_share", key="mha", point="snap", **m), Path("e")),
    ...         Reference(Measurement(id="b", quantity="decode_step_s", point="full", **m), Path("e"))]
    >>> prefill_readers(refs)
    {PosixPath('e'): frozenset({'snap'})}
    """
    return record_readers(references, quantities=PREFILL_STEP_FIELDS)


def record_readers(references: list[Reference], quantities: Collection[str] | None = None
                   ) -> dict[Path, frozenset[str]]:
    """For each experiment the references name, the records a measurement (of one of
    ``quantities``, or of any) reads: its point and the point it is relative to. The other points
    need not be simulated.

    >>> m = dict(source="s", experiment="e.yaml", calibration=True)
    >>> refs = [Reference(Measurement(id="a", quantity="max_batch", point="snap", **m), Path("e")),
    ...         Reference(Measurement(id="b", quantity="decode_step_s", point="full", relative_to="base", **m),
    ...                   Path("e"))]
    >>> sorted(record_readers(refs)[Path("e")])
    ['base', 'full', 'snap']
    """
    out: dict[Path, set[str]] = {}
    for ref in references:
        m = ref.measurement
        names = out.setdefault(ref.experiment_path, set())
        if quantities is None or m.quantity in quantities:
            names.update(name for name in (m.point, m.relative_to) if name is not None)
    return {path: frozenset(names) for path, names in out.items()}


#: experiment path -> records (one per point); ``validate`` and ``calibrate`` pass their own
Simulator = Callable[[Path], list[dict[str, Any]]]


def compare(references: list[Reference], simulate: Simulator) -> list[Comparison]:
    """Simulate each referenced experiment once and compare every measurement.

    Raises
    ------
    InputError
        When a measurement names a point its experiment does not have.
    """
    records: dict[Path, dict[str, dict]] = {}
    out = []
    for ref in references:
        if ref.experiment_path not in records:
            records[ref.experiment_path] = {r["name"]: r for r in simulate(ref.experiment_path)}
        by_name = records[ref.experiment_path]
        m = ref.measurement
        for field, name in (("point", m.point), ("relative_to", m.relative_to)):
            if name is not None and name not in by_name:  # pragma: no cover - load_references checked the names
                raise InputError(f"measurement {m.id!r} names point {name!r}, but {ref.experiment_path.name} "
                                 f"has {sorted(by_name)}", file=ref.origin[0], line=ref.origin[1], field=field)
        keys = sorted({k for r in by_name.values() if isinstance(r.get(m.quantity), dict) for k in r[m.quantity]})
        if m.key is not None and keys and m.key not in keys:   # else a typo read as a kernel that takes no time
            raise InputError(f"measurement {m.id!r}: no point of {ref.experiment_path.name} has {m.quantity} "
                             f"{m.key!r}; expected one of {keys}", file=ref.origin[0], line=ref.origin[1], field="key")
        try:
            value = extract(by_name[m.point], m)
            if m.relative_to is not None:
                over = extract(by_name[m.relative_to], m)
                if over == 0:   # a ZeroDivisionError traceback, after the simulations
                    what = m.quantity + (f"[{m.key}]" if m.key else "")
                    raise InputError(f"measurement {m.id!r} is a ratio over point {m.relative_to!r}, whose {what} is 0: "
                                     "the ratio has no value; expected a point where it is not 0", field="relative_to")
                value /= over
        except InputError as exc:
            raise InputError(exc.message, file=ref.origin[0], line=ref.origin[1], field=exc.field) from None
        out.append(Comparison(ref, value))
    return out


#: where ``calibrate --write`` leaves each calibration point's leave-one-out prediction
def format_table(comparisons: list[Comparison], loo: dict[str, float] | None = None) -> str:
    """The table ``validate`` prints, with summary lines of the mean and worst absolute error per
    unit (percentage points for shares, percent for rates, counts for batches). With ``loo``
    (measurement id -> the value a fit without that point predicts), a leave-one-out column shows
    the error of that prediction."""
    rows = [("id", "quantity", "measured", "simulated", "error", "ok", "role")]
    if loo is not None:
        rows[0] = rows[0] + ("leave-one-out",)
    by_kind: dict[str, list[Comparison]] = {}
    ranged: list[Comparison] = []   # their errors are distances outside a range, apart from the means
    for c in comparisons:
        m = c.reference.measurement
        quantity = m.label
        err = c.error
        text = _error_text(c)
        if err is not None and _ranged(c):
            ranged.append(c)
        elif err is not None:
            by_kind.setdefault(c.error_kind, []).append(c)
        shown = "{:g} to {:g}".format(*m.tolerance.range) if c.measured is not None and _ranged(c) \
            else _fmt(c.measured)
        row = (m.id, quantity, shown, _fmt(c.simulated), text,
               {True: "yes", False: "NO", None: "-"}[c.ok], "calibration" if m.calibration else "prediction")
        if loo is not None:
            row = row + (_error_text(Comparison(c.reference, loo[m.id])) if m.id in loo else "",)
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    measured = [c for c in comparisons if c.ok is not None]
    lines.append(f"\n{len(measured)} measurements, {sum(bool(c.ok) for c in measured)} within tolerance")
    if loo is not None:
        left_out = [Comparison(c.reference, loo[c.reference.measurement.id]) for c in measured
                    if c.reference.measurement.id in loo]
        lines.append(f"  left out of the fit, {sum(bool(c.ok) for c in left_out)} of {len(left_out)} predicted "
                     "within tolerance")
    width = max([5, *map(len, by_kind)])   # a field's unit (tokens/s) is longer than pp, % and count
    for kind, compared in sorted(by_kind.items()):
        unit = {"pp": "pp", "count": "", "%": "%"}.get(kind, f" {kind}")
        number = ".2f" if kind in ("pp", "count", "%") else ".3g"
        errs = [abs(c.error) for c in compared]
        worst = max(compared, key=lambda c: abs(c.error))
        # the worst miss with the digits its row shows, not rounded back to its band's edge
        worst_number = f".{_digits(worst, 2)}f" if kind in ("pp", "%") else number
        lines.append(f"  {kind:{width}s} mean |error| {sum(errs) / len(errs):{number}}{unit}, "
                     f"worst {abs(worst.error):{worst_number}}{unit} ({len(errs)} measurements)")
    if ranged:
        outside = [abs(c.error) for c in ranged if c.error]
        worst = f", worst {max(outside):.2f}% outside" if outside else ""
        lines.append(f"  {'range':{width}s} {len(ranged) - len(outside)} of {len(ranged)} within their range{worst}")
    return "\n".join(lines)


def _ranged(c: Comparison) -> bool:
    """Whether ``c``'s measurement is a range of accepted values."""
    t = c.reference.measurement.tolerance
    return t is not None and t.range is not None


def _error_text(c: Comparison) -> str:
    """The error as the table shows it; a miss that would round to its band's edge (0.020031
    against 0.02: '+2.00 pp' beside 'NO') with the digits that show it past the band."""
    err = c.error
    if err is None:
        return ""
    if _ranged(c) and err == 0:
        return "in range"
    kind = c.error_kind
    if kind in ("pp", "%"):
        return f"{err:+.{_digits(c, 2 if kind == 'pp' else 1)}f}" + (" pp" if kind == "pp" else "%")
    return {"count": f"{err:+.0f}"}.get(kind, f"{err:+.3g} {kind}")


def _digits(c: Comparison, digits: int) -> int:
    """``digits``, or more when ``c`` is a miss (pp or %) that would round to its band's edge."""
    kind = c.error_kind
    t = c.reference.measurement.tolerance
    band = None if t is None else t.abs * 100 if kind == "pp" else t.rel * 100 if kind == "%" and t.rel else None
    while c.ok is False and band is not None and abs(round(c.error, digits)) <= band and digits < 6:
        digits += 1
    return digits


def _fmt(value: float | None) -> str:
    """A measured or simulated value as the table shows it: four decimals, and four significant
    digits below 0.01 (a step of 0.702 ms was '0.0007', beside a simulated '0.0007').

    >>> _fmt(0.041), _fmt(0.000702), _fmt(453.52), _fmt(16.0), _fmt(None)
    ('0.0410', '0.000702', '453.5', '16', '(held back)')
    """
    if value is None:
        return "(held back)"
    if abs(value) >= 100 or float(value).is_integer():
        return f"{value:.0f}" if float(value).is_integer() else f"{value:.1f}"
    return f"{value:.4f}" if abs(value) >= 0.01 else f"{value:.4g}"
