"""Serving invariants of the SimPy continuous-batching model (serving/loop.py).

The step costs are plain functions here (no kernels): the serving model only sees cycles.
"""
from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import replace
from itertools import groupby, pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sn40l_sim.report.metrics import latencies, throughput
from sn40l_sim.serving.loop import ServingSetup, simulate
from sn40l_sim.serving.speculation import Speculation
from sn40l_sim.serving.workload import Request

PLAIN = Speculation()


def setup_for(mode="disaggregated", prefill_nodes=1, decode_nodes=1, slots=4, step=50, per_token=3,
              transfer=20, cache=lambda p, g: p + g, speculation=PLAIN, seed=0):
    return ServingSetup(mode=mode, prefill_nodes=prefill_nodes, decode_nodes=decode_nodes, slots=slots,
                        decode_step_cycles=step, prefill_cycles=lambda p: per_token * p,
                        transfer_cycles=lambda p: transfer + p // 10, cache_tokens=cache,
                        kv_bytes_per_token=7, slot_cache_tokens=200 + 64, speculation=speculation, seed=seed)


def random_requests(seed, n=40, max_prompt=200, max_out=64):
    rng = random.Random(seed)
    t = 0
    out = []
    for i in range(n):
        t += rng.choice([0, 0, 10, 300, 2000])
        out.append(Request(i, t, rng.randint(1, max_prompt), rng.randint(1, max_out)))
    return out


CASES = [
    dict(mode="disaggregated", prefill_nodes=1, decode_nodes=1, slots=4),
    dict(mode="disaggregated", prefill_nodes=3, decode_nodes=2, slots=2),
    dict(mode="disaggregated", prefill_nodes=2, decode_nodes=1, slots=16),
    dict(mode="colocated", decode_nodes=1, slots=4),
    dict(mode="colocated", decode_nodes=3, slots=2),
]


@pytest.fixture(params=[(case, seed) for case in range(len(CASES)) for seed in (1, 2, 3)],
                ids=lambda p: f"case{p[0]}-seed{p[1]}")
def served(request):
    case, seed = request.param
    setup = setup_for(**CASES[case])
    reqs = random_requests(seed)
    return setup, reqs, simulate(reqs, setup)


def test_every_request_finishes_with_all_its_tokens(served):
    setup, reqs, log = served
    assert len(log.requests) == len(reqs)
    for r in log.requests:
        assert r.finish >= r.first_token >= r.request.arrival_cycle
        assert r.generated == r.request.output_len
        assert r.token_cycles == sorted(r.token_cycles)
        assert r.finish == r.token_cycles[-1]
    # tokens are conserved: the first from prefill, one per decode step per active sequence
    assert sum(r.generated for r in log.requests) == sum(q.output_len for q in reqs)
    assert sum(s.active for s in log.steps) == sum(q.output_len - 1 for q in reqs)
    assert log.end_cycle == max(r.finish for r in log.requests)


def test_no_slot_ever_holds_two_sequences(served):
    setup, _, log = served
    by_slot = defaultdict(list)
    for r in log.requests:
        if r.request.output_len > 1 or setup.mode == "colocated":
            assert 0 <= r.slot < setup.slots
            by_slot[(r.decode_node, r.slot)].append((r.slot_acquired, r.finish))
    for intervals in by_slot.values():
        intervals.sort()
        for (_, end), (start, _) in pairwise(intervals):
            assert start >= end
    for step in log.steps:
        assert step.active <= step.slots_in_use <= setup.slots


def test_kv_occupancy_never_exceeds_the_reserved_slots(served):
    setup, _, log = served
    assert log.steps
    assert max(step.kv_bytes for step in log.steps) <= setup.kv_capacity_bytes
    assert min(step.kv_bytes for step in log.steps) > 0


def test_ttft_is_at_least_the_prefill_and_decode_follows_the_step_time(served):
    setup, _, log = served
    for r in log.requests:
        prefill = setup.prefill_cycles(r.request.prompt_len)
        assert r.first_token - r.request.arrival_cycle >= prefill
        assert r.first_token - r.prefill_start == prefill
        gaps = [b - a for a, b in pairwise(r.token_cycles)]
        assert all(g >= setup.decode_step_cycles for g in gaps)
        if len(r.token_cycles) > 2 and setup.mode == "disaggregated":
            assert set(gaps[1:]) == {setup.decode_step_cycles}  # once in the batch, one per step


