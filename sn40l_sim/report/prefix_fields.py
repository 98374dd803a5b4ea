"""The ``prefix_cache`` fields of a record, what reusing shared prompt prefixes saved in a served
run (:mod:`sn40l_sim.serving.prefix_cache`), and the ``chunked_prefill`` fields, what splitting
prefill into chunks cost (:mod:`sn40l_sim.serving.chunked_prefill`).

Examples
--------
>>> from types import SimpleNamespace
>>> from sn40l_sim.serving.serving_log import StepLog
>>> from sn40l_sim.serving.step_table import StepTable
>>> tracker = SimpleNamespace(caching=SimpleNamespace(share_decode_kv=True, kv_bytes_per_token=2),
...     requests_with_prefix=4, hits=3, held_not_reused=0, prefill_tokens_saved=300, prefill_cycles_saved=900,
...     peak_prefill_prefix_tokens=100)
>>> steps = StepTable([StepLog(0, start=0, end=10, active=1, slots_in_use=1, kv_bytes=0, kv_bytes_saved=40),
...                    StepLog(0, start=10, end=30, active=1, slots_in_use=1, kv_bytes=0, kv_bytes_saved=10)])
>>> log = SimpleNamespace(prefixes=tracker, steps=steps, requests=[0] * 5)
>>> fields = prefix_cache_fields(log, clock_hz=100.0)["prefix_cache"]
>>> fields["hit_rate"], fields["prefill_s_saved_mean"], fields["kv_bytes_saved_peak"], fields["kv_bytes_saved_mean"]
(0.75, 1.8, 40, 20.0)
"""
from __future__ import annotations

import operator
from typing import Any


def prefix_cache_fields(log: Any, clock_hz: float) -> dict[str, Any]:
    """The ``prefix_cache`` group of a served run's record (``log`` a
    :class:`~sn40l_sim.serving.loop.ServingLog` served with prefix caching)."""
    tracker = log.prefixes
    steps = log.steps
    spans, saved = (steps.column("end") - steps.column("start")).tolist(), steps.column("kv_bytes_saved").tolist()
    span = sum(spans)
    mean_saved = sum(map(operator.mul, spans, saved)) / span if span else 0.0
    return {"prefix_cache": {
        "decode_kv_shared": tracker.caching.share_decode_kv,
        "requests_with_prefix": tracker.requests_with_prefix,
        "hits": tracker.hits,
        "held_not_reused": tracker.held_not_reused,
        "hit_rate": tracker.hits / tracker.requests_with_prefix if tracker.requests_with_prefix else 0.0,
        "prefill_tokens_saved": tracker.prefill_tokens_saved,
        "prefill_s_saved_mean": tracker.prefill_cycles_saved / len(log.requests) / clock_hz,
        "kv_bytes_saved_peak": max(saved, default=0),
        "kv_bytes_saved_mean": mean_saved,
        "prefill_prefix_bytes_peak": tracker.peak_prefill_prefix_tokens * tracker.caching.kv_bytes_per_token,
    }}


def chunked_prefill_fields(log: Any, chunk: int) -> dict[str, Any]:
    """The ``chunked_prefill`` group of a served run's record: the chunk and the prefill cycles the
    chunks took over those of the same prompts prefilled whole.

    >>> from types import SimpleNamespace
    >>> log = SimpleNamespace(setup=SimpleNamespace(prefill_cycles=lambda p: 10 * p),
    ...     requests=[SimpleNamespace(request=SimpleNamespace(prompt_len=100))], busy={"colocated_prefill": [1250]})
    >>> chunked_prefill_fields(log, 32)
    {'chunked_prefill': {'chunk_tokens': 32, 'prefill_overhead_fraction': 0.25}}
    """
    whole = sum(log.setup.prefill_cycles(r.request.prompt_len) for r in log.requests)
    chunked = sum(log.busy.get("colocated_prefill", []))
    return {"chunked_prefill": {"chunk_tokens": chunk,
                                "prefill_overhead_fraction": chunked / whole - 1 if whole else 0.0}}
