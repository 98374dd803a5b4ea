"""The ArkVale numpy reference (sn40l_sim/reference/arkvale.py): bounding-box digests bound every
key's score, the buffer never exceeds its budget, the store keeps every token exactly once, a step
recalls at most the buffer's pages, a buffer holding the whole context gives full attention exactly,
and the policy's lengths (kvcache/policies/arkvale.py) count the same."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sn40l_sim.kvcache import ArkVale
from sn40l_sim.reference.arkvale import ArkCache, decode_step, digests, page_scores

DK, DV = 4, 3

cases = st.fixed_dictionaries(dict(
    recent=st.integers(1, 6), pages=st.integers(1, 4), page_tokens=st.sampled_from([1, 2, 4]),
    prompt_len=st.integers(1, 30), steps=st.integers(1, 10), groups=st.sampled_from([1, 2]),
    group_size=st.sampled_from([1, 2]), shared=st.booleans(), digest=st.sampled_from(["bounds", "centroid"]),
    seed=st.integers(0, 2**31 - 1)))


def _data(c, total):
    heads, groups = c["groups"] * c["group_size"], c["groups"]
    rng = np.random.default_rng(c["seed"])
    return (rng.normal(size=(heads, total, DK)), rng.normal(size=(groups, total, DK)),
            rng.normal(size=(groups, total, DV)))


@settings(max_examples=80, deadline=None)
@given(page_tokens=st.integers(1, 6), length=st.integers(1, 30), seed=st.integers(0, 2**31 - 1))
def test_bounds_digest_scores_are_at_least_every_key_score_of_the_page(page_tokens, length, seed):
    rng = np.random.default_rng(seed)
    keys, query = rng.normal(size=(1, length, DK)), rng.normal(size=DK)
    scores = page_scores(query, digests(keys, page_tokens)[0])
    for p, score in enumerate(scores):
        block = keys[0, p * page_tokens:(p + 1) * page_tokens]
        assert score >= (block @ query).max() - 1e-12


@settings(max_examples=60, deadline=None)
@given(cases)
def test_buffer_budget_store_conservation_and_recall_counts(c):
    L, steps = c["prompt_len"], c["steps"]
    q, k, v = _data(c, L + steps)
    cache = ArkCache.from_prompt(k[:, :L], v[:, :L], recent=c["recent"], pages=c["pages"],
                                 page_tokens=c["page_tokens"], digest=c["digest"], shared=c["shared"])
    policy = ArkVale(recent=c["recent"], pages=c["pages"], page_tokens=c["page_tokens"], digest=c["digest"])
    assert policy.budget == cache.budget
    for step in range(1, steps + 1):
        t = L + step - 1
        decode_step(cache, q[:, t], k[:, t], v[:, t])
        # the store holds every token written, once (nothing is ever dropped)
        assert cache.store_positions() == list(range(t + 1))
        assert len(cache.store_positions()) == policy.cache_len(L, step)
        for g in range(c["groups"]):
            attended = cache.attended[g]
            assert len(attended) == len(set(attended)) <= cache.budget      # never above the buffer
            assert set(range(max(0, t + 1 - c["recent"]), t + 1)) <= set(attended)   # the recent window
            assert len(cache.buffer_pages[g]) <= c["pages"]
        assert cache.recalled[-1] <= c["pages"] * c["groups"]
    assert policy.store_rows(L, steps) >= L + steps and policy.store_rows(L, steps) % c["page_tokens"] == 0


@settings(max_examples=40, deadline=None)
@given(cases)
def test_a_buffer_holding_the_whole_context_gives_full_attention_exactly(c):
    L, steps = c["prompt_len"], c["steps"]
    total = L + steps
    q, k, v = _data(c, total)
    pages = -(-total // c["page_tokens"])            # enough pages for every token
    cache = ArkCache.from_prompt(k[:, :L], v[:, :L], recent=c["recent"], pages=pages,
                                 page_tokens=c["page_tokens"], digest=c["digest"], shared=c["shared"])
    heads, groups = q.shape[0], k.shape[0]
    for t in range(L, total):
        out = decode_step(cache, q[:, t], k[:, t], v[:, t])
        for h in range(heads):
            g = h // (heads // groups)
            assert cache.attended[g] == list(range(t + 1))
            logits = k[g, :t + 1] @ q[h, t] / np.sqrt(DK)
            w = np.exp(logits - logits.max())
            np.testing.assert_allclose(out[h], w @ v[g, :t + 1] / w.sum(), rtol=1e-12, atol=1e-14)


def test_a_page_the_query_points_at_is_selected_and_recalled_once_while_it_stays():
    L, dk = 32, 2
    k = np.zeros((1, L + 3, dk))
    k[0, :, 1] = 1.0
    k[0, 9] = [6.0, 0.0]                          # page 2 of 4-token pages
    q = np.tile(np.array([1.0, 0.0]), (1, L + 3, 1))
    v = np.ones((1, L + 3, 1))
    cache = ArkCache.from_prompt(k[:, :L], v[:, :L], recent=4, pages=1, page_tokens=4)
    for t in range(L, L + 3):
        decode_step(cache, q[:, t], k[:, t], v[:, t])
        assert cache.buffer_pages[0] == {2} and 9 in cache.attended[0]
    assert cache.recalled == [1, 0, 0]            # fetched at the first step, then kept
