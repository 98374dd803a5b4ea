"""Prefill graphs whose attention also covers tokens already cached: a later chunk of a chunked
prefill (:mod:`sn40l_sim.serving.chunked_prefill`) and the suffix of a prompt whose prefix is cached
(:mod:`sn40l_sim.serving.prefix_cache`).

Each runs the graph compiled for its own rows whose queries also attend over the ``earlier``
tokens' keys: a :class:`~sn40l_sim.ir.Shape` of phase ``prefill`` with ``kv_len = earlier``
(:mod:`sn40l_sim.models.flash`). Timing one graph per count of earlier tokens would time as many
graphs as there are ways prompts split (or prefixes end); instead each caller times graphs at a few
counts (the multiples of the chunk, at most 65 of them chosen by :func:`refined_points`; the
compiled prefill lengths) and interpolates linearly between the two around ``earlier``: only the
attention over the earlier keys depends on their count, and it grows with it about linearly (one
(query, key) tile pair per block of keys) but for jumps where the mapper changes plan.

Examples
--------
A call's fixed 100 cycles, 1 per token and 1 per (query, earlier key) pair, timed at 0, 4 and 8
earlier tokens:

>>> timed = lambda tokens, earlier: 100 + tokens + tokens * earlier
>>> [interpolated_cycles(timed, 4, e, *between_points((0, 4, 8), e)) for e in (0, 4, 6, 8)]
[104, 120, 128, 136]
>>> between_multiples(4, 6), between_points((0, 4, 8), 8)
((4, 8), (8, 8))
"""
from __future__ import annotations

import bisect
import itertools
import math
import statistics
from collections.abc import Callable, Sequence


def interpolated_cycles(timed: Callable[[int, int], int], tokens: int, earlier: int, low: int, high: int) -> int:
    """Cycles of ``tokens`` rows after ``earlier`` cached tokens, from ``timed(tokens, earlier)``
    called at ``low`` and ``high`` only (``low <= earlier <= high``): exact at ``low``, linear between."""
    at_low = timed(tokens, low)
    if low == earlier:
        return at_low
    return at_low + math.ceil((timed(tokens, high) - at_low) * (earlier - low) / (high - low))


def between_multiples(step: int, earlier: int) -> tuple[int, int]:
    """The multiples of ``step`` around ``earlier``: ``(low, low + step)`` with ``low <= earlier``."""
    low = earlier // step * step
    return low, low + step


def between_points(points: Sequence[int], earlier: int) -> tuple[int, int]:
    """The two of the sorted ``points`` around ``earlier`` (both ``earlier`` when it is one);
    ``points`` must start at or below ``earlier`` and end at or above it."""
    i = bisect.bisect_left(points, earlier)
    if i < len(points) and points[i] == earlier:
        return earlier, earlier
    if i == 0 or i == len(points):
        raise ValueError(f"{earlier} earlier tokens lie outside the timed points {points[0]}..{points[-1]}")
    return points[i - 1], points[i]


def refined_points(last: int, timed: Callable[[int], int], most: int, spans: int) -> dict[int, int]:
    """At most ``most`` of the integers ``0..last`` with ``timed`` at each, chosen so that linear
    interpolation between consecutive ones follows ``timed`` closely; all of them when they are at
    most ``most``. First the ends of ``spans`` equal spans; then, one at a time, the middle of the
    interval (of two or more integers) that strays most, until ``most`` are timed or none strays by a
    cycle. An interval strays by its width times the larger of two slope differences: its own slope
    against the nearer of its neighbours' (a jump inside it makes it steeper than both; an end
    interval's other neighbour counts as having the median slope), and against
    the median slope (a run of jumps makes a staircase whose steps agree with one another but not
    with the slope between jumps). So the points gather at the jumps and bends of ``timed`` (the
    mapper changing plan at some count of keys) and stay sparse where it is straight.

    A line with a jump of 1,000 between 20 and 21: the points close in on it, and once it lies
    between two neighbours nothing strays, so 9 of the 15 allowed are timed.

    >>> points = refined_points(64, lambda i: 10 * i + (1000 if i >= 21 else 0), 15, 4)
    >>> sorted(points)
    [0, 16, 20, 21, 22, 24, 32, 48, 64]
    >>> points[20], points[21]
    (200, 1210)
    """
    if last + 1 <= most:
        return {i: timed(i) for i in range(last + 1)}
    if spans + 1 > most:
        raise ValueError(f"the ends of {spans} spans are more than the {most} points allowed")
    values = {i: timed(i) for i in sorted({round(k * last / spans) for k in range(spans + 1)})}
    while len(values) < most:
        xs = sorted(values)
        slopes = [(values[b] - values[a]) / (b - a) for a, b in itertools.pairwise(xs)]
        median = statistics.median_low(slopes)
        around = [median, *slopes, median]       # an end interval's missing neighbour: the median
        worst, at = 1.0, None     # strays of less than a cycle are rounding
        for j, (a, b) in enumerate(itertools.pairwise(xs)):
            if b - a < 2:
                continue
            beside = min(abs(slopes[j] - around[j]), abs(slopes[j] - around[j + 2]))
            stray = max(beside, abs(slopes[j] - median)) * (b - a)
            if stray > worst or (at is None and stray == worst):    # the first of the worst
                worst, at = stray, (a + b) // 2
        if at is None:
            break
        values[at] = timed(at)
    return dict(sorted(values.items()))
