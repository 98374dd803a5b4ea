"""Serving by requests (runs of decode steps booked once per sequence) gives the log of the
step-by-step loop, field for field, and the metrics the report derives from it.

The workloads are random with small cycle counts, so that arrivals, prefill ends, transfer ends and
step boundaries often fall on the same cycle (where the order of events decides who gets a slot).
"""
from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest

from sn40l_sim.kvcache import POLICIES, make_policy
from sn40l_sim.report.metrics import kv_occupancy, latencies, throughput
from sn40l_sim.report.slo import SLO, LatencyTarget, served_slo_fields
from sn40l_sim.serving import loop
from sn40l_sim.serving.decode_books import cached_tokens
from sn40l_sim.serving.drafts import tokens_per_step
from sn40l_sim.serving.loop import ServingSetup, simulate
from sn40l_sim.serving.prefix_cache import PrefixCaching, with_prefixes
from sn40l_sim.serving.speculation import Speculation
from sn40l_sim.serving.workload import Request

#: cached tokens per layer: a cache that grows with the output, one capped at a budget, a ring
CACHES = {
    "full": make_policy("full", {}).cache_len,
    "h2o": make_policy("h2o", {"budget": 120}).cache_len,
    "snapstream": make_policy("snapstream", {"sink": 4, "recent": 32, "topk": 16, "budget": 52}).cache_len,
}

#: and one that starts below a prefix and grows past it (what a sequence's prefix saves changes
#: from step to step until its cache covers the prefix)
PREFIX_CACHES = {**CACHES, "grows_past_prefix": lambda p, g: min(min(p, 4) + g, 300)}


