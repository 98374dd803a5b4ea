"""KV bytes per token and the tensor-parallel split of the cache work."""
from pathlib import Path

import pytest

from kv_test_models import deepseek_r1, llama
from sn40l_sim.kvcache.sizing import (kv_bytes_per_token, kv_bytes_per_token_layer, kv_sharding,
                                      kv_width)

ROOT = Path(__file__).resolve().parents[2]


def test_deepseek_mla_caches_576_elements_per_layer():
    r1 = deepseek_r1()
    assert kv_width(r1) == 512 + 64
    assert kv_bytes_per_token_layer(r1) == 1152
    assert kv_bytes_per_token(r1) == 70_272
    # a 128K sequence: 9.21 GB (issue 3, "must show")
    assert kv_bytes_per_token(r1) * 131072 == pytest.approx(9.21e9, rel=1e-3)


@pytest.mark.parametrize("size, per_token", [("8b", 128 * 1024), ("70b", 320 * 1024),
                                             ("405b", 504 * 1024)])
def test_llama_gqa_bytes_per_token(size, per_token):
    # layers x 2 (K, V) x 8 KV heads x 128 x 2 bytes
    assert kv_bytes_per_token(llama(size)) == per_token


def test_fp8_cache_halves_the_bytes():
    r1 = deepseek_r1().model_copy(update={"kv_dtype": "fp8"})
    assert kv_bytes_per_token(r1) == 70_272 // 2


def test_sharding_mla_shares_one_kv_head_over_all_sockets():
    s = kv_sharding(deepseek_r1(), 16)
    assert (s.query_heads, s.kv_heads, s.row_shards) == (8, 1, 16)
    s = kv_sharding(llama("8b"), 16)      # 8 KV heads over 16 sockets: 2 sockets per KV head
    assert (s.query_heads, s.kv_heads, s.row_shards) == (2, 1, 2)
    s = kv_sharding(llama("8b"), 4)
    assert (s.query_heads, s.kv_heads, s.row_shards) == (8, 2, 1)


def test_agrees_with_models_params_when_present():
    params = pytest.importorskip("sn40l_sim.models.params")
    for model in (deepseek_r1(), llama("8b"), llama("70b")):
        assert params.kv_bytes_per_token(model) == kv_bytes_per_token(model)


def test_python_specs_match_graph_files_when_loader_present():
    loader = pytest.importorskip("sn40l_sim.models.loader")
    r1 = loader.load_model(ROOT / "graphs" / "deepseek_r1.yaml")
    assert kv_bytes_per_token(r1) == kv_bytes_per_token(deepseek_r1())
    assert r1.attention == deepseek_r1().attention
