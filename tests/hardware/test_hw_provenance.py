"""Every number of the shipped hardware files carries its provenance (docs/design.md §4)."""
from __future__ import annotations

import math
import re

import pytest
from hw_test_helpers import HW

from sn40l_sim.hardware.loader import load_hardware
from sn40l_sim.hardware.spec import calibrated_parameters
from sn40l_sim.study.calibration import fitted_names, fixed_parameters

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


def _value_lines(text: str) -> dict[str, str]:
    """``dotted.path -> line`` of every ``key: value`` line, the path built from the indentation."""
    out: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    for line in text.splitlines():
        match = FIELD.match(line)
        if not match:
            continue
        indent = len(line) - len(line.lstrip())
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = ".".join([key for _, key in stack] + [match.group(1)])
        if match.group(2) is None:
            stack.append((indent, match.group(1)))
        else:
            out[path] = line
    return out


def test_at_most_eight_calibrated_parameters_each_bounded_and_saying_what_it_was_fitted_to():
    # the project's budget for fitted parameters (docs/validation.md, "Calibrated parameters"): at
    # most eight, each a physical quantity with finite schema bounds, and each line of the shipped
    # socket says what it was fitted to (the calibration points of experiments/reference/), or, for
    # one the fit holds fixed, that it is a placeholder
    socket = load_hardware(HW / "sn40l.yaml").socket
    params = calibrated_parameters(socket)
    assert 1 <= len(params) <= 8, list(params)
    lines = _value_lines((HW / "sn40l.yaml").read_text())
    fixed = fixed_parameters(socket)
    for path, param in params.items():
        assert math.isfinite(param.low) and math.isfinite(param.high) and param.low <= param.value <= param.high, path
        comment = lines[path].split("#", 1)[1]
        if path in fixed:
            assert re.search(r"\bassumed\b.*placeholder", comment), (path, comment)
        else:
            assert "calibrated: fitted by `python -m sn40l_sim calibrate`" in comment, (path, comment)
            assert "experiments/reference/" in comment and "docs/validation.md" in comment, (path, comment)
    assert [p for p in params if p not in fixed] == fitted_names(socket)
