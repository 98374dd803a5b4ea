"""docs/notebooks.md's section on the Python entry points: its code block runs as written and gives
the figures the text quotes, so a Python user following it meets no stale name."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "notebooks.md"


def _section() -> str:
    text = PAGE.read_text(encoding="utf-8")
    start = text.index("## From Python: the entry points")
    return text[start:text.index("\n## ", start + 1)]


def test_the_entry_points_the_section_names_import():
    import importlib
    names = re.findall(r"`(sn40l_sim(?:\.\w+)+)\(", _section())
    assert len(names) >= 7
    for dotted in names:
        module, _, name = dotted.rpartition(".")
        assert hasattr(importlib.import_module(module), name), dotted


def test_the_code_block_runs_and_gives_the_quoted_figures(monkeypatch, capsys):
    monkeypatch.chdir(REPO)   # the block's paths are relative to the repository, as the commands'
    section = _section()
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    names: dict = {}
    exec(compile(code, str(PAGE), "exec"), names)
    quoted = " ".join(section.split("```")[-1].split())
    assert f"a {names['step'].seconds * 1e3:.2f} ms step" in quoted
    assert max(names["by_cause"], key=names["by_cause"].get) == "kv_reads"
    assert f"a {names['prefill'].seconds:.3f} s prefill" in quoted
    assert f"SnapStream's {names['gain']:.2f}x" in quoted
    assert names["records"]["full"]["decode_step_s"] == pytest.approx(names["step"].seconds, rel=0)
    printed = capsys.readouterr().out.strip()
    assert printed.startswith("<overrides>: socket.memory.hbm.bandwith: unknown key (expected one of bytes_per_s_per_unit")
