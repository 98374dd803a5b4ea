"""Quantities in YAML: the spellings of a unit that look alike are read alike."""
from __future__ import annotations

import pytest

from sn40l_sim.quantities import parse_quantity


@pytest.mark.parametrize("text", ["3 us", "3us", "3 \u00b5s", "3 \u03bcs", "3\u03bcs"])
def test_microseconds_in_every_spelling(text):
    # U+00B5 (micro sign) and U+03BC (Greek mu) print the same; a keyboard gives either, and the
    # Greek one was "expected a time quantity such as '150 ns'" with nothing visibly wrong
    assert parse_quantity(text, "time") == pytest.approx(3e-6, rel=1e-15)


def test_numpy_numbers_are_the_numbers_they_are():
    # a notebook's override from a numpy array: np.float32(0.8) was "expected a number"
    np = pytest.importorskip("numpy")
    assert parse_quantity(np.float32(2.5), "bytes") == 2.5 and type(parse_quantity(np.int64(3), "time")) is float
