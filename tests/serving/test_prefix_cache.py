"""Prefix caching in the serving loop (serving/prefix_cache.py): shared prefix KV stored once and
freed when its last user leaves (stored + saved = what would be held without sharing), hits
skipping that part of prefill, and a compressed cache reusing the prefix for prefill only."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from sn40l_sim.serving.loop import ServingSetup, simulate
from sn40l_sim.serving.prefix_cache import PrefixCaching, PrefixTracker, with_prefixes
from sn40l_sim.serving.workload import Request


def setup(mode="disaggregated", prefill=lambda p: 100, caching=None, cache_tokens=lambda p, g: p + g):
    return ServingSetup(mode=mode, prefill_nodes=0 if mode == "colocated" else 2, decode_nodes=2, slots=4,
                        decode_step_cycles=50, prefill_cycles=prefill, transfer_cycles=lambda p: 7,
                        cache_tokens=cache_tokens, kv_bytes_per_token=3, slot_cache_tokens=400, prefix_caching=caching,
                        # a hit prefills the suffix alone (tests/study/test_prefix_hit_costs.py times
                        # the suffix's graph over the prefix)
                        prefix_hit_cycles=lambda p, held: (prefill(p - held), held))


def requests(n=60, seed=0, share=0.7):
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.integers(0, 60, size=n))
    reqs = [Request(i, int(arrivals[i]), int(rng.integers(64, 256)), int(rng.integers(1, 30))) for i in range(n)]
    return with_prefixes(reqs, share, 48, 3, seed)


@pytest.mark.parametrize("mode", ["disaggregated", "colocated"])
def test_prefix_kv_bytes_are_conserved_and_freed_with_the_last_user(mode):
    reqs = requests()
    # a constant prefill makes hits change no timing, so both runs take the same steps
    plain = simulate(reqs, setup(mode))
    shared = simulate(reqs, setup(mode, caching=PrefixCaching(share_decode_kv=True, kv_bytes_per_token=3)))
    assert [(s.node, s.start, s.end, s.active) for s in plain.steps] == \
        [(s.node, s.start, s.end, s.active) for s in shared.steps]
    for without, step in zip(plain.steps, shared.steps, strict=True):
        assert step.kv_bytes + step.kv_bytes_saved == without.kv_bytes
        assert step.kv_bytes_saved % 3 == 0 and step.kv_bytes_saved >= 0
    assert max(s.kv_bytes_saved for s in shared.steps) > 0
    tracker = shared.prefixes
    assert all(not held for held in tracker.held) and not tracker.holder      # every prefix freed
    assert tracker.requests_with_prefix == sum(r.prefix_id >= 0 for r in reqs)
    # a step where no two sequences of a node share a prefix saves nothing
    assert any(s.kv_bytes_saved == 0 for s in shared.steps)


def test_a_hit_skips_the_prefix_prefill_and_lowers_ttft():
    reqs = requests(seed=1)
    prefill = lambda p: 10 * p   # noqa: E731
    plain = simulate(reqs, setup(prefill=prefill))
    shared = simulate(reqs, setup(prefill=prefill, caching=PrefixCaching(True, 3)))
    tracker = shared.prefixes
    assert 0 < tracker.hits < tracker.requests_with_prefix
    # prefixes are 48 tokens and prompts at least 64: a hit skips the whole prefix
    assert tracker.prefill_tokens_saved == 48 * tracker.hits
    assert tracker.prefill_cycles_saved == 10 * tracker.prefill_tokens_saved
    ttft = {name: np.mean([r.first_token - r.request.arrival_cycle for r in log.requests])
            for name, log in (("plain", plain), ("shared", shared))}
    assert ttft["shared"] < ttft["plain"]
    assert sorted(r.request.id for r in shared.requests) == list(range(len(reqs)))
    assert all(len(r.token_cycles) == r.request.output_len for r in shared.requests)


def test_a_held_prefix_that_reuses_nothing_is_not_a_hit():
    # as with static graphs, a short prompt's rest needs the prompt's own graph: it reuses nothing
    reqs = requests(seed=1)
    prefill = lambda p: 10 * p   # noqa: E731
    s = setup(prefill=prefill, caching=PrefixCaching(True, 3))
    s = replace(s, prefix_hit_cycles=lambda p, held: (prefill(p - held), held) if p >= 160 else (prefill(p), 0))
    tracker = simulate(reqs, s).prefixes
    assert tracker.hits > 0 and tracker.held_not_reused > 0
    assert tracker.hits + tracker.held_not_reused < tracker.requests_with_prefix   # the first user misses
    # every hit reuses the whole 48-token prefix, so a hit that reused nothing would break this
    assert tracker.prefill_tokens_saved == 48 * tracker.hits


def test_a_compressed_cache_reuses_the_prefix_for_prefill_only():
    reqs = requests(seed=2)
    budget = lambda p, g: min(p, 64) + g   # noqa: E731  (a SnapStream-like cache of 64 prompt tokens)
    shared = simulate(reqs, setup(prefill=lambda p: 10 * p, cache_tokens=budget,
                                  caching=PrefixCaching(share_decode_kv=False, kv_bytes_per_token=3)))
    assert shared.prefixes.hits > 0 and shared.prefixes.prefill_tokens_saved > 0
    assert all(s.kv_bytes_saved == 0 for s in shared.steps)


@pytest.mark.parametrize("policy, params, shared", [
    ("full", {}, True),
    ("snapkv", {"budget": 8192}, True),             # the prompt kept whole, decode appends
    ("h2o", {"budget": 8192}, True),                # the whole context fits: nothing is evicted
    ("streamingllm", {"budget": 8192}, True),       # the ring never wraps
    ("h2o", {"budget": 4352}, False),               # evicts once the context passes 4,352 tokens
    ("streamingllm", {"budget": 4352}, False),      # the ring wraps over the prompt's tokens
    ("snapstream", {"budget": 16384, "recent": 8192}, True),    # prompt and output within sink + ring
    ("snapstream", {"budget": 16384, "recent": 4096}, False),   # a 4,100-token ring wraps over the prompt
    ("snapstream", {"budget": 2048}, False),        # compressed in prefill
])
def test_decode_nodes_share_a_prefix_only_with_a_cache_that_never_drops_a_prompt_token(policy, params, shared):
    """A 4,096-token prompt and 2,048 output tokens (a 6,143-token context). H2O and StreamingLLM
    with a 4,352-token budget keep the whole prompt after prefill, so they were counted as storing a
    shared prefix once on a decode node (3,072 tokens saved per extra user, as with a full cache),
    though each sequence evicts (H2O) or overwrites (the ring) the prefix's tokens with its own."""
    from types import SimpleNamespace

    from sn40l_sim.kvcache import make_policy
    from sn40l_sim.models.loader import load_model
    from sn40l_sim.serving.point import prefix_caching
    from sn40l_sim.serving.speculation import Speculation

    point = SimpleNamespace(prefix_cache=True, policy=make_policy(policy, params), prompt_len=4096,
                            max_new_tokens=2048, speculation=Speculation(), mode="disaggregated",
                            model=load_model("graphs/llama3_1_8b.yaml"))
    assert prefix_caching(point, kv_bytes_per_token=3, free_tokens=10**6).share_decode_kv is shared


