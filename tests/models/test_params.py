"""Parameter counts, KV bytes and weight bytes against the published figures (docs/reference.md §2)."""
from __future__ import annotations

import pytest

from sn40l_sim.ir import ParallelPlan
from sn40l_sim.models import params as P
from sn40l_sim.models.loader import load_model
from sn40l_sim.models.template import GRAPHS_DIR


def test_deepseek_total_is_671b_without_mtp(r1):
    assert P.total_params(r1) == pytest.approx(671e9, rel=0.005)
    # DeepSeek's checkpoint: 685B = 671B main model + 14B MTP module (with its copies of embed/head)
    with_mtp = P.total_params(r1) + P.mtp_params(r1, with_shared_copies=True)
    assert with_mtp == pytest.approx(685e9, rel=0.005)
    assert P.mtp_params(r1, with_shared_copies=True) == pytest.approx(14e9, rel=0.05)
    assert P.total_params(r1, include_mtp=True) - P.total_params(r1) == P.mtp_params(r1)


def test_each_mtp_module_stores_its_own_copies_of_the_embedding_and_head(r1):
    # two modules: twice one module's weights, and the checkpoint's copies of the 129,280 x 7,168
    # embedding and LM head twice over
    two = load_model(GRAPHS_DIR / "deepseek_r1.yaml", {"mtp": {"modules": 2}})
    assert P.mtp_params(two) == 2 * P.mtp_params(r1)
    assert P.mtp_params(two, with_shared_copies=True) - P.mtp_params(two) == 2 * 2 * 129280 * 7168


def test_deepseek_active_is_37b(r1):
    assert P.active_params(r1) == pytest.approx(37e9, rel=0.015)


def test_deepseek_total_from_first_principles(r1):
    # independent arithmetic from config_671B.json, written out long-hand
    h, v = 7168, 129280
    attn = h * 1536 + 1536 + 1536 * 128 * 192 + h * 576 + 512 + 512 * 128 * 256 + 128 * 128 * h
    dense = attn + 2 * h + 3 * h * 18432
    moe = attn + 2 * h + 257 * 3 * h * 2048 + 256 * h + 256
    assert P.total_params(r1) == 3 * dense + 58 * moe + 2 * v * h + h


def test_kv_bytes_deepseek(r1):
    assert P.kv_bytes_per_token(r1) == 70_272 == 61 * 576 * 2
    full = P.kv_bytes(r1, 131072)
    assert full / 1e9 == pytest.approx(9.21, abs=0.005)
    assert P.kv_bytes(r1, 32768) * 4 == full
    assert P.kv_bytes_per_token(r1, include_mtp=True) == 62 * 576 * 2


def test_kv_bytes_llama(llama8b, llama70b):
    assert P.kv_bytes_per_token(llama8b) == 128 * 1024
    assert P.kv_bytes_per_token(llama70b) == 80 * 8 * 128 * 2 * 2
    fp8_kv = load_model(GRAPHS_DIR / "llama3_1_8b.yaml", overrides={"kv_dtype": "fp8"})
    assert P.kv_bytes_per_token(fp8_kv) * 2 == P.kv_bytes_per_token(llama8b)


@pytest.mark.parametrize("name, billions", [("8b", 8.0), ("70b", 70.6), ("405b", 405.9)])
def test_llama_parameter_counts(name, billions):
    model = load_model(GRAPHS_DIR / f"llama3_1_{name}.yaml")
    assert P.total_params(model) / 1e9 == pytest.approx(billions, rel=0.005)
    # dense: everything but all but one embedding row is active
    assert P.total_params(model) - P.active_params(model) == (model.vocab - 1) * model.hidden


def test_fp8_weight_bytes_count_scales_and_bf16_tensors(r1):
    groups = P.weight_bytes_by_group(r1, include_mtp=False)
    assert sum(groups.values()) == P.weight_bytes(r1, include_mtp=False)
    # one FP32 scale per 128x128 block: about 4 / 16384 of the FP8 bytes
    assert groups["fp8_scales"] == pytest.approx(groups["fp8"] * 4 / 128**2, rel=0.01)
    # embedding + LM head + router + norms are BF16
    bf16_params = 2 * r1.vocab * r1.hidden + 58 * 256 * r1.hidden + (61 * 2 + 1) * r1.hidden + 61 * (1536 + 512)
    assert groups["bf16"] == 2 * bf16_params
    assert groups["fp32"] == 58 * 256 * 4  # router balancing bias


