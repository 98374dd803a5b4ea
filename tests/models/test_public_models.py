"""Public models the project does not ship, described in YAML only (``tests/models/public_models/``,
each fact cited from the model's config.json): their parameter counts match the published totals,
their KV bytes per token the closed forms, and their graphs the projections the configuration
gives. DeepSeek-V2-Lite projects its query directly (``q_lora_rank: null``), which MLA models could
not say before: the schema required an integer."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from sn40l_sim.commands import cli
from sn40l_sim.errors import InputError
from sn40l_sim.ir import ParallelPlan, Shape
from sn40l_sim.models.builder import build_graph
from sn40l_sim.models.loader import load_model
from sn40l_sim.models.params import active_params, kv_bytes_per_token, total_params
from sn40l_sim.models.template import GRAPHS_DIR

PUBLIC = Path(__file__).resolve().parent / "public_models"
REPO = Path(__file__).resolve().parents[2]


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


#: file -> (published total parameters, the source): the exact figures are the safetensors metadata
#: of the Hugging Face checkpoints; DeepSeek-V2's is the model card's rounded 236B
PUBLISHED = {
    "llama3_2_1b.yaml": (1_235_814_400, "meta-llama/Llama-3.2-1B"),
    "llama3_2_3b.yaml": (3_212_749_824, "meta-llama/Llama-3.2-3B"),
    "qwen2_5_72b.yaml": (72_706_203_648, "Qwen/Qwen2.5-72B"),
    "mixtral_8x7b.yaml": (46_702_792_704, "mistralai/Mixtral-8x7B-v0.1"),
    "qwen2_7b.yaml": (7_615_616_512, "Qwen/Qwen2-7B"),
    "deepseek_v2.yaml": (236e9, "deepseek-ai/DeepSeek-V2"),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_a_public_model_counts_its_published_parameters(name: str) -> None:
    model = load_model(PUBLIC / name)
    published, _ = PUBLISHED[name]
    assert total_params(model) == pytest.approx(published, rel=0.002)
    a = model.attention
    if a.kind == "gqa":
        closed = 2 * model.layers * a.kv_heads * a.head_dim * 2          # K and V, BF16
    else:
        closed = model.layers * (a.kv_lora_rank + a.qk_rope_head_dim) * 2
    assert kv_bytes_per_token(model) == closed


def test_the_counts_that_are_exact_stay_exact() -> None:
    # to the parameter: tied embeddings counted once (Llama-3.2), MoE with GQA attention, a softmax
    # router and no shared expert (Mixtral)
    for name in ("llama3_2_1b.yaml", "llama3_2_3b.yaml", "mixtral_8x7b.yaml"):
        assert total_params(load_model(PUBLIC / name)) == PUBLISHED[name][0]
    # Qwen2.5's Q, K and V projections carry biases, which the schema has no field for: the count
    # is short by exactly them, 80 layers x (8192 + 2 x 1024)
    assert PUBLISHED["qwen2_5_72b.yaml"][0] - total_params(load_model(PUBLIC / "qwen2_5_72b.yaml")) == 80 * 10240
    assert PUBLISHED["qwen2_7b.yaml"][0] - total_params(load_model(PUBLIC / "qwen2_7b.yaml")) == 28 * (3584 + 2 * 512)


def test_tied_heads_stream_the_embedding_table_once() -> None:
    small = load_model(PUBLIC / "llama3_2_1b.yaml")
    graph = build_graph(small, Shape("decode", 16, 0, kv_len=4096), ParallelPlan(tp=8))
    head = graph.graph.nodes["lm_head"]["kernel"]
    (gemm,) = [op for op in head.operators if op.name == "lm_head"]
    assert gemm.weight_bytes == 128256 // 8 * 2048 * 2      # the socket's vocab slice of the table
    assert active_params(small) == total_params(small)       # the head reads the whole table


def _run(tmp_path: Path, model: str, capsys) -> dict:
    """``experiments/llama8b_node8.yaml`` with ``model``, four requests of 4K tokens (16 to 32 out) and a decode
    batch of 16: one full-cache point's results."""
    exp = (REPO / "experiments" / "llama8b_node8.yaml").read_text()
    for old, new in (("../hw_configs/sn40l_node8.yaml", (REPO / "hw_configs" / "sn40l_node8.yaml").as_posix()),
                     ("../graphs/llama3_1_8b.yaml", (PUBLIC / model).as_posix()), ("count: 48", "count: 4"),
                     ("prompt_len: 32768", "prompt_len: 4096"), ("batch: max", "batch: 16"),
                     ("low: 64, high: 512", "low: 16, high: 32")):
        assert exp.count(old) == 1, old
        exp = exp.replace(old, new)
    path, out = tmp_path / f"{model}.exp.yaml", tmp_path / model
    path.write_text(exp)
    status = cli.main(["run", str(path), "--out", str(out), "--no-plot", "--quiet"])
    assert status == 0, capsys.readouterr().err
    (full, _) = json.loads((out / "results.json").read_text())
    return full


