"""The H2O numpy reference (sn40l_sim/reference/h2o.py) against a plain re-implementation (sets and
loops) and against direct attention: the tokens kept, the budget never exceeded, every token
written once and evicted at most once, and a budget holding the whole sequence giving full
attention exactly. The policy's cache lengths (kvcache/policies/h2o.py) follow the same counts."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sn40l_sim.kvcache import H2O
from sn40l_sim.reference.h2o import decode_step, prefill, prompt_scores

DK, DV = 4, 3


def _softmax(logits):
    w = np.exp(logits - logits.max())
    return w / w.sum()


def naive_h2o(q, k, prompt_len, steps, heavy, recent, shared):
    """Kept positions per KV head after each step, by loops over explicit sets and score dicts."""
    heads, groups = q.shape[0], k.shape[0]
    scale = 1 / np.sqrt(DK)
    kv_of = [h // (heads // groups) for h in range(heads)]
    scores = [dict() for _ in range(groups)]
    for h in range(heads):
        for i in range(prompt_len):
            p = _softmax(np.array([q[h, i] @ k[kv_of[h], j] * scale for j in range(i + 1)]))
            for g in range(groups):
                if shared or g == kv_of[h]:
                    for j in range(i + 1):
                        scores[g][j] = scores[g].get(j, 0.0) + p[j]
    kept = []
    for g in range(groups):
        if prompt_len <= heavy + recent:
            kept.append(set(range(prompt_len)))
        else:
            older = sorted(range(prompt_len - recent), key=lambda j: (-scores[g][j], j))
            kept.append(set(older[:heavy]) | set(range(prompt_len - recent, prompt_len)))
    history = [[sorted(s) for s in kept]]
    for step in range(steps):
        t = prompt_len + step
        for g in range(groups):
            if len(kept[g]) >= heavy + recent:
                loser = min((j for j in kept[g] if j < t + 1 - recent), key=lambda j: (scores[g].get(j, 0.0), j))
                kept[g].remove(loser)
            kept[g].add(t)
        for h in range(heads):
            held = sorted(kept[kv_of[h]])
            p = _softmax(np.array([q[h, t] @ k[kv_of[h], j] * scale for j in held]))
            for g in range(groups):
                if shared or g == kv_of[h]:
                    for j, pj in zip(held, p, strict=True):
                        scores[g][j] = scores[g].get(j, 0.0) + pj
        history.append([sorted(s) for s in kept])
    return history


cases = st.fixed_dictionaries(dict(
    heavy=st.integers(0, 6), recent=st.integers(1, 6), prompt_len=st.integers(1, 20), steps=st.integers(0, 10),
    groups=st.sampled_from([1, 2]), group_size=st.sampled_from([1, 2]), shared=st.booleans(),
    seed=st.integers(0, 2**31 - 1)))


def _data(c):
    heads, groups = c["groups"] * c["group_size"], c["groups"]
    total = c["prompt_len"] + c["steps"]
    rng = np.random.default_rng(c["seed"])
    return (rng.normal(size=(heads, total, DK)), rng.normal(size=(groups, total, DK)),
            rng.normal(size=(groups, total, DV)))


@settings(max_examples=60, deadline=None)
@given(cases)
def test_kept_tokens_match_a_plain_h2o_and_never_exceed_the_budget(c):
    q, k, v = _data(c)
    L, heavy, recent = c["prompt_len"], c["heavy"], c["recent"]
    want = naive_h2o(q, k, L, c["steps"], heavy, recent, c["shared"])
    cache = prefill(q[:, :L], k[:, :L], v[:, :L], heavy=heavy, recent=recent, shared=c["shared"])
    policy = H2O(heavy=heavy, recent=recent)
    evicted: list[set[int]] = [set() for _ in range(c["groups"])]
    for step in range(c["steps"] + 1):
        if step:
            t = L + step - 1
            before = [set(cache.held(g)) for g in range(c["groups"])]
            decode_step(cache, q[:, t], k[:, t], v[:, t])
            for g in range(c["groups"]):
                gone = before[g] - set(cache.held(g))
                assert len(gone) <= 1 and not gone & evicted[g]      # one eviction a step, never back
                evicted[g] |= gone
        for g in range(c["groups"]):
            held = cache.held(g)
            assert held == want[step][g]
            assert len(held) == policy.cache_len(L, step) <= policy.static_cache_len(L, c["steps"]) <= heavy + recent
            t = L + step - 1 if step else L - 1
            assert set(range(max(0, t + 1 - recent), t + 1)) <= set(held)    # the recent window is kept
            # bytes conserved: every written token is held or was evicted (prefill drops count once)
            dropped = set(range(L)) - set(want[0][g])
            assert set(held) | evicted[g] | dropped == set(range(t + 1))


@settings(max_examples=40, deadline=None)
@given(cases)
def test_a_budget_holding_the_whole_sequence_gives_full_attention_exactly(c):
    q, k, v = _data(c)
    L, total = c["prompt_len"], c["prompt_len"] + c["steps"]
    heavy = max(c["heavy"], total - c["recent"])
    cache = prefill(q[:, :L], k[:, :L], v[:, :L], heavy=heavy, recent=c["recent"], shared=c["shared"])
    heads, groups = q.shape[0], k.shape[0]
    for t in range(L, total):
        out = decode_step(cache, q[:, t], k[:, t], v[:, t])
        for h in range(heads):
            g = h // (heads // groups)
            p = _softmax(k[g, :t + 1] @ q[h, t] / np.sqrt(DK))
            np.testing.assert_allclose(out[h], p @ v[g, :t + 1], rtol=1e-12, atol=1e-14)


def test_prompt_scores_sum_to_the_queries_that_saw_each_position():
    rng = np.random.default_rng(1)
    q, k = rng.normal(size=(3, 9, DK)), rng.normal(size=(1, 9, DK))
    scores = prompt_scores(q, k, shared=True)
    # every query row's probabilities sum to 1: the total is heads x prompt length
    assert np.isclose(scores.sum(), 3 * 9)
    # the first position is seen by every query, the last only by itself
    assert scores[0, 0] >= scores[0, -1] and scores[0, 0] > 0


def test_a_heavy_hitter_survives_and_a_token_nobody_attends_to_is_evicted():
    # keys along one axis; every query points at position 2, so it keeps the top score
    L, dk = 10, 2
    k = np.zeros((1, L + 4, dk))
    k[0, :, 1] = 1.0
    k[0, 2] = [8.0, 0.0]
    q = np.tile(np.array([1.0, 0.0]), (1, L + 4, 1))
    v = np.arange((L + 4) * 1.0).reshape(1, L + 4, 1)
    cache = prefill(q[:, :L], k[:, :L], v[:, :L], heavy=1, recent=3)
    assert cache.held(0) == [2, 7, 8, 9]
    for t in range(L, L + 4):
        decode_step(cache, q[:, t], k[:, t], v[:, t])
        assert 2 in cache.held(0) and len(cache.held(0)) == 4
