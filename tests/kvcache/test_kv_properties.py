"""Property tests of the SnapStream reference over random lengths, budgets and head layouts:
decode attention over the ring-buffer cache equals attention computed directly over
{sinks, the selected tokens, the last L_recent tokens} at every step, and the cache's contents
and size follow the policy's rules."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from kv_naive import assert_is_top_k, naive_attention, naive_scores

from sn40l_sim.kvcache import SnapStream, StreamingLLM
from sn40l_sim.reference.snapstream import Layout, decode_step, prefill

DK, DV = 4, 3

cases = st.fixed_dictionaries(dict(
    sink=st.integers(0, 5), recent=st.integers(1, 8), topk=st.integers(0, 10),
    window=st.integers(1, 8), pool_kernel=st.sampled_from([1, 3, 5]),
    prompt_len=st.integers(1, 48), steps=st.integers(0, 14),
    groups=st.sampled_from([1, 2]), group_size=st.sampled_from([1, 2, 3]),
    shared=st.booleans(), seed=st.integers(0, 2**31 - 1)))


def _expected_set(t, sink, recent, selected):
    """Tokens SnapStream keeps when decoding position t."""
    return sorted(set(range(min(sink, t + 1))) | set(selected.tolist())
                  | set(range(max(0, t - recent + 1), t + 1)))


@settings(max_examples=80, deadline=None)
@given(cases)
def test_ring_cache_attention_equals_direct_attention_over_the_kept_tokens(c):
    lay = Layout(c["sink"], c["recent"], c["topk"])
    heads, groups = c["groups"] * c["group_size"], c["groups"]
    L, total = c["prompt_len"], c["prompt_len"] + c["steps"]
    rng = np.random.default_rng(c["seed"])
    q = rng.normal(size=(heads, total, DK))
    k, v = rng.normal(size=(groups, total, DK)), rng.normal(size=(groups, total, DV))
    cache = prefill(q[:, :L], k[:, :L], v[:, :L], lay, window=c["window"],
                    pool_kernel=c["pool_kernel"], shared=c["shared"])
    policy = SnapStream(sink=lay.sink, recent=lay.recent, topk=lay.topk,
                        observation_window=c["window"], pool_kernel=c["pool_kernel"])
    assert cache.valid_topk == policy.valid_topk(L)
    assert cache.selected.shape == (groups, policy.valid_topk(L))
    for g in range(groups):
        sel = cache.selected[g].tolist()
        assert all(lay.sink <= p < L - lay.recent for p in sel) and sel == sorted(set(sel))
        assert int(cache.valid[g].sum()) == policy.cache_len(L, 0)
    scale = 1 / np.sqrt(DK)
    for step in range(1, c["steps"] + 1):
        t = L + step - 1
        out = decode_step(cache, q[:, t], k[:, t], v[:, t])
        assert cache.keys.shape[1] == policy.static_cache_len(L, c["steps"]) == lay.static_len
        for g in range(groups):
            keep = _expected_set(t, lay.sink, lay.recent, cache.selected[g])
            assert cache.held_positions(g).tolist() == keep      # positions, not only values
            assert int(cache.valid[g].sum()) == policy.cache_len(L, step) == len(keep)
            ring_pos = cache.positions[g, lay.sink:lay.topk_start]
            ring_valid = cache.valid[g, lay.sink:lay.topk_start]
            assert sorted(ring_pos[ring_valid].tolist()) == list(
                range(max(lay.sink, t - lay.recent + 1), t + 1))
            assert all(lay.slot(p) == lay.sink + i
                       for i, (p, ok) in enumerate(zip(ring_pos, ring_valid, strict=True)) if ok)
            for h in range(g * c["group_size"], (g + 1) * c["group_size"]):
                want = naive_attention(q[h, t], k[g, keep], v[g, keep], scale)
                np.testing.assert_allclose(out[h], want, rtol=1e-9, atol=1e-12)


@settings(max_examples=50, deadline=None)
@given(heads=st.integers(1, 6), prompt_len=st.integers(6, 40), topk=st.integers(1, 8),
       window=st.integers(1, 10), pool_kernel=st.sampled_from([1, 3, 5, 7]),
       seed=st.integers(0, 2**31 - 1))
def test_mla_shared_selection_is_top_k_of_head_summed_scores(heads, prompt_len, topk, window,
                                                             pool_kernel, seed):
    sink, recent = 1, 3
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(heads, prompt_len, DK))
    k, v = rng.normal(size=(1, prompt_len, DK)), rng.normal(size=(1, prompt_len, DV))
    cache = prefill(q, k, v, Layout(sink, recent, topk), window=window, pool_kernel=pool_kernel,
                    shared=True)
    summed = naive_scores(q, k, prompt_len, sink, recent, window, 1 / np.sqrt(DK)).sum(axis=0)
    assert_is_top_k(cache.selected[0].tolist(), summed, pool_kernel, topk, sink)


@settings(max_examples=50, deadline=None)
@given(sink=st.integers(0, 6), recent=st.integers(1, 9), prompt_len=st.integers(1, 40),
       steps=st.integers(0, 20))
def test_streamingllm_cache_len_matches_a_reference_cache_without_topk(sink, recent, prompt_len,
                                                                       steps):
    lay = Layout(sink, recent, 0)
    rng = np.random.default_rng(0)
    total = prompt_len + steps
    q, k, v = (rng.normal(size=(1, total, DK)), rng.normal(size=(1, total, DK)),
               rng.normal(size=(1, total, DV)))
    cache = prefill(q[:, :prompt_len], k[:, :prompt_len], v[:, :prompt_len], lay)
    policy = StreamingLLM(sink=sink, recent=recent)
    for step in range(steps + 1):
        if step:
            decode_step(cache, q[:, prompt_len + step - 1], k[:, prompt_len + step - 1],
                        v[:, prompt_len + step - 1])
        held = int(cache.valid[0].sum())
        assert held == policy.cache_len(prompt_len, step) <= policy.static_cache_len(prompt_len, steps)