def test_disaggregated_transfers_precede_the_join_and_share_their_link():
    setup = setup_for(prefill_nodes=2, decode_nodes=2, slots=2, transfer=500)
    log = simulate(random_requests(5), setup)
    per_link = defaultdict(list)
    for r in log.requests:
        if r.request.output_len == 1:
            assert r.transfer_start == -1  # nothing to decode, nothing sent
            continue
        assert r.first_token <= r.slot_acquired <= r.transfer_start
        assert r.transfer_end - r.transfer_start == setup.transfer_cycles(r.request.prompt_len)
        assert r.join >= r.transfer_end
        per_link[r.prefill_node].append((r.transfer_start, r.transfer_end))
    for intervals in per_link.values():
        intervals.sort()
        assert all(b[0] >= a[1] for a, b in pairwise(intervals))
    assert sum(log.busy["link"]) == sum(e - s for iv in per_link.values() for s, e in iv)


def test_with_a_prefill_node_per_request_ttft_is_one_prefill_and_the_transfer_delays_the_second_token():
    # experiments/long_context_1m.yaml's layout (one prefill node per request, all arriving at once):
    # its comment said TTFT was one prefill and its KV transfer; TTFT ends at the prefill
    # (report/metrics.py), and the transfer comes before the first decode step
    setup = setup_for(prefill_nodes=4, decode_nodes=1, slots=4, step=50, per_token=3, transfer=500)
    log = simulate([Request(i, 0, 100, 3) for i in range(4)], setup)
    prefill, transfer = setup.prefill_cycles(100), setup.transfer_cycles(100)
    assert (prefill, transfer) == (300, 510)
    assert latencies(log, clock_hz=1.0)["ttft_s"] == {"count": 4, "max": 300.0, "mean": 300.0, "p50": 300.0,
                                                      "p90": 300.0, "p99": 300.0}
    # the four transfers share one decode node's ingress: the second token waits for them and a step
    second = sorted(r.token_cycles[1] - r.token_cycles[0] for r in log.requests)
    assert second[0] >= transfer + setup.decode_step_cycles


def test_colocated_prefill_blocks_decode_on_its_node():
    setup = setup_for(mode="colocated", decode_nodes=2, slots=3)
    log = simulate(random_requests(9), setup)
    for node in range(2):
        prefills = [(r.prefill_start, r.first_token) for r in log.requests if r.decode_node == node]
        for step in (s for s in log.steps if s.node == node):
            assert all(step.end <= a or step.start >= b for a, b in prefills)
    assert all(r.transfer_start == -1 for r in log.requests)


def test_a_colocated_node_loads_the_configurations_the_other_graph_took_where_it_switches():
    # prefill 1 cycle a token, steps of 10; 3 cycles of loads before a step after a prefill, 5 before
    # a prefill after a step. R0 prefills 0-10 (nothing ran before), loads 10-13 and steps 13-23;
    # R1 (arrived at 15) waits for the step, loads 23-28, prefills 28-38; loads 38-41, steps 41-51.
    setup = replace(setup_for(mode="colocated", decode_nodes=1, slots=2, step=10, per_token=1),
                    decode_switch_cycles=3, prefill_switch_cycles=lambda p: 5)
    for stepwise in (True, False):
        log = simulate([Request(0, 0, 10, 3), Request(1, 15, 10, 2)], setup, stepwise=stepwise)
        r0, r1 = log.requests
        assert r0.token_cycles == [10, 23, 51] and r1.token_cycles == [38, 51]
        assert log.busy["graph_switch"] == [3 + 5 + 3] and log.busy["decode"] == [20]
    # disaggregated nodes run one graph each: nothing to load again (the cache crosses 10-31)
    apart = replace(setup, mode="disaggregated", prefill_nodes=1)
    assert simulate([Request(0, 0, 10, 3)], apart).requests[0].token_cycles == [10, 41, 51]


