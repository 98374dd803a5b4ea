"""Names in a kernel template are shown in ``map``'s table, the Chrome trace and messages: a kernel's
``name`` or ``kind`` with a line break split map's table row in two, and a blank one fell back to
the kernel's id unsaid. They are names (``sn40l_sim.schema.Name``), refused at their line."""
from __future__ import annotations

from pathlib import Path

import pytest

from sn40l_sim.commands.cli import main

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("field, value, words", [
    ("name", '"mla\\nrouter"', "expected a name on one line, without control characters"),
    ("name", '""', "expected a name (results rows and messages show it), got an empty one"),
    ("name", '" mla"', "expected a name without spaces at its start or end"),
    ("kind", '"mla\\t"', "expected a name on one line, without control characters"),
])
def test_a_kernel_name_or_kind_is_one_visible_line(tmp_path, capsys, field, value, words):
    text = (REPO / "graphs" / "kernels_deepseek.yaml").read_text()
    old = "    mla_router:              # the MoE layers' MLA kernel also runs the router GEMM\n      name: mla\n      kind: mla\n"
    assert old in text
    new = old.replace(f"      {field}: mla\n", f"      {field}: {value}\n")
    (tmp_path / "kernels_deepseek.yaml").write_text(text.replace(old, new))
    assert main(["check", str(tmp_path / "kernels_deepseek.yaml")]) == 2
    err = capsys.readouterr().err
    line = 123 if field == "name" else 124
    assert err.count("\n") == 1 and f"kernels_deepseek.yaml:{line}: decode.kernels.mla_router.{field}: {words}" in err, err


def test_the_template_name_is_a_name_too(tmp_path, capsys):
    text = (REPO / "graphs" / "kernels_llama.yaml").read_text()
    assert "\nname: " in text
    lines = [('name: "  "' if line.startswith("name: ") else line) for line in text.splitlines()]
    (tmp_path / "kernels_llama.yaml").write_text("\n".join(lines) + "\n")
    assert main(["check", str(tmp_path / "kernels_llama.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and ": name: expected a name (results rows and messages show it), got '  '" in err, err


@pytest.mark.parametrize("phase, old, new, line", [
    # decode's attention in a prefill kernel: it attends over the cached kv_len tokens only, none of
    # the prompt's own (run raised a ValueError for its zero-wide GEMM; a later chunk would be short)
    ("prefill", "operators: [flash_qk, flash_softmax, flash_pv]", "operators: [gqa_qk, gqa_softmax, gqa_pv]", 39),
    ("decode", "gqa_qk, gqa_softmax,\n                  gqa_pv,", "flash_qk, flash_softmax,\n                  flash_pv,", 65),
])
def test_an_attention_operator_of_the_other_phase_is_refused_by_check_and_run(tmp_path, capsys, phase, old, new, line):
    text = (REPO / "graphs" / "kernels_llama.yaml").read_text()
    assert text.count(old) == 1
    (tmp_path / "kernels_llama.yaml").write_text(text.replace(old, new))
    (tmp_path / "llama.yaml").write_text((REPO / "graphs" / "llama3_1_8b.yaml").read_text())
    experiment = (REPO / "experiments" / "llama8b_node8.yaml").read_text()
    experiment = experiment.replace("../graphs/llama3_1_8b.yaml", "llama.yaml").replace(
        "../hw_configs/", str(REPO / "hw_configs") + "/")
    (tmp_path / "exp.yaml").write_text(experiment)
    for args in (["check", str(tmp_path / "kernels_llama.yaml")],
                 ["run", str(tmp_path / "exp.yaml"), "--out", str(tmp_path / "out"), "--quiet", "--no-plot"]):
        assert main(args) == 2, args
        err = capsys.readouterr().err
        first = "gqa_qk" if phase == "prefill" else "flash_qk"
        assert err.count("\n") == 1, err
        assert f"kernels_llama.yaml:{line}: {phase}.kernels." in err and f"operator {first!r} " in err, err
        assert f"runs only in {'decode' if phase == 'prefill' else 'prefill'}, not in {phase}" in err, err