def workload(seed: int, mode: str, drafts: int, cache: str, caches=CACHES):
    rng = random.Random(seed)
    t, requests = 0, []
    for i in range(rng.randint(1, 50)):
        t += rng.choice([0, 0, 5, 10, 50, 300, 2000])
        requests.append(Request(i, t, rng.randint(1, 200), rng.randint(1, rng.choice([3, 40, 200]))))
    per_token, transfer = rng.choice([0, 1, 3]), rng.choice([0, 1, 20, 500])
    setup = ServingSetup(mode=mode, prefill_nodes=rng.randint(1, 3), decode_nodes=rng.randint(1, 3),
                         slots=rng.randint(1, 8), decode_step_cycles=rng.choice([1, 7, 10, 50, 97, 400]),
                         prefill_cycles=lambda p: per_token * p + seed % 3, transfer_cycles=lambda p: transfer + p // 10,
                         cache_tokens=caches[cache], kv_bytes_per_token=7, slot_cache_tokens=400,
                         speculation=Speculation(drafts, rng.choice([0.0, 0.3, 0.8, 1.0])), seed=seed % 4)
    # co-located: configurations loaded again where a node switches between prefill and decode
    switch = rng.choice([0, 0, 3, 40])
    setup = replace(setup, decode_switch_cycles=switch, prefill_switch_cycles=lambda p: switch // 2 + p % 5)
    return requests, setup


def everything(log):
    requests = [(r.request, r.prefill_node, r.prefill_start, r.first_token, r.transfer_start, r.transfer_end,
                 r.decode_node, r.slot, r.slot_acquired, r.join, r.finish, r.token_cycles, r.generated)
                for r in log.requests]
    return requests, log.steps, log.end_cycle, log.busy


@pytest.mark.parametrize("mode", ["disaggregated", "colocated"])
@pytest.mark.parametrize("drafts", [0, 2])
@pytest.mark.parametrize("cache", sorted(CACHES))
def test_runs_give_the_step_by_step_log(mode, drafts, cache, runs):
    for seed in range(12):
        requests, setup = workload(seed, mode, drafts, cache)
        by_steps = simulate(requests, setup, stepwise=True)
        by_runs = simulate(requests, setup)
        assert everything(by_runs) == everything(by_steps), f"seed {seed}"
        clock = 1e3
        assert latencies(by_runs, clock) == latencies(by_steps, clock)
        assert throughput(by_runs, clock) == throughput(by_steps, clock)
        assert kv_occupancy(by_runs, clock) == kv_occupancy(by_steps, clock)
        slo = SLO(ttft=LatencyTarget(max_s=2.0, percentile=90), tpot=LatencyTarget(max_s=0.1, percentile=50))
        assert served_slo_fields(by_runs, clock, slo) == served_slo_fields(by_steps, clock, slo)
    assert max(runs) > 1  # the workloads do have runs of steps advanced in one event


@pytest.mark.parametrize("drafts", [1, 3])
def test_back_pressure_and_other_draft_counts_by_runs_give_the_step_by_step_log(drafts, runs):
    # a prefill node holding back while its memory is full of caches waiting for a decode slot
    # (prefill_hold_tokens); the workloads' prompts are up to 200 tokens, so 200 to 1,000 tokens of
    # room hold one to five of them
    held_back = 0
    for seed in range(12):
        requests, setup = workload(seed, "disaggregated", drafts, sorted(CACHES)[seed % len(CACHES)])
        setup = replace(setup, prefill_hold_tokens=random.Random(seed).choice([200, 400, 1000]))
        by_steps = simulate(requests, setup, stepwise=True)
        by_runs = simulate(requests, setup)
        assert everything(by_runs) == everything(by_steps), f"seed {seed}"
        assert latencies(by_runs, 1e3) == latencies(by_steps, 1e3)
        free = simulate(requests, replace(setup, prefill_hold_tokens=None))
        held_back += [r.prefill_start for r in free.requests] != [r.prefill_start for r in by_runs.requests]
    assert max(runs) > 1 and held_back > 0   # runs of steps, and prefills the held caches delayed


def prefixes(log):
    tracker = log.prefixes
    return tracker and (tracker.requests_with_prefix, tracker.hits, tracker.prefill_tokens_saved,
                        tracker.prefill_cycles_saved, tracker.peak_prefill_prefix_tokens)


@pytest.mark.parametrize("mode", ["disaggregated", "colocated"])
@pytest.mark.parametrize("drafts", [0, 2])
@pytest.mark.parametrize("cache", sorted(PREFIX_CACHES))
def test_prefix_caching_and_chunked_prefill_by_runs_give_the_step_by_step_log(mode, drafts, cache, runs):
    saved = 0
    for seed in range(12):
        requests, setup = workload(seed, mode, drafts, cache, PREFIX_CACHES)
        rng = random.Random(1000 + seed)
        # prefixes longer and shorter than the compressed caches' first tokens (decode sharing is
        # forced on even for them, so runs must be cut while a sequence's saving still changes)
        requests = with_prefixes(requests, rng.choice([0.5, 0.9]), rng.choice([8, 48, 100]), rng.randint(1, 3), seed)
        caching = PrefixCaching(share_decode_kv=rng.random() < 0.8, kv_bytes_per_token=7,
                                capacity_tokens=rng.choice([None, None, 100]))
        chunk = rng.choice([None, 1, 16, 64, 500]) if mode == "colocated" else None
        # a later chunk pays a cycle per (query, earlier key) pair on top of its own prefill
        # a hit, the suffix's own prefill (its attention over the prefix is in the real cost only)
        setup = replace(setup, prefix_caching=caching if seed % 3 else None, prefill_chunk=chunk,
                        prefill_chunk_cycles=lambda earlier, n, p=setup.prefill_cycles: p(n) + n * earlier,
                        prefix_hit_cycles=lambda n, held, p=setup.prefill_cycles: (p(n - held), held))
        by_steps = simulate(requests, setup, stepwise=True)
        by_runs = simulate(requests, setup)
        assert everything(by_runs) == everything(by_steps), f"seed {seed}"
        assert prefixes(by_runs) == prefixes(by_steps), f"seed {seed}"
        clock = 1e3
        assert latencies(by_runs, clock) == latencies(by_steps, clock)
        assert kv_occupancy(by_runs, clock) == kv_occupancy(by_steps, clock)
        saved += sum(step.kv_bytes_saved for step in by_runs.steps)
    assert max(runs) > 1 and saved > 0  # runs of steps, and steps where sharing saved KV


@pytest.mark.parametrize("mode", ["disaggregated", "colocated"])
@pytest.mark.parametrize("drafts", [0, 2])
def test_runs_on_several_decode_nodes_span_the_other_nodes_steps(mode, drafts, monkeypatch):
    # a run is cut only by what can change its node (sn40l_sim/serving/run_bounds.py), so it spans
    # the other nodes' step boundaries; with short steps (1 and 7 cycles) boundaries of two nodes
    # often fall on one cycle, where their order decides which node gets a cache or a request
    starts = loop._Serving._start_steps
    runs: list[tuple[int, int, int]] = []
    monkeypatch.setattr(loop._Serving, "_start_steps", lambda self, node, most=None: runs.append(
        (node.index, *starts(self, node, most)[:2])) or starts(self, node, most))
    spanned = 0
    for seed in range(40):
        requests, setup = workload(seed, mode, drafts, sorted(CACHES)[seed % len(CACHES)])
        setup = replace(setup, decode_nodes=2 + seed % 2, decode_step_cycles=[1, 7, 50][seed % 3])
        by_steps = simulate(requests, setup, stepwise=True)
        runs.clear()
        by_runs = simulate(requests, setup)
        assert everything(by_runs) == everything(by_steps), f"seed {seed}"
        ends = {(step.node, step.end) for step in by_runs.steps}
        cycles = setup.decode_step_cycles
        spanned += any((other, end) in ends for node, start, count in runs if count > 1
                       for other in range(setup.decode_nodes) if other != node
                       for end in range(start + 1, start + count * cycles))
    assert spanned >= 10


def test_a_disaggregated_nodes_bound_is_never_before_the_serves_next_event(monkeypatch):
    # BoundedClock.peek and RunBounds.bound stop looking once the serve's next event settles the
    # run, which holds only while no bound falls before that event; co-located nodes are exempt
    # (their steps ending on one cycle take one step per event), and are not shortcut
    from sn40l_sim.serving.run_bounds import RunBounds

    bound, checked = RunBounds.bound, []

    def checked_bound(self, node, **one_step):
        got = bound(self, node, **one_step)
        checked.append(got >= self.env.peek())
        return got

    monkeypatch.setattr(RunBounds, "bound", checked_bound)
    for seed in range(60):
        requests, setup = workload(seed, "disaggregated", seed % 3, sorted(CACHES)[seed % len(CACHES)])
        by_runs = simulate(requests, replace(setup, decode_nodes=2 + seed % 3,
                                             decode_step_cycles=[1, 7, 50][seed % 3]))
        assert by_runs.requests
    assert checked and all(checked), f"{checked.count(False)} of {len(checked)} bounds before the next event"


def test_a_bound_cut_short_at_one_step_is_the_bound_wherever_it_decides_more_than_one_step(monkeypatch):
    # BoundedClock.peek lets RunBounds.bound stop at the first cycle within two steps (the run is then
    # one step wherever the bound lies): the whole bound whenever it is later, one within the two steps otherwise
    from sn40l_sim.serving.run_bounds import INFINITY, RunBounds

    bound, seen = RunBounds.bound, {"short": 0, "whole": 0}

    def checked_bound(self, node, one_step=-INFINITY):
        got, whole = bound(self, node, one_step), bound(self, node)
        if whole <= one_step:
            assert whole <= got <= one_step
            seen["short"] += got != whole
        else:
            assert got == whole
            seen["whole"] += 1
        return got

    monkeypatch.setattr(RunBounds, "bound", checked_bound)
    for seed in range(40):
        mode = ("disaggregated", "colocated")[seed % 2]
        requests, setup = workload(seed, mode, seed % 3, sorted(CACHES)[seed % len(CACHES)])
        simulate(requests, replace(setup, decode_nodes=2 + seed % 3, decode_step_cycles=[1, 7, 50][seed % 3]))
    assert seen["short"] and seen["whole"]


def test_a_lone_node_runs_to_the_next_finish_in_one_event(runs):
    # nothing else is due once every request has joined: one event per finishing sequence
    setup = ServingSetup(mode="disaggregated", prefill_nodes=1, decode_nodes=1, slots=4, decode_step_cycles=10,
                         prefill_cycles=lambda p: 1, transfer_cycles=lambda p: 0, cache_tokens=CACHES["full"],
                         kv_bytes_per_token=1, slot_cache_tokens=2000)
    requests = [Request(i, 0, 10, out) for i, out in enumerate((1000, 700, 300, 2))]
    log = simulate(requests, setup)
    assert len(log.steps) == 999
    runs.clear()
    assert everything(simulate(requests, setup)) == everything(simulate(requests, setup, stepwise=True))
    assert len(runs) < 10 and sum(runs) == 999


def test_every_kv_policy_grows_one_token_per_output_token_until_a_cap():
    # what RunBook relies on to book a sequence's cached tokens from three calls
    generated = np.arange(0, 300)
    for name in POLICIES:
        cache_len = make_policy(name, {}).cache_len
        for prompt in (1, 3, 50, 1000, 5000, 40000):
            expected = [cache_len(prompt, int(g)) for g in generated]
            assert cached_tokens(cache_len, prompt, generated).tolist() == expected, (name, prompt)


def test_a_cache_of_another_shape_is_refused():
    with pytest.raises(ValueError, match="grow by one token per generated token"):
        cached_tokens(lambda p, g: p + 2 * g, 10, np.arange(1, 5))


def test_drafts_drawn_in_one_go_match_the_draws_step_by_step():
    spec = Speculation(3, 0.7)
    one_go, _ = tokens_per_step(spec, np.random.default_rng([1, 9]), 500)
    rng, by_step, need = np.random.default_rng([1, 9]), [], 500
    while need:
        by_step.append(min(1 + spec.accepted(rng), need))
        need -= by_step[-1]
    assert one_go.tolist() == by_step
