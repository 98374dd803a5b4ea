"""The leave-one-out predictions ``validate`` prints beside each calibration point:
:class:`LeaveOneOut`, written by ``calibrate --write`` (docs/validation.md) to
``experiments/reference/leave_one_out.json``; computed on the fit's linearisation
(:func:`~sn40l_sim.study.calibration.leave_one_out`, no more simulation) or by refitting the
simulator itself without each point (:func:`refit_leave_one_out`, ``calibrate --leave-one-out
refit``).

A linearised refit is a guide to which points constrain which parameters; far from the fit, where
the simulator is not linear (a mapper plan switching), it can predict what no simulation gives. A
refit simulates every step it proposes, so its prediction is a simulated value at parameters
fitted without the point."""
from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

from sn40l_sim.errors import InputError, shown
from sn40l_sim.hardware.spec import SocketSpec
from sn40l_sim.report.outputs import rewrite_text
from sn40l_sim.study.assemble import Assembly
from sn40l_sim.study.calibration import Evaluator, FitResult, calibration_references, fit
from sn40l_sim.study.evaluation import LoadedExperiments
from sn40l_sim.study.reference_schema import Measurement
from sn40l_sim.study.sweep.plan import assembly_parameters
from sn40l_sim.study.validation import DEFAULT_REFERENCE_DIR, Comparison, Reference
from sn40l_sim.yamlio import parse_json

LEAVE_ONE_OUT = DEFAULT_REFERENCE_DIR / "leave_one_out.json"
#: the keys :meth:`LeaveOneOut.write` writes, the only ones :meth:`LeaveOneOut.read` takes
FILE_KEYS = ("fitted", "predictions", "method", "measurements", "inputs")
#: how the method of a column of true refits (:func:`refit_leave_one_out`) begins
REFIT_METHOD = "refit of the simulator without the point"


