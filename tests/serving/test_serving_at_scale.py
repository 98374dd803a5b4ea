"""The serving loop at scale and in odd cases, against the step-by-step loop and against an
independent model of its rules.

* Serving by requests gives the step-by-step log (docs/architecture.md, "serving/": the two give the
  same log) on workloads larger and odder than ``test_runs_match_steps.py``'s: hundreds of
  requests, half of them one token long (no decode step), bursts arriving on one cycle, a request
  list not in arrival order, and every token conserved.
* Where no two events fall on one cycle, the order of events decides nothing, and the loop's log is
  what the rules of ``sn40l_sim/serving/loop.py``'s docstring give when followed by hand (here by a
  small event loop written from them): prefill nodes first come, first served, an idle node taking
  the next arrival in the order it went idle; a prefilled sequence reserving a slot on the decode
  node with most free slots (lowest index on ties); its cache crossing its prefill node's link, then
  the decode node's, one transfer at a time on each, first come, first served; a cache joining its
  node's next step (or starting a step on an idle node); a sequence leaving its slot at the end of
  the step of its last token; co-located, a waiting request prefilled whenever a slot is free, else a
  decode step.
"""
from __future__ import annotations

import heapq
import random
from collections import deque

import pytest

from sn40l_sim.kvcache import make_policy
from sn40l_sim.report.metrics import latencies, throughput
from sn40l_sim.serving.loop import ServingSetup, simulate
from sn40l_sim.serving.speculation import Speculation
from sn40l_sim.serving.workload import Request


def _everything(log):
    return ([(r.request, r.prefill_node, r.prefill_start, r.first_token, r.transfer_start, r.transfer_end,
              r.decode_node, r.slot, r.slot_acquired, r.join, r.finish, r.token_cycles) for r in log.requests],
            log.steps, log.end_cycle, log.busy)


def _odd_workload(seed: int) -> tuple[list[Request], ServingSetup]:
    rng = random.Random(seed)
    t, requests = 0, []
    for i in range(rng.choice([300, 500])):
        t += rng.choice([0, 0, 0, 1, 7, 40, 400])          # bursts on one cycle, and ties with steps
        output = 1 if rng.random() < 0.5 else rng.randint(2, rng.choice([3, 60]))
        requests.append(Request(i, t, rng.randint(1, 300), output))
    rng.shuffle(requests)                                   # handed over in no particular order
    mode = ("disaggregated", "colocated")[seed % 2]
    setup = ServingSetup(mode=mode, prefill_nodes=rng.randint(1, 3), decode_nodes=rng.randint(1, 3),
                         slots=rng.choice([1, 4, 32]), decode_step_cycles=rng.choice([1, 10, 97]),
                         prefill_cycles=lambda p: p // 4 + 3, transfer_cycles=lambda p: 5 + p // 50,
                         cache_tokens=make_policy("full", {}).cache_len, kv_bytes_per_token=3,
                         slot_cache_tokens=400, speculation=Speculation(seed % 3, 0.7), seed=seed)
    return requests, setup


@pytest.mark.parametrize("seed", range(4))
def test_large_odd_workloads_by_runs_give_the_step_by_step_log(seed, runs):
    requests, setup = _odd_workload(seed)
    by_steps, by_runs = simulate(requests, setup, stepwise=True), simulate(requests, setup)
    assert _everything(by_runs) == _everything(by_steps)
    assert latencies(by_runs, 1e3) == latencies(by_steps, 1e3)
    assert throughput(by_runs, 1e3) == throughput(by_steps, 1e3)
    # every request served once, with its tokens: the decode steps gave all but each first token
    assert sorted(r.request.id for r in by_runs.requests) == sorted(r.id for r in requests)
    assert all(r.generated == r.request.output_len for r in by_runs.requests)
    assert int(by_runs.steps.column("tokens").sum()) == sum(r.output_len - 1 for r in requests)
    assert int(by_runs.steps.column("slots_in_use").max()) <= setup.slots
    assert max(runs) > 1


