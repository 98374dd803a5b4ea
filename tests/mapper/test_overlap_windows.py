"""The mapper's arithmetic of an overlapped collective's window (sn40l_sim/mapper/windows.py): the
share of its last tile it charges, and which windows close before the stream ends."""
from __future__ import annotations

import pytest

from sn40l_sim.mapper.windows import OverlapWindow, interior_window

#: tails[j]: the share of 2**j data tiles (bytes / 2**j), fewer cycles the more tiles
WINDOW = OverlapWindow(0.0, 1.0, 1000, (400, 300, 200, 100))


@pytest.mark.parametrize("tiles,tail", [(1, 400), (2, 300), (3, 200), (4, 200), (5, 100), (8, 100), (64, 100)])
def test_a_windows_share_is_that_of_the_next_power_of_two_of_tiles(tiles, tail):
    # a window given its table alone, not its collective's cost (overlap_windows gives that: the
    # share of its own tiles, tests/mapper/test_window_share.py): at most what the engine charges
    # (bytes / tiles), 3 tiles take the share of 4, never of 2
    assert WINDOW.tail_cycles(tiles) == tail


@pytest.mark.parametrize("end,interior", [(0.5, True), (0.875, True), (1.0, False)])
def test_a_window_ending_one_tile_before_the_stream_is_interior(end, interior):
    # of 8 tiles, a window to 7/8 closes after tile 7 of 8: the stream's last tile waits for it
    assert interior_window([OverlapWindow(0.0, end, 1000, (100,))], 8) is interior
