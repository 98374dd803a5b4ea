"""Rooms in which a kernel can only take several sections are not mapped by the side-by-side and
confined searches (sn40l_sim/mapper/confined.py, ``beyond_one_section``): the prediction agrees
with the mapper, and the searches choose what they chose mapping every room."""
from __future__ import annotations

from pathlib import Path

import pytest

from sn40l_sim.commands.cli import main
from sn40l_sim.errors import InfeasibleError
from sn40l_sim.hardware.loader import load_hardware
from sn40l_sim.ir import ParallelPlan, Shape
from sn40l_sim.mapper import confined
from sn40l_sim.mapper.budget import UnitBudget
from sn40l_sim.mapper.graph import clear_memo
from sn40l_sim.mapper.kernel import map_kernel
from sn40l_sim.mapper.sections import split_sections
from sn40l_sim.models.builder import build_graph
from sn40l_sim.models.loader import load_model

ROOT = Path(__file__).resolve().parents[2]
NODE = load_hardware(ROOT / "hw_configs" / "sn40l_node16.yaml")


@pytest.fixture(scope="module")
def graph():
    model = load_model(ROOT / "graphs" / "llama3_1_8b.yaml")
    return build_graph(model, Shape("decode", 1, 1024, 2048), ParallelPlan(16, 1))


@pytest.mark.parametrize("room", [(1, 2, 56), (1, 8, 8), (4, 3, 300), (None, 20, 40), (1, 200, 200)])
def test_a_room_said_to_need_several_sections_maps_to_several_or_none(graph, room):
    chip_tiles, pcus, pmus = room
    budget = UnitBudget(chip_tiles=chip_tiles, pcus_per_tile=pcus, pmus_per_tile=pmus)
    said = []
    for kernel in {k.signature(): k for k in graph.kernels()}.values():
        beyond = confined.beyond_one_section(NODE.socket, kernel, budget)
        try:   # as the cut of the sections says
            cut = len(split_sections(NODE.socket, kernel.operators, chip_tiles or 4, "", budget)) > 1
        except InfeasibleError:
            cut = False
        assert beyond == cut, kernel.name
        try:
            sections = map_kernel(NODE.socket, kernel, budget=budget).sections
        except InfeasibleError:
            sections = None
        if beyond:
            assert sections != 1, kernel.name
        said.append(beyond)
    if room == (1, 200, 200):
        assert not any(said)   # a roomy tile: every kernel of one section is mapped as before
    if room == (1, 2, 56):
        assert any(said)       # two PCUs: the multi-operator kernels are predicted, not mapped


def _map_text(capsys) -> str:
    """``map``'s output for DeepSeek-R1's SnapStream decode at batch 64, where two rooms of the
    side-by-side search give the MLA several sections, less the line timing the mapping."""
    clear_memo()
    assert main(["map", str(ROOT / "experiments" / "deepseek_tp16.yaml"), "--phase", "decode",
                 "--batch", "64", "--policy", "snapstream"]) == 0
    return "\n".join(line for line in capsys.readouterr().out.splitlines() if "mapped in" not in line)


def test_the_search_chooses_alike_with_and_without_the_shortcut(capsys, monkeypatch):
    real, said = confined.beyond_one_section, []

    def recorded(socket, kernel, budget, fewest=None):
        said.append(real(socket, kernel, budget, fewest))
        return said[-1]

    monkeypatch.setattr(confined, "beyond_one_section", recorded)
    fast = _map_text(capsys)
    assert any(said)   # some room was skipped, so the comparison below compares something
    monkeypatch.setattr(confined, "beyond_one_section", lambda socket, kernel, budget, fewest=None: False)
    assert _map_text(capsys) == fast
    clear_memo()
