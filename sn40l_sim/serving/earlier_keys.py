"""Prefill graphs whose attention also covers tokens already cached: a later chunk of a chunked
prefill (:mod:`sn40l_sim.serving.chunked_prefill`) and the suffix of a prompt whose prefix is cached
(:mod:`sn40l_sim.serving.prefix_cache`).

Each runs the graph compiled for its own rows whose queries also attend over the ``earlier``
tokens' keys: a :class:`~sn40l_sim.ir.Shape` of phase ``prefill`` with ``kv_len = earlier``
(:mod:`sn40l_sim.models.flash`). Timing one graph per count of earlier tokens would time as many
graphs as there are ways prompts split (or prefixes end); instead each caller times graphs at a few
counts (the multiples of the chunk; the compiled prefill lengths) and interpolates linearly between
the two around ``earlier``: only the attention over the earlier keys depends on their count, and it
grows with it about linearly (one (query, key) tile pair per block of keys).

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
import math
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
