"""``describe`` of an experiment states the weight and KV-cache datatypes of the model run serves:
the model file's, with the experiment's ``model_overrides`` applied, as ``map``'s datatypes line
gives them. It named the model file and its overrides only, so a user could not read from it that
DeepSeek-R1 runs FP8 weights and a BF16 cache, or what an override made of a Llama's BF16."""
from __future__ import annotations

from pathlib import Path

from sn40l_sim.commands.describe import describe_experiment

REPO = Path(__file__).resolve().parents[2]


def _lines(text: str, label: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip().startswith(label)]


def test_the_models_datatypes_are_described():
    out = describe_experiment(REPO / "experiments" / "deepseek_tp16.yaml")
    assert _lines(out, "datatypes") == ["datatypes  weights fp8 (FP32 scales a 128 x 128 block; embedding, lm_head, "
                                        "router, norms bf16), KV cache bf16, activations bf16"]


def test_the_model_overrides_are_applied(tmp_path):
    text = (REPO / "experiments" / "llama8b_node8.yaml").read_text().replace("../", f"{REPO}/")
    path = tmp_path / "fp8.yaml"
    path.write_text(text + "model_overrides: {weight_dtype: fp8, kv_dtype: fp8}\n")
    assert _lines(describe_experiment(path), "datatypes") == \
        ["datatypes  weights fp8 (FP32 scales a 128 x 128 block), KV cache fp8, activations bf16"]


def test_each_served_model_of_a_multi_model_section_is_described():
    out = describe_experiment(REPO / "experiments" / "multi_model.yaml")
    rows = [line.strip() for line in out.splitlines()
            if "KV cache" in line and line.strip().startswith(("datatypes", "llama"))]
    assert rows == [f"{'datatypes  ' if i == 0 else ''}{name}: weights bf16, KV cache bf16, activations bf16"
                    for i, name in enumerate(("llama8b", "llama70b", "llama405b"))]


def test_a_missing_model_file_is_named_not_raised(tmp_path):
    text = (REPO / "experiments" / "llama8b_node8.yaml").read_text().replace("../", f"{REPO}/")
    path = tmp_path / "missing.yaml"
    path.write_text(text.replace("llama3_1_8b.yaml", "no_such_model.yaml"))
    out = describe_experiment(path)
    assert "(MISSING)" in out
    assert _lines(out, "datatypes") == ["datatypes  (the model does not load: check says why)"]


def test_drafts_on_a_model_without_mtp_are_said_to_be_refused(tmp_path):
    """describe quoted 2.44 tokens per step for drafts on Llama-3.1-8B, which has no MTP module to
    draft them, where check and run refuse the experiment at serving.speculative.drafts."""
    text = (REPO / "experiments" / "llama8b_node8.yaml").read_text().replace("../", f"{REPO}/")
    path = tmp_path / "drafts.yaml"
    path.write_text(text.replace("\n  seed: 7\n", "\n  seed: 7\n  speculative: {drafts: 2, acceptance: 0.8}\n"))
    assert _lines(describe_experiment(path), "drafts") == \
        ["drafts     2 per decode step (serving.speculative), but model 'llama-3.1-8b' has no mtp section to "
         "draft them with: check and run refuse them"]
    assert "2.44 tokens per step" in describe_experiment(REPO / "experiments" / "deepseek_tp16.yaml")
