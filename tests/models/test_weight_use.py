"""A kernel template must read every weight the model stores (sn40l_sim.models.weight_use): one
whose block lost a whole fused kernel (block entry and kernel table alike) kept the residual
stream's chain whole, passed the dataflow rules and ran with silently wrong numbers."""
from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import pytest

from sn40l_sim.commands import cli
from sn40l_sim.models.dataflow import dataflow_problem
from sn40l_sim.models.loader import load_model
from sn40l_sim.models.reductions import unreduced_row_parallel
from sn40l_sim.models.template import GRAPHS_DIR, template_for
from sn40l_sim.models.weight_use import split_weight_of_whole_rows, unread_weight

REPO = Path(__file__).resolve().parents[2]


def _without_kernel(template, phase: str, part: str, kernel_id: str):
    """``template`` with ``kernel_id`` taken out of ``phase``'s ``part`` block, and out of its kernel
    table when no other block calls it (as a user deleting the kernel would)."""
    spec = getattr(template, phase)
    blocks = spec.blocks.model_copy(update={part: tuple(k for k in getattr(spec.blocks, part) if k != kernel_id)})
    used = {k for ids in blocks.model_dump().values() for k in ids}
    kernels = {k: entry for k, entry in spec.kernels.items() if k in used}
    return template.model_copy(update={phase: spec.model_copy(update={"blocks": blocks, "kernels": kernels})})


@pytest.mark.parametrize("model_file", ["deepseek_r1.yaml", "llama3_1_8b.yaml", "llama3_1_70b.yaml",
                                        "llama3_1_405b.yaml"])
def test_the_shipped_templates_read_every_weight(model_file: str) -> None:
    model = load_model(GRAPHS_DIR / model_file)
    for phase in ("prefill", "decode"):
        assert unread_weight(template_for(model), model, phase) is None


@pytest.mark.parametrize("model_file", ["deepseek_r1.yaml", "llama3_1_8b.yaml"])
def test_every_whole_kernel_taken_out_of_a_shipped_template_is_refused(model_file: str) -> None:
    model = load_model(GRAPHS_DIR / model_file)
    template = template_for(model)
    accepted_before, checked = [], 0
    for phase in ("prefill", "decode"):
        for part, ids in getattr(template, phase).blocks.model_dump().items():
            for kernel_id in ids:
                broken = _without_kernel(template, phase, part, kernel_id)
                earlier = dataflow_problem(broken, model, phase) or unreduced_row_parallel(broken, model, phase)
                problem = earlier or unread_weight(broken, model, phase)
                assert problem is not None, f"{phase} {part} without {kernel_id}"
                checked += 1
                if earlier is None:
                    assert problem[0] == (phase, "blocks")
                    accepted_before.append((phase, kernel_id))
    assert checked >= 10
    # what the dataflow rules let through: Llama-3.1's prefill FFN kernel (x passes the layer
    # unchanged), DeepSeek-R1's MTP projection (the MTP run starts from x and the tokens)
    expected = {"llama3_1_8b.yaml": [("prefill", "ffn")],
                "deepseek_r1.yaml": [("prefill", "mtp_proj"), ("decode", "mtp_proj")]}[model_file]
    assert accepted_before == expected


