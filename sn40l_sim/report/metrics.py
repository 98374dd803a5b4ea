"""Serving metrics from a :class:`~sn40l_sim.serving.loop.ServingLog` (no simulation here).

All outputs are in seconds (cycles divided by the clock) or plain fractions:

* TTFT: arrival to the first token (the end of its prefill);
* TPOT: per request, (last token - first token) / (output_len - 1), for requests with >1 token;
* inter-token latency (ITL): every gap between consecutive tokens of a request;
* end-to-end latency: arrival to the last token; queueing: arrival to the start of the prefill;
* throughput: requests and output tokens per second of the whole run (first arrival to last
  token), and decode tokens per second of decode-step time (the tokens the steps gave, accepted
  drafts of speculative decoding included);
* utilisation: busy fraction of each prefill node, decode node and KV link over the run, and of
  each hardware resource within one prefill and one decode step;
* KV occupancy: bytes of cache held by a decode node's sequences after each step, against the
  bytes reserved for its slots.

Percentiles interpolate linearly between the two nearest ranks (numpy's default method, Hyndman and
Fan's type 7): p of n sorted values is at rank ``p / 100 * (n - 1)`` counting from 0, so the p90 of
1, 2, 3, 4 is 3.7 (below); :mod:`sn40l_sim.report.slo` uses the same for its SLO percentiles.
Output tokens count every token once: each request's first (from prefill) and, under speculative
decoding, the drafts a step accepts, never those it rejects.

Examples
--------
>>> {k: round(v, 6) for k, v in summary([1.0, 2.0, 3.0, 4.0]).items()}
{'count': 4, 'max': 4.0, 'mean': 2.5, 'p50': 2.5, 'p90': 3.7, 'p99': 3.97}
>>> summary([])
{'count': 0, 'max': None, 'mean': None, 'p50': None, 'p90': None, 'p99': None}

A served log (the serving loop's example, :mod:`sn40l_sim.serving.loop`) at a clock of 100 Hz, so
that a second is 100 cycles: request 0's tokens at cycles 100, 115 and 125, request 1's at 200 and
215 after queueing for the prefill node until cycle 100; 5 tokens in 2.15 s, the 3 decode steps
giving 3 in 0.3 s of step time; of the 215 cycles the prefill node busy 200, the decode node 30,
the KV link 10 (two transfers):

>>> from sn40l_sim.serving.loop import ServingSetup, simulate
>>> from sn40l_sim.serving.workload import Request
>>> setup = ServingSetup(mode="disaggregated", prefill_nodes=1, decode_nodes=1, slots=2,
...     decode_step_cycles=10, prefill_cycles=lambda p: p, transfer_cycles=lambda p: 5,
...     cache_tokens=lambda p, g: p + g, kv_bytes_per_token=1, slot_cache_tokens=110)
>>> log = simulate([Request(0, 0, 100, 3), Request(1, 0, 100, 2)], setup)
>>> lat = latencies(log, clock_hz=100.0)
>>> {name: [lat[name][k] for k in ("p50", "max")] for name in ("ttft_s", "tpot_s", "queue_s", "e2e_s")}
{'ttft_s': [1.5, 2.0], 'tpot_s': [0.1375, 0.15], 'queue_s': [0.5, 1.0], 'e2e_s': [1.7, 2.15]}
>>> rates = throughput(log, clock_hz=100.0)
>>> rates["makespan_s"], rates["output_tokens"], round(rates["output_tokens_per_s"], 4)
(2.15, 5, 2.3256)
>>> rates["decode_steps"], rates["decode_tokens_per_s_observed"], rates["mean_active_slots"]
(3, 10.0, 1.0)
>>> {role: [round(f * 215) for f in busy] for role, busy in node_utilisation(log).items()}
{'decode': [30], 'link': [10], 'prefill': [200]}
"""
from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from sn40l_sim.report.token_gaps import inter_token_gaps, weighted_summary
from sn40l_sim.serving.loop import ServingLog


def summary(values: Sequence[float]) -> dict[str, Any]:
    """Count, mean, p50, p90, p99 and max (linear interpolation between order statistics)."""
    if len(values) == 0:
        return {"count": 0, "max": None, "mean": None, "p50": None, "p90": None, "p99": None}
    data = np.asarray(values, dtype=float)
    p50, p90, p99 = np.percentile(data, [50, 90, 99])
    return {"count": int(data.size), "max": float(data.max()), "mean": float(data.mean()),
            "p50": float(p50), "p90": float(p90), "p99": float(p99)}


def latencies(log: ServingLog, clock_hz: float) -> dict[str, dict[str, Any]]:
    """TTFT, TPOT, inter-token, end-to-end and queueing latency summaries, in seconds.

    The module's second example serves two requests and reads them with it.
    """
    ttft, tpot, e2e, queue = [], [], [], []
    for r in log.requests:
        arrival = r.request.arrival_cycle
        ttft.append((r.first_token - arrival) / clock_hz)
        e2e.append((r.finish - arrival) / clock_hz)
        queue.append((r.prefill_start - arrival) / clock_hz)
        generated = r.generated
        if generated > 1:
            tpot.append(float(r.last_token - r.first_token) / (generated - 1) / clock_hz)
    # every inter-token gap, counted by decode step rather than listed (token_gaps.py: a serve's
    # gaps are as many as its tokens)
    itl = weighted_summary(*inter_token_gaps(log), clock_hz=clock_hz)
    return {"ttft_s": summary(ttft), "tpot_s": summary(tpot), "itl_s": itl, "e2e_s": summary(e2e),
            "queue_s": summary(queue)}


