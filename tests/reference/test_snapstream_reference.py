"""The SnapStream numpy reference on fixed cases: the paper's Figure 4, short prompts, the cache
layout, valid_topk masking and the MLA shared selection."""
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kvcache"))
from kv_naive import assert_is_top_k, naive_scores  # noqa: E402

from sn40l_sim.reference.snapstream import (
    Layout,
    decode_step,
    observation_scores,
    pool_scores,
    prefill,
    ring_gather_positions,
    select_topk,
)


def _data(heads, groups, length, dk=8, dv=6, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(heads, length, dk)), rng.normal(size=(groups, length, dk)),
            rng.normal(size=(groups, length, dv)))


def _step(cache, q, k, v, t):
    return decode_step(cache, q[:, t], k[:, t], v[:, t])


def test_figure4_positions_exactly():
    lay = Layout(sink=1, recent=4, topk=3)
    q, k, v = _data(heads=4, groups=1, length=30)
    lo, hi = ring_gather_positions(26, lay)
    assert lo.tolist() == [21, 22, 23, 24] and hi.tolist() == [25, 26, 27, 28]
    cache = prefill(q[:, :26], k[:, :26], v[:, :26], lay, window=4, pool_kernel=3, shared=True)
    assert cache.positions[0, 0] == 0                                   # the sink
    assert cache.ring_positions().tolist() == [25, 26, 23, 24]
    assert cache.valid[0, 1:5].tolist() == [True, False, True, True]     # 26 is padding yet
    assert np.all(cache.keys[0, 2] == 0)
    np.testing.assert_array_equal(cache.keys[0, [1, 3, 4]], k[0, [25, 23, 24]])
    assert cache.valid_topk == 3
    top = cache.positions[0, 5:8]
    assert all(1 <= p < 22 for p in top) and list(top) == sorted(top)
    _step(cache, q, k, v, 26)                  # first decoded token lands in the padding slot
    assert cache.ring_positions().tolist() == [25, 26, 23, 24]
    np.testing.assert_array_equal(cache.keys[0, 2], k[0, 26])
    _step(cache, q, k, v, 27)                  # position 27 overwrites 23
    assert cache.positions[0, :5].tolist() == [0, 25, 26, 27, 24]
    assert cache.positions[0, 5:8].tolist() == top.tolist()
    # position 22 = L - L_recent is in neither the ring nor the middle: the construction drops it
    assert 22 not in cache.held_positions().tolist()


def test_short_prompt_is_prompt_plus_padding_and_appends_in_place():
    lay = Layout(sink=1, recent=4, topk=2)
    q, k, v = _data(heads=2, groups=1, length=12)
    cache = prefill(q[:, :3], k[:, :3], v[:, :3], lay, window=2, pool_kernel=1)
    assert cache.positions[0].tolist() == [0, 1, 2, 3, 4, -1, -1]
    assert cache.valid[0].tolist() == [True, True, True, False, False, False, False]
    assert cache.valid_topk == 0
    for t in range(3, 8):
        _step(cache, q, k, v, t)
    # 3 and 4 appended in place, then 5, 6, 7 wrap over 1, 2, 3 (slot 1 + (p - 1) mod 4)
    assert cache.positions[0, :5].tolist() == [0, 5, 6, 7, 4]
    assert not cache.valid[0, 5:].any()


def test_prompt_shorter_than_the_sinks_fills_sink_slots_in_place():
    lay = Layout(sink=4, recent=2, topk=2)
    q, k, v = _data(heads=1, groups=1, length=10)
    cache = prefill(q[:, :2], k[:, :2], v[:, :2], lay)
    for t in range(2, 8):
        _step(cache, q, k, v, t)
    assert cache.positions[0, :6].tolist() == [0, 1, 2, 3, 6, 7]
    assert cache.held_positions().tolist() == [0, 1, 2, 3, 6, 7]


