"""Properties of the continuous-batching loop on random workloads, checked against the log alone.

``test_runs_match_steps.py`` holds the by-requests loop to the step-by-step one; this module does
not compare the loop with itself but with what any serve must satisfy, whatever the loop's inner
workings: every request served once with exactly its tokens, no first token before the arrival and
the prefill, each decode token at the end of a step of the request's node that it took part in,
the batch and the KV within what the node reserves, the reported rates as docs/results.md defines
them, the metrics unmoved by shifting every arrival, and the first-come-first-served order the loop
promises (``serving/loop.py``: one waiting queue that every prefill takes from in arrival order).

The workloads come from a seeded numpy generator: bursts of simultaneous arrivals, 1-token
outputs, prompts of one token, full and capped (SnapStream-like) caches, drafts, prefix caching,
chunked prefill and back-pressure on the prefill nodes, with small cycle counts so that events
often fall on one cycle. ``test_real_serve_properties.py`` checks the same on a serve through the
real step timer; ``test_multi_model_properties.py`` those of a node serving several models.
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, replace
from itertools import pairwise

import numpy as np
import pytest

from sn40l_sim.kvcache import make_policy
from sn40l_sim.report.metrics import kv_occupancy, latencies, summary, throughput
from sn40l_sim.report.slo import SLO, LatencyTarget, served_slo_fields
from sn40l_sim.serving.loop import ServingLog, ServingSetup, simulate
from sn40l_sim.serving.prefix_cache import PrefixCaching, with_prefixes
from sn40l_sim.serving.speculation import Speculation
from sn40l_sim.serving.workload import Request

#: cached tokens per layer: growing with the output (full), capped at a budget (SnapStream's)
CACHES = {"full": make_policy("full", {}).cache_len,
          "snapstream": make_policy("snapstream", {"sink": 4, "recent": 32, "topk": 16, "budget": 52}).cache_len}
#: the one clock the report's seconds are computed with here (figures in kilo-cycles)
CLOCK_HZ = 1e3


@dataclass(frozen=True)
class Case:
    """One random workload and setup, and the per-token prefill cycles its costs are built from."""

    requests: list[Request]
    setup: ServingSetup
    #: the costs' cycles per prompt token and per call (None: costs not of that form, the real timer's)
    per_token: int | None = None
    fixed: int = 0

    def prefill_floor(self, r: Request) -> int:
        """The fewest cycles the prompt's prefill can take: its whole prefill, or with prefix
        caching the suffix's (a hit), or with chunks the tokens' own cost (no call's fixed cost)."""
        s = self.setup
        if self.per_token is None and (s.prefill_chunk is not None or s.prefix_caching is not None):
            return 0   # the chunks' own cycles are checked instead (check_serve)
        if s.prefill_chunk is not None:
            return self.per_token * r.prompt_len
        if s.prefix_caching is not None and r.prefix_id >= 0:
            return self.per_token * (r.prompt_len - r.prefix_len) + self.fixed
        return s.prefill_cycles(r.prompt_len)


def random_case(seed: int, *, mode: str | None = None, drafts: int | None = None, extras: bool = True) -> Case:
    rng = np.random.default_rng(seed)
    mode = mode or str(rng.choice(["disaggregated", "colocated"]))
    n = int(rng.integers(1, 40))
    gaps = rng.choice([0, 0, 0, 1, 7, 60, 500, 4000], size=n)       # ties and bursts
    arrivals = np.cumsum(gaps) - gaps[0] + int(rng.choice([0, 3, 1000]))
    longest = int(rng.choice([1, 4, 64, 300]))
    requests = [Request(i, int(t), int(rng.integers(1, 200)), int(rng.integers(1, longest + 1)))
                for i, t in enumerate(arrivals)]
    if rng.random() < 0.3:   # some 1-token outputs among the others
        requests = [replace(r, output_len=1) if rng.random() < 0.4 else r for r in requests]
    per_token, fixed = int(rng.choice([0, 1, 3])), int(rng.choice([0, 5]))
    transfer = int(rng.choice([0, 1, 25, 700]))
    drafts = int(rng.choice([0, 0, 1, 3])) if drafts is None else drafts
    cache = str(rng.choice(sorted(CACHES)))
    prompt_cap = max(r.prompt_len for r in requests)
    setup = ServingSetup(
        mode=mode, prefill_nodes=int(rng.integers(1, 4)), decode_nodes=int(rng.integers(1, 4)),
        slots=int(rng.choice([1, 1, 2, 3, 8])), decode_step_cycles=int(rng.choice([1, 7, 50, 400])),
        prefill_cycles=lambda p: per_token * p + fixed, transfer_cycles=lambda p: transfer + p // 10,
        cache_tokens=CACHES[cache], kv_bytes_per_token=3,
        # a slot holds the longest prompt and output (and the last step's drafts), as point.py sizes it
        slot_cache_tokens=prompt_cap + max(r.output_len for r in requests) + drafts,
        speculation=Speculation(drafts, float(rng.choice([0.0, 0.5, 1.0]))), seed=int(rng.integers(0, 4)),
        decode_switch_cycles=int(rng.choice([0, 3])), prefill_switch_cycles=lambda p: p % 4)
    if extras:
        roll = rng.random()
        if roll < 0.25:     # prefix caching (decode sharing only with an uncompressed cache)
            requests = with_prefixes(requests, 0.8, int(rng.choice([1, 20, 60])), int(rng.integers(1, 3)), seed)
            requests = [r if r.prefix_len < r.prompt_len else replace(r, prefix_id=-1, prefix_len=0)
                        for r in requests]
            caching = PrefixCaching(share_decode_kv=cache == "full", kv_bytes_per_token=3,
                                    capacity_tokens=rng.choice([None, 100]))
            setup = replace(setup, prefix_caching=caching,
                            prefix_hit_cycles=lambda p, held: (per_token * (p - held) + fixed, held))
            if mode == "disaggregated" and caching.capacity_tokens is not None and rng.random() < 0.5:
                setup = replace(setup, prefill_hold_tokens=int(rng.choice([100, 300])))  # back-pressure too
        elif roll < 0.5 and mode == "colocated":
            setup = replace(setup, prefill_chunk=int(rng.choice([1, 16, 64])),
                            prefill_chunk_cycles=lambda earlier, n: per_token * n + fixed + (earlier > 0))
            if rng.random() < 0.5:   # the policy's kernels once after the last chunk, and their switch apart
                setup = replace(setup, prefill_policy_cycles=lambda p: p % 7, prefill_part_switch_cycles=lambda p: 1)
        elif roll < 0.75 and mode == "disaggregated":
            setup = replace(setup, prefill_hold_tokens=int(rng.choice([200, 400, 1000])))
    return Case(requests, setup, per_token, fixed)


def decode_tokens(log: ServingLog) -> dict[int, list[int]]:
    """Each request's decode tokens' cycles (all but the prefill's first)."""
    return {r.request.id: r.token_cycles[1:] for r in log.requests}


def check_serve(case: Case, log: ServingLog, clock_hz: float = CLOCK_HZ) -> None:
    """Every property of one serve (assertion messages name the request or step)."""
    setup, requests = case.setup, case.requests
    drafts = setup.speculation.drafts
    by_id = {r.request.id: r for r in log.requests}
    # served once, none dropped, exactly its tokens
    assert sorted(by_id) == sorted(r.id for r in requests) and len(log.requests) == len(requests)
    assert sum(r.generated for r in log.requests) == sum(r.output_len for r in requests)
    for r in log.requests:
        q, tokens = r.request, r.token_cycles
        assert r.generated == q.output_len == len(tokens), q
        assert tokens == sorted(tokens) and r.finish == tokens[-1] == r.last_token, q
        # no first token before its arrival and its prefill; TTFT within the end-to-end latency
        assert q.arrival_cycle <= r.prefill_start <= r.first_token == tokens[0] <= r.finish, q
        assert r.first_token - q.arrival_cycle >= case.prefill_floor(q), q
        if setup.prefill_chunk is None:
            floor = case.prefill_floor(q)
            assert r.first_token - r.prefill_start >= floor, q
        else:
            assert r.first_token - q.arrival_cycle >= sum(e - s for s, e in r.prefill_chunks), q
        # the request's own service time: its prefill, its transfer, the fewest steps its tokens need
        steps_needed = math.ceil((q.output_len - 1) / (1 + drafts))
        own = case.prefill_floor(q) + steps_needed * setup.decode_step_cycles
        if setup.mode == "disaggregated" and q.output_len > 1:
            own += setup.transfer_cycles(q.prompt_len)
            assert r.first_token <= r.slot_acquired <= r.transfer_start < r.transfer_end or \
                setup.transfer_cycles(q.prompt_len) == 0, q
            assert r.transfer_end <= r.join, q
        assert r.finish - q.arrival_cycle >= own, q
    # each decode token comes out at the end of a step of the request's node, every step from its
    # join to its last taking part; each step's active count and tokens are those requests'
    steps_by_node: dict[int, list] = defaultdict(list)
    for step in log.steps:
        steps_by_node[step.node].append(step)
    stepped_at: dict[tuple[int, int], list[int]] = defaultdict(list)   # (node, end) -> tokens each
    for r in log.requests:
        decode = r.token_cycles[1:]
        if not decode:
            continue
        ends = sorted(set(decode))
        took = [s for s in steps_by_node[r.decode_node] if r.join <= s.start and s.end <= r.finish]
        assert [s.end for s in took] == ends, r.request
        # it joins the first step its node starts once its cache is there (sent, or prefilled there)
        ready = r.transfer_end if setup.mode == "disaggregated" else r.first_token
        assert took[0].start == min(s.start for s in steps_by_node[r.decode_node] if s.start >= ready), r.request
        for end in ends:
            stepped_at[(r.decode_node, end)].append(decode.count(end))
        assert all(1 <= decode.count(e) <= 1 + drafts for e in ends), r.request
        # TPOT is the decode span over the tokens after the first
        tpot = (r.finish - r.first_token) / (r.generated - 1)
        assert tpot * (r.generated - 1) == pytest.approx(r.finish - r.first_token)
        assert tpot >= setup.decode_step_cycles / (1 + drafts) * len(ends) / (r.generated - 1) - 1e-9
    # back-pressure: a prefill node starts a prompt only while the caches it holds for their
    # transfer fit in its room (a cache prefilled at the same cycle before it in the queue counts)
    room = setup.prefill_hold_tokens
    if room is not None and setup.prefix_caching is None:
        for r in log.requests:
            t = r.prefill_start
            ahead = (t, r.request.arrival_cycle, r.request.id)
            held = sum(setup.cache_tokens(q.request.prompt_len, 0) for q in log.requests
                       if q is not r and q.prefill_node == r.prefill_node and q.request.output_len > 1
                       and t < q.transfer_end and (q.first_token, q.request.arrival_cycle, q.request.id) < ahead)
            assert held <= room, r.request
    capacity = setup.kv_capacity_bytes
    for step in log.steps:
        got = stepped_at.get((step.node, step.end), [])
        assert (step.active, step.tokens) == (len(got), sum(got)), step
        assert step.end - step.start == setup.decode_step_cycles, step
        assert 1 <= step.active <= step.slots_in_use <= setup.slots, step
        assert 0 <= step.kv_bytes <= capacity, step
    # a node runs one step at a time
    for steps in steps_by_node.values():
        starts = sorted((s.start, s.end) for s in steps)
        assert all(b[0] >= a[1] for a, b in pairwise(starts))
    # the reported rates as docs/results.md defines them (first arrival to last token)
    first = min(r.arrival_cycle for r in requests)
    assert log.end_cycle == max(r.finish for r in log.requests)
    span_s = (log.end_cycle - first) / clock_hz
    rates = throughput(log, clock_hz)
    assert rates["makespan_s"] == span_s
    assert rates["makespan_s"] >= max(r.finish - r.request.arrival_cycle for r in log.requests) / clock_hz
    assert rates["output_tokens"] == sum(r.output_len for r in requests)
    assert rates["requests"] == len(requests)
    if span_s > 0:
        assert rates["output_tokens_per_s"] == pytest.approx(rates["output_tokens"] / span_s, rel=1e-12)
        assert rates["requests_per_s"] == pytest.approx(len(requests) / span_s, rel=1e-12)
    decode_s = sum(s.end - s.start for s in log.steps) / clock_hz
    if log.steps:
        assert rates["decode_tokens_per_s_observed"] == pytest.approx(
            sum(r.output_len - 1 for r in requests) / decode_s, rel=1e-12)
    else:
        assert rates["decode_tokens_per_s_observed"] is None
    # the latency summaries are those of the log's own per-request figures
    lat = latencies(log, clock_hz)
    ttft = [(r.first_token - r.request.arrival_cycle) / clock_hz for r in log.requests]
    e2e = [(r.finish - r.request.arrival_cycle) / clock_hz for r in log.requests]
    assert lat["ttft_s"]["max"] == max(ttft) and lat["e2e_s"]["max"] == max(e2e)
    assert lat["ttft_s"]["max"] <= lat["e2e_s"]["max"] and lat["ttft_s"]["mean"] <= lat["e2e_s"]["mean"]
    tpots = [(r.finish - r.first_token) / (r.generated - 1) / clock_hz for r in log.requests if r.generated > 1]
    assert lat["tpot_s"]["count"] == len(tpots)
    if tpots:
        assert lat["tpot_s"]["mean"] == pytest.approx(sum(tpots) / len(tpots), rel=1e-12)
    # the inter-token gaps, counted by step, are every gap written out
    gaps = [(b - a) / clock_hz for r in log.requests for a, b in pairwise(r.token_cycles)]
    itl = summary(gaps)
    assert lat["itl_s"] == {**itl, "mean": pytest.approx(itl["mean"], rel=1e-12) if gaps else None}
    # the goodput is the requests (and tokens) within every SLO over the same window
    slo = SLO(ttft=LatencyTarget(max_s=float(np.median(ttft)), percentile=90),
              tpot=LatencyTarget(max_s=float(np.median(tpots)) if tpots else 1.0, percentile=50))
    met = [t <= slo.ttft.max_s and (r.generated == 1 or (r.finish - r.first_token) / (r.generated - 1) / clock_hz
                                    <= slo.tpot.max_s) for t, r in zip(ttft, log.requests, strict=True)]
    good = served_slo_fields(log, clock_hz, slo)
    assert good["slo"]["attainment"] == sum(met) / len(met)
    if span_s > 0:
        assert good["goodput_requests_per_s"] == pytest.approx(sum(met) / span_s, rel=1e-12)
        assert good["goodput_tokens_per_s"] == pytest.approx(
            sum(r.generated for r, m in zip(log.requests, met, strict=True) if m) / span_s, rel=1e-12)
        assert good["goodput_tokens_per_s"] <= rates["output_tokens_per_s"] * (1 + 1e-12)


def check_first_come_first_served(case: Case, log: ServingLog) -> None:
    """The loop's one promise of order: requests leave the waiting queue in arrival order (ties by
    id). Disaggregated, a request leaves it as its prefill starts; co-located, as it takes a slot
    (its prefill starts after the node's graph switch)."""
    ordered = sorted(log.requests, key=lambda r: (r.request.arrival_cycle, r.request.id))
    taken = [r.prefill_start if case.setup.mode == "disaggregated" else r.slot_acquired for r in ordered]
    assert taken == sorted(taken)


SEEDS = range(400)


@pytest.mark.parametrize("block", range(8))
def test_random_serves_keep_every_property(block):
    for seed in SEEDS[block::8]:
        case = random_case(seed)
        log = simulate(case.requests, case.setup)
        try:
            check_serve(case, log)
            check_first_come_first_served(case, log)
        except AssertionError as exc:
            raise AssertionError(f"seed {seed}: {exc}") from exc


def shifted(requests: list[Request], cycles: int) -> list[Request]:
    return [replace(r, arrival_cycle=r.arrival_cycle + cycles) for r in requests]


def test_shifting_every_arrival_shifts_the_log_and_leaves_the_metrics():
    for seed in range(0, 400, 4):
        case = random_case(seed)
        shift = 1 + seed * 997
        base = simulate(case.requests, case.setup)
        moved = simulate(shifted(case.requests, shift), case.setup)
        for a, b in zip(base.requests, moved.requests, strict=True):
            times = lambda r: (r.prefill_start, r.first_token, r.transfer_start, r.transfer_end,  # noqa: E731
                               r.slot_acquired, r.join, r.finish)
            assert [t + shift if t >= 0 else t for t in times(a)] == list(times(b)), f"seed {seed}"
            assert [t + shift for t in a.token_cycles] == b.token_cycles, f"seed {seed}"
            assert (a.decode_node, a.slot, a.prefill_node) == (b.decode_node, b.slot, b.prefill_node)
        assert latencies(moved, CLOCK_HZ) == latencies(base, CLOCK_HZ), f"seed {seed}"
        assert throughput(moved, CLOCK_HZ) == throughput(base, CLOCK_HZ), f"seed {seed}"
        occupancy, occupancy_moved = kv_occupancy(base, CLOCK_HZ), kv_occupancy(moved, CLOCK_HZ)
        series, series_moved = occupancy.pop("series"), occupancy_moved.pop("series")
        assert occupancy_moved == occupancy
        assert [{**p, "t_s": pytest.approx(p["t_s"] + shift / CLOCK_HZ)} for p in series] == series_moved


def identical_requests(seed: int) -> list[Request]:
    """Arrivals at random (with ties) of copies of three requests."""
    rng = np.random.default_rng(seed)
    kinds = [(int(rng.integers(1, 200)), int(rng.integers(1, 60))) for _ in range(3)]
    arrivals = np.sort(rng.choice([0, 0, 5, 40, 300, 2000, 9000], size=int(rng.integers(2, 30))).cumsum())
    return [Request(i, int(t), *kinds[int(rng.integers(0, 3))]) for i, t in enumerate(arrivals)]


@pytest.mark.parametrize("mode,chunk", [("disaggregated", None), ("colocated", None), ("colocated", 16)])
def test_an_identical_request_arriving_later_never_finishes_earlier_on_one_node_pair(mode, chunk):
    # the promise is per queue: one prefill queue, one link, one decode node's batch, no drafts
    # (drafts are drawn per request, so a later copy may accept more) and no prefix reuse (a later
    # copy may find the prefix the earlier one left): the earlier copy starts each stage no later
    for seed in range(80):
        case = random_case(seed, mode=mode, drafts=0, extras=False)
        setup = replace(case.setup, prefill_nodes=1, decode_nodes=1)
        if chunk is not None:
            cost = case.setup.prefill_cycles   # a chunk as its tokens' prompt, plus a cycle after the first
            setup = replace(setup, prefill_chunk=chunk, prefill_chunk_cycles=lambda earlier, n, cost=cost: cost(n) + (earlier > 0))
        requests = identical_requests(seed)
        setup = replace(setup, slot_cache_tokens=400)
        log = simulate(requests, setup)
        check_serve(Case(requests, setup, case.per_token, case.fixed), log)
        copies = defaultdict(list)
        for r in log.requests:
            copies[(r.request.prompt_len, r.request.output_len)].append(r)
        for group in copies.values():
            group.sort(key=lambda r: (r.request.arrival_cycle, r.request.id))
            for stage in ("first_token", "join", "finish"):
                times = [getattr(r, stage) for r in group]
                assert times == sorted(times), f"seed {seed}: {stage} {times}"


# -- metamorphic: settings that must change nothing but what they are about --------------------

def timeline(log: ServingLog) -> list:
    return [(r.prefill_start, r.first_token, r.transfer_end, r.join, r.finish, r.token_cycles) for r in log.requests]


def test_drafts_never_accepted_serve_as_no_drafts():
    # a step's cost is the setup's whatever the drafts (the point times the draft graph), so drafts
    # all rejected give one token per step: the log of plain decoding
    for seed in range(0, 400, 2):
        case = random_case(seed, drafts=2)
        rejected = simulate(case.requests, replace(case.setup, speculation=Speculation(2, 0.0)))
        plain = simulate(case.requests, replace(case.setup, speculation=Speculation()))
        assert timeline(rejected) == timeline(plain) and rejected.steps == plain.steps, f"seed {seed}"


def test_sharing_a_prefix_on_decode_nodes_moves_bytes_only():
    # storing a shared prefix once changes what a step holds, never when anything happens: the
    # bytes held and saved add up to what the node holds without sharing, step by step
    cases = saved = 0
    for seed in range(800):
        case = random_case(seed)
        if case.setup.prefix_caching is None:
            continue
        setup = replace(case.setup, cache_tokens=CACHES["full"])
        on, off = (simulate(case.requests, replace(setup, prefix_caching=replace(setup.prefix_caching,
                                                                                  share_decode_kv=share)))
                   for share in (True, False))
        assert timeline(on) == timeline(off), f"seed {seed}"
        for shared, alone in zip(on.steps, off.steps, strict=True):
            assert shared.kv_bytes + shared.kv_bytes_saved == alone.kv_bytes and alone.kv_bytes_saved == 0
        cases += 1
        saved += any(step.kv_bytes_saved for step in on.steps)
    assert cases > 150 and saved > 50
