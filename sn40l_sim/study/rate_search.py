"""The highest arrival rate at which the SLOs still hold: bisection on the rate, every probe kept.

Operators size a deployment by this number (DistServe, OSDI 2024, and Vidur, MLSys 2024, search
for it the same way): the largest rate of requests per second a node set serves while the SLOs of
the experiment's ``slo:`` section hold. For each point (KV policy x prompt length) the search

1. probes ``low_per_s`` (expected to hold) and ``high_per_s`` (expected to fail): if the low end
   fails, there is no rate in the bracket, and the answer is empty; if the high end holds, the
   answer is the high end, marked as not bracketed;
2. bisects the bracket ``probes`` times (fewer once it is narrower than ``tolerance`` of its low
   end), keeping the highest rate that held.

A probe serves the workload at that rate: a Poisson workload with ``rate_per_s`` set to it (the
same seed, so the same requests arrive in the same order, closer together), a trace with its
``rate_scale`` set so that its mean arrival rate is the probe's. The step costs of a point are
computed once for all its probes (the decode and prefill graphs do not depend on the rate).

The search assumes SLO attainment falls as the rate rises, which holds for first-come-first-served
queues; the probes are reported so that a workload where it does not can be seen.

A probe is a finite run that starts with every slot free, so at a rate a little above what the
nodes can serve it may still meet the SLOs: the queue that would grow without bound has not grown
yet. So a probe holds only at a rate its nodes sustain: at most the decode slots over the mean time
a request holds one (:func:`steady_state_rate`), and at most what the nodes that prefill can do
(:func:`prefill_sustained_rate`: a queue of prompts grows without bound above it however many
decode slots are free), both measured on the probe's own requests.

Examples
--------
>>> bisect_rate(lambda rate: rate <= 3.3, 1.0, 8.0, probes=6, tolerance=0.01)
(3.296875, True, [(1.0, True), (8.0, False), (4.5, False), (2.75, True), (3.625, False), (3.1875, True), (3.40625, False), (3.296875, True)])
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from sn40l_sim.errors import InputError
from sn40l_sim.report.slo import served_slo_fields
from sn40l_sim.serving.point import PointResult, simulate_point
from sn40l_sim.serving.traces import TraceRow, select_window, window_offset
from sn40l_sim.serving.workload import Request
from sn40l_sim.study.assemble import Assembly
from sn40l_sim.study.experiment import Experiment
from sn40l_sim.study.experiment_files import read_trace_rows
from sn40l_sim.study.points import Point


def search_settings(search: Any) -> str:
    """The ``rate_search`` section in one line, every setting (its defaults too), as a record keeps it.

    >>> from types import SimpleNamespace
    >>> search_settings(SimpleNamespace(low_per_s=0.25, high_per_s=16.0, probes=7, tolerance=0.02))
    'low_per_s=0.25, high_per_s=16, probes=7, tolerance=0.02'
    """
    return ", ".join(f"{key}={getattr(search, key):g}" for key in ("low_per_s", "high_per_s", "probes", "tolerance"))


def bisect_rate(holds: Callable[[float], bool], low: float, high: float, *, probes: int,
                tolerance: float) -> tuple[float | None, bool, list[tuple[float, bool]]]:
    """``(highest rate that held or None, whether the bracket held the answer, [(rate, held)])``.

    ``holds(rate)`` serves one probe. The low end is probed first, then the high end, then the
    midpoints of the bracket.
    """
    tried: list[tuple[float, bool]] = []

    def probe(rate: float) -> bool:
        held = holds(rate)
        tried.append((rate, held))
        return held

    if not probe(low):
        return None, True, tried
    if probe(high):
        return high, False, tried
    for _ in range(probes):
        if (high - low) <= tolerance * low:
            break
        mid = (low + high) / 2
        if probe(mid):
            low = mid
        else:
            high = mid
    return low, True, tried


def steady_state_rate(result: PointResult) -> float | None:
    """Requests per second the decode slots sustain: the slots of every decode node over the mean
    time a request held its slot in ``result``'s served log (its transfer and its decode steps);
    None when no request took a slot.

    >>> from types import SimpleNamespace as NS
    >>> log = NS(requests=[NS(slot_acquired=0, finish=200), NS(slot_acquired=100, finish=200), NS(slot_acquired=-1)],
    ...          setup=NS(decode_nodes=2, slots=3))
    >>> steady_state_rate(NS(log=log, clock_hz=100.0))     # 6 slots, each request 1.5 s
    4.0
    """
    held = [r.finish - r.slot_acquired for r in result.log.requests if r.slot_acquired >= 0]
    if not held:
        return None
    setup = result.log.setup
    return setup.decode_nodes * setup.slots * result.clock_hz * len(held) / sum(held)


def prefill_sustained_rate(result: PointResult) -> float | None:
    """Requests per second the nodes that prefill sustain: their number over the mean time their
    prefill kept one busy in ``result``'s served log (disaggregated, the prefill nodes' busy time
    per request). A co-located node also runs the decode steps, so there each request costs its
    prefill (chunks and graph switches included) plus its share of decode steps run with every
    slot filled (the fewest steps its tokens could take); None when nothing was prefilled.

    Without it a finite run above a prefill node's speed still met a loose TTFT SLO: with one node
    prefilling a 4K prompt in 57 ms (at most 17.4 requests/s), 300 requests at 29 requests/s had
    TTFT p90 under 5 s, and the search reported 29 requests/s.

    >>> from types import SimpleNamespace as NS
    >>> log = NS(requests=[NS(), NS(), NS(), NS()], busy={"prefill": [100, 300], "decode": [0]},
    ...          setup=NS(mode="disaggregated", slots=8))
    >>> prefill_sustained_rate(NS(log=log, clock_hz=100.0))   # 2 nodes, 1 s of prefill per request
    2.0
    """
    log = result.log
    setup, busy = log.setup, log.busy
    if setup.mode == "colocated":
        steps = log.steps
        # sequence-steps over the slots: the decode steps the node could not have run fewer of
        full_steps = int((steps.column("active") * (steps.column("end") - steps.column("start"))).sum()) \
            if len(steps) else 0
        nodes = len(busy["colocated_prefill"])
        cycles = sum(busy["colocated_prefill"]) + sum(busy.get("graph_switch", ())) + full_steps / setup.slots
    else:
        nodes, cycles = len(busy["prefill"]), sum(busy["prefill"])
    if cycles <= 0 or not log.requests:
        return None
    return nodes * result.clock_hz * len(log.requests) / cycles


def base_rate(exp: Experiment, rows: Sequence[TraceRow] | None) -> float:
    """The workload's own arrival rate (requests/s): a Poisson workload's ``rate_per_s``; for a
    trace (its ``rows``), the requests of its window over the window's length, or over the span to
    its last arrival when the window runs to the end of the trace or past it (a ``duration_s``
    beyond the trace's last request holds no arrival in its last seconds: read as the window's
    length, 2,867 requests over 900 s of a 600 s trace were taken for 3.19 requests/s where they
    arrive at 4.78, and every probe arrived that much faster than it was reported), at
    ``rate_scale`` 1. The simulator's format takes its rows in any order, so the last arrival is
    the latest one, not the last row's."""
    workload = exp.spec.workload
    if workload.kind == "poisson":
        return float(workload.rate_per_s)
    window = select_window(rows, workload.start_s, workload.duration_s)
    last_s = max((row.arrival_s for row in window), default=0.0)
    arrivals = [row.arrival_s for row in rows]
    inside = workload.duration_s is not None and \
        window_offset(workload.start_s + workload.duration_s) <= window_offset(max(arrivals) - min(arrivals))
    span = workload.duration_s if inside else last_s
    if len(window) < 2:
        raise exp.error(("workload",), "a rate search on a trace needs at least two requests in its window")
    if span <= 0:
        raise exp.error(("workload",), f"the {len(window)} requests of the trace's window all arrive at once: a rate "
                        "search needs arrivals spread over time to scale")
    return len(window) / span


