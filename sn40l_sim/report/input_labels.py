"""Axis text for sweep axes, which set experiment and hardware inputs rather than results fields
(a results column is labelled by its declaration in :mod:`sn40l_sim.report.fields`). Used by
:func:`sn40l_sim.report.plot_csv.axis_label`, which adds the unit a name's suffix implies
(``_s`` -> s, ``bytes_per_s`` -> GB/s): a label here that ends with ``)`` already names its unit.

The serving and workload entries are the numeric fields of an experiment's ``workload``,
``serving`` and ``slo`` sections (:mod:`sn40l_sim.study.serving_section`,
:mod:`sn40l_sim.study.slo_section`): a load sweep's x axis is usually one of them, and without an
entry the plot showed the bare path (``workload.rate_per_s``) with no unit.

Examples
--------
>>> INPUT_LABELS["workload.rate_per_s"]
'arrival rate (requests/s)'
"""
from __future__ import annotations

#: input path (after ``sweep.`` or ``sweep.hardware.``), or its last part -> axis text
INPUT_LABELS: dict[str, str] = {
    "prompt_len": "prompt length (tokens)",
    "shape.prompt_len": "prompt length (tokens)",
    "budget": "KV budget (tokens per sequence)",
    "sink": "sink tokens",
    "recent": "recent-ring tokens",
    "topk": "top-K tokens",
    "sockets": "sockets per node",
    "socket.p2p.bytes_per_s_per_port": "P2P bandwidth per port",
    "socket.clock_hz": "clock",
    # workload: arrivals and lengths
    "workload.rate_per_s": "arrival rate (requests/s)",
    "workload.rate_scale": "arrival rate (x the trace's)",
    "workload.start_s": "trace window start",
    "workload.duration_s": "trace window length",
    "workload.arrival_s": "first arrival",
    "workload.interval_s": "interval between arrivals",
    "workload.count": "requests",
    "workload.rounds": "rounds of requests",
    "workload.output_len": "output length (tokens)",
    "workload.prefix.share": "share of requests with a shared prefix",
    "workload.prefix.tokens": "shared prefix (tokens)",
    "workload.prefix.groups": "distinct shared prefixes",
    # serving
    "serving.prefill_chunk": "prefill chunk (tokens)",
    "serving.speculative.drafts": "speculative drafts per step",
    "serving.speculative.acceptance": "draft acceptance probability",
    "serving.seed": "random seed",
    # service-level objectives
    "slo.ttft.max_s": "TTFT objective",
    "slo.tpot.max_s": "TPOT objective",
    "slo.ttft.percentile": "TTFT objective percentile",
    "slo.tpot.percentile": "TPOT objective percentile",
}

#: field of a memory tier (a sweep axis ``socket.memory.<tier>.<field>``) -> text after the tier's name
TIER_FIELD_LABELS: dict[str, str] = {
    "bytes_per_s_per_unit": "bandwidth per module/channel",
    "capacity_bytes_per_unit": "capacity per module/channel",
    "units_per_die": "modules/channels per die",
    "latency_s": "latency",
    "efficiency": "achievable fraction of peak bandwidth",
    "reserved_bytes": "reserved by the runtime",
}

__all__ = ["INPUT_LABELS", "TIER_FIELD_LABELS"]
