"""Every number of the shipped hardware files carries its provenance (docs/design.md §4)."""
from __future__ import annotations

import re

import pytest
from hw_test_helpers import HW

TAG = re.compile(r"\b(stated|inferred|assumed|calibrated)\b")
#: ``key: value  # comment`` of a YAML line (a value that is not a nested mapping)
FIELD = re.compile(r"^\s*([A-Za-z_0-9]+):\s*([^#\s][^#]*?)?\s*(#.*)?$")
#: fields that name things rather than state a figure
NAMES = {"kind", "name", "base", "socket"}


def _untagged(text: str) -> list[str]:
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        match = FIELD.match(line)
        if not match or match.group(2) is None or match.group(1) in NAMES:
            continue
        comment = match.group(3) or ""
        if not TAG.search(comment):
            out.append(f"{number}: {line.strip()}")
        elif re.search(r"\bcalibrated\b", comment) and "docs/validation.md" not in comment:
            out.append(f"{number}: calibrated without docs/validation.md: {line.strip()}")
    return out


@pytest.mark.parametrize("name", sorted(p.name for p in HW.glob("*.yaml")))
def test_every_value_line_names_its_provenance(name):
    assert _untagged((HW / name).read_text()) == []


def test_the_scan_finds_an_untagged_and_a_sourceless_calibrated_value():
    text = "kind: socket\nclock_hz: 1.6 GHz   # a guess\ntile:\n  pcus: 260  # inferred: 1040 / 4\n" \
           "  x: 0.5  # calibrated: fitted\n"
    assert _untagged(text) == ["2: clock_hz: 1.6 GHz   # a guess",
                               "5: calibrated without docs/validation.md: x: 0.5  # calibrated: fitted"]
