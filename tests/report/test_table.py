"""The side-by-side table ``run`` prints: a non-zero value is never shown as zero."""
from __future__ import annotations

import pytest

from sn40l_sim.report.table import side_by_side
from sn40l_sim.report.table_rows import Row


def _cell(table: str, label: str) -> str:
    return next(line.split()[-1] for line in table.splitlines() if line.startswith(label))


def test_a_tiny_rate_is_not_printed_as_zero():
    table = side_by_side([{"name": "slow", "throughput": {"requests": 1, "requests_per_s": 1e-6}}])
    cell = _cell(table, "served requests/s")
    assert float(cell) == pytest.approx(1e-6, rel=0.05)


@pytest.mark.parametrize(("fmt", "scale", "value"), [(".4f", 1.0, 3.2e-7), (".1f", 100, 2e-5), (".2f", 1e3, -4e-8),
                                                     (".0f", 1.0, 0.2)])
def test_a_small_non_zero_value_keeps_its_size(fmt, scale, value):
    cell = Row(0, "x", fmt, scale).cell(value)
    assert float(cell) == pytest.approx(value * scale, rel=0.05)


@pytest.mark.parametrize(("fmt", "scale", "value", "shown"), [(".4f", 1.0, 0.0, "0.0000"), (".4f", 1.0, 0.25, "0.2500"),
                                                              (".1f", 1.0, 181.84, "181.8"), (".2f", 1e3, 0.0875, "87.50"),
                                                              ("", 1.0, 16, "16")])
def test_ordinary_values_print_as_their_format_says(fmt, scale, value, shown):
    assert Row(0, "x", fmt, scale).cell(value) == shown