def _by_hand(requests, setup):
    """Each request's token cycles, decode node and prefill node by the loop's rules (no drafts, a
    full cache; co-located on one node), assuming no two events share a cycle."""
    P, T, D, S = setup.prefill_cycles, setup.transfer_cycles, setup.decode_step_cycles, setup.slots
    M, N = setup.prefill_nodes, setup.decode_nodes
    requests = sorted(requests, key=lambda r: (r.arrival_cycle, r.id))
    tokens = {r.id: [] for r in requests}
    if setup.mode == "colocated":
        pending, waiting, active, now = deque(requests), deque(), {}, 0
        while pending or waiting or active:
            while pending and pending[0].arrival_cycle <= now:
                waiting.append(pending.popleft())
            if waiting and len(active) < S:
                r = waiting.popleft()
                now += P(r.prompt_len)
                tokens[r.id].append(now)
                if r.output_len > 1:
                    active[r.id] = r.output_len - 1
            elif active:
                now += D
                for i in list(active):
                    tokens[i].append(now)
                    active[i] -= 1
                    if not active[i]:
                        del active[i]
            else:
                now = pending[0].arrival_cycle
        return tokens, {}, {}
    events, order = [], iter(range(10**9))

    def at(cycle, *event):
        heapq.heappush(events, (cycle, next(order), event))

    for r in requests:
        at(r.arrival_cycle, "arrive", r)
    waiting, idle, ready, free = deque(), deque(range(M)), deque(), [S] * N
    link, link_queue = [False] * M, [deque() for _ in range(M)]
    ingress, ingress_queue = [False] * N, [deque() for _ in range(N)]
    active, arrived, stepping = [{} for _ in range(N)], [[] for _ in range(N)], [False] * N
    decode_node, prefill_node = {}, {}

    def ingress_request(now, i, r, j):
        if ingress[j]:
            ingress_queue[j].append((r, i))
        else:
            ingress[j] = True
            at(now + T(r.prompt_len), "transferred", i, r, j)

    def link_request(now, i, r, j):
        if link[i]:
            link_queue[i].append((r, j))
        else:
            link[i] = True
            ingress_request(now, i, r, j)

    def dispatch(now):
        while ready and max(free):
            j = max(range(N), key=lambda j: (free[j], -j))
            r = ready.popleft()
            free[j] -= 1
            decode_node[r.id] = j
            link_request(now, prefill_node[r.id], r, j)

    def prefill(now, i, r):
        prefill_node[r.id] = i
        at(now + P(r.prompt_len), "prefilled", i, r)

    while events:
        now, _, (kind, *what) = heapq.heappop(events)
        if kind == "arrive":
            if idle:
                prefill(now, idle.popleft(), what[0])
            else:
                waiting.append(what[0])
        elif kind == "prefilled":
            i, r = what
            tokens[r.id].append(now)
            if r.output_len > 1:
                ready.append(r)
                dispatch(now)
            if waiting:
                prefill(now, i, waiting.popleft())
            else:
                idle.append(i)
        elif kind == "transferred":
            i, r, j = what
            link[i] = ingress[j] = False
            if ingress_queue[j]:
                q, qi = ingress_queue[j].popleft()
                ingress_request(now, qi, q, j)
            if link_queue[i]:
                q, qj = link_queue[i].popleft()
                link[i] = True
                ingress_request(now, i, q, qj)
            if stepping[j]:
                arrived[j].append(r)
            else:
                stepping[j] = True
                active[j][r.id] = r.output_len - 1
                at(now + D, "stepped", j)
        else:
            (j,) = what
            for i in list(active[j]):
                tokens[i].append(now)
                active[j][i] -= 1
                if not active[j][i]:
                    del active[j][i]
                    free[j] += 1
            dispatch(now)
            active[j].update({r.id: r.output_len - 1 for r in arrived[j]})
            arrived[j].clear()
            if active[j]:
                at(now + D, "stepped", j)
            else:
                stepping[j] = False
    return tokens, decode_node, prefill_node


@pytest.mark.parametrize("seed", range(6))
def test_where_no_events_tie_the_loop_follows_its_rules_by_hand(seed):
    rng = random.Random(seed)
    step = rng.choice([99_991, 1_000_003])
    mean_gap = step * 10 / rng.choice([1, 3, 10, 30])   # light load to a long queue
    t, requests = 0, []
    for i in range(rng.choice([200, 600])):
        t += int(rng.expovariate(1) * mean_gap) + 1
        requests.append(Request(i, t, rng.randint(1, 5000), rng.choice([1, rng.randint(2, 50), rng.randint(2, 800)])))
    per_token, transfer_base = rng.choice([13, 997, 100_003]), rng.choice([7_919, 1_000_033])
    # prime-ish cycle counts: no two events on one cycle
    setup = ServingSetup(mode=("disaggregated", "colocated")[seed % 3 == 2], prefill_nodes=rng.randint(1, 3),
                         decode_nodes=1 if seed % 3 == 2 else rng.randint(1, 3), slots=rng.choice([1, 2, 16]),
                         decode_step_cycles=step, prefill_cycles=lambda p: 31_337 + per_token * p,
                         transfer_cycles=lambda p: transfer_base + 17 * p, cache_tokens=lambda p, g: p + g,
                         kv_bytes_per_token=1, slot_cache_tokens=6000)
    tokens, decode_node, prefill_node = _by_hand(requests, setup)
    log = simulate(requests, setup)
    assert {r.request.id: r.token_cycles for r in log.requests} == tokens
    if setup.mode == "disaggregated":
        assert {r.request.id: r.decode_node for r in log.requests if r.decode_node >= 0} == decode_node
        assert {r.request.id: r.prefill_node for r in log.requests} == prefill_node