@dataclass(frozen=True)
class LeaveOneOut:
    """Each calibration point as predicted by a fit without it (``calibrate`` computes them), with
    the calibrated values of the fit they were computed at."""

    fitted: dict[str, float]
    predictions: dict[str, float]
    method: str = ""
    #: each calibration point the fit read, as it read it (:func:`measured_as`); None in a file
    #: written before these were recorded
    measurements: dict[str, dict] | None = None
    #: the digest of what the calibration points' experiments simulate, less the fitted values
    #: (:func:`inputs_digest`); None in a file written before it was recorded
    inputs: str | None = None

    def current(self, calibrated: dict[str, float], rel_tol: float = 1e-4) -> bool:
        """Whether these predictions belong to the ``calibrated`` values in use."""
        return set(self.fitted) <= set(calibrated) and all(
            abs(calibrated[k] - v) <= rel_tol * max(abs(v), 1e-300) for k, v in self.fitted.items())

    def changed_measurement(self, references: list[Reference]) -> str | None:
        """The first of ``references`` that these predictions were not fitted to as it now reads (a
        value, tolerance, quantity or point edited, a calibration point added or held back), as
        ``"id: was ..., now ..."``; None when every one reads as it did (or none was recorded: see
        :attr:`measurements`)."""
        if self.measurements is None:
            return None
        for r in references:
            m = r.measurement
            now = measured_as(m) if m.calibration and m.value is not None else None
            was = self.measurements.get(m.id)
            if now != was:
                return f"{m.id}: was {_shown(was)}, now {_shown(now)}"
        return None

    def write(self, path: Path = LEAVE_ONE_OUT) -> Path:
        """Write as JSON (sorted keys, so it diffs as data)."""
        data = {"method": self.method, "fitted": self.fitted, "predictions": self.predictions}
        if self.measurements is not None:
            data["measurements"] = self.measurements
        if self.inputs is not None:
            data["inputs"] = self.inputs
        text = json.dumps(data, indent=1, sort_keys=True)
        rewrite_text(path, text + "\n")   # an edit of the project's file: through a link, keeping its mode
        return path

    @classmethod
    def read(cls, path: Path = LEAVE_ONE_OUT) -> LeaveOneOut | None:
        """The file at ``path`` (None when there is none)."""
        if not path.is_file():
            return None
        rerun = "; rerun `python -m sn40l_sim calibrate --write`"
        try:
            data = parse_json(path.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise InputError(f"cannot read the leave-one-out predictions: {exc}{rerun}", file=path) from None
        if not isinstance(data, dict):
            raise InputError(f"expected a JSON object of fitted, predictions and method, got {type(data).__name__}"
                             f"{rerun}", file=path)
        unknown = sorted(set(data) - set(FILE_KEYS))
        if unknown:   # a misspelt "predictions" was read as none, a column silently dropped
            raise InputError(f"unknown key {shown(unknown[0])}; expected {', '.join(FILE_KEYS)}{rerun}", file=path)
        tables = {}
        for key in ("fitted", "predictions"):   # else a traceback when validate computes with a value
            table = data.get(key)
            if not isinstance(table, dict):
                raise InputError(f"expected an object of numbers by name, got {shown(table)}{rerun}", file=path,
                                 field=key)
            tables[key] = {name: _finite(path, f"{key}.{name}", value, rerun) for name, value in table.items()}
        measurements = data.get("measurements")
        if measurements is not None and not (isinstance(measurements, dict) and
                                             all(isinstance(v, dict) for v in measurements.values())):
            raise InputError(f"expected an object of measurements by id, each an object, got {shown(measurements)}"
                             f"{rerun}", file=path, field="measurements")
        method = data.get("method", "")
        if not isinstance(method, str):   # str() of a list or a number was shown as the column's method
            raise InputError(f"expected the method as text, got {shown(method)}{rerun}", file=path, field="method")
        inputs = data.get("inputs")
        if inputs is not None and not isinstance(inputs, str):
            raise InputError(f"expected the inputs' digest as text, got {shown(inputs)}{rerun}", file=path, field="inputs")
        return cls(tables["fitted"], tables["predictions"], method, measurements, inputs)


def _finite(path: Path, field: str, value: object, rerun: str) -> float:
    """``value`` as a float if it is a finite JSON number (an integer of 400 digits, past a float's
    range, stopped math.isfinite with an OverflowError traceback), else an error at ``field``."""
    number = None
    if not isinstance(value, bool) and isinstance(value, (int, float)):
        try:
            number = float(value)
        except OverflowError:
            number = None
    if number is None or not math.isfinite(number):
        raise InputError(f"expected a finite number, got {shown(value)}{rerun}", file=path, field=field)
    return number


def measured_as(m: Measurement) -> dict:
    """What a fit reads of a measurement, as JSON data: its quantity (and key, and the record it is
    relative to), value, tolerance and the experiment point it names; its source text and id are
    not read.

    >>> measured_as(Measurement(id="a", quantity="max_batch", value=16, tolerance={"abs": 0}, source="s",
    ...                         experiment="../x.yaml", point="full", calibration=True))["tolerance"]
    {'abs': 0.0}
    """
    return m.model_dump(mode="json", include={"quantity", "key", "value", "tolerance", "experiment", "point",
                                              "relative_to"}, exclude_none=True)


def _shown(read: dict | None) -> str:
    """A measurement as :func:`measured_as` reads it, in one line (None: not a calibration point)."""
    return "not a calibration point" if read is None else json.dumps(read, sort_keys=True, separators=(", ", ": "))


def inputs_digest(loaded: LoadedExperiments, references: list[Reference], fitted: Collection[str]) -> str:
    """SHA-256 of everything the calibration points' experiments simulate (each experiment's or
    sweep run's :func:`~sn40l_sim.study.sweep.plan.assembly_parameters`: the experiment, node,
    model, kernel template, trace, plug-ins) with the ``fitted`` values of its sockets left out, in
    the order of the experiments as the measurements name them; no path and no simulator code.

    The leave-one-out column records it: it was checked against the calibrated values and the
    measurements only, so a hardware, model or experiment file edited since (HBM at half its
    bandwidth, 20% fewer tokens/s simulated) still showed the predictions made for the old one."""
    def blanked(node: dict) -> dict:
        node["name"] = None   # named after any override, a fitted value's too; simulated by no one
        for name in fitted:   # "calibrated.sync_latency_s", "memory.hbm.efficiency": fitted values
            *parents, leaf = name.split(".")
            held = node["socket"]
            for part in parents:
                held = held[part]
            held[leaf] = None
        return node

    def parameters(asm: Assembly) -> dict:
        data = assembly_parameters(asm)
        for key in ("node", "prefill_node"):
            if key in data:
                data[key] = blanked(data[key])
        return data

    experiments = {r.measurement.experiment: r.experiment_path for r in calibration_references(references)}
    inputs = []
    for name in sorted(experiments):
        got = loaded.load(experiments[name])
        runs = [got] if isinstance(got, Assembly) else [run.assembly for run in got]
        inputs.append([name, [parameters(asm) for asm in runs]])
    text = json.dumps(inputs, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def fitted_measurements(references: list[Reference]) -> dict[str, dict]:
    """Each calibration point of ``references`` a fit reads, by id, as :func:`measured_as` gives it."""
    return {r.measurement.id: measured_as(r.measurement) for r in calibration_references(references)}


class _SharedPasses:
    """An evaluator for the refits that simulates every calibration point at each parameter set
    once, whichever points a refit asks for: the refits all start where the full fit started, so
    their first pass and their Jacobian's are the same simulations, and a left-out point's value at
    a refit's parameters is read from the pass that simulated the others."""

    def __init__(self, references: list[Reference], evaluate: Evaluator) -> None:
        self.references = references
        self.evaluate = evaluate
        self._passes: dict[tuple, dict[str, Comparison]] = {}
        self._answers: list[tuple[list[Comparison], dict[str, Comparison]]] = []
        self.simulated = 0

    def __call__(self, refs: list[Reference], calibrated: dict[str, float]) -> list[Comparison]:
        key = tuple(sorted(calibrated.items()))
        if key not in self._passes:
            self._passes[key] = {c.reference.measurement.id: c for c in self.evaluate(self.references, calibrated)}
            self.simulated += 1
        every = self._passes[key]
        answer = [every[r.measurement.id] for r in refs]
        self._answers.append((answer, every))   # the fit returns the answer it ends at: keep its whole pass
        return answer

    def whole_pass(self, answer: list[Comparison]) -> dict[str, Comparison]:
        """Every point's comparison in the pass that gave ``answer`` (this very list)."""
        return next(every for given, every in self._answers if given is answer)


def refit_leave_one_out(references: list[Reference], socket: SocketSpec, evaluate: Evaluator,
                        max_evaluations: int = 40,
                        progress: Callable[[str, int, FitResult], None] | None = None) -> dict[str, float]:
    """Each calibration point predicted by a fit of the simulator without it: measurement id ->
    its simulated value at the parameters that fit the other points.

    Each refit is :func:`~sn40l_sim.study.calibration.fit` from ``socket``'s values with the same
    prior, bounds and pass budget, on every calibration point but one; passes at parameters already
    simulated are not simulated again (:class:`_SharedPasses`). ``socket`` is the one the full fit
    started from: its fitted values were fitted to the point left out, and a refit pulled towards
    them would read it.

    Parameters
    ----------
    references : list of Reference
        The references; only calibration points with a measured value are fitted and predicted.
    socket : SocketSpec
        The hardware whose calibrated values start every refit and are its prior.
    evaluate : callable
        Simulates references at calibrated overrides (as for ``fit``).
    max_evaluations : int
        Each refit's budget of passes.
    progress : callable, optional
        Called after each refit with the point left out, the passes simulated so far and the refit
        (where it ended and why it stopped: a refit its budget stopped before any step predicts
        the point at the values it started from).
    """
    refs = calibration_references(references)
    shared = _SharedPasses(refs, evaluate)
    out: dict[str, float] = {}
    for left in refs:
        others = [r for r in refs if r is not left]
        result = fit(others, socket, shared, max_evaluations=max_evaluations)
        point = left.measurement.id
        out[point] = float(shared.whole_pass(result.comparisons)[point].simulated)
        if progress is not None:
            progress(point, shared.simulated, result)
    return out
