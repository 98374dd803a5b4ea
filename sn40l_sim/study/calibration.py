"""Fit the hardware YAML's calibrated parameters (the ``calibrated:`` block and each memory tier's
``efficiency``) to the calibration measurements (``python -m sn40l_sim calibrate``).

Bounded, regularised least squares, fitted on the simulator linearised by finite differences
(:mod:`~sn40l_sim.study.linear_fit`: a simulation pass is seconds, so the Jacobian is measured once
and reused, and the leave-one-out refits reuse it too):

- one residual per calibration measurement with a value: ``(simulated - measured) / band``,
  where ``band`` is the measurement's tolerance (absolute, or relative times the value; a range
  counts only its outside, in half its width), so "within tolerance" means ``|residual| <= 1``;
- one weak prior residual per parameter, ``PRIOR_WEIGHT * (p - p0) / (upper - lower)``, pulling
  towards the value in the YAML. Several parameters act on the decode step alike (a per-kernel
  overhead and an HBM efficiency both lengthen it), so the measurements alone leave a valley; the
  prior picks the point in it closest to the engineering estimate instead of an arbitrary one.

Parameters are dotted paths under the socket (``calibrated.config_load_bytes_per_s``,
``memory.hbm.efficiency``), with the physical bounds the schema declares
(:func:`~sn40l_sim.hardware.spec.calibrated_parameters`). Only parameters a measurement can inform
are fitted; the rest keep their YAML value (:func:`fixed_parameters` says why). ``--write`` edits
the exact line each value was read from (:mod:`~sn40l_sim.study.calibration_file`).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sn40l_sim.hardware.spec import SocketSpec, calibrated_parameters
from sn40l_sim.study.linear_fit import (
    RESOLUTION,
    STEP,
    LinearFit,
    Linearisation,
    cost_of,
    linearise,
    surrogate_minimum,
    trust_region_fit,
)
from sn40l_sim.study.validation import Comparison, Measurement, Reference

#: weight of the pull towards the prior value, relative to one tolerance band
PRIOR_WEIGHT = 0.3


def fixed_parameters(socket: SocketSpec) -> dict[str, str]:
    """Calibrated parameters the fit keeps at their YAML value, with the reason: the efficiency of
    every memory tier after the first (the reference deployment keeps weights and KV in the first
    tier, so its measurements move no bytes through the others). The reason is the fit's rule, not
    a claim about the files given: a reference file of the user's may time a step from DDR, and
    the DDR efficiency is still not fitted to it.

    >>> from sn40l_sim.hardware.loader import load_hardware
    >>> list(fixed_parameters(load_hardware("hw_configs/sn40l.yaml").socket))
    ['memory.ddr.efficiency']
    """
    first, *others = socket.memory
    return {f"memory.{tier}.efficiency": f"only the first tier's efficiency is fitted: the paper's deployment "
            f"keeps weights and KV in {first.upper()}, so its measurements move nothing through {tier.upper()}"
            for tier in others}


def parameter_bounds(socket: SocketSpec) -> dict[str, tuple[float, float]]:
    """Physical bounds of every calibrated parameter of ``socket``, as declared in the schema."""
    return {path: (p.low, p.high) for path, p in calibrated_parameters(socket).items()}


def bounds(socket: SocketSpec, path: str) -> tuple[float, float]:
    """Physical bounds of the calibrated parameter at ``path`` (under the socket)."""
    return parameter_bounds(socket)[path]


def bound_reached(value: float, low: float, high: float, share: float = 1e-3) -> str:
    """``"lower"`` or ``"upper"`` when ``value`` is within ``share`` of the span of its bounds from
    one of them (a fit that would have gone further, were the bound not there), else ``""``.

    >>> bound_reached(0.9999, 0.3, 1.0), bound_reached(7e-23, 0.0, 5e-5), bound_reached(0.96, 0.3, 1.0)
    ('upper', 'lower', '')
    """
    margin = share * (high - low)
    return "lower" if value <= low + margin else "upper" if value >= high - margin else ""


def fitted_names(socket: SocketSpec) -> list[str]:
    """Parameters the fit moves: the ``calibrated:`` block in schema order, then the memory tiers'
    efficiencies in tier order, less :func:`fixed_parameters`."""
    fixed = fixed_parameters(socket)
    return [path for path in calibrated_parameters(socket) if path not in fixed]


def residual(c: Comparison) -> float | None:
    """Normalised residual of one comparison (None for a prediction without a value)."""
    return measured_residual(c.reference.measurement, c.simulated)


def measured_residual(m: Measurement, simulated: float) -> float | None:
    """Normalised residual of a simulated value against measurement ``m`` (see the module docstring)."""
    c = Comparison(Reference(m, Path()), simulated)
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
    """The fitted values, the starting values, the comparisons at the fit, and the simulator's
    linearisation the fit used (its Jacobian, for :func:`leave_one_out`) with the passes it took
    and why the kept fit stopped (:data:`~sn40l_sim.study.linear_fit.STOPPED`); with several
    starts, the cost each one ended at and which was kept."""

    names: tuple[str, ...]
    start: tuple[float, ...]
    fitted: tuple[float, ...]
    comparisons: list[Comparison]
    cost: float
    linearisation: Linearisation | None = None
    passes: int = 0
    start_costs: tuple[float, ...] = ()
    kept_start: int = 0
    stopped: str = "converged"
    #: each parameter: ``"upper"`` or ``"lower"`` when the cost, on the fit's Jacobian, falls as it moves
    #: that way from where the fit ended (:func:`falling_sides`), else ``""``: at a bound, the fit
    #: would go further only that way
    falling: tuple[str, ...] = ()
    #: the comparisons at the start (the YAML's values): where a fit of no measurement stays
    at_start: list[Comparison] | None = None


#: (references to simulate, calibrated overrides) -> comparisons
Evaluator = Callable[[list[Reference], dict[str, float]], list[Comparison]]


class ParameterSpace:
    """The fitted parameters as a unit box the solver works in: a parameter whose bounds span over
    two decades (a bandwidth, a latency) moves on a log scale, the others linearly, so that a
    finite-difference step means the same to every parameter whatever its unit."""

    def __init__(self, socket: SocketSpec) -> None:
        params = calibrated_parameters(socket)
        self.names = fitted_names(socket)
        self.lows = np.array([params[n].low for n in self.names], dtype=float)
        self.highs = np.array([params[n].high for n in self.names], dtype=float)
        self.log = (self.lows > 0) & (self.highs / np.where(self.lows > 0, self.lows, 1.0) > 100.0)
        start = np.array([params[n].value for n in self.names], dtype=float)
        self.start = np.clip(start, self.lows, self.highs)
        # log-scale parameters: their bounds as logarithms (others keep a dummy decade)
        self._log_low = np.log(np.where(self.log, self.lows, 1.0))
        self._log_span = np.log(np.where(self.log, self.highs, 10.0)) - self._log_low
        self._u_start = self.to_unit(self.start)

    def to_unit(self, x: np.ndarray) -> np.ndarray:
        """Parameter values -> the unit box."""
        logs = (np.log(np.where(self.log, x, 1.0)) - self._log_low) / self._log_span
        return np.where(self.log, logs, (x - self.lows) / (self.highs - self.lows))

    def from_unit(self, u: np.ndarray) -> np.ndarray:
        """The unit box -> parameter values; a parameter at its start is its YAML value exactly."""
        logs = np.exp(self._log_low + u * self._log_span)
        # exp(log(bound)) can round to a hair outside the bound, which the schema refuses
        x = np.clip(np.where(self.log, logs, self.lows + u * (self.highs - self.lows)), self.lows, self.highs)
        # the round trip through the box can miss the YAML's value by an ulp (0.9365 comes back as
        # 0.9365000000000001), and a simulator on a jump (a mapper plan switching) then simulates the
        # other side of it at the fit's start: the start would not be what validate simulates
        return np.where(u == self._u_start, self.start, x)

    def values(self, u: np.ndarray) -> dict[str, float]:
        """Dotted path -> value of the point ``u`` of the unit box."""
        return dict(zip(self.names, map(float, self.from_unit(u)), strict=True))


def fit(references: list[Reference], socket: SocketSpec, evaluate: Evaluator,
        max_evaluations: int = 60, progress: Callable[[int, float], None] | None = None,
        starts: int = 1) -> FitResult:
    """Fit the calibrated parameters of ``socket`` to the calibration references.

    A trust-region fit on the simulator linearised by finite differences
    (:func:`~sn40l_sim.study.linear_fit.trust_region_fit`), from the values in the YAML; the
    Jacobian it measured comes back with the result, for :func:`leave_one_out`. With ``starts``
    above one, the fit runs again from ``starts - 1`` more points spread over the parameters'
    bounds (:func:`start_points`) and keeps the lowest cost: the simulator is piecewise constant
    where a mapper plan switches, so a fit from one point can stop in a local minimum. Every start
    keeps the same prior (the YAML's values): only where the search begins moves.

    Parameters
    ----------
    references : list of Reference
        Only those with ``calibration: true`` and a value are used.
    socket : SocketSpec
        The hardware as loaded: its calibrated values are the prior and the first starting point.
    evaluate : callable
        Simulates the references with the calibrated values overridden (dotted path under the
        socket -> value).
    max_evaluations : int
        Budget of simulations of each start (each is one pass over the referenced points), the
        finite differences' included (at least one more than the number of parameters).
    progress : callable, optional
        Called after each pass with the number of passes so far (over all starts) and the pass's
        cost (half the sum of squared residuals), for a command that shows the fit advancing.
    starts : int
        Number of starting points (1: the YAML's values only).
    """
    if starts < 1:
        raise ValueError(f"a fit needs at least one start, got {starts}")
    refs = calibration_references(references)
    space = ParameterSpace(socket)
    u0 = space.to_unit(space.start)
    residuals = fit_residuals(refs, u0)
    passes: dict[bytes, list[Comparison]] = {}

    def simulate(u: np.ndarray) -> np.ndarray:
        if u.tobytes() not in passes:
            passes[u.tobytes()] = evaluate(refs, space.values(u))
        return np.array([c.simulated for c in passes[u.tobytes()]], dtype=float)

    best, kept, costs = None, 0, []
    total = 0
    for i, u_start in enumerate(start_points(u0, starts)):
        on_pass = None if progress is None else (lambda n, cost, before=total: progress(before + n, cost))
        found = trust_region_fit(simulate, residuals, u_start, max_passes=max_evaluations, on_pass=on_pass)
        total += found.passes
        costs.append(found.cost)
        if best is None or found.cost < best.cost:   # a tie keeps the earlier start (the YAML's first)
            best, kept = found, i
    assert best is not None
    # a parameter the fit left at its YAML value keeps it to the last digit (ParameterSpace.from_unit)
    fitted = space.from_unit(best.u)
    return FitResult(tuple(space.names), tuple(map(float, space.start)), tuple(map(float, fitted)),
                     passes[best.u.tobytes()], best.cost, best.linearisation, total, tuple(costs), kept,
                     best.stopped, falling_sides(residuals, best), passes[u0.tobytes()])


def falling_sides(residuals: Callable[[np.ndarray, np.ndarray], np.ndarray], found: LinearFit) -> tuple[str, ...]:
    """For each parameter, the way the cost falls from where ``found`` ended, on its Jacobian (the
    linear prediction of the simulated values, no more passes): ``"upper"``, ``"lower"`` or ``""``
    (it rises or stays both ways). A parameter at a bound is where the fit would have gone further
    only if the cost falls past that bound; one the measurements do not move would not.

    >>> import numpy as np
    >>> from sn40l_sim.study.linear_fit import LinearFit, Linearisation
    >>> u = np.array([1.0, 0.5])
    >>> lin = Linearisation(u, np.eye(2), np.array([-0.01, 0.01]))
    >>> falling_sides(lambda v, x: v - np.array([2.0, 0.5]), LinearFit(u, u.copy(), 0.5, lin, 3))
    ('upper', '')
    """
    h = RESOLUTION * STEP
    out = []
    for j in range(len(found.u)):
        costs = {}
        for side, sign in (("upper", 1.0), ("lower", -1.0)):
            moved = found.u.copy()
            moved[j] += sign * h
            predicted = found.values + found.linearisation.jacobian @ (moved - found.u)
            costs[side] = cost_of(residuals(predicted, moved))
        low = min(costs, key=costs.__getitem__)
        out.append(low if costs[low] < found.cost * (1 - 1e-9) else "")
    return tuple(out)


#: seed of the starting points after the first, so that a multi-start fit is reproducible
START_SEED = 12


def start_points(u0: np.ndarray, count: int, seed: int = START_SEED) -> list[np.ndarray]:
    """``u0`` and ``count - 1`` points of the unit box in a Latin hypercube: each parameter's range
    cut into ``count - 1`` equal strata, one point in each, the strata paired at random (``seed``),
    so that every parameter is tried across its whole range with few points.

    >>> points = start_points(np.array([0.5, 0.5]), 5)
    >>> points[0].tolist(), len(points)
    ([0.5, 0.5], 5)
    >>> sorted(int(p[0] * 4) for p in points[1:]), sorted(int(p[1] * 4) for p in points[1:])
    ([0, 1, 2, 3], [0, 1, 2, 3])
    """
    n = count - 1
    rng = np.random.default_rng(seed)
    strata = np.array([rng.permutation(n) for _ in u0], dtype=float).reshape(len(u0), n).T
    return [np.array(u0, dtype=float), *((strata + rng.random((n, len(u0)))) / max(n, 1))]


def fit_residuals(references: list[Reference], u0: np.ndarray) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """``(simulated values, u) -> residuals`` of a fit to ``references`` (in their order) from the
    prior ``u0``: one per measurement with a tolerance, then one prior residual per parameter."""
    measurements = [r.measurement for r in references]

    def residuals(values: np.ndarray, u: np.ndarray) -> np.ndarray:
        measured = [measured_residual(m, float(v)) for m, v in zip(measurements, values, strict=True)]
        return np.concatenate([np.array([r for r in measured if r is not None], dtype=float),
                               PRIOR_WEIGHT * (u - u0)])

    return residuals


def calibration_references(references: list[Reference]) -> list[Reference]:
    """The references a fit uses: calibration points with a measured value."""
    return [r for r in references if r.measurement.calibration and r.measurement.value is not None]


def leave_one_out(result: FitResult, socket: SocketSpec, evaluate: Evaluator | None = None) -> dict[str, float]:
    """Each calibration point predicted by a fit that leaves it out: measurement id -> simulated value.

    The refits are made on the simulator linearised at ``result`` (the fit's own Jacobian; measured
    again with ``evaluate``, one pass per parameter, only for a result that carries none), with the
    same residuals, prior and bounds as :func:`fit`: a refit without point ``i`` moves the
    parameters by ``delta_i`` to fit the others, and ``simulated_i + dsimulated_i/du . delta_i`` is
    its prediction.

    A refit without the only point has just the prior, which holds it at the start: the point is
    predicted as simulated there, not by a linear model through values fitted to it.
    """
    space = ParameterSpace(socket)
    u_fit = space.to_unit(np.array(result.fitted, dtype=float))
    u0 = space.to_unit(space.start)
    comps = [c for c in result.comparisons if c.reference.measurement.value is not None]
    refs = [c.reference for c in comps]
    if len(comps) == 1 and result.at_start is not None:
        return {comps[0].reference.measurement.id: float(result.at_start[0].simulated)}
    base = np.array([c.simulated for c in comps], dtype=float)
    lin = result.linearisation
    if lin is None:
        if evaluate is None:
            raise ValueError("a fit result without its Jacobian needs evaluate= to measure one")
        lin = linearise(lambda u: np.array([c.simulated for c in evaluate(refs, space.values(u))], dtype=float),
                        u_fit, base)
    out: dict[str, float] = {}
    low, high = np.zeros(len(u_fit)), np.ones(len(u_fit))
    for i, left in enumerate(comps):
        others = [r for k, r in enumerate(refs) if k != i]
        without = fit_residuals(others, u0)
        u_i = surrogate_minimum(lambda values, u, i=i, without=without: without(np.delete(values, i), u),
                                lin.jacobian, u_fit, base, low, high)
        out[left.reference.measurement.id] = float(base[i] + lin.jacobian[i] @ (u_i - u_fit))
    return out
