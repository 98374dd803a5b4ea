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
