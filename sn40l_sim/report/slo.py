"""Service-level objectives of a served run: attainment and goodput (no simulation here).

An SLO bounds a latency at a percentile: "TTFT at p90 within 2 s", "TPOT at p99 within 100 ms".
Of a served run (:class:`~sn40l_sim.serving.loop.ServingLog`) this module reports, as DistServe
(Zhong et al., OSDI 2024) and Vidur (Agrawal et al., MLSys 2024) do:

* per SLO, the latency at its percentile and whether it is within the bound (the SLO *holds*);
* the *attainment*: the fraction of requests that met every SLO (their own TTFT and TPOT within
  the bounds; a request of one token has no TPOT and meets a TPOT SLO);
* the *goodput*: requests (and their output tokens) per second of the run that met every SLO.

The SLOs hold for the run when every stated percentile is within its bound; that is what the
highest-rate search (:mod:`sn40l_sim.study.rate_search`) bisects on.

Examples
--------
>>> slo = SLO(ttft=LatencyTarget(max_s=1.0, percentile=50))
>>> fields = slo_fields([0.5, 0.8, 3.0], [None, 0.1, 0.1], [1, 5, 5], makespan_s=10.0, slo=slo)
>>> fields["slo"]["attainment"], fields["slo"]["holds"], fields["goodput_requests_per_s"]
(0.6666666666666666, True, 0.2)
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sn40l_sim.serving.loop import ServingLog


@dataclass(frozen=True)
class LatencyTarget:
    """A latency bound at a percentile: ``percentile`` % of requests within ``max_s`` seconds."""

    max_s: float
    percentile: float


@dataclass(frozen=True)
class SLO:
    """The SLOs of an experiment (either may be absent)."""

    ttft: LatencyTarget | None = None
    tpot: LatencyTarget | None = None


def request_latencies(log: ServingLog, clock_hz: float) -> tuple[list[float], list[float | None], list[int]]:
    """Per request, in id order: TTFT (s), TPOT (s; None for a request of one token), tokens."""
    ttft, tpot, tokens = [], [], []
    for r in log.requests:
        ttft.append((r.first_token - r.request.arrival_cycle) / clock_hz)
        n = r.generated  # the first token is the prefill's (first_token), the last at last_token
        tpot.append((r.last_token - r.first_token) / (n - 1) / clock_hz if n > 1 else None)
        tokens.append(n)
    return ttft, tpot, tokens


def _at_percentile(values: Sequence[float], percentile: float) -> float | None:
    return float(np.percentile(np.asarray(values, dtype=float), percentile)) if len(values) else None


def slo_fields(ttft: Sequence[float], tpot: Sequence[float | None], tokens: Sequence[int], *, makespan_s: float,
               slo: SLO) -> dict[str, Any]:
    """The ``slo`` group of a results record (:mod:`sn40l_sim.report.fields`) from per-request
    latencies (:func:`request_latencies`) and the run's makespan."""
    met = [True] * len(ttft)
    out: dict[str, Any] = {}
    holds = True
    for name, values in (("ttft", list(ttft)), ("tpot", list(tpot))):
        target: LatencyTarget | None = getattr(slo, name)
        if target is None:
            out.update({f"{name}_max_s": None, f"{name}_percentile": None, f"{name}_at_percentile_s": None,
                        f"{name}_attainment": None})
            continue
        ok = [v is None or v <= target.max_s for v in values]
        met = [a and b for a, b in zip(met, ok, strict=True)]
        at = _at_percentile([v for v in values if v is not None], target.percentile)
        holds = holds and (at is None or at <= target.max_s)
        out.update({f"{name}_max_s": target.max_s, f"{name}_percentile": target.percentile,
                    f"{name}_at_percentile_s": at, f"{name}_attainment": sum(ok) / len(ok) if ok else None})
    good = sum(met)
    good_tokens = sum(n for n, m in zip(tokens, met, strict=True) if m)
    out.update(attainment=good / len(met) if met else None, holds=holds)
    return {"slo": dict(sorted(out.items())),
            "goodput_requests_per_s": good / makespan_s if makespan_s > 0 else 0.0,
            "goodput_tokens_per_s": good_tokens / makespan_s if makespan_s > 0 else 0.0}


def served_slo_fields(log: ServingLog, clock_hz: float, slo: SLO) -> dict[str, Any]:
    """:func:`slo_fields` of a served run (makespan from the first arrival to the last token, as
    :func:`sn40l_sim.report.metrics.throughput` counts it)."""
    start = log.span_start
    ttft, tpot, tokens = request_latencies(log, clock_hz)
    return slo_fields(ttft, tpot, tokens, makespan_s=(log.end_cycle - start) / clock_hz, slo=slo)
