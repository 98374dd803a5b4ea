"""``map`` says which version of a prefill attention kernel it kept: a prompt short of whole
FlashAttention tiles is mapped with its edge tiles exact and padded (sn40l_sim/models/flash.py), and
the row of the padded version is marked, with a line saying what it saved over the exact one."""
from __future__ import annotations

from dataclasses import replace

import pytest
from conftest import ROOT

from sn40l_sim.commands.cli import main
from sn40l_sim.frozen import copied
from sn40l_sim.mapper.summary import PADDED_MARK

#: Llama-3.1-8B on 8 sockets; its flash tiles are 8,192 query rows (graphs/kernels_llama.yaml)
BASE = ROOT / "experiments" / "llama8b_node8.yaml"


def _experiment(tmp_path, prompt: int) -> str:
    path = tmp_path / f"llama8b_{prompt}.yaml"
    # a graph compiled for the prompt's own length (map maps the compiled prefill graph run runs;
    # the default lengths are powers of two, whole tiles)
    path.write_text(f"base: {BASE}\nshape: {{prompt_len: {prompt}}}\nserving: {{prefill_lens: [{prompt}]}}\n")
    return str(path)


def _map(capsys, path: str) -> str:
    assert main(["map", path, "--phase", "prefill"]) == 0
    return capsys.readouterr().out


def _table(out: str) -> tuple[str, list[str]]:
    lines = out.splitlines()
    rules = [i for i, line in enumerate(lines) if line and set(line) == {"-"}]
    return lines[rules[0] - 1], lines[rules[0] + 1:rules[1]]


def _exact_attention_cycles(path: str) -> int:
    """The attention kernel's cycles a call when the mapper is offered only its exact edge tiles."""
    from sn40l_sim.study.experiment import load_experiment
    from sn40l_sim.study.mapping import build_phase, map_phase

    built = build_phase(load_experiment(path), "prefill", None, None)
    graph = built.graph
    for name in list(graph.nodes):
        node = graph.nodes[name]
        node["kernel"] = copied(node["kernel"], padded=None)
    placed = map_phase(replace(built, graph=graph))
    return next(pk.call_cycles for pk in placed.kernels if pk.kernel.kind == "attention")


def test_a_prompt_one_short_of_whole_tiles_marks_the_padded_attention(capsys, tmp_path):
    path = _experiment(tmp_path, 16383)
    out = _map(capsys, path)
    head, rows = _table(out)
    marked = [row for row in rows if PADDED_MARK in row]
    assert len(marked) == 1 and marked[0].split()[0] == "*.attention" + PADDED_MARK
    # the marker does not shift the columns: every row ends where the header does, cycles under cycles
    assert all(len(row) == len(head) for row in rows)
    cycles_end = head.index("cycles") + len("cycles")
    padded_cycles = int(marked[0][:cycles_end].split()[-1])
    note = next(line for line in out.splitlines() if line.startswith("*.attention" + PADDED_MARK + ":"))
    saved = int(note.split("by ")[-1].split(" cycles")[0].replace(",", ""))
    assert "padded to whole 8,192-token tiles" in note
    # what it says it saved is what the exact edge tiles cost more, mapped on their own
    assert saved > 0 and saved == _exact_attention_cycles(path) - padded_cycles


@pytest.mark.parametrize("prompt", [16384, 32256])
def test_no_mark_for_whole_tiles_or_when_the_exact_edge_tiles_are_faster(capsys, tmp_path, prompt):
    # 16,384: whole tiles, nothing to pad; 32,256: its edge tiles as they are beat the padded version
    out = _map(capsys, _experiment(tmp_path, prompt))
    _, rows = _table(out)
    assert any(row.split()[0] == "*.attention" for row in rows)
    assert PADDED_MARK not in out and "edge tiles padded" not in out
