"""One row per served request: ``run --requests FILE.csv``, the records every latency and served
throughput figure of ``results.json`` summarises, so that a user can recompute them.

Each row holds a request's point (``name`` in ``results.json``), its id, lengths (``output_len`` as
served: after ``workload.cap_lengths``, with what capping cut), the nodes that served it, the
simulated times of its stages (seconds from the start of the simulated clock, the trace window's
start for a trace) and its latencies, as :mod:`sn40l_sim.report.metrics` defines them:

* ``queue_s`` = ``prefill_start_s - arrival_s``; ``ttft_s`` = ``first_token_s - arrival_s``;
* ``tpot_s`` = ``(last_token_s - first_token_s) / (tokens - 1)``, empty for a one-token request;
* ``e2e_s`` = ``last_token_s - arrival_s``.

From the rows of a point: ``latency.<x>_s`` is ``count``, ``mean``, numpy's linear ``p50``, ``p90``,
``p99`` and ``max`` of the column (``tpot_s`` without its empty cells); ``throughput.makespan_s`` is
the last ``last_token_s`` minus the first ``arrival_s`` (of a model sharing a node, over the rows of
every model of its scheduler's run: the node's window), ``output_tokens`` the sum of ``tokens``,
``output_tokens_per_s`` and ``requests_per_s`` those over the makespan; ``slo.attainment`` is the
fraction of rows within every bound, and the goodput those rows (and their tokens) over the
makespan. ``latency.itl_s`` needs every token's time, which the rows do not hold (a request's gaps
after its second token are its decode node's steps: ``run --trace``). A stage a request did not go
through (a transfer when co-located, a decode node for a one-token output) is an empty cell.

Values are written in full (``repr``), not rounded as ``results.json``'s are (9 significant
digits), so that summaries recomputed from them round to the same figures.

Examples
--------
>>> from types import SimpleNamespace as NS
>>> from sn40l_sim.serving.serving_log import RequestLog
>>> from sn40l_sim.serving.workload import Request
>>> log = RequestLog(Request(7, 10, 100, 3), prefill_node=0, prefill_start=20, first_token=50, finish=90)
>>> for cycle in (50, 70, 90):
...     log.add_token(cycle)
>>> row = request_rows(NS(setup=NS(name="full"), clock_hz=10.0, log=NS(requests=[log])))[0]
>>> row["ttft_s"], row["tpot_s"], row["e2e_s"], row["queue_s"], row["decode_node"]
(4.0, 2.0, 8.0, 1.0, None)
"""
from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from sn40l_sim.report.outputs import write_text
from sn40l_sim.report.point_results import point_results

#: the columns, in order, and what each holds (the CSV's header)
COLUMNS: tuple[tuple[str, str], ...] = (
    ("point", "the point's name, as results.json's name"),
    ("request", "request id: arrival order, requests arriving together in workload order (a trace in "
                "the simulator's format may list its rows in any order)"),
    ("arrival_s", "arrival, simulated seconds"),
    ("prompt_len", "prompt tokens"),
    ("output_len", "output tokens asked (after capping)"),
    ("tokens", "output tokens delivered, the prefill's first included"),
    ("capped_prompt_tokens", "prompt tokens cut by workload.cap_lengths"),
    ("capped_output_tokens", "output tokens cut by workload.cap_lengths"),
    ("prefill_node", "node that prefilled it (co-located: its decode node)"),
    ("prefill_start_s", "start of its prefill"),
    ("first_token_s", "end of its prefill: its first token"),
    ("transfer_start_s", "start of its KV transfer (disaggregated)"),
    ("transfer_end_s", "end of its KV transfer"),
    ("decode_node", "decode node that stepped it"),
    ("join_s", "when it joined its decode node's steps"),
    ("last_token_s", "its last token"),
    ("queue_s", "prefill_start_s - arrival_s"),
    ("ttft_s", "first_token_s - arrival_s"),
    ("tpot_s", "(last_token_s - first_token_s) / (tokens - 1); empty for one token"),
    ("e2e_s", "last_token_s - arrival_s"),
)


def request_rows(result: Any) -> list[dict[str, Any]]:
    """The rows of one served point (a :class:`~sn40l_sim.serving.point.PointResult` with a log),
    in the log's order (arrival, then id); none for a point that served nothing."""
    log = result.log
    if log is None:
        return []
    clock = result.clock_hz

    def at(cycle: int) -> float | None:   # -1: the stage did not happen
        return cycle / clock if cycle >= 0 else None

    rows = []
    for r in log.requests:
        req, tokens = r.request, r.generated
        arrival, last = req.arrival_cycle, r.last_token
        rows.append({
            "point": result.setup.name, "request": req.id, "arrival_s": arrival / clock,
            "prompt_len": req.prompt_len, "output_len": req.output_len, "tokens": tokens,
            "capped_prompt_tokens": req.capped_prompt_tokens, "capped_output_tokens": req.capped_output_tokens,
            "prefill_node": r.prefill_node if r.prefill_node >= 0 else None,
            "prefill_start_s": at(r.prefill_start), "first_token_s": at(r.first_token),
            "transfer_start_s": at(r.transfer_start), "transfer_end_s": at(r.transfer_end),
            "decode_node": r.decode_node if r.decode_node >= 0 and tokens > 1 else None,
            "join_s": at(r.join), "last_token_s": at(last),
            "queue_s": (r.prefill_start - arrival) / clock, "ttft_s": (r.first_token - arrival) / clock,
            # the same operations as metrics.latencies, so the recomputed summaries match to the bit
            "tpot_s": float(last - r.first_token) / (tokens - 1) / clock if tokens > 1 else None,
            "e2e_s": (r.finish - arrival) / clock,
        })
    return rows


def requests_csv(rows: Iterable[dict[str, Any]]) -> str:
    """The CSV text of ``rows``: the header of :data:`COLUMNS`, numbers in full, empty for None."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    names = [name for name, _ in COLUMNS]
    writer.writerow(names)
    for row in rows:
        writer.writerow(["" if row[n] is None else repr(row[n]) if isinstance(row[n], float) else row[n]
                         for n in names])
    return buffer.getvalue()


def write_requests(path: str | Path, results: Sequence[Any]) -> Path:
    """Write the rows of every served point of ``results`` to ``path`` (whole or not at all)."""
    # simulate_experiment's records (dicts) in their place: an AttributeError ('dict' object has no attribute 'log')
    results = point_results(results, "results", "a list of PointResults (simulate_experiment's on_result)", "log")
    return write_text(path, requests_csv(row for result in results for row in request_rows(result)))
