"""KV policies (kvcache/policies/): the registry, cache lengths over a sequence's life, reserved
and decode bytes."""
import dataclasses

import pytest
from kv_test_models import deepseek_r1

from sn40l_sim.kvcache import POLICIES, KVPolicy, SnapStream, make_policy

R1_TOKEN = 70_272          # KV bytes per token of DeepSeek-R1 (docs/reference.md §2)
L128K = 131072


def test_registry_holds_the_six_policies():
    assert sorted(POLICIES) == ["arkvale", "full", "h2o", "snapkv", "snapstream", "streamingllm"]
    for name in POLICIES:
        policy = make_policy(name, {})
        assert isinstance(policy, KVPolicy) and policy.name == name
        with pytest.raises(dataclasses.FrozenInstanceError):
            policy.name_of_nothing = 1   # frozen
        assert hash(policy) == hash(make_policy(name, {}))   # usable as memo keys


def test_full_grows_by_one_per_token_and_pads_its_static_length():
    full = make_policy("full", {"pad_to": 4096})
    assert [full.cache_len(1000, g) for g in (0, 1, 7)] == [1000, 1001, 1007]
    assert full.static_cache_len(1000, 10) == 4096
    assert full.static_cache_len(L128K, 0) == L128K
    assert full.static_cache_len(L128K, 1) == L128K + 4096
    assert make_policy("full", {}).static_cache_len(1000, 10) == 1010
    assert full.prefill_kernels(deepseek_r1(), L128K, 16) == []


def test_snapstream_lengths():
    s = SnapStream(sink=4, recent=4096, topk=28668)
    assert s == SnapStream.from_budget(32768) == make_policy("snapstream", {"budget": 32768})
    assert s.static_cache_len(L128K, 0) == s.static_cache_len(100, 5000) == 32768
    assert s.cache_len(L128K, 0) == 32767          # the ring's slot for the first decoded token
    assert [s.cache_len(L128K, g) for g in (1, 2, 10000)] == [32768] * 3
    assert s.valid_topk(L128K) == 28668 and s.valid_topk(10000) == 10000 - 4100
    assert s.cache_len(10000, 3) == 4 + 4096 + 5900          # the whole 5900-token middle is kept
    assert s.cache_len(100, 0) == 100 and s.cache_len(100, 50) == 150   # short prompt appends
    assert s.cache_len(4000, 200) == 4100                   # ...up to sink + recent


def test_streamingllm_and_snapkv_lengths():
    st = make_policy("streamingllm", {"budget": 2048, "sink": 8})
    assert (st.sink, st.recent) == (8, 2040)
    assert st.static_cache_len(L128K, 10) == 2048
    assert st.cache_len(L128K, 0) == 2047 and st.cache_len(L128K, 1) == 2048
    sk = make_policy("snapkv", {"budget": 4096, "pad_to": 1024})
    assert (sk.topk, sk.observation_window) == (4064, 32)
    assert sk.cache_len(L128K, 0) == 4096 and sk.cache_len(L128K, 10) == 4106   # grows in decode
    assert sk.static_cache_len(L128K, 10) == 5120
    assert sk.cache_len(1000, 5) == 1005                    # shorter than the budget: kept whole


def test_snapstream_32k_for_128k_is_a_quarter_of_full():
    r1 = deepseek_r1()
    full, snap = make_policy("full", {}), make_policy("snapstream", {"budget": 32768})
    assert full.bytes_per_sequence(r1, L128K, 0) == L128K * R1_TOKEN == 9_210_691_584
    assert snap.bytes_per_sequence(r1, L128K, 0) * 4 == full.bytes_per_sequence(r1, L128K, 0)
    # decode reads the whole static slot each step, whatever has been generated
    assert snap.decode_read_bytes(r1, L128K, 1, 1024) == snap.decode_read_bytes(r1, L128K, 900, 1024) \
        == 32768 * R1_TOKEN
    assert full.decode_read_bytes(r1, L128K, 1, 1024) == (L128K + 1024) * R1_TOKEN
    assert full.decode_read_tokens(L128K, 1, 1024) == L128K + 1024
    assert snap.decode_write_bytes(r1) == full.decode_write_bytes(r1) == R1_TOKEN


@pytest.mark.parametrize("name", sorted(POLICIES))
@pytest.mark.parametrize("prompt_len, steps", [(1.5, 0), (100, 2.0), (None, 0), ("100", 0), (True, 0),
                                               (0, 0), (100, -1)])
def test_every_policy_names_lengths_that_are_not_whole_counts(name, prompt_len, steps):
    """From Python, Full().cache_len(1.5, 0) returned a cache of 1.5 tokens and its static length 2,
    None and "100" raised a TypeError, and a negative count a ValueError; each is now an InputError."""
    from sn40l_sim.errors import InputError
    policy = make_policy(name, {})
    for method, other in ((policy.cache_len, "generated"), (policy.static_cache_len, "max_new_tokens")):
        with pytest.raises(InputError, match=rf"^need integers prompt_len >= 1 and {other} >= 0, got "):
            method(prompt_len, steps)
