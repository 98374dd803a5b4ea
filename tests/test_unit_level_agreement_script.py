"""``scripts/unit_level_agreement.py``: its draw is reproducible and stays in the unit level's
range, it names the layouts the mapper does not make, and a short run prints its table and exits 0
(the random hunt itself is run by hand: ``python scripts/unit_level_agreement.py --cases 100``)."""
from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
import unit_level_agreement as ula  # noqa: E402

from sn40l_sim.hardware.units.tile_kernels import AttentionKernel, GatherKernel, GemmKernel  # noqa: E402


def test_the_draw_is_reproducible_and_every_kernel_is_one_the_unit_level_runs():
    first = [(ula.draw_kernel(r), ula.draw_changes(r)) for r in [random.Random(7)] for _ in range(50)]
    again = [(ula.draw_kernel(r), ula.draw_changes(r)) for r in [random.Random(7)] for _ in range(50)]
    assert first == again
    for kernel, changes in first:
        assert len(changes) <= 3 and set(changes) <= {field for field, _ in ula.FIELDS}
        if isinstance(kernel, GemmKernel):
            assert (-(-kernel.n // 32)) % kernel.pcus == 0 and max(kernel.m, kernel.k, kernel.n) <= 128
        elif isinstance(kernel, AttentionKernel):
            assert kernel.q_len % kernel.q_tile == 0 and kernel.q_len <= 64
        else:
            assert kernel.table_rows * kernel.row_elems * 2 <= 512 * 1024


def test_layouts_the_mapper_does_not_make_are_named():
    assert ula.layout_mapper_skips(AttentionKernel(32, 64, 16, 4), {}) == "rows"
    assert ula.layout_mapper_skips(AttentionKernel(4, 64, 16, 4), {}) == ""
    assert ula.layout_mapper_skips(AttentionKernel(24, 16, 32, 8), {}) == "tiles"
    assert ula.layout_mapper_skips(AttentionKernel(32, 64, 16, 8), {}) == ""
    assert ula.layout_mapper_skips(GemmKernel(8, 64, 64, 2), {"pmu__addresses_per_cycle": 1}) == "addresses"
    assert ula.layout_mapper_skips(GatherKernel(256, 8, 64), {"pmu__addresses_per_cycle": 1}) == ""
    assert ula.layout_mapper_skips(GemmKernel(8, 64, 64, 2), {"pmu__banks": 16}) == ""


def test_a_short_run_prints_its_table_and_agrees(capsys):
    assert ula.main(["--cases", "2", "--seed", "5"]) == 0
    out = capsys.readouterr().out
    assert "GatherKernel(table_rows=3273" in out and "GemmKernel(m=29, k=96, n=121" in out
    assert "mapper vs unit level, layouts it makes: median" in out and "beyond tolerance" not in out


def test_no_cases_is_refused_with_exit_status_2(capsys):
    with pytest.raises(SystemExit) as stop:
        ula.main(["--cases", "0"])
    assert stop.value.code == 2
    assert "--cases: expected a positive number of cases, got 0" in capsys.readouterr().err