def test_a_colocated_prefill_right_after_another_prefill_graph_loads_what_that_one_took():
    # two prompts waiting at once prefill back to back; the second's graph (compiled for its own
    # length) runs right after the first's and loads what that took of its units (the pair's
    # reload, serving/prefill_pairs.py), where nothing was charged: R0 prefills 0-30, R1 loads 30-34
    # and prefills 34-94, then the step loads 94-97 and runs 97-107
    from sn40l_sim.serving.setup import PrefillRun
    asked = []
    setup = replace(setup_for(mode="colocated", decode_nodes=1, slots=2, step=10, per_token=3),
                    decode_switch_cycles=3, prefill_switch_cycles=lambda p: 5,
                    prefill_pair_switch_cycles=lambda before, run: asked.append((before, run)) or 4)
    for stepwise in (True, False):
        asked.clear()
        log = simulate([Request(0, 0, 10, 2), Request(1, 0, 20, 2)], setup, stepwise=stepwise)
        assert [r.token_cycles for r in log.requests] == [[30, 107], [94, 107]]
        assert log.busy["graph_switch"] == [4 + 3]
        assert asked == [(PrefillRun(10, 0, False, False), PrefillRun(20, 0, False, False))]


def test_a_full_batch_makes_requests_wait_for_a_free_slot():
    # 3 requests, 2 slots, no transfer: the third joins when the first finishes
    setup = setup_for(slots=2, step=10, per_token=1, transfer=0)
    reqs = [Request(0, 0, 10, 4), Request(1, 0, 10, 6), Request(2, 0, 10, 2)]
    log = simulate(reqs, setup)
    r0, r1, r2 = log.requests
    assert (r0.first_token, r1.first_token, r2.first_token) == (10, 20, 30)
    assert (r0.transfer_start, r1.transfer_start) == (10, 20)
    # r0 joins at 11 (transfer 1 cycle), steps 11-21-31-41 give tokens 2..4
    assert r0.token_cycles == [10, 21, 31, 41]
    # r2 waits for r0's slot: freed at 41, cache sent 41-42, joins at the step boundary 51
    assert r2.slot_acquired == 41 and r2.slot == r0.slot
    assert r2.join == 51 and r2.token_cycles == [30, 61]


def test_same_inputs_same_log():
    setup = setup_for(prefill_nodes=2, decode_nodes=2, slots=3)
    a = simulate(random_requests(11), setup)
    b = simulate(random_requests(11), setup)
    assert [(r.token_cycles, r.slot, r.decode_node) for r in a.requests] == \
           [(r.token_cycles, r.slot, r.decode_node) for r in b.requests]
    assert a.steps == b.steps and a.busy == b.busy


def test_bad_request_lists_are_refused():
    with pytest.raises(ValueError):
        simulate([], setup_for())
    with pytest.raises(ValueError):
        simulate([Request(0, 0, 10, 0)], setup_for())


request_lists = st.lists(st.tuples(st.integers(0, 5000), st.integers(1, 200), st.integers(1, 40)),
                         min_size=1, max_size=25)


@settings(max_examples=60, deadline=None)
@given(reqs=request_lists, mode=st.sampled_from(["disaggregated", "colocated"]),
       prefill_nodes=st.integers(1, 3), decode_nodes=st.integers(1, 3), slots=st.integers(1, 6),
       step=st.integers(1, 400), transfer=st.integers(0, 900))
def test_invariants_hold_for_any_workload(reqs, mode, prefill_nodes, decode_nodes, slots, step, transfer):
    setup = setup_for(mode=mode, prefill_nodes=prefill_nodes, decode_nodes=decode_nodes, slots=slots,
                      step=step, transfer=transfer)
    requests = [Request(i, t, p, o) for i, (t, p, o) in enumerate(reqs)]
    log = simulate(requests, setup)
    assert all(r.generated == r.request.output_len for r in log.requests)
    assert sum(s.active for s in log.steps) == sum(o - 1 for _, _, o in reqs)
    assert all(s.kv_bytes <= setup.kv_capacity_bytes and s.slots_in_use <= slots for s in log.steps)
    for r in log.requests:
        assert r.first_token - r.request.arrival_cycle >= setup.prefill_cycles(r.request.prompt_len)
    held = defaultdict(list)
    for r in log.requests:
        if r.slot >= 0:
            held[(r.decode_node, r.slot)].append((r.slot_acquired, r.finish))
    for intervals in held.values():
        intervals.sort()
        assert all(b[0] >= a[1] for a, b in pairwise(intervals))


