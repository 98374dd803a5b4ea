"""How a stage's items divide over its PCUs (sn40l_sim/mapper/division.py): the busiest PCU's items,
and the PCUs past which none gets an item of its own."""
from __future__ import annotations

import pytest

from sn40l_sim.mapper.division import sequence, useful_pcus


def test_a_whole_number_of_items_is_not_rounded_up_by_float_error():
    # 2.2 pieces of 25 items a data tile are 55 items: 2.2 * 25 is 55.00000000000001 in floats,
    # which a bare ceiling would make 56
    assert sequence(25, 2.2, 1) == (55, 1.0)
    assert sequence(25, 2.2, 5) == (11, 1.0)


@pytest.mark.parametrize("items,pieces,useful", [(3, 1.0, 3), (3, 2.0, 6), (4, 0.5, 4), (1, 1.0, 1), (25, 2.2, 55)])
def test_every_item_of_a_data_tile_may_have_a_pcu_of_its_own(items, pieces, useful):
    # max(1, pieces) x items items arrive per data tile (a piece every 1 / pieces tiles has all of
    # its items at once): that many PCUs each run one, and more get none
    assert useful_pcus(items, pieces) == useful
