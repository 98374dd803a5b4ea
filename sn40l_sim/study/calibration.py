"""Fit the hardware YAML's ``calibrated:`` parameters to the calibration measurements
(``python -m sn40l_sim calibrate``).

Bounded, regularised least squares (scipy's trust-region reflective solver):

- one residual per calibration measurement with a value: ``(simulated - measured) / band``,
  where ``band`` is the measurement's tolerance (absolute, or relative times the value; a range
  contributes only outside the range), so "within tolerance" means ``|residual| <= 1``;
- one weak prior residual per parameter, ``PRIOR_WEIGHT * (p - p0) / (upper - lower)``, pulling
  towards the value in the YAML. Several parameters act on the decode step alike (a per-kernel
  overhead and an HBM efficiency both lengthen it), so the measurements alone leave a valley; the
  prior picks the point in it closest to the engineering estimate instead of an arbitrary one.

Only parameters with bounds in :class:`~sn40l_sim.hardware.spec.CalibratedSpec` and a measurement
that can inform them are fitted; the rest keep their YAML value (``FIXED`` says why).
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sn40l_sim.hardware.spec import CalibratedSpec
from sn40l_sim.study.validation import Comparison, Reference

#: weight of the pull towards the prior value, relative to one tolerance band
PRIOR_WEIGHT = 0.3
#: calibrated parameters no calibration measurement can inform, kept at their YAML value
FIXED = {"ddr_efficiency": "no reference measurement exercises DDR (the deployment keeps weights and KV in HBM)"}


def bounds(name: str) -> tuple[float, float]:
    """Physical bounds of a calibrated parameter, as declared in the schema."""
    extra = CalibratedSpec.model_fields[name].json_schema_extra or {}
    low, high = extra["bounds"]
    return float(low), float(high)


def fitted_names() -> list[str]:
    """Parameters the fit moves, in schema order."""
    return [n for n in CalibratedSpec.model_fields if n not in FIXED]


def residual(c: Comparison) -> float | None:
    """Normalised residual of one comparison (None for a prediction without a value)."""
    m = c.reference.measurement
    if m.value is None or m.tolerance is None:
        return None
    t = m.tolerance
    if t.range is not None:
        low, high = t.range
        half = (high - low) / 2 or 1.0
        return (c.simulated - high) / half if c.simulated > high else (c.simulated - low) / half if c.simulated < low else 0.0
    band = t.abs if t.abs is not None else t.rel * abs(m.value)
    if band == 0:
        # an exact discrete target (a max batch): not moved by these parameters; count it as a miss or not
        return 0.0 if c.simulated == m.value else 10.0
    return (c.simulated - m.value) / band


@dataclass(frozen=True)
class FitResult:
    """The fitted values, the starting values, and the comparisons at the fit."""

    names: tuple[str, ...]
    start: tuple[float, ...]
    fitted: tuple[float, ...]
    comparisons: list[Comparison]
    cost: float


#: (references to simulate, calibrated overrides) -> comparisons
Evaluator = Callable[[list[Reference], dict[str, float]], list[Comparison]]


def fit(references: list[Reference], start: dict[str, float], evaluate: Evaluator,
        max_evaluations: int = 60) -> FitResult:
    """Fit the calibrated parameters to the calibration references.

    Parameters
    ----------
    references : list of Reference
        Only those with ``calibration: true`` and a value are used.
    start : dict
        The YAML's current values (the prior and the starting point).
    evaluate : callable
        Simulates the references with the calibrated block overridden.
    max_evaluations : int
        Budget of simulations (each is one pass over the referenced points).
    """
    from scipy.optimize import least_squares

    refs = [r for r in references if r.measurement.calibration and r.measurement.value is not None]
    names = fitted_names()
    lows = np.array([bounds(n)[0] for n in names])
    highs = np.array([bounds(n)[1] for n in names])
    spans = highs - lows
    x0 = np.clip(np.array([start[n] for n in names], dtype=float), lows, highs)
    cache: dict[tuple, list[Comparison]] = {}

    def comparisons_at(x: np.ndarray) -> list[Comparison]:
        key = tuple(np.round(x, 12))
        if key not in cache:
            cache[key] = evaluate(refs, dict(zip(names, map(float, x), strict=True)))
        return cache[key]

    def residuals(u: np.ndarray) -> np.ndarray:
        x = lows + u * spans  # the solver works on [0, 1] boxes so parameters of any unit compare
        measured = [r for r in (residual(c) for c in comparisons_at(x)) if r is not None]
        prior = PRIOR_WEIGHT * (x - x0) / spans
        return np.concatenate([np.array(measured, dtype=float), prior])

    u0 = (x0 - lows) / spans
    solution = least_squares(residuals, u0, bounds=(0.0, 1.0), diff_step=0.02, x_scale=1.0,
                             max_nfev=max_evaluations, method="trf")
    x = lows + solution.x * spans
    return FitResult(tuple(names), tuple(map(float, x0)), tuple(map(float, x)), comparisons_at(x),
                     float(solution.cost))


def write_back(yaml_path: Path, result: FitResult, note: str) -> None:
    """Rewrite the ``calibrated:`` values in ``yaml_path`` in place, keeping the file's other lines,
    and replace each value's comment with the provenance ``note``."""
    text = yaml_path.read_text(encoding="utf-8")
    for name, value in zip(result.names, result.fitted, strict=True):
        pattern = re.compile(rf"^(\s*{name}:\s*)([^#\n]*?)(\s*#.*)?$", re.MULTILINE)
        if not pattern.search(text):
            raise KeyError(f"{name} not found in {yaml_path}")
        new = f"{_format_value(name, value)}  # calibrated: {note}"
        text = pattern.sub(lambda m, new=new: f"{m.group(1)}{new}",
                           text, count=1)
    yaml_path.write_text(text, encoding="utf-8")


def _format_value(name: str, value: float) -> str:
    if name.endswith("_s"):
        return f"{value * 1e6:.6g} us"
    return f"{value:.4f}"