# -- speculative decoding: 1 + accepted drafts per sequence and step --------------------------

SPEC = Speculation(drafts=2, acceptance=0.8)


@settings(max_examples=40, deadline=None)
@given(reqs=request_lists, mode=st.sampled_from(["disaggregated", "colocated"]),
       decode_nodes=st.integers(1, 3), slots=st.integers(1, 6), drafts=st.integers(0, 4),
       acceptance=st.sampled_from([0.0, 0.3, 0.8, 1.0]), seed=st.integers(0, 3))
def test_with_speculation_every_request_finishes_once_with_exactly_its_tokens(reqs, mode, decode_nodes, slots,
                                                                                drafts, acceptance, seed):
    spec = Speculation(drafts, acceptance)
    setup = setup_for(mode=mode, decode_nodes=decode_nodes, slots=slots, speculation=spec, seed=seed)
    requests = [Request(i, t, p, o) for i, (t, p, o) in enumerate(reqs)]
    log = simulate(requests, setup)
    assert sorted(r.request.id for r in log.requests) == list(range(len(reqs)))
    for r in log.requests:
        assert r.generated == r.request.output_len and r.finish == r.token_cycles[-1]
        assert r.token_cycles == sorted(r.token_cycles)
    # every step gives each active sequence between 1 and 1 + drafts tokens
    assert sum(s.tokens for s in log.steps) == sum(o - 1 for _, _, o in reqs)
    assert all(s.active <= s.tokens <= s.active * (1 + drafts) for s in log.steps)
    assert all(s.kv_bytes <= setup.kv_capacity_bytes for s in log.steps)
    if acceptance == 1.0:   # every draft accepted: each step but a sequence's last gives 1 + drafts
        for r in log.requests:
            per_step = [len(list(group)) for _, group in groupby(r.token_cycles[1:])]
            assert all(n == 1 + drafts for n in per_step[:-1])


def test_tokens_per_step_converge_to_the_acceptance_formula():
    # one long request per slot: the mean tokens per sequence and step, over ~20,000 draws
    setup = setup_for(slots=8, step=10, per_token=0, transfer=0, speculation=SPEC, seed=1)
    log = simulate([Request(i, 0, 10, 6000) for i in range(8)], setup)
    full = [s for s in log.steps if s.active == 8][:-1]  # drop the end, where the cap truncates
    mean = sum(s.tokens for s in full) / sum(s.active for s in full)
    assert SPEC.tokens_per_step == pytest.approx(2.44)
    assert mean == pytest.approx(SPEC.tokens_per_step, rel=0.01)
    tpot = [(r.token_cycles[-1] - r.token_cycles[0]) / (r.generated - 1) for r in log.requests]
    assert sum(tpot) / len(tpot) == pytest.approx(10 / 2.44, rel=0.02)
    # the served figures the results report from this log (one cycle a second: figures in cycles)
    served = throughput(log, clock_hz=1.0)
    # 8 sequences, 2.44 tokens each per 10-cycle step, while all 8 run (most of the run)
    assert served["decode_tokens_per_s_observed"] == pytest.approx(8 * 2.44 / 10, rel=0.02)
    assert served["decode_tokens_per_s_observed"] == sum(s.tokens for s in log.steps) / sum(
        s.end - s.start for s in log.steps)
    assert served["mean_active_slots"] == pytest.approx(8, rel=0.01)
    # a step's accepted drafts come out with its token: after the first decode step, gaps of 0 and
    # of whole steps only (the first gap also holds the wait for the first step)
    gaps = [b - a for r in log.requests for a, b in pairwise(r.token_cycles)]
    assert all((b - a) % 10 == 0 for r in log.requests for a, b in pairwise(r.token_cycles[1:]))
    itl = latencies(log, clock_hz=1.0)["itl_s"]
    assert itl["max"] == max(gaps) and itl["p50"] == 0
    assert itl["mean"] == pytest.approx(sum(gaps) / len(gaps))


