"""Bad model files get one clear error naming file, field and line (and exit 2 from the CLI)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from sn40l_sim.commands.cli import main
from sn40l_sim.errors import InputError
from sn40l_sim.models.loader import load_model
from sn40l_sim.models.template import GRAPHS_DIR, load_templates

GOOD = (GRAPHS_DIR / "deepseek_r1.yaml").read_text()


def _write(tmp_path: Path, text: str, name: str = "model.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    # the kernels: path is relative to the model file
    (tmp_path / "kernels_deepseek.yaml").write_text((GRAPHS_DIR / "kernels_deepseek.yaml").read_text())
    return path


def _line_of(text: str, pattern: str) -> int:
    for i, line in enumerate(text.splitlines(), 1):
        if re.search(pattern, line):
            return i
    raise AssertionError(pattern)


def test_good_files_load():
    for name in ("deepseek_r1", "llama3_1_8b", "llama3_1_70b", "llama3_1_405b"):
        assert load_model(GRAPHS_DIR / f"{name}.yaml").kind == "model"


# (replacement applied to the good DeepSeek file, field named in the error, pattern of the line, message part)
BAD = [
    ("layers: 61 ", "layers: -61 ", "layers", r"^layers:", "positive"),
    ("layers: 61 ", "layers: sixty ", "layers", r"^layers:", "integer"),
    ("hidden: 7168 ", "hidden: 7168.5 ", "hidden", r"^hidden:", "integer"),
    ("dense_layers: 3 ", "dense_layers: 62 ", "dense_layers", r"^dense_layers:", "<= layers"),
    ("experts_per_token: 8 ", "experts_per_token: 300 ", "moe.experts_per_token", r"experts_per_token:", "routed_experts"),
    ("topk_groups: 4 ", "topk_groups: 9 ", "moe.topk_groups", r"topk_groups:", "<= groups"),
    ("groups: 8 ", "groups: 7 ", "moe.groups", r"^  groups:", "evenly"),
    ("experts_per_token: 8 ", "experts_per_token: 200 ", "moe.experts_per_token", r"experts_per_token:", "top 4 groups"),
    ("weight_dtype: fp8 ", "weight_dtype: int4 ", "weight_dtype", r"^weight_dtype:", "fp8"),
    ("kv_dtype: bf16 ", "kv_dtype: bf16\nkv_dtyp: bf16 ", "kv_dtyp", r"^kv_dtyp:", "unknown key"),
    ("  heads: 128 ", "  heads: 128\n  heads: 64 ", "attention.heads", r"heads: 64", "duplicate key"),
    ("  kind: mla ", "  kind: mha ", "attention.kind", r"kind: mha",
     "unknown attention kind; expected one of gqa, mla (got 'mha')"),
    ("  kind: mla ", "  kinds: mla ", "attention.kind", r"kinds: mla", "required field is missing"),
    ("  q_lora_rank: 1536 ", "  q_lora_rank: -1 ", "attention.q_lora_rank", r"q_lora_rank:", "positive"),
    ("scoring: sigmoid ", "scoring: relu ", "moe.scoring", r"scoring:", "softmax"),
    ("bf16_tensors: [embedding, lm_head, router, norms]", "bf16_tensors: [embedding, bias]", "bf16_tensors",
     r"^bf16_tensors:", ""),
    ("kernels: kernels_deepseek.yaml", "kernels: nowhere.yaml", "kernels", r"^kernels:", "not found"),
    ("kind: model", "kind: node", "kind", r"^kind:", "kind: model"),
]


@pytest.mark.parametrize("old, new, field, line_pattern, message", BAD, ids=[b[1].split(":")[0].strip() for b in BAD])
def test_bad_model_file(tmp_path, old, new, field, line_pattern, message):
    assert old in GOOD
    text = GOOD.replace(old, new, 1)
    path = _write(tmp_path, text)
    with pytest.raises(InputError) as info:
        load_model(path)
    err = info.value
    assert err.file == str(path.resolve())
    assert err.field is not None and err.field.startswith(field)
    assert err.line == _line_of(text, line_pattern)
    assert message in err.message
    assert "Traceback" not in str(err)


def test_gqa_heads_must_divide(tmp_path):
    text = (GRAPHS_DIR / "llama3_1_8b.yaml").read_text().replace("kv_heads: 8 ", "kv_heads: 5 ")
    path = tmp_path / "llama.yaml"
    path.write_text(text.replace("kernels: kernels_llama.yaml\n", ""))
    with pytest.raises(InputError, match="divisible by kv_heads") as info:
        load_model(path)
    assert info.value.field == "attention.kv_heads" and info.value.line == _line_of(text, r"kv_heads:")


def test_gqa_head_dim_must_be_even(tmp_path):
    # gqa_rope rotates every element of a head in pairs, as MLA's RoPE width, which is checked too
    text = (GRAPHS_DIR / "llama3_1_8b.yaml").read_text().replace("head_dim: 128 ", "head_dim: 127 ")
    path = tmp_path / "llama.yaml"
    path.write_text(text.replace("kernels: kernels_llama.yaml\n", ""))
    with pytest.raises(InputError, match="head_dim must be even, got 127") as info:
        load_model(path)
    assert info.value.field == "attention.head_dim" and info.value.line == _line_of(text, r"head_dim:")


@pytest.mark.parametrize("edits, name, why", [
    # a dense model has no router: the name would be ignored
    ((("kv_dtype: bf16", "bf16_tensors: [router]\nkv_dtype: bf16"),), "router", "no moe section"),
    # a tied head is the embedding table: naming the head would leave it streaming in FP8
    ((("weight_dtype: bf16", "weight_dtype: fp8\nbf16_tensors: [lm_head]"),
      ("tie_embeddings: false", "tie_embeddings: true")), "lm_head", "name embedding instead"),
])
def test_bf16_tensors_must_name_groups_the_model_has(tmp_path, edits, name, why):
    text = (GRAPHS_DIR / "llama3_1_8b.yaml").read_text().replace("kernels: kernels_llama.yaml\n", "")
    for old, new in edits:
        assert text.count(old) == 1
        text = text.replace(old, new)
    path = tmp_path / "llama.yaml"
    path.write_text(text)
    with pytest.raises(InputError, match=f"bf16_tensors names '{name}', which the model does not have") as info:
        load_model(path)
    assert why in info.value.message
    assert info.value.field == "bf16_tensors" and info.value.line == _line_of(text, r"^bf16_tensors:")


def test_syntax_error_names_the_line(tmp_path):
    path = _write(tmp_path, GOOD.replace("hidden: 7168 ", "hidden: [7168 "))
    with pytest.raises(InputError, match="YAML syntax error") as info:
        load_model(path)
    assert info.value.line is not None


def test_overrides_are_validated_and_named(r1):
    with pytest.raises(InputError) as info:
        load_model(GRAPHS_DIR / "deepseek_r1.yaml", overrides={"weight_dtype": "fp4"})
    assert "(overrides)" in str(info.value) and info.value.field == "weight_dtype"
    with pytest.raises(InputError, match="<= routed_experts"):
        load_model(GRAPHS_DIR / "deepseek_r1.yaml", overrides={"moe.experts_per_token": 512})
    nested = load_model(GRAPHS_DIR / "deepseek_r1.yaml", overrides={"moe": {"routed_experts": 128}})
    assert nested.moe.routed_experts == 128 and nested.moe.expert_ffn == r1.moe.expert_ffn


def test_overrides_not_a_mapping_are_refused_as_input(r1):
    # a notebook passed a list of pairs and got AttributeError: 'list' object has no attribute 'items'
    from sn40l_sim.models.loader import with_overrides
    with pytest.raises(InputError, match=r"expected a mapping of field names to values.*got a list"):
        with_overrides(r1, [("layers", 2)])
    with pytest.raises(InputError, match=r"\(overrides\): expected a mapping.*got a tuple"):
        load_model(GRAPHS_DIR / "deepseek_r1.yaml", overrides=(("layers", 2),))
    assert with_overrides(r1, {"layers": 4}).layers == 4


def test_template_errors_are_located(tmp_path):
    text = (GRAPHS_DIR / "kernels_deepseek.yaml").read_text().replace("[mha_qk, mha_softmax, mha_pv]",
                                                                      "[mha_qk, mha_softmaxx, mha_pv]")
    path = tmp_path / "kernels.yaml"
    path.write_text(text)
    with pytest.raises(InputError, match="unknown operator formula 'mha_softmaxx'") as info:
        load_templates(path)
    assert info.value.field == "prefill.kernels.mha.operators[1]"
    assert info.value.line == _line_of(text, "mha_softmaxx")


def test_a_template_kernel_no_block_uses_is_an_error(tmp_path):
    """Deleting a block entry (the LM head from the tail, say) would drop its kernel silently."""
    text = (GRAPHS_DIR / "kernels_llama.yaml").read_text()
    assert text.count("tail: [lm_head, sampling]") == 2
    path = tmp_path / "kernels.yaml"
    path.write_text(text.replace("tail: [lm_head, sampling]", "tail: [sampling]", 1))
    with pytest.raises(InputError, match="kernel 'lm_head' is defined but no block of prefill uses it") as info:
        load_templates(path)
    assert info.value.field == "prefill.kernels.lm_head"


def test_template_must_shard_every_tensor(tmp_path):
    text = (GRAPHS_DIR / "kernels_deepseek.yaml").read_text().replace("  router_bias: replicated\n", "")
    (tmp_path / "kernels_deepseek.yaml").write_text(text)
    path = tmp_path / "model.yaml"
    path.write_text(GOOD)
    with pytest.raises(InputError, match="no sharding rule for tensor.*router_bias") as info:
        load_model(path)
    assert info.value.field == "sharding"


def test_cli_exits_2_on_a_bad_model_file(tmp_path, capsys):
    path = _write(tmp_path, GOOD.replace("dense_layers: 3 ", "dense_layers: 99 "))
    assert main(["describe", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "dense_layers" in err[0] and str(path.name) in err[0]


def test_a_model_deriving_from_another_folders_file_finds_the_bases_template(tmp_path):
    # the base's kernels: path was resolved beside the derived file, and a valid file was refused
    derived = tmp_path / "mine.yaml"
    derived.write_text(f"base: {GRAPHS_DIR / 'llama3_1_8b.yaml'}\nname: my-8b\n")
    model = load_model(derived)
    assert model.name == "my-8b" and model.kernels == str(GRAPHS_DIR / "kernels_llama.yaml")
    derived.write_text(f"base: {GRAPHS_DIR / 'llama3_1_8b.yaml'}\nkernels: nope.yaml\n")   # its own: beside it
    with pytest.raises(InputError, match=re.escape(f"'{tmp_path / 'nope.yaml'}' not found")) as err:
        load_model(derived)
    assert err.value.file == str(derived) and err.value.line == 2


def test_a_kernels_path_naming_a_folder_says_so(tmp_path):
    # `kernels: .` (or any folder) was refused as "kernel template file '...' does not exist", of
    # a folder that does
    derived = tmp_path / "mine.yaml"
    derived.write_text(f"base: {GRAPHS_DIR / 'llama3_1_8b.yaml'}\nkernels: .\n")
    with pytest.raises(InputError, match=re.escape(f"'{tmp_path}' is a folder; expected a path to a kind: "
                                                   "kernels file")) as err:
        load_model(derived)
    assert err.value.file == str(derived) and err.value.line == 2


def test_a_template_error_shows_the_path_as_given(tmp_path, monkeypatch, capsys):
    # check of a template (and of a model naming it) printed the template's absolute path, where every
    # other file is shown as the user wrote it (docs/robustness.md)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "graphs").mkdir()
    (tmp_path / "graphs" / "k.yaml").write_text(
        (GRAPHS_DIR / "kernels_llama.yaml").read_text().replace("block_q: 8192 ", "block_q: -1 "))
    (tmp_path / "graphs" / "m.yaml").write_text(
        (GRAPHS_DIR / "llama3_1_8b.yaml").read_text().replace("kernels: kernels_llama.yaml", "kernels: k.yaml"))
    for given in ("graphs/k.yaml", "graphs/m.yaml"):
        assert main(["check", given]) == 2
        assert capsys.readouterr().err.startswith("error: graphs/k.yaml:8: flash.block_q: expected a positive integer")


def test_a_model_the_default_template_does_not_fit_is_refused_at_its_own_file(tmp_path, capsys):
    # a Mixtral-like MoE with GQA written without kernels: gets the gqa family's default template,
    # graphs/kernels_llama.yaml, which has no MoE kernels; the error named only that shipped file's
    # line, as if it were the file to fix
    mixtral = (Path(__file__).parent / "public_models" / "mixtral_8x7b.yaml").read_text()
    path = _write(tmp_path, mixtral.replace("kernels: kernels_gqa_moe.yaml\n", ""), "mixtral.yaml")
    with pytest.raises(InputError) as info:
        load_model(path)
    assert info.value.file == str(path) and info.value.field == "kernels"
    assert "kernels_llama.yaml" in info.value.message and "has MoE layers but the template defines no" in info.value.message
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}") and len(err.strip().splitlines()) == 1


def test_a_dense_template_given_to_an_moe_model_is_refused_for_its_missing_moe_kernels(tmp_path):
    # the kernels it lacks, not the expert tensors' sharding rules that follow from them
    mixtral = (Path(__file__).parent / "public_models" / "mixtral_8x7b.yaml").read_text()
    path = _write(tmp_path, mixtral.replace("kernels: kernels_gqa_moe.yaml",
                                            f"kernels: {GRAPHS_DIR / 'kernels_llama.yaml'}"), "mixtral.yaml")
    with pytest.raises(InputError) as info:
        load_model(path)
    assert info.value.field == "prefill.blocks.moe_layer" and info.value.file.endswith("kernels_llama.yaml")
    assert "model 'mixtral-8x7b' has MoE layers but the template defines no prefill moe_layer kernels" in str(info.value)


def test_a_file_whose_kind_comes_through_its_base_is_named_not_its_base():
    # the 8-socket node file has no kind of its own (base: sn40l_node16.yaml): given as a model,
    # the error named the base at its kind: line, a file the user did not give
    node8 = GRAPHS_DIR.parent / "hw_configs" / "sn40l_node8.yaml"
    with pytest.raises(InputError) as info:
        load_model(node8)
    assert info.value.file == str(node8) and info.value.field == "base"
    assert "this is a node file through its base:" in info.value.message
    assert "expected 'kind: model' in a model file" in info.value.message