def test_check_and_run_refuse_a_template_without_its_prefill_ffn_kernel(tmp_path: Path, capsys) -> None:
    # Llama-3.1-8B's 32K prefill on 8 sockets ran in 0.198 s instead of 0.289 s with this template
    text = (GRAPHS_DIR / "kernels_llama.yaml").read_text()
    old_block = "dense_layer: [qkv, attention, o_proj, ffn]\n    tail: [lm_head, sampling]\n  kernels:\n    embedding"
    assert text.count(old_block) == 1
    text = text.replace(old_block, old_block.replace(", ffn]", "]"))
    old_kernel = ("    ffn:\n      operators: [ffn_norm, dense_gate_up, dense_act, dense_down, ffn_residual]\n"
                  "      collectives: [{size: hidden, kind: all_reduce, overlapped: true}]\n")
    assert text.count(old_kernel) == 1
    (tmp_path / "kernels_llama.yaml").write_text(text.replace(old_kernel, ""))
    shutil.copy(GRAPHS_DIR / "llama3_1_8b.yaml", tmp_path / "llama3_1_8b.yaml")
    exp_text = (REPO / "experiments" / "llama8b_node8.yaml").read_text()
    exp_text = exp_text.replace("../hw_configs/sn40l_node8.yaml", (REPO / "hw_configs" / "sn40l_node8.yaml").as_posix())
    exp_text = exp_text.replace("../graphs/llama3_1_8b.yaml", (tmp_path / "llama3_1_8b.yaml").as_posix())
    exp = tmp_path / "exp.yaml"
    exp.write_text(exp_text)
    for command in (["check", str(exp)], ["check", str(tmp_path / "kernels_llama.yaml")],
                    ["run", str(exp), "--out", str(tmp_path / "out"), "--no-plot"]):
        # the CLI's main in this process (a traceback would be an exception here, and a warning line
        # of the process is a recorded warning); a subprocess each paid ~2 CPU-s of start-up and imports
        with warnings.catch_warnings(record=True) as warned:
            warnings.simplefilter("default")
            status, err = cli.main(command), capsys.readouterr().err
        assert status == 2, command
        lines = err.strip().splitlines() + [f"warning: {w.message}" for w in warned]
        assert len(lines) == 1 and "Traceback" not in err, err
        assert "kernels_llama.yaml" in lines[0] and "prefill.blocks" in lines[0]
        assert "reads weight 'ffn_norm'" in lines[0]
    assert not (tmp_path / "out" / "results.json").exists()


@pytest.mark.parametrize("model_file", ["deepseek_r1.yaml", "llama3_1_8b.yaml", "llama3_1_70b.yaml",
                                        "llama3_1_405b.yaml"])
def test_the_shipped_templates_split_no_weight_a_norm_applies_to_whole_rows(model_file: str) -> None:
    model = load_model(GRAPHS_DIR / model_file)
    for phase in ("prefill", "decode"):
        assert split_weight_of_whole_rows(template_for(model), model, phase) is None


@pytest.mark.parametrize("model_file, norm, rule", [("llama3_1_8b.yaml", "attn_norm", "column"),
                                                    ("deepseek_r1.yaml", "q_norm", "column"),
                                                    ("deepseek_r1.yaml", "kv_norm", "row")])
def test_a_norm_weight_marked_split_is_refused(model_file: str, norm: str, rule: str) -> None:
    # the gather rule took the label's word: DeepSeek-R1's norms marked column let a template drop the
    # latent's all-gather, and the 128K prefill ran in 6.753 s instead of 6.832 s; the norm's own
    # work stayed whole rows whatever the label
    model = load_model(GRAPHS_DIR / model_file)
    template = template_for(model)
    split = template.model_copy(update={"sharding": {**template.sharding, norm: rule}})
    problem = split_weight_of_whole_rows(split, model, "prefill")
    assert problem is not None and problem[0] == ("sharding", norm)
    assert problem[1].startswith(f"{rule} splits weight {norm!r}, but operator {norm!r} applies it to whole rows")
    assert problem[1].endswith("expected replicated")


def test_a_template_splitting_a_norm_is_refused_by_run_at_its_sharding_rule(tmp_path, capsys) -> None:
    text = (GRAPHS_DIR / "kernels_deepseek.yaml").read_text(encoding="utf-8")
    assert "  q_norm: replicated\n" in text and "      collectives: [{size: latent, kind: all_gather}]\n" in text
    edited = tmp_path / "kernels.yaml"
    edited.write_text(text.replace("  q_norm: replicated\n", "  q_norm: column\n").replace(
        "  kv_norm: replicated\n", "  kv_norm: column\n").replace(
        "      collectives: [{size: latent, kind: all_gather}]\n", "      collectives: []\n"), encoding="utf-8")
    code = cli.main(["run", str(REPO / "experiments" / "deepseek_tp16.yaml"), "--set",
                     f"graph_options.template={edited}", "--out", str(tmp_path / "out"), "--quiet", "--no-plot"])
    err = capsys.readouterr().err
    assert code == 2 and "sharding.q_norm: column splits weight 'q_norm'" in err, err
    assert not (tmp_path / "out" / "results.json").exists()