def test_speculative_draws_are_seeded_per_request():
    reqs = random_requests(4)
    a = simulate(reqs, setup_for(slots=3, speculation=SPEC, seed=5))
    b = simulate(reqs, setup_for(slots=3, speculation=SPEC, seed=5))
    c = simulate(reqs, setup_for(slots=3, speculation=SPEC, seed=6))
    assert [r.token_cycles for r in a.requests] == [r.token_cycles for r in b.requests]
    assert [r.token_cycles for r in a.requests] != [r.token_cycles for r in c.requests]
    # a request's draws do not depend on the others: served alone, its tokens per step are the same
    long = max(reqs, key=lambda q: q.output_len)
    alone = simulate([long], setup_for(slots=3, speculation=SPEC, seed=5)).requests[0]
    together = next(r for r in a.requests if r.request.id == long.id)
    per_step = lambda r: [len(list(g)) for _, g in groupby(r.token_cycles[1:])]  # noqa: E731
    assert per_step(alone) == per_step(together)
    # without drafts the step gives one token, as plain decode
    plain = simulate(reqs, setup_for(slots=3, speculation=Speculation(0, 0.8)))
    assert all(s.tokens == s.active for s in plain.steps)


def _tie_setup(**changes):
    """Hand-checkable numbers: prefill one cycle per prompt token, transfers 5 cycles, steps 10."""
    setup = ServingSetup(mode="disaggregated", prefill_nodes=2, decode_nodes=1, slots=2, decode_step_cycles=10,
                         prefill_cycles=lambda p: p, transfer_cycles=lambda p: 5, cache_tokens=lambda p, g: p + g,
                         kv_bytes_per_token=1, slot_cache_tokens=110)
    return replace(setup, **changes)


@pytest.mark.parametrize("stepwise", [False, True])
def test_a_cache_that_arrives_as_a_step_starts_joins_that_step(stepwise):
    # request 0 steps 15-25, 25-35, ...; request 1 (sent at 20, prefilled by 20 on the other
    # prefill node) has its cache on the decode node at 25, the cycle a step starts: it joins that
    # step, its second token at 35 (the step end scheduled first used to start the step without it: 45)
    log = simulate([Request(0, 0, 10, 5), Request(1, 10, 10, 2)], _tie_setup(), stepwise=stepwise)
    first, second = log.requests
    assert (first.join, first.token_cycles) == (15, [10, 25, 35, 45, 55])
    assert (second.transfer_end, second.join, second.token_cycles) == (25, 25, [20, 35])
    assert log.end_cycle == 55


@pytest.mark.parametrize("stepwise", [False, True])
def test_caches_that_arrive_together_on_an_idle_node_join_one_step(stepwise):
    # instant transfers: both caches land at cycle 10 on the idle node, each in its own event (the
    # first wakes the node); both join the step that starts then
    setup = _tie_setup(transfer_cycles=lambda p: 0)
    log = simulate([Request(0, 0, 10, 3), Request(1, 0, 10, 3)], setup, stepwise=stepwise)
    assert [(r.transfer_end, r.join, r.token_cycles) for r in log.requests] == \
           [(10, 10, [10, 20, 30]), (10, 10, [10, 20, 30])]


def test_a_prefilled_sequence_goes_to_the_decode_node_with_most_free_slots_the_lowest_index_on_ties():
    # four prompts prefilled at once on four prefill nodes, dispatched in request order to three
    # decode nodes of two slots: all tie (node 0), then nodes 1 and 2 tie with two free (node 1),
    # then node 2 has most, then all tie at one free (node 0)
    setup = _tie_setup(prefill_nodes=4, decode_nodes=3, slots=2)
    log = simulate([Request(i, 0, 10, 3) for i in range(4)], setup)
    assert [(r.decode_node, r.slot) for r in log.requests] == [(0, 0), (1, 0), (2, 0), (0, 1)]


def test_a_prompts_cache_after_prefill_is_asked_once_per_prompt_length():
    # the loop adds and takes back each prompt's prefilled cache on its prefill node (and each
    # decode node books it): a pure function of the prompt length, asked once per length
    asked = []
    cache = lambda p, g: asked.append((p, g)) or p + g   # noqa: E731
    requests = [Request(i, 40 * i, 100 + 50 * (i % 2), 5) for i in range(30)]
    log = simulate(requests, setup_for(prefill_nodes=2, decode_nodes=2, slots=4, cache=cache))
    assert all(len(r.token_cycles) == 5 for r in log.requests)
    assert sorted(p for p, g in asked if g == 0).count(100) <= 3 and len(asked) < 30
