"""The serving loop's cost grows with the requests, not with the tokens they generate (README,
"Speed"; benchmarks/bench_serving.py measures the wall time): outputs 100 times as long, with the
arrivals spread as much, must not multiply the events that advance the decode steps.

The events are counted as runs of steps (:meth:`RunBook.steps_to_run`, one call per event that
advances a node's steps); the step-by-step reference book would make one per step.
"""
from __future__ import annotations

import random

import pytest

from sn40l_sim.kvcache import make_policy
from sn40l_sim.serving.loop import ServingSetup, simulate
from sn40l_sim.serving.workload import Request

REQUESTS = 100


def _serve(mode: str, decode_nodes: int, scale: int, runs: list[int]) -> tuple[int, int]:
    """``(events, steps)`` of 100 requests whose outputs and gaps between arrivals are ``scale``
    times those of the base workload (the same load, ``scale`` times the tokens)."""
    rng = random.Random(3)
    t, requests = 0, []
    for i in range(REQUESTS):
        t += rng.randint(0, 2000) * scale
        requests.append(Request(i, t, rng.randint(1, 200), scale * rng.randint(1, 50)))
    setup = ServingSetup(mode=mode, prefill_nodes=2, decode_nodes=decode_nodes, slots=64, decode_step_cycles=50,
                         prefill_cycles=lambda p: 3 * p, transfer_cycles=lambda p: 20 + p // 10,
                         cache_tokens=make_policy("full", {}).cache_len, kv_bytes_per_token=7,
                         slot_cache_tokens=400 * scale)
    runs.clear()
    simulate(requests, setup)
    return len(runs), sum(runs)


@pytest.mark.parametrize("mode", ["disaggregated", "colocated"])
def test_one_decode_node_advances_its_steps_in_events_per_request_not_per_token(mode, runs):
    events_1, steps_1 = _serve(mode, 1, 1, runs)
    events_100, steps_100 = _serve(mode, 1, 100, runs)
    assert steps_100 > 50 * steps_1                      # the tokens did grow (about 100x)
    assert events_100 <= 4 * REQUESTS                    # arrival, join, finish: a few per request
    assert events_100 <= 1.25 * events_1                 # 372 against 365 disaggregated when written


@pytest.mark.parametrize("mode", ["disaggregated", "colocated"])
@pytest.mark.parametrize("decode_nodes", [2, 3])
def test_several_decode_nodes_advance_their_steps_in_events_per_request_not_per_token(mode, decode_nodes, runs):
    # a run is cut only by what can change its node (sn40l_sim/serving/run_bounds.py), not by the
    # other nodes' step boundaries: on two nodes 569 events against 531 disaggregated, 471 against
    # 429 co-located when written (123,892 and 106,877 when any event cut a run)
    events_1, steps_1 = _serve(mode, decode_nodes, 1, runs)
    events_100, steps_100 = _serve(mode, decode_nodes, 100, runs)
    assert steps_100 > 50 * steps_1
    assert events_100 <= 1.25 * events_1
