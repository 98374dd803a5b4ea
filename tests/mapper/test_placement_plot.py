"""``map --plot``'s stage colours: a stage drawn in grey read as the grey of unused cells."""
from __future__ import annotations

from matplotlib.colors import to_rgb

from sn40l_sim.mapper.plot import _UNUSED, _palette


def test_no_stage_is_drawn_in_a_grey_that_reads_as_unused():
    unused = to_rgb(_UNUSED)
    for colour in _palette(40):
        r, g, b = colour[:3]
        assert max(r, g, b) - min(r, g, b) > 0.05, colour   # not a grey
        assert sum(abs(a - u) for a, u in zip(colour[:3], unused, strict=True)) > 0.2, colour


def test_the_first_stages_get_distinct_colours():
    colours = _palette(30)
    assert len(set(colours)) == 30
