"""The Python code blocks of the docs run as written and give the figures the text quotes, so a
Python user following them meets no stale name: docs/notebooks.md's section on the Python entry
points, and docs/validation.md's record of the output projection's prefill call, part by part."""
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


def test_validation_output_projection_block_gives_its_table(monkeypatch, capsys):
    """docs/validation.md, "The output projection's call, part by part": the snippet prints the
    engine's record of layer 3's output projection, and the table under it quotes that record."""
    monkeypatch.chdir(REPO)
    text = (REPO / "docs" / "validation.md").read_text(encoding="utf-8")
    start = text.index("#### The output projection's call, part by part")
    section = text[start:text.index("\n#", start + 1)]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    names: dict = {}
    exec(compile(code, "docs/validation.md", "exec"), names)
    assert capsys.readouterr().out.count("\n") == 1 + len(names["r"].collectives)   # what it prints
    r, (c,) = names["r"], names["r"].collectives
    mhz = names["asm"].node.socket.clock_hz / 1e6
    quoted = " ".join(section.split())

    def us(cycles: int) -> str:
        return f"{cycles / mhz:,.1f}"

    total = r.end - r.start
    assert f"takes {total:,} cycles ({us(total)} µs" in quoted
    assert f"| launch + barrier | {us(r.launch_cycles)} + {us(r.barrier_cycles)} |" in quoted
    assert f"| configuration load | {us(r.config_cycles)} |" in quoted
    assert f"| pipeline fill | {us(r.fill_cycles)} |" in quoted
    assert f"({c.ready - r.stream_start} cycles into the stream) | {us(c.end - c.start)} |" in quoted
    assert f"| of which under the GEMM's stream | {us(r.stream_end - r.stream_start)} |" in quoted
    assert f"| of which after it (exposed) | {us(r.end - r.stream_end)} |" in quoted
    assert f"{c.staged_bytes / 1e9:.2f} GB, {c.staged_bytes / 15 / 1e6:.1f} MB on each of its 15 links" in quoted
    assert f"The streams move {r.tier_bytes['hbm'] / 1e9:.2f} GB of HBM traffic" in quoted


def test_architecture_python_guide_runs_and_gives_its_figures(monkeypatch):
    """docs/architecture.md, "Using sn40l_sim from Python": the block runs as written, and every
    figure the text under it quotes is the block's own."""
    monkeypatch.chdir(REPO)
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    start = text.index("## Using sn40l_sim from Python")
    section = text[start:text.index("\n## ", start + 1)]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    n: dict = {}
    exec(compile(code, "docs/architecture.md", "exec"), n)
    quoted = " ".join(section.split("```")[-1].split())
    kernels, layer, placed, phase = n["kernels"], n["layer"], n["placed"], n["phase"]
    clock_hz = phase.node.socket.clock_hz
    assert f"The graph has {len(kernels)} kernels" in quoted
    assert [k.name for k in kernels[:2]] + [k.name for k in kernels[-2:]] == \
        ["embedding", "L00.decoder", "lm_head", "sampling"] and len(kernels) == 3 + n["llama"].layers
    ops = [op.name for op in layer.operators]
    assert f"fuses {len(ops)} operators, from `{ops[0]}` to `{ops[-1]}`" in quoted
    tiles = [p for p in placed.pcus_per_tile if p]
    assert f"takes {placed.cycles:,} cycles ({placed.cycles / clock_hz * 1e6:.1f} µs at {clock_hz / 1e9:g} GHz), " \
           f"bound by {placed.bounding_resource.upper()}, on {len(tiles)} tiles of {tiles[0]} PCUs and " \
           f"{placed.pmus_per_tile[0]} PMUs each" in quoted
    assert len(set(tiles)) == 1 and set(placed.pmus_per_tile[:len(tiles)]) == {placed.pmus_per_tile[0]}
    kv, usable = n["kv"], phase.memory.capacity["hbm"]
    assert f"hold {kv:,} bytes of KV a socket ({kv / 2**30:.1f} GiB)" in quoted
    assert f"the {usable / 2**30:.0f} GiB of HBM left after the reserve" in quoted
    assert kv == phase.memory.by_tier["hbm"]["kv"] and kv + phase.memory.total("weights") <= usable < 2 * kv
    base, fast = n["base"], n["fast"]
    assert base[0]["max_batch"] == 64 and f"`run`'s `max_batch` is {base[0]['max_batch']}" in quoted
    assert f"add up to {n['floor_s'] * 1e3:.2f} ms" in quoted and n["floor_s"] <= base[0]["decode_step_s"]
    assert f"the {base[0]['decode_step_s'] * 1e3:.2f} ms step" in quoted
    ratio = fast[0]["decode_step_s"] / base[0]["decode_step_s"]
    assert f"the step is {fast[0]['decode_step_s'] * 1e3:.2f} ms, {ratio:.3f} of the base" in quoted
    assert f"{ratio:.4g}" in n["tables"][0] and n["only_base"] == n["only_fast"] == []