def test_weight_dtype_is_selectable(r1):
    bf16 = load_model(GRAPHS_DIR / "deepseek_r1.yaml", overrides={"weight_dtype": "bf16"})
    assert bf16.weight_dtype == "bf16"
    assert P.total_params(bf16) == P.total_params(r1)
    ratio = P.weight_bytes(bf16) / P.weight_bytes(r1)
    assert 1.98 < ratio < 2.0  # BF16 doubles the FP8 part; the BF16 part and the scales do not double


def test_per_socket_weights_shard_and_replicate(r1):
    one = P.weight_bytes_per_socket(r1, ParallelPlan(tp=1))
    sixteen = P.weight_bytes_per_socket(r1, ParallelPlan(tp=16, attention_dp=16))
    assert one == P.weight_bytes(r1)
    replicated = set(P.replicated_tensors(r1))
    assert {"router", "attn_norm"} <= replicated and "expert_down" not in replicated
    # replicated tensors are held whole, so 16 sockets hold more than one copy in total...
    assert sixteen * 16 > one
    # ...but not by more than the replicated bytes (plus FP8 scale blocks a shard straddles)
    from sn40l_sim.models.tensors import holders, inventory
    rep_bytes = sum(t.shard_bytes(r1, "replicated", 1) * holders(r1, t, True)
                    for t in inventory(r1) if t.name in replicated)
    assert sixteen * 16 - one <= 15 * rep_bytes + 0.001 * one
    assert P.weight_bytes_per_socket(r1, ParallelPlan(tp=16)) == sixteen  # DP does not move weights


def test_llama_kv_heads_replicate_beyond_eight_sockets(llama8b):
    from sn40l_sim.models.tensors import inventory
    k = {t.name: t for t in inventory(llama8b)}["k_proj"]
    assert k.shard_dims("column", 8) == (4096, 128)
    assert k.shard_dims("column", 16) == (4096, 128)  # one KV head per socket, twice over


def test_tied_head_reads_the_whole_embedding_table(llama8b):
    # a tied LM head multiplies by the embedding table, so one token reads all of it: tying moves
    # parameters out of the total, not out of what a token reads
    tied = llama8b.model_copy(update={"tie_embeddings": True})
    table = llama8b.vocab * llama8b.hidden
    assert P.total_params(tied) == P.total_params(llama8b) - table
    # untied: one embedding row + the head (table); tied: the table once, as the head
    assert P.active_params(tied) == P.active_params(llama8b) - llama8b.hidden


def test_an_fp8_tensor_pays_a_scale_for_every_block_it_overlaps_even_a_partial_one(r1):
    # DeepSeek-R1's kv_a projection, 7168 x 576 FP8: 576 columns are 4.5 blocks of 128, and the
    # half block still has its FP32 scale (kv_a_proj_with_mqa.weight_scale_inv is 5 x 56 in the
    # published checkpoint)
    from sn40l_sim.models.tensors import Tensor
    assert r1.fp8_block == 128 and r1.weight_dtype == "fp8"
    kv_a = Tensor("kv_a", rows=7168, cols=576)
    assert kv_a.shard_bytes(r1, "replicated", 1) == 7168 * 576 + 56 * 5 * 4
    # a tensor smaller than one block still has one scale
    assert Tensor("tiny", rows=100, cols=100).shard_bytes(r1, "replicated", 1) == 100 * 100 + 4
    # a column shard of a whole number of blocks: 24576 / 16 = 1536 columns, 12 blocks
    q_b = Tensor("q_b", rows=1536, cols=128 * 192, col_granule=192)
    assert q_b.shard_bytes(r1, "column", 16) == 1536 * 1536 + 12 * 12 * 4
