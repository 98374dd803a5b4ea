"""Rounding of fractional cycle counts to integer cycles, shared by the unit models."""
from __future__ import annotations

import math

# A cycle count computed in floating point as 240.00000000000003 is 240 cycles, not 241: values
# this close to an integer are taken as that integer before rounding up.
_REL_TOL = 1e-9


def ceil_cycles(value: float) -> int:
    """Round a non-negative cycle count up to whole cycles, forgiving float noise.

    Parameters
    ----------
    value : float
        Cycles (or any count) that must be paid in whole units.

    Returns
    -------
    int
        The smallest integer not below ``value`` (within a relative tolerance of 1e-9).

    Examples
    --------
    >>> ceil_cycles(1.5e-7 * 1.6e9)   # 150 ns at 1.6 GHz, 240.00000000000003 in floats
    240
    >>> ceil_cycles(2.2)
    3
    >>> ceil_cycles(0.0)
    0
    """
    if value.__class__ is int and value >= 0:
        # what the rest gives a whole count, without its float arithmetic: the PMU models round
        # byte counts that are already integers hundreds of thousands of times per mapping
        return value
    if value < 0:
        raise ValueError(f"cycle count must be >= 0, got {value!r}")
    nearest = round(value)
    if abs(value - nearest) <= _REL_TOL * max(1.0, abs(value)):
        return int(nearest)
    return int(math.ceil(value))


def ceil_div(a: int, b: int) -> int:
    """Integer ceiling of ``a / b`` for ``a >= 0`` and ``b > 0``.

    >>> ceil_div(33, 32), ceil_div(32, 32), ceil_div(0, 32)
    (2, 1, 0)
    """
    return -(-a // b)
