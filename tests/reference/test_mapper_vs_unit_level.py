"""The mapper against the unit-level simulation, on the same small kernels and the same units.

Every kernel the unit level runs (tests/reference/unit_level_cases.py, variants included) is
mapped through :func:`sn40l_sim.mapper.map_kernel` with :func:`unit_level_kernels.budget_for`: one
tile, the PCUs and PMUs of the unit-level layout, its weight-stationary dataflow and, for
attention, its query tiles as data tiles. The call overhead is left out (the unit level has
none), and the mapper maps on a socket whose configuration loads at the schema's fastest rate:
with the fitted rate it would rightly trade cycles for a smaller configuration (finer data tiles
need fewer PMUs), a choice the unit level, which loads nothing, cannot judge. The two agree within
10% on every case; the table and the worst case are printed by the first test (``pytest -s``).

The slow-hops variant's kernels are run with their operands 1 hop from their PCUs here: the mapper
places a stage's PMUs next to its PCUs, so a layout with operands 3 hops away is not one it makes.
"""
from __future__ import annotations

from dataclasses import replace
from functools import cache

import pytest
from unit_level_cases import ATTENTIONS, GATHERS, GEMMS, SOCKET, VARIANTS, simulated, socket_named
from unit_level_kernels import as_fused, budget_for

from sn40l_sim.mapper import map_kernel
from sn40l_sim.study.calibration import bounds

TOLERANCE = 0.10
#: the upper bound the schema allows the configuration-load rate (sn40l_sim/hardware/spec.py)
FASTEST_CONFIG_LOAD = bounds(SOCKET, "calibrated.config_load_bytes_per_s")[1]

CASES = [("base", k) for k in GEMMS + ATTENTIONS + GATHERS] + [
    (name, k if k.hops == 1 else replace(k, hops=1)) for name, _, kernels in VARIANTS for k in kernels]


def mapped_cycles(kernel, socket_name: str) -> int:
    """The mapper's cycles for ``kernel`` on the unit-level layout's units, call overhead excluded."""
    socket = socket_named(socket_name)
    free = socket.calibrated.model_copy(update={"config_load_bytes_per_s": FASTEST_CONFIG_LOAD})
    pk = map_kernel(socket.model_copy(update={"calibrated": free}), as_fused(kernel), budget=budget_for(kernel))
    return pk.cycles - pk.overhead_cycles


@cache
def agreement(index: int) -> tuple[str, object, int, int, float]:
    """``(socket, kernel, unit-level cycles, mapper cycles, relative error)`` of ``CASES[index]``,
    computed once per process (case by case, so that a pytest-xdist worker given some of the cases
    simulates only those)."""
    name, kernel = CASES[index]
    unit = simulated(kernel, name).cycles
    mapper = mapped_cycles(kernel, name)
    return name, kernel, unit, mapper, (mapper - unit) / unit


def test_the_table_names_the_worst_case(capsys):
    # first in the module: the cases below are then the ones it computed, unless another worker takes
    # them; `pytest -s` shows the table (the agreement over every case, and the worst)
    rows = [agreement(i) for i in range(len(CASES))]
    print("\nsocket            kernel                                                   unit  mapper   error")
    for name, kernel, unit, mapper, error in rows:
        print(f"{name:<17} {str(kernel)[:55]:<55} {unit:>6} {mapper:>7} {error:>+7.1%}")
    name, kernel, unit, mapper, error = max(rows, key=lambda row: abs(row[4]))
    print(f"worst: {name} {kernel}: mapper {mapper} vs unit level {unit} ({error:+.1%})")
    out = capsys.readouterr().out
    with capsys.disabled():
        print(out, end="")
    assert out.count("\n") == len(CASES) + 3
    worst = out.splitlines()[-1]
    assert worst.startswith(f"worst: {name} ") and all(abs(row[4]) <= abs(error) for row in rows)
    assert abs(error) <= TOLERANCE


@pytest.mark.parametrize("index", range(len(CASES)), ids=[f"{n}-{k}" for n, k in CASES])
def test_mapper_within_10_percent_of_the_unit_level(index):
    name, kernel, unit, mapper, error = agreement(index)
    assert abs(error) <= TOLERANCE, f"{name} {kernel}: mapper {mapper} vs unit level {unit} cycles ({error:+.1%})"
