"""Rooms a kernel does not fill share what they compute alike: a section given the same units under
two budgets is placed and routed once (:func:`sn40l_sim.mapper.planning.placed_section`), and a call's
windows over that one section plan are replayed once (:mod:`sn40l_sim.mapper.kernel_cost`). The
side-by-side search (:mod:`sn40l_sim.mapper.side_by_side`) maps a step's kernels in rooms a few
units apart, most of which they do not fill. Each mapping through the shared memos equals the
mapping made cold, in its room alone."""
from __future__ import annotations

import pytest
from conftest import deepseek_graph

from sn40l_sim.mapper import kernel_cost, planning
from sn40l_sim.mapper.budget import UnitBudget
from sn40l_sim.mapper.graph import clear_memo
from sn40l_sim.mapper.kernel import map_kernel
from sn40l_sim.mapper.kernel_cost import LoopContext
from sn40l_sim.mapper.keys import UNPLANNED_CALIBRATED, socket_key
from sn40l_sim.mapper.tier_split import TierSplit
from sn40l_sim.mapper.windows import OverlapWindow

#: rooms per tile as the side-by-side search offers a decoder beside the kernels called once
ROOMS = tuple(UnitBudget(pcus_per_tile=pcus, pmus_per_tile=pmus) for pcus, pmus in ((240, 239), (240, 240), (250, 250)))
#: a call waiting mid-stream for a collective its later operators read, its configuration loaded
WINDOWED = LoopContext(resident=True, windows=(OverlapWindow(0.1, 0.2, 5000, (5000, 4000, 3000, 2500, 2200, 2000)),))
TIERS = TierSplit.all_in("hbm")


def _kernel(name: str):
    return next(k for k in deepseek_graph("decode", kv_len=32768, batch=8).kernels() if k.name == name)


def _counted(monkeypatch, module, name: str) -> list[int]:
    calls = [0]
    original = getattr(module, name)

    def counting(*args, **kwargs):
        calls[0] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, counting)
    return calls


@pytest.mark.parametrize("name", ["L00.ffn", "L00.mla"])
def test_rooms_a_kernel_does_not_fill_share_its_placements_and_replays_and_map_as_cold(socket, monkeypatch, name):
    kernel = _kernel(name)
    placed = _counted(monkeypatch, planning, "place_stages")
    replayed = _counted(monkeypatch, kernel_cost, "windowed_section_cycles")
    cold, cold_work = [], 0
    for room in ROOMS:
        clear_memo()
        placed[0] = replayed[0] = 0
        cold.append(map_kernel(socket, kernel, TIERS, budget=room, loop=WINDOWED))
        cold_work += placed[0] + replayed[0]
    clear_memo()
    placed[0] = replayed[0] = 0
    warm = [map_kernel(socket, kernel, TIERS, budget=room, loop=WINDOWED) for room in ROOMS]
    assert warm == cold
    assert len({(pk.pcus_per_tile, pk.pmus_per_tile) for pk in warm}) == 1   # the kernel fills none of them
    # each room alone placed and replayed what the others did again
    assert placed[0] + replayed[0] < cold_work
    clear_memo()


def test_a_section_allocated_alike_under_two_budgets_is_one_placed_section(socket, monkeypatch):
    planned = socket_key(socket, UNPLANNED_CALIBRATED)
    ops = _kernel("L00.ffn").operators
    placed = _counted(monkeypatch, planning, "place_stages")
    planning.clear_section_memo()
    plans = [planning.plan_section(socket, ops, 4096, TIERS, 4, 0, 0, room, planned) for room in ROOMS]
    # 4,096 data tiles on every tile: the section takes 66 PCUs a tile whatever the room
    assert plans[0] is not None and all(plan.alloc == plans[0].alloc for plan in plans)
    assert all(plan is plans[0] for plan in plans)
    assert placed[0] == 1
    stages, streams = planning.section_work(socket, ops, 4096, TIERS, 4, 0, 0, ROOMS[0], planned)
    assert planning.placed_section(socket, stages, streams, plans[0].alloc, 4096, 4) == plans[0]
    planning.clear_section_memo()
