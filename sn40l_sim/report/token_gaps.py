"""Inter-token gaps of a serve counted by step, not by token, and their exact summary.

A sequence's decode tokens come out at its node's step ends, so every gap between two of its
decode steps is a gap between two consecutive step ends of that node, and every token a step gives
beyond the first (accepted drafts) comes a gap of 0 after the one before it. The multiset of a
serve's gaps is therefore a count per node step (how many sequences took part in both that step
and the next), a count of zeros, and the few gaps outside the runs of steps (the prefill's token to
the first decode step, and the tokens the step-by-step loop gives one at a time). Counting them so
costs memory and time in requests and steps, not in generated tokens: listing every gap took some
7 KB per request of a served run (a 20,000-request Llama-3.1-8B serve peaked at 145 MB there).

:func:`weighted_summary` gives what :func:`sn40l_sim.report.metrics.summary` gives for the list
of every gap written out: the percentiles with numpy's default (linear) method, the same
floating-point operations on the same two order statistics; the mean is the exact sum of the
cycles over the count (``summary``'s mean of the seconds may differ from it in its last bit).

Examples
--------
>>> import numpy as np
>>> values, counts = np.array([0, 10, 30]), np.array([2, 3, 1])   # gaps 0 0 10 10 10 30
>>> {k: round(v, 6) for k, v in weighted_summary(values, counts, clock_hz=10.0).items()}
{'count': 6, 'max': 3.0, 'mean': 1.0, 'p50': 1.0, 'p90': 2.0, 'p99': 2.9}
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from sn40l_sim.serving.loop import ServingLog

#: the percentiles every latency summary reports
PERCENTILES = (50, 90, 99)


def inter_token_gaps(log: ServingLog) -> tuple[np.ndarray, np.ndarray]:
    """Every gap between two consecutive output tokens of a request, in cycles, as distinct values
    (int64, ascending) and how many times each occurs (int64, all positive)."""
    loose: list[np.ndarray] = []          # gaps written out, for the tokens outside a run of steps
    joins: list[int] = []                 # a prefill's token to the sequence's first decode step
    zeros = 0                             # tokens after the first of a step (accepted drafts)
    runs: dict[int, tuple[list[int], list[int], list[int]]] = {}   # per node's ends: starts, stops
    for r in log.requests:
        single, decode = r.single_tokens, r.decode
        if len(single) > 1:
            loose.append(np.diff(np.asarray(single, dtype=np.int64)))
        if decode is None or decode.steps == 0:
            continue
        if decode.per_step is not None and not decode.per_step.all():
            # a step that gave this sequence nothing joins the gaps around it: write them out
            tokens = r.token_array()
            loose.append(np.diff(tokens[len(single) - 1 if single else 0:]))
            continue
        first = decode.first_step
        if single:
            joins.append(decode.ends[first] - single[-1])
        if decode.per_step is not None:
            zeros += int(decode.per_step.sum()) - decode.steps
        if decode.steps > 1:
            ends, starts, stops = runs.setdefault(id(decode.ends), (decode.ends, [], []))
            starts.append(first)                  # the gap after step `first` ...
            stops.append(first + decode.steps - 1)   # ... up to the gap before the run's last step
    values, counts = [np.array([0], dtype=np.int64)], [np.array([zeros], dtype=np.int64)]
    for ends, starts, stops in runs.values():
        gaps = np.diff(np.asarray(ends, dtype=np.int64))
        change = np.bincount(starts, minlength=gaps.size + 1) - np.bincount(stops, minlength=gaps.size + 1)
        values.append(gaps)
        counts.append(np.cumsum(change)[:gaps.size])
    if joins:
        loose.append(np.asarray(joins, dtype=np.int64))
    if loose:
        distinct, times = np.unique(np.concatenate(loose), return_counts=True)
        values.append(distinct)
        counts.append(times.astype(np.int64))
    all_values, all_counts = np.concatenate(values), np.concatenate(counts)
    distinct, where = np.unique(all_values, return_inverse=True)
    total = np.zeros(distinct.size, dtype=np.int64)
    np.add.at(total, where, all_counts)
    keep = total > 0
    return distinct[keep], total[keep]


def _lerp(below: float, above: float, fraction: float) -> float:
    # numpy's linear interpolation between two order statistics (numpy.lib's ``_lerp``): from the
    # nearer end, so that the result is exact at both
    step = above - below
    return above - step * (1 - fraction) if fraction >= 0.5 else below + step * fraction


def weighted_summary(values: np.ndarray, counts: np.ndarray, clock_hz: float) -> dict[str, Any]:
    """Count, mean, p50, p90, p99 and max, in seconds, of ``values`` (cycles, ascending, distinct)
    each occurring ``counts`` times: what ``summary`` gives of them all written out."""
    n = int(counts.sum())
    if n == 0:
        return {"count": 0, "max": None, "mean": None, "p50": None, "p90": None, "p99": None}
    cumulative = np.cumsum(counts)
    seconds = values / clock_hz

    def order_statistic(rank: int) -> float:
        return float(seconds[int(np.searchsorted(cumulative, rank, side="right"))])

    out: dict[str, Any] = {"count": n, "max": float(seconds[-1]),
                           "mean": sum(int(v) * int(c) for v, c in zip(values, counts, strict=True)) / n / clock_hz}
    for p in PERCENTILES:
        q = np.float64(p) / 100
        virtual = (n - 1) * q                    # numpy's virtual index for the linear method
        below = int(np.floor(virtual))
        fraction = float(virtual - below)
        low = order_statistic(below)
        high = order_statistic(min(below + 1, n - 1))
        out[f"p{p}"] = float(_lerp(low, high, fraction))
    return {k: out[k] for k in ("count", "max", "mean", "p50", "p90", "p99")}