def test_without_prefix_caching_the_loop_is_unchanged():
    reqs = requests(seed=3)
    bare = [Request(r.id, r.arrival_cycle, r.prompt_len, r.output_len) for r in reqs]
    a, b = simulate(reqs, setup(prefill=lambda p: 10 * p)), simulate(bare, setup(prefill=lambda p: 10 * p))
    assert [r.token_cycles for r in a.requests] == [r.token_cycles for r in b.requests] and a.prefixes is None


def test_a_prefill_node_keeps_no_more_prefixes_than_its_free_memory_holds():
    # the room is shared with the caches waiting on the node for their transfer
    reqs = requests(seed=4)
    roomy = simulate(reqs, setup(prefill=lambda p: 10 * p, caching=PrefixCaching(True, 3)))
    tight = simulate(reqs, setup(prefill=lambda p: 10 * p, caching=PrefixCaching(True, 3, capacity_tokens=200)))
    assert roomy.prefixes.peak_prefill_prefix_tokens > tight.prefixes.peak_prefill_prefix_tokens
    assert tight.prefixes.peak_prefill_prefix_tokens <= 200
    assert 0 < tight.prefixes.hits < roomy.prefixes.hits
    assert all(not held for held in tight.prefixes.held) and not tight.prefixes.holder


@pytest.mark.parametrize("prefix, kept", [(100, True), (101, False)])
def test_a_prefix_that_fills_the_free_room_exactly_is_kept(prefix, kept):
    # a node with room for 100 prefix tokens keeps a prefix of 100 and the next user reuses it;
    # one of 101 does not fit: prefilled and not kept, so the next user prefills it again
    tracker = PrefixTracker(PrefixCaching(True, 3, capacity_tokens=100), 1, prefill_cycles=lambda p: 10 * p,
                            hit_cycles=lambda p, held: (10 * (p - held), held))
    first, second = (Request(i, 0, prefix + 20, 4, prefix_id=7, prefix_len=prefix) for i in (0, 1))
    assert tracker.prefill(first, 0) == (10 * (prefix + 20), prefix + 20)
    assert tracker.held_tokens(0) == (prefix if kept else 0)
    assert tracker.prefill(second, 0) == ((200, 20) if kept else (10 * (prefix + 20), prefix + 20))
    assert tracker.hits == int(kept)


