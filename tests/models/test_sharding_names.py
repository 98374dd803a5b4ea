"""A kernel template's sharding rule must name a tensor a model can have: a rule for no tensor was
ignored, so a misspelt key (``o_prj: column`` beside ``o_proj: row``) left the rule it meant to
change as it was and the run reported the unchanged numbers."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from sn40l_sim.errors import InputError
from sn40l_sim.models.loader import load_model
from sn40l_sim.models.template import GRAPHS_DIR
from sn40l_sim.models.tensors import OPTIONAL_TENSORS, inventory


def _llama_with_template(tmp_path: Path, old: str, new: str, model_edit: tuple[str, str] | None = None) -> Path:
    text = (GRAPHS_DIR / "kernels_llama.yaml").read_text()
    assert text.count(old) == 1, old
    (tmp_path / "kernels_llama.yaml").write_text(text.replace(old, new))
    model = (GRAPHS_DIR / "llama3_1_8b.yaml").read_text()
    if model_edit is not None:
        assert model.count(model_edit[0]) == 1
        model = model.replace(*model_edit)
    (tmp_path / "llama3_1_8b.yaml").write_text(model)
    return tmp_path / "llama3_1_8b.yaml"


def test_a_rule_for_no_tensor_is_refused_at_its_line(tmp_path: Path) -> None:
    path = _llama_with_template(tmp_path, "  o_proj: row\n", "  o_proj: row\n  o_prj: column\n")
    with pytest.raises(InputError) as info:
        load_model(path)
    message = str(info.value)
    assert "kernels_llama.yaml:24: sharding.o_prj: no tensor named 'o_prj' in model 'llama-3.1-8b'" in message
    assert "o_proj" in message   # the names it could be


def test_a_shared_template_may_shard_a_tensor_this_model_lacks(tmp_path: Path) -> None:
    # Llama-3.1 with tied embeddings has no lm_head tensor; the template's rule serves the untied models
    path = _llama_with_template(tmp_path, "  o_proj: row\n", "  o_proj: row\n",
                                ("tie_embeddings: false", "tie_embeddings: true"))
    model = load_model(path)
    assert "lm_head" not in {t.name for t in inventory(model)}


def test_the_optional_tensors_are_those_only_a_model_option_holds() -> None:
    # DeepSeek-R1 has every option (untied head, MoE with sigmoid scoring and shared experts, MTP)
    deepseek = load_model(GRAPHS_DIR / "deepseek_r1.yaml")
    # (the dense FFN is an option too: a model whose every layer is MoE has none, Mixtral's)
    always = {"embedding", "final_norm", "attn_norm", "ffn_norm"}
    family = {t.name for t in deepseek.attention.weight_tensors(deepseek.hidden)}
    assert {t.name for t in inventory(deepseek)} - always - family == OPTIONAL_TENSORS
    llama = load_model(GRAPHS_DIR / "llama3_1_8b.yaml")
    assert {t.name for t in inventory(llama)} & OPTIONAL_TENSORS == {"lm_head", "dense_gate_up", "dense_down"}


def test_check_of_the_template_alone_refuses_it(tmp_path: Path, capsys) -> None:
    from sn40l_sim.commands.cli import main

    _llama_with_template(tmp_path, "  o_proj: row\n", "  o_proj: row\n  o_prj: column\n")
    shutil.copy(GRAPHS_DIR / "llama3_1_70b.yaml", tmp_path / "llama3_1_70b.yaml")
    assert main(["check", str(tmp_path / "kernels_llama.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "sharding.o_prj" in err