def test_layout_sink_ring_topk_and_never_modified_in_decode():
    lay = Layout(sink=3, recent=5, topk=6)
    q, k, v = _data(heads=4, groups=2, length=70, seed=3)
    cache = prefill(q[:, :50], k[:, :50], v[:, :50], lay, window=6, pool_kernel=3)
    assert cache.keys.shape[1] == lay.static_len == 14
    for g in range(2):
        assert cache.positions[g, :3].tolist() == [0, 1, 2]
        ring = cache.positions[g, 3:8]
        assert sorted(ring.tolist()) == [46, 47, 48, 49, 50]
        assert all(lay.slot(p) == 3 + i for i, p in enumerate(ring))
        top = cache.positions[g, 8:]
        assert len(set(top.tolist())) == 6 and all(3 <= p < 45 for p in top)
        np.testing.assert_array_equal(cache.keys[g, 8:], k[g, top])
    frozen = cache.keys[:, list(range(3)) + list(range(8, 14))].copy()
    for t in range(50, 70):
        _step(cache, q, k, v, t)
    np.testing.assert_array_equal(cache.keys[:, list(range(3)) + list(range(8, 14))], frozen)


def test_valid_topk_masks_the_unused_topk_slots():
    lay = Layout(sink=2, recent=4, topk=10)
    q, k, v = _data(heads=2, groups=1, length=20, seed=5)
    cache = prefill(q[:, :12], k[:, :12], v[:, :12], lay, window=3, pool_kernel=3)
    assert cache.valid_topk == 6 == min(max(12 - (2 + 4), 0), 10)
    assert cache.positions[0, 6:12].tolist() == [2, 3, 4, 5, 6, 7]   # the whole middle
    assert not cache.valid[0, 12:].any() and (cache.positions[0, 12:] == -1).all()
    poisoned = prefill(q[:, :12], k[:, :12], v[:, :12], lay, window=3, pool_kernel=3)
    poisoned.keys[0, 12:], poisoned.values[0, 12:] = 50.0, 1e6   # would dominate if read
    for t in range(12, 20):
        np.testing.assert_allclose(_step(poisoned, q, k, v, t), _step(cache, q, k, v, t))


def test_selection_finds_the_tokens_the_window_attends_to():
    lay = Layout(sink=1, recent=4, topk=2)
    q, k, v = _data(heads=2, groups=1, length=40, seed=7)
    # plant two keys aligned with every observation query
    k[0, 9] = k[0, 27] = 4.0 * q[:, 32:40].mean(axis=(0, 1))
    cache = prefill(q, k, v, lay, window=8, pool_kernel=1, shared=True)
    assert cache.selected[0].tolist() == [9, 27]


@pytest.mark.parametrize("groups, shared", [(1, True), (2, False), (2, True)])
def test_selection_matches_naive_head_summed_scores(groups, shared):
    lay = Layout(sink=2, recent=3, topk=5)
    L, window, kernel = 31, 7, 5      # window > recent: the causal mask matters
    q, k, v = _data(heads=4, groups=groups, length=L, seed=11)
    cache = prefill(q, k, v, lay, window=window, pool_kernel=kernel, shared=shared)
    scores = naive_scores(q, k, L, 2, 3, window, 1 / np.sqrt(8))
    for g in range(groups):
        heads = range(4) if shared else range(2 * g, 2 * g + 2)
        assert_is_top_k(cache.selected[g].tolist(), scores[list(heads)].sum(axis=0), kernel, 5, 2)
    if shared:
        assert (cache.selected == cache.selected[0]).all()


def test_observation_rows_are_probability_distributions():
    q, k, _ = _data(heads=3, groups=1, length=20, seed=2)
    s = observation_scores(q, k, 20, sink=1, recent=2, window=4, scale=0.3)
    # each of the 4 window rows sums to 1 over the 17 middle keys (all precede the window)
    np.testing.assert_allclose(s.sum(axis=1), 4.0)


def test_pool_and_select_helpers():
    assert pool_scores(np.array([[3.0, 0.0, 0.0, 0.0, 6.0]]), 3).tolist() == [[1.0, 1.0, 0.0, 2.0, 2.0]]
    assert select_topk(np.array([[0.2, 0.2, 0.1], [0.0, 0.3, 0.5]]), 1).tolist() == [[0], [2]]
    with pytest.raises(ValueError):
        pool_scores(np.zeros((1, 4)), 2)
