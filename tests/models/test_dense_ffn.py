"""``dense_ffn`` is the width of the dense layers' FFN: a model whose every layer is MoE (Mixtral)
leaves it out, and its template needs no ``dense_layer`` kernels. Before, both were required, so
such a model had to carry a width the simulator ignored (a Hugging Face ``intermediate_size`` put
there read as used) and a template of dense kernels that never ran."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from sn40l_sim.errors import InputError
from sn40l_sim.models.loader import load_model
from sn40l_sim.models.params import total_params
from sn40l_sim.models.template import GRAPHS_DIR
from sn40l_sim.models.tensors import inventory

PUBLIC = Path(__file__).resolve().parent / "public_models"
MIXTRAL = "dense_layers: 0           # every layer is MoE, so no dense_ffn: [intermediate_size] is the experts' width\n"


def _copy(tmp_path: Path, name: str, old: str, new: str, source: Path = PUBLIC) -> Path:
    text = (source / name).read_text()
    assert text.count(old) == 1, old
    (tmp_path / name).write_text(text.replace(old, new))
    return tmp_path / name


def test_an_all_moe_model_has_no_dense_ffn_tensors() -> None:
    mixtral = load_model(PUBLIC / "mixtral_8x7b.yaml")
    assert mixtral.dense_ffn is None
    assert not {"dense_gate_up", "dense_down"} & {t.name for t in inventory(mixtral)}
    assert total_params(mixtral) == 46_702_792_704     # the published count, no dense FFN in it


def test_a_dense_ffn_an_all_moe_model_would_ignore_is_refused(tmp_path: Path) -> None:
    shutil.copy(PUBLIC / "kernels_gqa_moe.yaml", tmp_path)
    path = _copy(tmp_path, "mixtral_8x7b.yaml", MIXTRAL, MIXTRAL + "dense_ffn: 14336\n")
    with pytest.raises(InputError, match=r"mixtral_8x7b.yaml:\d+: dense_ffn: every layer is MoE .* moe.expert_ffn"):
        load_model(path)


def test_a_model_with_dense_layers_must_give_dense_ffn(tmp_path: Path) -> None:
    shutil.copy(GRAPHS_DIR / "kernels_llama.yaml", tmp_path)
    path = _copy(tmp_path, "llama3_1_8b.yaml", "dense_ffn: 14336         # [intermediate_size]: SwiGLU width\n",
                 "", GRAPHS_DIR)
    with pytest.raises(InputError, match="dense_ffn: required: the model has 32 dense layer"):
        load_model(path)


def test_a_template_without_the_dense_kernels_a_model_runs_is_refused(tmp_path: Path) -> None:
    # Mixtral's template has no dense_layer kernels: a variant whose first layer is dense cannot use it
    _copy(tmp_path, "kernels_gqa_moe.yaml", "  expert_down: row\n",
          "  expert_down: row\n  dense_gate_up: column\n  dense_down: row\n")
    path = _copy(tmp_path, "mixtral_8x7b.yaml", MIXTRAL, "dense_layers: 1\ndense_ffn: 14336\n")
    with pytest.raises(InputError, match="prefill.blocks.dense_layer: model 'mixtral-8x7b' has dense layers"):
        load_model(path)


def test_a_dense_ffn_operator_in_an_all_moe_template_is_refused_by_name(tmp_path: Path) -> None:
    shutil.copy(PUBLIC / "mixtral_8x7b.yaml", tmp_path)
    ffn = "operators: [dispatch, expert_gate_up, expert_act, expert_down, combine, ffn_residual]\n      collectives: [{"
    _copy(tmp_path, "kernels_gqa_moe.yaml", ffn, ffn.replace("[dispatch,", "[dense_gate_up, dispatch,"))
    with pytest.raises(InputError, match="operator 'dense_gate_up' needs weight 'dense_gate_up'.*dense_ffn"):
        load_model(tmp_path / "mixtral_8x7b.yaml")
