"""The ``slo`` and ``rate_search`` sections of an experiment file. Part of
:mod:`sn40l_sim.study.experiment`, which re-exports the three models (``LatencySLO``,
``SLOSection``, ``RateSearchSection``), not the field types.

``slo`` states service-level objectives: a bound on TTFT and/or TPOT at a percentile. The results
then report, beside throughput, the latency at each percentile, the SLO attainment (the fraction
of requests that met every SLO) and the goodput (requests per second that did;
:mod:`sn40l_sim.report.slo`).

``rate_search`` asks for the highest arrival rate at which the SLOs still hold: a bisection
between ``low_per_s`` and ``high_per_s`` on the Poisson workload's ``rate_per_s`` (or, for a
trace, on its arrival rate: ``rate_scale`` times the trace's own mean rate), reporting every probe
(:mod:`sn40l_sim.study.rate_search`).

Examples
--------
>>> section = SLOSection(ttft={"max_s": "2 s", "percentile": 90}, tpot={"max_s": "100 ms"})
>>> section.target().ttft, section.target().tpot
(LatencyTarget(max_s=2.0, percentile=90.0), LatencyTarget(max_s=0.1, percentile=90.0))
>>> RateSearchSection(low_per_s=0.5, high_per_s=8).probes
8
"""
from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, model_validator

from sn40l_sim.report.slo import SLO, LatencyTarget
from sn40l_sim.schema import Range, StrictInt, StrictModel, ranged, timed
from sn40l_sim.study.serving_section import RequestRate

#: the physical ranges of these sections' numbers (docs/robustness.md): no latency bound of a
#: serving study comes near a day; a bisection halves its bracket 30 times at most (2**-30 of it)
LatencyBound = timed(Range("latency bound", 0, 86400, "0 s", "86400 s (a day)", "s", low_open=True))
Percentile = ranged(Range("percentile", 0, 100, "0", "100", low_open=True))
#: (a StrictInt, so that 0 is told this range and not PositiveInt's 1 .. 2**31 - 1)
Probes = Annotated[StrictInt, AfterValidator(Range("number of probes", 1, 30, "1", "30"))]
RelativeTolerance = ranged(Range("relative tolerance", 0, 1, "0", "1", low_open=True))


class LatencySLO(StrictModel):
    """``percentile`` % of requests within ``max_s`` (``"2 s"``, ``"100 ms"`` or seconds)."""

    max_s: LatencyBound
    percentile: Percentile = 90.0

    def target(self) -> LatencyTarget:
        """The report's :class:`~sn40l_sim.report.slo.LatencyTarget`."""
        return LatencyTarget(float(self.max_s), float(self.percentile))


class SLOSection(StrictModel):
    """SLOs on time to first token and time per output token (at least one)."""

    ttft: LatencySLO | None = None
    tpot: LatencySLO | None = None

    @model_validator(mode="after")
    def _one_at_least(self) -> SLOSection:
        if self.ttft is None and self.tpot is None:
            raise ValueError("state at least one SLO: ttft: {max_s: ..., percentile: ...} or tpot: {...}")
        return self

    def target(self) -> SLO:
        """The report's :class:`~sn40l_sim.report.slo.SLO`."""
        return SLO(self.ttft.target() if self.ttft else None, self.tpot.target() if self.tpot else None)


class RateSearchSection(StrictModel):
    """Bisection for the highest arrival rate (requests/s) at which every SLO holds."""

    #: a rate expected to hold (the search reports it if even this one does not)
    low_per_s: RequestRate
    #: a rate expected to fail (the search reports it if even this one holds)
    high_per_s: RequestRate
    #: bisection probes after the two ends (the bracket halves with each)
    probes: Probes = 8
    #: stop early once the bracket is narrower than this fraction of its low end
    tolerance: RelativeTolerance = 0.02

    @model_validator(mode="after")
    def _ordered(self) -> RateSearchSection:
        if not self.low_per_s < self.high_per_s:
            raise ValueError(f"low_per_s ({self.low_per_s:g}) must be below high_per_s ({self.high_per_s:g})")
        return self
