"""Least squares on a simulator too slow to differentiate often: a trust-region fit on its
linearisation, measured once by finite differences and reused while it predicts well.

The simulator is a function of a point ``u`` of the unit box (one *pass*: every calibration point
simulated) returning a vector of simulated values; the residuals are a cheap function of those
values and of ``u`` (piecewise linear: a range contributes only outside it). Instead of
linearising the residuals (as a generic solver does, which cannot see a range's edge), the fit
linearises the *simulated values*,

    values(u) ~ values(v) + J (u - v)         (v: the current point, J: finite differences),

and minimises the exact residuals of that prediction (the *surrogate*) inside a box around ``v``
(the trust region); only the surrogate's minimum is simulated. :func:`surrogate_minimum` is also
what the leave-one-out refits of :mod:`~sn40l_sim.study.calibration` solve, on the same ``J``.

The Jacobian costs one pass per parameter, so it is measured at the start and kept while the
simulator agrees with it; it is measured again only when, at a point farther than
:data:`RESOLUTION` of the step from where it was measured, a step it proposed is refused or it
sees nothing better. The trust region starts at the finite-difference step (the
scale the Jacobian has seen), doubles after a step the simulator agrees with and shrinks to a
quarter of a refused one. The fit stops when the surrogate, on a fresh Jacobian, sees no
reduction of the cost worth a pass, when the region has shrunk below :data:`RESOLUTION` of the
finite-difference step (the simulator has a kink or a jump there: a mapper plan switching, a
batch no longer fitting, which a secant over the step cannot resolve), or when the pass budget is
spent.

Examples
--------
A linear "simulator" of two parameters whose values must reach (0.3, 0.9):

>>> import numpy as np
>>> target = np.array([0.3, 0.9])
>>> result = trust_region_fit(lambda u: np.array(u, dtype=float), lambda v, u: (v - target) / 0.01,
...                           np.array([0.5, 0.5]), max_passes=40)
>>> np.round(result.u, 6).tolist(), result.passes <= 12
([0.3, 0.9], True)
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

#: the finite-difference step, in the unit box (a hundredth of each parameter's range)
STEP = 0.01
#: the smallest trust region tried, as a fraction of the finite-difference step
RESOLUTION = 1 / 16
#: a surrogate reduction of the cost below this fraction of the cost is not worth a pass
FTOL = 1e-6

#: ``u -> simulated values``: one pass of the simulator
Simulate = Callable[[np.ndarray], np.ndarray]
#: ``(simulated values, u) -> residuals`` (the cost is half their sum of squares)
Residuals = Callable[[np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Linearisation:
    """The simulated values' sensitivities to the unit-box parameters, by forward differences.

    Attributes
    ----------
    at : numpy.ndarray
        The point they were measured at.
    jacobian : numpy.ndarray
        ``d value_i / d u_j`` (one row per simulated value, one column per parameter).
    steps : numpy.ndarray
        The signed step of each parameter (into the box from a bound).
    """

    at: np.ndarray
    jacobian: np.ndarray
    steps: np.ndarray


@dataclass(frozen=True)
class LinearFit:
    """Where a :func:`trust_region_fit` ended: the point, its simulated values and cost, the
    Jacobian last measured, the number of passes it took and why it stopped (:data:`STOPPED`)."""

    u: np.ndarray
    values: np.ndarray
    cost: float
    linearisation: Linearisation
    passes: int
    stopped: str = "converged"


#: why a fit stops: the surrogate on a Jacobian measured where the fit is sees no better point; the
#: pass budget is spent; the trust region shrank below :data:`RESOLUTION` of the step (a jump)
STOPPED = ("converged", "budget", "resolution")


def cost_of(residuals: np.ndarray) -> float:
    """Half the sum of squared residuals."""
    return float(0.5 * residuals @ residuals)


def forward_steps(u: np.ndarray, step: float = STEP) -> np.ndarray:
    """``step`` for every parameter, negative where ``u + step`` would leave the unit box.

    >>> forward_steps(np.array([0.2, 0.995])).tolist()
    [0.01, -0.01]
    """
    return np.where(u + step <= 1.0, step, -step)


def linearise(simulate: Simulate, u: np.ndarray, values: np.ndarray, step: float = STEP) -> Linearisation:
    """Measure the Jacobian at ``u`` (whose simulated values are ``values``): one pass per parameter."""
    steps = forward_steps(u, step)
    jacobian = np.zeros((len(values), len(u)))
    for j, h in enumerate(steps):
        moved = u.copy()
        moved[j] += h
        jacobian[:, j] = (simulate(moved) - values) / h
    return Linearisation(u.copy(), jacobian, steps)


def surrogate_minimum(residuals: Residuals, jacobian: np.ndarray, u: np.ndarray, values: np.ndarray,
                      low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """The point of the box ``[low, high]`` minimising the residuals of the linear prediction
    ``values + jacobian (x - u)`` (no simulation), searched from ``u`` (which the box holds)."""
    from scipy.optimize import least_squares

    solution = least_squares(lambda x: residuals(values + jacobian @ (x - u), x), u, bounds=(low, high),
                             method="trf")
    return solution.x


def trust_region_fit(simulate: Simulate, residuals: Residuals, u0: np.ndarray, *, max_passes: int,
                     step: float = STEP, on_pass: Callable[[int, float], None] | None = None) -> LinearFit:
    """Minimise the cost of ``residuals(simulate(u), u)`` over the unit box from ``u0`` (see the
    module docstring).

    Parameters
    ----------
    simulate, residuals
        The simulator (one pass per call) and the residuals of its values.
    u0 : numpy.ndarray
        The starting point (inside the unit box).
    max_passes : int
        Budget of passes, the Jacobians' included (at least ``1 + len(u0)``: the start and one
        Jacobian).
    step : float
        Finite-difference step in the unit box.
    on_pass : callable, optional
        Called after each pass with the number of passes so far and that pass's cost.
    """
    if max_passes < 1 + len(u0):
        raise ValueError(f"a fit of {len(u0)} parameters needs at least {1 + len(u0)} passes, got {max_passes}")
    passes = 0

    def run(u: np.ndarray) -> np.ndarray:
        nonlocal passes
        values = np.asarray(simulate(u), dtype=float)
        passes += 1
        if on_pass is not None:
            on_pass(passes, cost_of(residuals(values, u)))
        return values

    u = np.array(u0, dtype=float)
    values = run(u)
    cost = cost_of(residuals(values, u))
    lin = linearise(run, u, values, step)
    radius = step
    while True:
        # measured here, or so near that a secant over ``step`` would measure the same
        fresh = float(np.max(np.abs(u - lin.at))) < RESOLUTION * step
        trial = surrogate_minimum(residuals, lin.jacobian, u, values, np.maximum(0.0, u - radius),
                                  np.minimum(1.0, u + radius))
        predicted = cost - cost_of(residuals(values + lin.jacobian @ (trial - u), trial))
        moved = float(np.max(np.abs(trial - u)))
        if predicted <= FTOL * cost or moved == 0.0:
            if fresh or passes + len(u) > max_passes:
                # converged: the surrogate sees nothing better (or, on an old Jacobian, no pass is left
                # to look again)
                stopped = "converged" if fresh else "budget"
                break
            lin = linearise(run, u, values, step)   # the Jacobian was measured elsewhere: look again
            continue
        if passes >= max_passes:
            stopped = "budget"
            break
        trial_values = run(trial)
        trial_cost = cost_of(residuals(trial_values, trial))
        if trial_cost < cost:
            agreement = (cost - trial_cost) / predicted
            if agreement >= 0.75 and moved >= 0.99 * radius:
                radius *= 2
            elif agreement < 0.25:
                radius = moved / 4
            u, values, cost = trial, trial_values, trial_cost
        elif fresh:
            radius = moved / 4
        elif passes + len(u) <= max_passes:
            lin = linearise(run, u, values, step)   # refused by a Jacobian measured elsewhere: measure it here
            continue
        else:
            stopped = "budget"
            break
        if radius < RESOLUTION * step:
            stopped = "resolution"   # the simulator disagrees on a scale the linearisation cannot resolve
            break
    return LinearFit(u, values, cost, lin, passes, stopped)