def test_prefix_caching_without_the_cost_of_a_hit_is_refused():
    with pytest.raises(ValueError, match="prefix_caching needs prefix_hit_cycles"):
        ServingSetup(mode="colocated", prefill_nodes=0, decode_nodes=1, slots=4, decode_step_cycles=50,
                     prefill_cycles=lambda p: p, transfer_cycles=lambda p: 0, cache_tokens=lambda p, g: p + g,
                     kv_bytes_per_token=3, slot_cache_tokens=400, prefix_caching=PrefixCaching(True, 3))


def test_a_colocated_hit_after_decode_steps_loads_its_suffix_graphs_configurations():
    # a hit runs the suffix's graph (40 rows here), not the prompt's (240): after decode steps it
    # loads that graph's configurations. Request 0 misses first (no switch before a node's first
    # graph) and holds the prefix for the whole run, so every later prefill is a hit: charged by
    # rows, the schedule is the one where every switch to prefill costs 7; charged by the prompt,
    # the hits paid the whole prompt's graph's 1,000
    reqs = [Request(0, 0, 240, 150, prefix_id=0, prefix_len=200)] + \
        [Request(i, 300 * i, 240, 5, prefix_id=0, prefix_len=200) for i in range(1, 11)]
    base = replace(setup("colocated", prefill=lambda p: 10 * p, caching=PrefixCaching(True, 3)), decode_nodes=1,
                   decode_switch_cycles=3)
    by_rows = simulate(reqs, replace(base, prefill_switch_cycles=lambda rows: 7 if rows <= 40 else 1000))
    small = simulate(reqs, replace(base, prefill_switch_cycles=lambda rows: 7))
    assert by_rows.prefixes.hits == 10 and sum(by_rows.busy["graph_switch"]) > 0
    assert by_rows.busy == small.busy and by_rows.steps == small.steps
    assert [(r.prefill_start, r.token_cycles) for r in by_rows.requests] == \
        [(r.prefill_start, r.token_cycles) for r in small.requests]


def test_a_colocated_hit_without_the_policys_kernels_loads_that_graphs_configurations():
    # where a hit's suffix graph runs without the KV policy's kernels, its switch loads that
    # graph's configurations (7 cycles here), not those of a graph of its rows with them (1,000);
    # the first request's miss runs the whole prompt's graph, whose switch it does not pay (the
    # node's first graph)
    reqs = [Request(0, 0, 240, 150, prefix_id=0, prefix_len=200)] + \
        [Request(i, 300 * i, 240, 5, prefix_id=0, prefix_len=200) for i in range(1, 11)]
    base = replace(setup("colocated", prefill=lambda p: 10 * p, caching=PrefixCaching(True, 3)), decode_nodes=1,
                   decode_switch_cycles=3)
    apart = simulate(reqs, replace(base, prefill_switch_cycles=lambda rows: 1000,
                                   prefill_part_switch_cycles=lambda rows: 7))
    small = simulate(reqs, replace(base, prefill_switch_cycles=lambda rows: 7))
    assert apart.prefixes.hits == 10 and sum(apart.busy["graph_switch"]) > 0
    assert apart.busy == small.busy and apart.steps == small.steps


def test_a_longer_prefix_of_the_group_is_held_once_a_user_has_computed_it():
    # a group's first user with a prompt shorter than the prefix holds that prompt less one token
    # (with_prefixes); a later user computes the rest of the prefix on the node, which then held
    # only the first user's share of it for every user after: experiments/prefix_cache.yaml's
    # Azure prompts (median about 1K) under a 1,024-token prefix lost 636K tokens of reuse that way
    tracker = PrefixTracker(PrefixCaching(True, 3), 1, prefill_cycles=lambda p: 10 * p,
                            hit_cycles=lambda p, held: (10 * (p - held), held))
    short, long, later = (Request(0, 0, 11, 4, prefix_id=7, prefix_len=10), Request(1, 0, 120, 4, prefix_id=7, prefix_len=100),
                          Request(2, 0, 120, 4, prefix_id=7, prefix_len=100))
    assert tracker.prefill(short, 0) == (110, 11)
    assert tracker.prefill(long, 0) == (10 * 110, 110)        # reuses the 10 held
    assert tracker.held_tokens(0) == 100
    assert tracker.prefill(later, 0) == (200, 20)              # reuses the whole prefix
    for request in (short, long, later):
        tracker.release(request)
    assert tracker.held_tokens(0) == 0 and not tracker.holder


def test_a_longer_prefix_of_the_group_is_held_only_where_it_fits():
    # the rest of the prefix needs room as a whole prefix does; without it the node keeps the shorter one
    tracker = PrefixTracker(PrefixCaching(True, 3, capacity_tokens=50), 1, prefill_cycles=lambda p: 10 * p,
                            hit_cycles=lambda p, held: (10 * (p - held), held))
    short, long = Request(0, 0, 11, 4, prefix_id=7, prefix_len=10), Request(1, 0, 120, 4, prefix_id=7, prefix_len=100)
    tracker.prefill(short, 0), tracker.prefill(long, 0)
    assert tracker.held_tokens(0) == 10 and tracker.peak_prefill_prefix_tokens == 10
