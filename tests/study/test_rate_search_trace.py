"""A rate search on a trace: the trace's own arrival rate, from which every probe's rate_scale
follows, does not depend on the order of the rows (the simulator's format takes them in any order,
docs/architecture.md, "Traces")."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from sn40l_sim.serving.traces import TraceRow
from sn40l_sim.study.experiment import TraceWorkload
from sn40l_sim.study.rate_search import base_rate


def experiment(**workload) -> SimpleNamespace:
    spec = SimpleNamespace(workload=TraceWorkload(kind="trace", path="t.csv", **workload))
    return SimpleNamespace(spec=spec, error=lambda path, message: ValueError(message))


def rows(arrivals: list[float]) -> list[TraceRow]:
    return [TraceRow(t, 100, 10, "t.csv", line) for line, t in enumerate(arrivals, start=2)]


def test_the_trace_rate_is_its_requests_over_the_span_to_its_last_arrival():
    # 20 requests, the last 9.5 s after the first
    arrivals = [0.5 * i for i in range(20)]
    assert base_rate(experiment(), rows(arrivals)) == 20 / 9.5


def test_rows_out_of_order_give_the_same_rate():
    arrivals = [0.5 * i for i in range(20)]
    swapped = list(arrivals)
    swapped[9], swapped[19] = swapped[19], swapped[9]   # the last row is not the last arrival
    assert base_rate(experiment(), rows(swapped)) == base_rate(experiment(), rows(arrivals))
    assert base_rate(experiment(), rows(arrivals[::-1])) == base_rate(experiment(), rows(arrivals))


def test_a_window_counts_its_span_from_its_start():
    arrivals = [10.0, 3.0, 0.0, 7.0, 5.0]
    # the window [2 s, end): 3, 5, 7 and 10 s, counted from 2 s, so the last at 8 s
    assert base_rate(experiment(start_s=2.0), rows(arrivals)) == 4 / 8.0
    assert base_rate(experiment(start_s=2.0, duration_s=4.0), rows(arrivals)) == 2 / 4.0


def test_a_window_running_past_the_trace_counts_to_its_last_arrival():
    # 20 requests over 9.5 s: a window of 100 s holds no arrival after 9.5 s, so its rate is the
    # trace's (read as 20 / 100, every probe arrived 10x faster than it was reported)
    arrivals = [0.5 * i for i in range(20)]
    assert base_rate(experiment(duration_s=100.0), rows(arrivals)) == 20 / 9.5
    assert base_rate(experiment(start_s=2.0, duration_s=100.0), rows(arrivals)) == 16 / 7.5
    # a window ending inside the trace, even at its last arrival, is its own length
    assert base_rate(experiment(duration_s=9.5), rows(arrivals)) == 19 / 9.5
    assert base_rate(experiment(start_s=2.0, duration_s=4.0), rows(arrivals)) == 8 / 4.0


def test_requests_all_arriving_at_once_have_no_rate_and_say_so():
    with pytest.raises(ValueError, match="the 3 requests of the trace's window all arrive at once"):
        base_rate(experiment(), rows([0.0, 0.0, 0.0]))
    with pytest.raises(ValueError, match="needs at least two requests"):
        base_rate(experiment(), rows([4.0]))
