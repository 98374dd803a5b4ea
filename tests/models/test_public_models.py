"""Public models the project does not ship, described in YAML only (``tests/models/public_models/``,
each fact cited from the model's config.json): their parameter counts match the published totals,
their KV bytes per token the closed forms, and their graphs the projections the configuration
gives. DeepSeek-V2-Lite projects its query directly (``q_lora_rank: null``), which MLA models could
not say before: the schema required an integer."""
from __future__ import annotations

from pathlib import Path

import pytest

from sn40l_sim.errors import InputError
from sn40l_sim.ir import ParallelPlan, Shape
from sn40l_sim.models.builder import build_graph
from sn40l_sim.models.loader import load_model
from sn40l_sim.models.params import active_params, kv_bytes_per_token, total_params
from sn40l_sim.models.template import GRAPHS_DIR

PUBLIC = Path(__file__).resolve().parent / "public_models"


def test_deepseek_v2_lite_counts_its_published_parameters() -> None:
    lite = load_model(PUBLIC / "deepseek_v2_lite.yaml")
    h, heads, qk, vocab, layers = 2048, 16, 128 + 64, 102400, 27
    attention = (h * heads * qk                      # q_proj: no q_a / q_norm / q_b
                 + h * (512 + 64) + 512               # kv_a, kv_norm
                 + 512 * heads * (128 + 128)          # kv_b
                 + heads * 128 * h + 2 * h)           # o_proj, the layer's two RMSNorms
    routed, shared = 3 * h * 1408, 3 * h * 2 * 1408  # SwiGLU gate, up and down of one expert
    expected = 2 * vocab * h + h + layers * attention + 3 * h * 10944 + 26 * (64 * routed + shared + h * 64)
    assert total_params(lite) == expected
    assert total_params(lite) == pytest.approx(15.7e9, rel=0.01)        # model card: 15.7B
    # one embedding row, every attention weight, 6 of the 64 experts, the whole head (model card: 2.4B,
    # 2% under: the card's count is rounded and its convention for the head unstated)
    active = h + h + vocab * h + layers * attention + 3 * h * 10944 + 26 * (6 * routed + shared + h * 64)
    assert active_params(lite) == active and active_params(lite) == pytest.approx(2.4e9, rel=0.025)
    assert kv_bytes_per_token(lite) == layers * (512 + 64) * 2            # latent + RoPE key, BF16


def test_deepseek_v2_lite_projects_its_query_in_one_gemm() -> None:
    lite = load_model(PUBLIC / "deepseek_v2_lite.yaml")
    prompt, tp = 8192, 8
    graph = build_graph(lite, Shape("prefill", 1, prompt), ParallelPlan(tp=tp))
    qkv = graph.graph.nodes["L01.qkv"]["kernel"]
    names = [op.name for op in qkv.operators]
    assert "q_proj" in names and not {"q_a", "q_norm", "q_b"} & set(names)
    (q_proj,) = [op for op in qkv.operators if op.name == "q_proj"]
    assert q_proj.flops == 2 * prompt * 2048 * (16 // tp) * 192
    assert q_proj.weight_bytes == 2048 * (16 // tp) * 192 * 2
    # the latent all-gather carries kv_a's output only (no compressed query to gather)
    (latent,) = [c for c in qkv.collectives if c.kind == "all_gather"]
    assert latent.bytes == prompt * (512 + 64) * 2


def test_a_compressed_query_template_is_refused_for_a_direct_query_model(tmp_path: Path) -> None:
    text = (PUBLIC / "deepseek_v2_lite.yaml").read_text()
    (tmp_path / "lite.yaml").write_text(text.replace("kernels: kernels_deepseek_no_q_lora.yaml",
                                                     f"kernels: {GRAPHS_DIR / 'kernels_deepseek.yaml'}"))
    with pytest.raises(InputError, match="no sharding rule for tensor.s. q_proj of model 'deepseek-v2-lite'"):
        load_model(tmp_path / "lite.yaml")
    # a template that keeps the rule but names q_a is refused at the operator, not inside its formula
    template = (PUBLIC / "kernels_deepseek_no_q_lora.yaml").read_text()
    assert template.count("operators: [attn_norm, q_proj,") == 3
    (tmp_path / "kernels_deepseek_no_q_lora.yaml").write_text(
        template.replace("operators: [attn_norm, q_proj,", "operators: [attn_norm, q_a, q_proj,", 1))
    (tmp_path / "lite.yaml").write_text(text)
    with pytest.raises(InputError, match="operator 'q_a' needs weight 'q_a'.*attention.q_lora_rank"):
        load_model(tmp_path / "lite.yaml")


def test_q_lora_rank_must_still_be_written(tmp_path: Path) -> None:
    # null is a choice the file makes: a file that leaves the field out is refused, not read as null
    text = (PUBLIC / "deepseek_v2_lite.yaml").read_text()
    lines = [line for line in text.splitlines() if "q_lora_rank" not in line]
    (tmp_path / "kernels_deepseek_no_q_lora.yaml").write_text((PUBLIC / "kernels_deepseek_no_q_lora.yaml").read_text())
    (tmp_path / "lite.yaml").write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match="attention.q_lora_rank: required field is missing"):
        load_model(tmp_path / "lite.yaml")
