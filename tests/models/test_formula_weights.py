"""A template naming an operator or collective size whose weight the model does not have (an MoE
router in a dense Llama's FFN, the MoE gather of expert intermediates, DeepSeek's MTP projection)
is refused where it is loaded, naming the template's file, the kernel's field and the part of the
model that holds the weight (sn40l_sim/models/dataflow.py). Before, ``check`` and ``run`` stopped
with a Python traceback from inside the formula (``'NoneType' object has no attribute
'routed_experts'``)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from sn40l_sim.commands import cli
from sn40l_sim.errors import InputError
from sn40l_sim.models.loader import load_model
from sn40l_sim.models.template import GRAPHS_DIR

FFN = "operators: [ffn_norm, dense_gate_up, dense_act, dense_down, ffn_residual]\n      collectives: [{size: hidden,"

#: (the FFN kernel of graphs/kernels_llama.yaml's prefill as changed, the words the error must contain)
CASES = {
    "router_in_a_dense_ffn": (
        FFN.replace("[ffn_norm,", "[ffn_norm, router_gemm,"),
        ["prefill.kernels.ffn.operators", "operator 'router_gemm' needs weight 'router'", "a moe section"]),
    "expert_gather_in_a_dense_ffn": (
        FFN.replace("[{size: hidden,", "[{size: expert_intermediate, kind: all_gather}, {size: hidden,"),
        ["prefill.kernels.ffn.collectives", "collective size 'expert_intermediate' needs weight 'expert_gate_up'"]),
    "mtp_projection_without_mtp": (
        FFN.replace("[ffn_norm,", "[mtp_proj, ffn_norm,"),
        ["prefill.kernels.ffn.operators", "operator 'mtp_proj' needs weight 'mtp_proj'", "an mtp section"]),
}


def _model(tmp_path: Path, ffn: str) -> Path:
    text = (GRAPHS_DIR / "kernels_llama.yaml").read_text()
    assert text.count(FFN) == 1
    (tmp_path / "kernels_llama.yaml").write_text(text.replace(FFN, ffn))
    shutil.copy(GRAPHS_DIR / "llama3_1_8b.yaml", tmp_path / "llama3_1_8b.yaml")
    return tmp_path / "llama3_1_8b.yaml"


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_formula_needing_a_weight_the_model_lacks_is_refused(tmp_path: Path, case: str) -> None:
    ffn, words = CASES[case]
    with pytest.raises(InputError) as info:
        load_model(_model(tmp_path, ffn))
    message = str(info.value)
    assert "kernels_llama.yaml" in message and "'llama-3.1-8b' does not have" in message
    for word in words:
        assert word in message


def test_check_says_so_in_one_line_with_status_2(tmp_path: Path, capsys) -> None:
    path = _model(tmp_path, CASES["router_in_a_dense_ffn"][0])
    assert cli.main(["check", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err and "router_gemm" in err


def test_the_moe_formulas_still_build_for_a_model_with_experts() -> None:
    # the same formulas, named by DeepSeek-R1's template, pass: the check looks at the model's weights
    assert load_model(GRAPHS_DIR / "deepseek_r1.yaml").moe is not None
