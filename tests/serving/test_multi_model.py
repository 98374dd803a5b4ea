"""Several models on one node (serving/multi_model.py) with hand-checkable costs: every request
finishes once under every scheduler, the tiers never hold more than they can, a switch costs its
bytes over the copy bandwidth, and the policies differ the way they are meant to."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from sn40l_sim.errors import InputError, InvariantError
from sn40l_sim.serving.multi_model import POLICIES, ModelCosts, NodeMemory, SlowTierFull, simulate_models
from sn40l_sim.serving.workload import Request


def model(name, weights, slots=2, step=10, fast_extra=100):
    return ModelCosts(name, slots, step, lambda p: 3 * p, lambda p, g: p + g, 1, 64, weights, weights + fast_extra)


def random_requests(n, n_models, seed):
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.integers(0, 40, size=n))
    reqs = [Request(i, int(arrivals[i]), int(rng.integers(1, 16)), int(rng.integers(1, 20))) for i in range(n)]
    return reqs, [int(m) for m in rng.integers(0, n_models, size=n)]


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_request_finishes_once_and_no_tier_overflows(policy, seed):
    models = [model("a", 300), model("b", 500, slots=3), model("c", 150, step=4)]
    memory = NodeMemory(fast_bytes=900, slow_bytes=2000, copy_bytes_per_cycle=7.0)
    reqs, model_of = random_requests(60, 3, seed)
    run = simulate_models(reqs, model_of, models, memory, policy, quantum_cycles=50)
    assert sorted(log.request.id for log in run.requests) == list(range(60))
    for log in run.requests:
        r = log.request
        assert len(log.token_cycles) == r.output_len and log.finish == log.token_cycles[-1]
        assert r.arrival_cycle <= log.prefill_start < log.first_token == log.token_cycles[0]
        assert log.token_cycles == sorted(log.token_cycles)
    # each step only stepped its own model's sequences, within its slots and their KV reservation
    for m, steps in enumerate(run.steps):
        for step in steps:
            assert step.active <= models[m].slots and step.kv_bytes <= models[m].kv_capacity_bytes
    assert run.peak_fast_bytes <= memory.fast_bytes and run.peak_slow_bytes <= memory.slow_bytes
    assert sum(s.waited_cycles for s in run.switches_log) == run.switch_cycles <= run.end_cycle


def test_a_switch_costs_the_bytes_over_the_copy_bandwidth():
    a, b = model("a", 600), model("b", 500)
    memory = NodeMemory(fast_bytes=1000, slow_bytes=10_000, copy_bytes_per_cycle=10.0)
    run = simulate_models([Request(0, 0, 4, 1), Request(1, 0, 4, 1)], [0, 1], [a, b], memory, "batch_by_model",
                          quantum_cycles=1000)
    # a one-token request holds no KV when its model is evicted: the copies are the weights alone
    assert [(s.model, s.copied_bytes, s.waited_cycles) for s in run.switches_log] == [(0, 600, 60), (1, 500, 50)]
    assert run.requests[1].first_token == 60 + 12 + 50 + 12


def test_a_graph_run_after_another_loads_its_configurations_first():
    # two resident models (no copies after the first), each a prefill of 4 tokens (12 cycles) then
    # steps of 10: a decode step after another graph loads 2 cycles first, a prefill 5
    a, b = (dataclasses.replace(model(name, 300), decode_switch_cycles=2, prefill_switch_cycles=lambda p: 5)
            for name in "ab")
    memory = NodeMemory(fast_bytes=1000, slow_bytes=10_000, copy_bytes_per_cycle=10.0)
    run = simulate_models([Request(0, 0, 4, 2), Request(1, 0, 4, 2)], [0, 1], [a, b], memory, "batch_by_model",
                          quantum_cycles=1000)
    # a: copy 0-30, prefill 30-42 (the first graph), load 42-44, step 44-54; b: copy 54-84, load
    # 84-89 (a's step ran last), prefill 89-101, load 101-103, step 103-113
    assert [log.token_cycles for log in run.requests] == [[42, 54], [101, 113]]
    assert run.graph_switch_cycles == 2 + 5 + 2


def test_a_models_prefill_right_after_its_prefill_of_another_prompt_loads_what_that_graph_took():
    # one model, two prompts waiting (4 and 8 tokens, graphs of their own): the second prefill runs
    # right after the first and loads what the first's graph took of its units (the pair's reload,
    # serving/prefill_pairs.py), where nothing was charged: copy 0-30, prefill 30-42, load 42-45,
    # prefill 45-69, load 69-71, step 71-81; another prompt of the same length loads nothing
    asked = []
    a = dataclasses.replace(model("a", 300), decode_switch_cycles=2, prefill_switch_cycles=lambda p: 5,
                            prefill_pair_switch_cycles=lambda before, p: asked.append((before, p)) or 3)
    memory = NodeMemory(fast_bytes=1000, slow_bytes=10_000, copy_bytes_per_cycle=10.0)
    run = simulate_models([Request(0, 0, 4, 2), Request(1, 0, 8, 2)], [0, 0], [a], memory, "on_demand",
                          quantum_cycles=1000)
    assert [log.token_cycles for log in run.requests] == [[42, 81], [69, 81]]
    assert run.graph_switch_cycles == 3 + 2 and asked == [(4, 8)]
    run = simulate_models([Request(0, 0, 4, 2), Request(1, 0, 4, 2)], [0, 0], [a], memory, "on_demand",
                          quantum_cycles=1000)
    assert run.graph_switch_cycles == 2


def test_evicting_a_model_with_sequences_decoding_writes_their_kv_back_and_reads_it_again():
    a, b = model("a", 600, slots=1), model("b", 500, slots=1)
    memory = NodeMemory(fast_bytes=1000, slow_bytes=10_000, copy_bytes_per_cycle=1.0)
    # on_demand leaves a's sequence (10 prompt tokens) decoding to prefill b
    run = simulate_models([Request(0, 0, 10, 3), Request(1, 0, 10, 2)], [0, 1], [a, b], memory, "on_demand",
                          quantum_cycles=1)
    # a's sequence is evicted after its first token (a 10-token cache at 1 B a token), then b's after
    # its first (10), then a's again after its second (11 tokens)
    assert run.written_back_bytes == 10 + 10 + 11
    # every copy is a model's weights, plus the KV written back before, all of which came back
    assert run.copied_bytes == run.loads[0] * 600 + run.loads[1] * 500 + run.written_back_bytes
    # b's first token: a loaded (600 cycles at 1 B a cycle) and prefilled (3 x 10), then a's 10 B
    # written back before b's 500 B come in, then b's prefill
    first_b = next(r.first_token for r in run.requests if r.request.id == 1)
    assert first_b == 600 + 30 + 10 + 500 + 30


def test_models_that_fit_together_switch_for_free_after_their_first_copy():
    a, b = model("a", 300), model("b", 400)
    memory = NodeMemory(fast_bytes=1000, slow_bytes=10_000, copy_bytes_per_cycle=10.0)
    reqs, model_of = random_requests(40, 2, 5)
    run = simulate_models(reqs, model_of, [a, b], memory, "on_demand", quantum_cycles=1)
    assert run.loads == [1, 1] and run.switches > 2
    assert run.copied_bytes == 700


def test_batching_by_model_switches_less_than_on_demand():
    models = [model("a", 600), model("b", 500)]       # 700 + 600 do not fit together in 1000
    memory = NodeMemory(fast_bytes=1000, slow_bytes=10_000, copy_bytes_per_cycle=5.0)
    reqs, model_of = random_requests(80, 2, 3)
    runs = {p: simulate_models(reqs, model_of, models, memory, p, quantum_cycles=400) for p in POLICIES}
    assert runs["batch_by_model"].switches < runs["on_demand"].switches
    assert runs["batch_by_model"].switch_cycles < runs["on_demand"].switch_cycles


def test_prewarm_copies_the_next_model_while_the_node_computes():
    models = [model("a", 300), model("b", 300), model("c", 300)]   # two of three fit together
    memory = NodeMemory(fast_bytes=900, slow_bytes=10_000, copy_bytes_per_cycle=2.0)
    reqs, model_of = random_requests(80, 3, 4)
    runs = {p: simulate_models(reqs, model_of, models, memory, p, quantum_cycles=400) for p in POLICIES[1:]}
    assert runs["prewarm"].switch_cycles < runs["batch_by_model"].switch_cycles


def test_a_model_larger_than_the_fast_tier_is_refused():
    with pytest.raises(InvariantError, match="memory_within_capacity"):
        simulate_models([Request(0, 0, 4, 1)], [0], [model("a", 2000)], NodeMemory(1000, 10_000, 1.0),
                        "on_demand", quantum_cycles=1)


def test_unknown_policy_and_bad_model_index_are_refused():
    with pytest.raises(ValueError, match="unknown scheduler"):
        simulate_models([Request(0, 0, 4, 1)], [0], [model("a", 1)], NodeMemory(1000, 10_000, 1.0), "fifo",
                        quantum_cycles=1)
    with pytest.raises(ValueError, match="not served"):
        simulate_models([Request(0, 0, 4, 1)], [3], [model("a", 1)], NodeMemory(1000, 10_000, 1.0), "on_demand",
                        quantum_cycles=1)


def test_a_slow_tier_too_small_for_the_kv_written_back_is_the_inputs_capacity_not_a_bug():
    # a's sequence (10 prompt tokens, 1 B a token) is evicted for b after its first token: its 10 B
    # of KV would join the 1100 B of weights, 1 B over a slow tier of 1109 B
    a, b = model("a", 600, slots=1), model("b", 500, slots=1)
    reqs = [Request(0, 0, 10, 3), Request(1, 0, 10, 2)]
    with pytest.raises(SlowTierFull) as info:
        simulate_models(reqs, [0, 1], [a, b], NodeMemory(1000, 1109, 1.0), "on_demand", quantum_cycles=1)
    assert (info.value.model, info.value.held_bytes, info.value.capacity_bytes) == ("a", 1110, 1109)
    assert isinstance(info.value, InputError) and not isinstance(info.value, InvariantError)
    # the run writes back 10 + 10 + 11 B, each while the KV of the model coming back in is still
    # in the slow tier (written back first, then read in): at most 10 + 11 beside the weights. With
    # room for that it finishes; with 1 B less, a's second eviction overflows
    run = simulate_models(reqs, [0, 1], [a, b], NodeMemory(1000, 1121, 1.0), "on_demand", quantum_cycles=1)
    assert run.peak_slow_bytes == 1121 and run.written_back_bytes == 31
    with pytest.raises(SlowTierFull) as info:
        simulate_models(reqs, [0, 1], [a, b], NodeMemory(1000, 1120, 1.0), "on_demand", quantum_cycles=1)
    assert (info.value.model, info.value.held_bytes) == ("a", 1121)


@pytest.mark.parametrize("policy", POLICIES)
def test_a_decoding_model_is_not_starved_by_the_others_under_a_load_the_node_carries(policy):
    # c's one long request decodes while a and b take one-token requests (12 cycles of prefill
    # each, one every 20 cycles on average): the longest wait between two of c's tokens is the
    # same whether the others' stream lasts 200 or 3200 requests. (Beyond the node's capacity,
    # one every 3 cycles, every policy prefills first and c waits until the stream ends, as the
    # single-model co-located loop's decoding sequences do.)
    def longest_gap(n):
        rng = np.random.default_rng(0)
        arrivals = 1 + np.cumsum(rng.integers(10, 30, size=n))
        reqs = [Request(0, 0, 4, 40)] + [Request(i, int(arrivals[i]), 4, 1) for i in range(1, n)]
        models = [model("a", 300), model("b", 300), model("c", 300, slots=1)]
        run = simulate_models(reqs, [2] + [i % 2 for i in range(1, n)], models,
                              NodeMemory(2000, 10**6, 10.0), policy, quantum_cycles=50)
        return int(np.diff(run.requests[0].token_cycles).max())
    assert longest_gap(200) == longest_gap(3200) < 300


def test_what_a_model_keeps_in_the_slow_tier_counts_there_resident_or_not():
    # each model keeps 40 B in the slow tier beside its weights (a KV store such as ArkVale's):
    # the slow tier holds 600 + 500 + 2 x 40 B from the start, and one byte less is an overflow
    a, b = (dataclasses.replace(model(name, w, slots=1), slow_bytes=40) for name, w in (("a", 600), ("b", 500)))
    reqs = [Request(0, 0, 4, 1), Request(1, 0, 4, 1)]
    run = simulate_models(reqs, [0, 1], [a, b], NodeMemory(1000, 1180, 1.0), "batch_by_model", quantum_cycles=1)
    assert run.peak_slow_bytes == 1180
    with pytest.raises(InvariantError, match="slow tier 1180 B of 1179"):
        simulate_models(reqs, [0, 1], [a, b], NodeMemory(1000, 1179, 1.0), "batch_by_model", quantum_cycles=1)