def at_rate(asm: Assembly, rate: float) -> Assembly:
    """``asm`` with its workload's arrival rate set to ``rate`` requests/s."""
    exp = asm.experiment
    workload = exp.spec.workload
    if workload.kind == "poisson":
        changed = workload.model_copy(update={"rate_per_s": rate})
    else:
        rows = asm.trace_rows if asm.trace_rows is not None else read_trace_rows(exp)
        changed = workload.model_copy(update={"rate_scale": rate / base_rate(exp, rows)})
    spec = exp.spec.model_copy(update={"workload": changed})
    return replace(asm, experiment=Experiment(spec, exp.doc))


def search_point(asm: Assembly, point: Point, *,
                 on_probe: Callable[[PointResult, list[Request], Experiment], Any] | None = None
                 ) -> tuple[PointResult, dict[str, Any], Experiment]:
    """The rate search of one point: the served result at the highest rate that held (at the low
    end when even that fails), the ``rate_search`` fields of its record and the experiment at that
    rate (its workload is the one the result served: the record's ``workload`` line showed the
    experiment's own rate, not the rate found). ``on_probe`` is called with each probe's result, the
    requests that went in and the experiment at its rate (the runner checks the invariants)."""
    exp = asm.experiment
    search, slo = exp.spec.rate_search, exp.spec.slo.target()
    setup = asm.setup(point)
    costs, place = asm.step_timer(setup), asm.memory_placer(setup.model)   # shared by every probe
    prefill_side = asm.prefill_side(setup, policy_free_prefill=True)
    results: dict[float, tuple[PointResult, Experiment]] = {}
    rows: list[dict[str, Any]] = []

    def holds(rate: float) -> bool:
        probe = at_rate(asm, rate)
        probe_requests = probe.requests(point)
        went_in: list[Request] = []

        def requests_for(slots: int) -> list[Request]:
            made = probe_requests(slots)
            went_in.extend(made)
            return made

        try:
            result = simulate_point(setup, requests_for, costs, place, **prefill_side)
        except InputError as exc:
            raise asm.locate(exc, point) from None
        if on_probe is not None:
            on_probe(result, went_in, probe.experiment)
        results[rate] = result, probe.experiment
        fields = served_slo_fields(result.log, result.clock_hz, slo)
        s = fields["slo"]
        sustained, prefilled = steady_state_rate(result), prefill_sustained_rate(result)
        held = bool(s["holds"]) and all(bound is None or rate <= bound for bound in (sustained, prefilled))
        rows.append({"rate_per_s": rate, "holds": held, "attainment": s["attainment"],
                     "goodput_requests_per_s": fields["goodput_requests_per_s"],
                     "ttft_at_percentile_s": s["ttft_at_percentile_s"],
                     "tpot_at_percentile_s": s["tpot_at_percentile_s"],
                     "steady_state_rate_per_s": sustained, "prefill_rate_per_s": prefilled})
        return held

    best, bracketed, _ = bisect_rate(holds, search.low_per_s, search.high_per_s, probes=search.probes,
                                     tolerance=search.tolerance)
    # the search's own settings beside its answer: two searches of other bounds or probes differ in the
    # rate they found, which compare named as a changed workload alone
    fields = {"rate_search": search_settings(search), "max_rate_per_s": best, "max_rate_bracketed": bracketed,
              "rate_probes": sorted(rows, key=lambda row: row["rate_per_s"])}
    result, ran = results[best if best is not None else search.low_per_s]
    return result, fields, ran