def throughput(log: ServingLog, clock_hz: float) -> dict[str, float | None]:
    """Request and token rates of the run, and decode tokens per second of decode-step time (None,
    an empty cell, for a run without a decode step: every output one token long).

    The module's second example serves two requests and reads them with it.
    """
    start = log.span_start
    span_s = (log.end_cycle - start) / clock_hz
    tokens = sum(r.generated for r in log.requests)
    steps = log.steps
    decode_tokens = int(steps.column("tokens").sum())
    stepped = int(steps.column("active").sum())
    decode_s = int((steps.column("end") - steps.column("start")).sum()) / clock_hz
    return {
        "makespan_s": span_s,
        "requests": len(log.requests),
        "output_tokens": tokens,
        "requests_per_s": len(log.requests) / span_s if span_s > 0 else 0.0,
        "output_tokens_per_s": tokens / span_s if span_s > 0 else 0.0,
        "decode_steps": len(log.steps),
        # what the decode nodes achieved with the slots actually filled and the drafts accepted
        # no decode step is no rate, not a rate of 0 tokens/s
        "decode_tokens_per_s_observed": decode_tokens / decode_s if decode_s > 0 else None,
        "mean_active_slots": stepped / len(log.steps) if log.steps else None,
    }


def node_utilisation(log: ServingLog) -> dict[str, list[float]]:
    """Busy fraction of every node (and link) by role over the run (first arrival to the end).

    The module's second example serves two requests and reads them with it.
    """
    start = log.span_start
    span = max(1, log.end_cycle - start)
    return {role: [b / span for b in busy] for role, busy in sorted(log.busy.items())}


def resource_utilisation(timing: Any) -> dict[str, float]:
    """Busy cycles of each hardware resource in one step, as a fraction of the step's cycles
    (a :class:`~sn40l_sim.engine.phase.PhaseTiming`'s ``resource_busy_cycles``).

    Examples
    --------
    A fake step (:func:`~sn40l_sim.serving.fixed_costs.fixed_timing`) computes half its cycles and
    streams HBM through all of them:

    >>> from sn40l_sim.serving.fixed_costs import fixed_timing
    >>> resource_utilisation(fixed_timing("decode", {"attention": 600, "ffn": 400}))
    {'compute': 0.5, 'hbm': 1.0}
    """
    cycles = max(1, int(timing.cycles))
    return {name: busy / cycles for name, busy in sorted(timing.resource_busy_cycles.items())}


def kv_occupancy(log: ServingLog, clock_hz: float, max_points: int = 100) -> dict[str, Any]:
    """Peak and mean KV occupancy of the decode nodes, and a series per node of every k-th step (at
    most ``max_points`` of them) and the node's peak step and last step: ``max_points + 2`` at most."""
    capacity = log.setup.kv_capacity_bytes
    out: dict[str, Any] = {"capacity_bytes_per_node": capacity, "peak_bytes": 0, "peak_fraction": 0.0,
                           "mean_fraction": 0.0, "series": []}
    if not log.steps:
        return out
    kv_bytes, ends, nodes = log.steps.column("kv_bytes"), log.steps.column("end"), log.steps.column("node")
    weights = ends - log.steps.column("start")
    peak = int(kv_bytes.max())
    # the weighted sum in Python integers: cycles x bytes can pass int64's 9.2e18
    mean = sum(map(operator.mul, weights.tolist(), kv_bytes.tolist())) / int(weights.sum())
    out.update(peak_bytes=peak, peak_fraction=peak / capacity, mean_fraction=mean / capacity)
    slots_in_use = log.steps.column("slots_in_use")
    for node in np.unique(nodes).tolist():
        rows = np.flatnonzero(nodes == node)
        stride = max(1, -(-rows.size // max_points))
        peak_index = int(np.argmax(kv_bytes[rows]))   # the first of the node's peak steps
        keep = sorted(set(range(0, rows.size, stride)) | {peak_index, rows.size - 1})
        out["series"].extend({"node": node, "t_s": int(ends[rows[i]]) / clock_hz, "kv_bytes": int(kv_bytes[rows[i]]),
                              "slots_in_use": int(slots_in_use[rows[i]])} for i in keep)
    return out


def capped_lengths(log: ServingLog) -> dict[str, int]:
    """What capping a trace's lengths to the compiled graphs cut: requests, prompts and outputs
    capped, and the tokens cut from them (all 0 when nothing was capped)."""
    reqs = [r.request for r in log.requests]
    return {"requests": sum(1 for r in reqs if r.capped_prompt_tokens or r.capped_output_tokens),
            "prompts": sum(1 for r in reqs if r.capped_prompt_tokens),
            "outputs": sum(1 for r in reqs if r.capped_output_tokens),
            "prompt_tokens": sum(r.capped_prompt_tokens for r in reqs),
            "output_tokens": sum(r.capped_output_tokens for r in reqs)}
