"""Properties of one node serving several models (serving/multi_model.py) on random workloads,
checked against the run's log: every request served once with its tokens, each prefill its own
cycles after its arrival, each decode token at the end of a step of its model that it took part
in, every step from its first to its last, the node doing one thing at a time, each model's
batch and KV within its slots, no step before its model's copy has landed, and each model's
requests prefilled in arrival order (the scheduler keeps one first-come-first-served queue per
model; which model runs next is the policy's, so no order across models is promised).

Ties and bursts of arrivals, 1-token outputs, 1 to 3 models, fast tiers from one model's footprint
to all of them, every scheduler policy.
"""
from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest

from sn40l_sim.serving.multi_model import POLICIES, ModelCosts, NodeMemory, SlowTierFull, simulate_models
from sn40l_sim.serving.workload import Request


def random_node(seed: int):
    rng = np.random.default_rng(seed)
    models = []
    for i in range(int(rng.integers(1, 4))):
        per_token, fixed, cap = int(rng.choice([0, 1, 3])), int(rng.choice([0, 5])), int(rng.choice([10**9, 40]))
        slots, weights = int(rng.choice([1, 2, 3])), int(rng.integers(100, 600))
        models.append(ModelCosts(
            f"m{i}", slots, int(rng.choice([1, 4, 10, 50])), lambda p, a=per_token, b=fixed: a * p + b,
            lambda p, g, cap=cap: min(p + g, max(cap, p)), 1, 80, weights, weights + slots * 80 + 10,
            decode_switch_cycles=int(rng.choice([0, 3])), prefill_switch_cycles=lambda p: p % 3))
    n = int(rng.integers(1, 40))
    arrivals = np.cumsum(rng.choice([0, 0, 1, 7, 60, 500], size=n))
    longest = int(rng.choice([2, 20, 64]))
    requests = [Request(i, int(arrivals[i]), int(rng.integers(1, 16)), int(rng.integers(1, longest)))
                for i in range(n)]
    model_of = [int(m) for m in rng.integers(0, len(models), size=n)]
    fast = max(m.fast_bytes for m in models) + int(rng.choice([0, 200, 10**6]))
    memory = NodeMemory(fast, 10**7, float(rng.choice([1.0, 7.0, 1000.0])))
    return requests, model_of, models, memory, str(rng.choice(POLICIES)), int(rng.choice([1, 50, 1000]))


@pytest.mark.parametrize("block", range(4))
def test_random_multi_model_serves_keep_every_property(block):
    served = 0
    for seed in range(block, 320, 4):
        requests, model_of, models, memory, policy, quantum = random_node(seed)
        try:
            run = simulate_models(requests, model_of, models, memory, policy, quantum_cycles=quantum)
        except SlowTierFull:   # the input's capacity, refused with its reason
            continue
        served += 1
        assert sorted(log.request.id for log in run.requests) == list(range(len(requests))), seed
        busy = []          # (start, end) of everything the node computed
        for log in run.requests:
            r, m = log.request, model_of[log.request.id]
            costs = models[m]
            assert log.generated == r.output_len == len(log.token_cycles), (seed, r)
            assert log.finish == log.token_cycles[-1] and log.token_cycles == sorted(log.token_cycles), (seed, r)
            assert r.arrival_cycle <= log.slot_acquired <= log.prefill_start, (seed, r)
            assert log.first_token - log.prefill_start == costs.prefill_cycles(r.prompt_len), (seed, r)
            busy.append((log.prefill_start, log.first_token))
            decode = log.token_cycles[1:]
            if decode:
                took = [s.end for s in run.steps[m] if log.join <= s.start and s.end <= log.finish]
                assert took == sorted(set(decode)) and len(decode) == len(took), (seed, r)
        for m, steps in enumerate(run.steps):
            for step in steps:
                assert step.end - step.start == models[m].decode_step_cycles, (seed, step)
                assert 1 <= step.active <= step.slots_in_use <= models[m].slots, (seed, step)
                assert step.kv_bytes <= models[m].kv_capacity_bytes, (seed, step)
                busy.append((step.start, step.end))
            # no step of a model before the copy that switched to it has landed
            for switch in run.switches_log:
                if switch.model == m:
                    later = [s.start for s in steps if s.start >= switch.cycle]
                    assert all(start >= switch.cycle + switch.waited_cycles for start in later), (seed, switch)
        busy.sort()
        assert all(b[0] >= a[1] for a, b in pairwise(busy)), seed
        assert run.end_cycle == max(log.finish for log in run.requests)
        assert run.peak_fast_bytes <= memory.fast_bytes and run.peak_slow_bytes <= memory.slow_bytes
        for m in range(len(models)):   # first come, first served within a model
            own = sorted((log for log in run.requests if model_of[log.request.id] == m),
                         key=lambda log: (log.request.arrival_cycle, log.request.id))
            taken = [log.slot_acquired for log in own]
            assert taken == sorted(taken), (seed, m, taken)
    assert served > 60