def test_a_smaller_model_of_a_family_is_faster(tmp_path: Path, capsys) -> None:
    # the same node, plan, prompt and decode batch: fewer, narrower layers and a smaller cache
    small, large = (_run(tmp_path, name, capsys) for name in ("llama3_2_1b.yaml", "llama3_2_3b.yaml"))
    assert small["decode_step_s"] < large["decode_step_s"]
    assert small["prefill_s"] < large["prefill_s"]


def test_qwen2_7b_on_sixteen_sockets_without_attention_dp_is_physically_sane(tmp_path: Path, capsys) -> None:
    # 28 query heads, 4 KV heads, TP16 and no attention DP: each KV group has 4 sockets of its own,
    # so a socket caches one KV head of every sequence (it cached two: half the batch, twice the
    # reads). The batch is the largest power of two whose cache fits beside the weights, the step
    # no shorter than the busiest socket's weights and cache read at the HBM's peak, and the
    # tokens per second are the batch over the step.
    exp = (REPO / "experiments" / "llama8b_node8.yaml").read_text()
    for old, new in (("../hw_configs/sn40l_node8.yaml", (REPO / "hw_configs" / "sn40l_node16.yaml").as_posix()),
                     ("../graphs/llama3_1_8b.yaml", (PUBLIC / "qwen2_7b.yaml").as_posix()),
                     ("{tp: 8}", "{tp: 16}"), ("{tp: 8, attention_dp: 8}", "{tp: 16, attention_dp: 1}"),
                     ("count: 48", "count: 2"), ("low: 64, high: 512", "low: 16, high: 32"),
                     ("max_new_tokens: 512", "max_new_tokens: 32")):
        assert exp.count(old) == 1, old
        exp = exp.replace(old, new)
    path, out = tmp_path / "qwen.exp.yaml", tmp_path / "qwen"
    path.write_text(exp)
    with pytest.warns(UserWarning, match="tp 16 splits the 28 query heads of 'qwen2-7b' unevenly") as said:
        assert cli.main(["run", str(path), "--out", str(out), "--no-plot", "--quiet"]) == 0, capsys.readouterr().err
    assert len(said) == 2  # parallel.prefill and parallel.decode, each once
    (full, _) = json.loads((out / "results.json").read_text())
    kv_len = 32768 + 32 - 1                              # the last token is never fed back: no row
    per_sequence = kv_len * 28 * 1 * 128 * 2 * 2        # layers x one KV head x K and V x BF16
    hbm = full["memory"]["hbm"]
    assert hbm["kv"] == full["batch"] * per_sequence
    usable = hbm["capacity"] - hbm["reserved"] - hbm["weights"] - hbm["activations"]
    assert full["batch"] * per_sequence <= usable < 2 * full["batch"] * per_sequence
    assert full["batch"] == 64
    assert full["decode_step_s"] >= (hbm["weights"] - 152064 // 16 * 3584 * 2 + hbm["kv"]) / 1638.4e9
    assert full["decode_tokens_per_s"] == pytest.approx(full["batch"] / full["decode_step_s"], rel=1e-6)
