"""The inter-token gaps counted by step (report/token_gaps.py) against every gap written out."""
from __future__ import annotations

import random
from itertools import pairwise

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sn40l_sim.report.metrics import latencies, summary
from sn40l_sim.report.token_gaps import inter_token_gaps, weighted_summary
from sn40l_sim.serving.loop import ServingSetup, simulate
from sn40l_sim.serving.speculation import Speculation
from sn40l_sim.serving.workload import Request


def _setup(mode: str, decode_nodes: int, slots: int, drafts: int, acceptance: float) -> ServingSetup:
    return ServingSetup(mode=mode, prefill_nodes=2, decode_nodes=decode_nodes, slots=slots, decode_step_cycles=37,
                        prefill_cycles=lambda p: 3 * p, transfer_cycles=lambda p: 20 + p // 10,
                        cache_tokens=lambda p, g: p + g, kv_bytes_per_token=7, slot_cache_tokens=400,
                        speculation=Speculation(drafts, acceptance), seed=3)


def _requests(seed: int, n: int = 60) -> list[Request]:
    rng = random.Random(seed)
    t, out = 0, []
    for i in range(n):
        t += rng.choice([0, 0, 7, 150, 3000])
        out.append(Request(i, t, rng.randint(1, 200), rng.randint(1, 90)))
    return out


def _written_out(log) -> np.ndarray:
    return np.concatenate([np.diff(np.asarray(r.token_cycles, dtype=np.int64)) for r in log.requests])


@pytest.mark.parametrize("stepwise", [False, True])
@pytest.mark.parametrize("mode", ["disaggregated", "colocated"])
@pytest.mark.parametrize("drafts,acceptance", [(0, 0.0), (2, 0.8), (3, 0.0), (1, 1.0)])
@pytest.mark.parametrize("seed", [1, 2])
def test_the_gaps_counted_by_step_are_every_gap_of_every_request(stepwise, mode, drafts, acceptance, seed):
    log = simulate(_requests(seed), _setup(mode, 2, 5, drafts, acceptance), stepwise=stepwise)
    values, counts = inter_token_gaps(log)
    explicit, times = np.unique(_written_out(log), return_counts=True)
    assert values.tolist() == explicit.tolist() and counts.tolist() == times.tolist()
    # the summary is what summary() gives of them all written out (the mean to its last bits)
    clock_hz = 1.6e9
    mine, theirs = latencies(log, clock_hz)["itl_s"], summary(_written_out(log) / clock_hz)
    assert {k: mine[k] for k in ("count", "max", "p50", "p90", "p99")} == {
        k: theirs[k] for k in ("count", "max", "p50", "p90", "p99")}
    assert mine["mean"] == pytest.approx(theirs["mean"], rel=1e-12)


def test_by_request_and_step_by_step_serves_report_the_same_gaps():
    reqs = _requests(5)
    by_request = latencies(simulate(reqs, _setup("disaggregated", 2, 4, 2, 0.8)), 1e9)
    stepwise = latencies(simulate(reqs, _setup("disaggregated", 2, 4, 2, 0.8), stepwise=True), 1e9)
    assert by_request == stepwise


@settings(max_examples=200, deadline=None)
@given(data=st.lists(st.integers(0, 10**11), min_size=1, max_size=60), clock_hz=st.sampled_from([1.0, 1.6e9, 7.0]))
def test_weighted_percentiles_are_numpys_exactly(data, clock_hz):
    values, counts = np.unique(np.asarray(data, dtype=np.int64), return_counts=True)
    mine = weighted_summary(values, counts, clock_hz)
    theirs = summary(np.asarray(data, dtype=np.int64) / clock_hz)
    assert {k: mine[k] for k in ("count", "max", "p50", "p90", "p99")} == {
        k: theirs[k] for k in ("count", "max", "p50", "p90", "p99")}
    assert mine["mean"] == pytest.approx(theirs["mean"], rel=1e-12)


def test_no_gap_no_summary():
    log = simulate([Request(0, 0, 10, 1), Request(1, 5, 10, 1)], _setup("disaggregated", 1, 2, 0, 0.0))
    assert latencies(log, 1.0)["itl_s"] == summary([])
    # one token each: no gap at all, and a request with two tokens has exactly one
    log = simulate([Request(0, 0, 10, 2)], _setup("disaggregated", 1, 2, 0, 0.0))
    gaps = [b - a for a, b in pairwise(log.requests[0].token_cycles)]
    assert latencies(log, 1.0)["itl_s"]["count"] == 1 and latencies(log, 1.0)["itl_s"]["max"] == gaps[0]


def test_a_step_that_gave_a_sequence_nothing_joins_the_gaps_around_it():
    from types import SimpleNamespace

    from sn40l_sim.serving.serving_log import DecodeTokens, RequestLog
    log = RequestLog(Request(0, 0, 10, 6), first_token=100)
    log.add_token(100)
    log.set_decode(DecodeTokens(ends=[110, 120, 130, 140, 150], first_step=1, steps=4,
                                per_step=np.array([2, 0, 1, 2])))
    assert log.token_cycles == [100, 120, 120, 140, 150, 150]
    values, counts = inter_token_gaps(SimpleNamespace(requests=[log]))
    assert dict(zip(values.tolist(), counts.tolist(), strict=True)) == {0: 2, 10: 1, 20: 2}
