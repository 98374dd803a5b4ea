"""A kernel's unit budget refuses counts no kernel can have (sn40l_sim/mapper/budget.py), and a
PMU's read and write streams are capped by its own read and write ports (sn40l_sim/mapper/pmus.py)."""
from __future__ import annotations

import pytest

from sn40l_sim.hardware.loader import load_hardware
from sn40l_sim.mapper.budget import UnitBudget
from sn40l_sim.mapper.pmus import PmuRates


@pytest.mark.parametrize("field", ["chip_tiles", "pcus_per_tile", "pmus_per_tile", "n_tiles"])
def test_a_budget_of_no_units_is_refused_and_of_one_accepted(field):
    with pytest.raises(ValueError, match=f"{field} must be >= 1, got 0"):
        UnitBudget(**{field: 0})
    UnitBudget(**{field: 1})


@pytest.mark.parametrize("field", ["stage_pcus", "stage_pmus"])
def test_a_stage_may_have_no_units_but_not_fewer(field):
    UnitBudget(**{field: (("scores", 0),)})
    with pytest.raises(ValueError, match="'scores': unit count must be >= 0, got -1"):
        UnitBudget(**{field: (("scores", -1),)})


def test_a_budget_may_use_every_tile_but_not_one_more():
    assert UnitBudget(chip_tiles=4).tiles_for(4) == (4,)
    with pytest.raises(ValueError, match="chip_tiles 5 exceeds the socket's 4 tiles"):
        UnitBudget(chip_tiles=5).tiles_for(4)


def test_a_pmus_read_and_write_streams_take_their_own_ports():
    # a row of 32 banks x 4 B per port per cycle: two read ports move 256 B, one write port 128 B,
    # under a mesh link wider than both
    pmu = load_hardware("hw_configs/sn40l.yaml").socket.pmu.model_copy(update={"read_ports": 2, "write_ports": 1})
    rates = PmuRates(pmu, link=1024)
    assert (rates.read_cap, rates.write_cap) == (256, 128)
    assert (PmuRates(pmu, link=64).read_cap, PmuRates(pmu, link=64).write_cap) == (64, 64)
