"""``scripts/table5_row1.py``: Table 5 row 1's two decode steps split by kernel role and cause. The
split is the step's own breakdown regrouped (two readings of the same critical path agree), and the
difference table is the second point less the first."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from sn40l_sim.study.evaluation import LoadedExperiments

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
import table5_row1 as script  # noqa: E402


@pytest.fixture(scope="module")
def parts():
    return script.step_parts()


def test_each_points_groups_add_up_to_its_step_and_to_its_records_breakdown(parts):
    records = {r["name"]: r for r in LoadedExperiments().records(script.MAIN, serve=False, reads_prefill=())}
    assert parts.keys() == records.keys() == {"full", "snapstream"}
    for name, (step_ms, groups) in parts.items():
        assert step_ms == pytest.approx(records[name]["decode_step_s"] * 1e3, rel=1e-9)
        assert sum(sum(row.values()) for row in groups.values()) == pytest.approx(step_ms, rel=1e-9)
        for cause, seconds in records[name]["decode_step_breakdown_s"].items():
            assert sum(row[cause] for row in groups.values()) == pytest.approx(seconds * 1e3, abs=1e-6)
        # DeepSeek-R1's 3 dense and 58 MoE layers, each an MLA and an FFN kernel, and the MTP module's
        assert {"dense.mla", "dense.ffn", "moe.mla", "moe.ffn", "mtp.mla", "lm_head"} <= groups.keys()


def test_the_difference_is_the_second_point_less_the_first_and_keeps_a_group_only_one_has():
    a = {"x": dict.fromkeys(script.CATEGORIES, 1.0)}
    b = {"x": dict.fromkeys(script.CATEGORIES, 3.0), "y": dict.fromkeys(script.CATEGORIES, 0.5)}
    diff = script.difference(a, b)
    assert all(v == 2.0 for v in diff["x"].values()) and all(v == 0.5 for v in diff["y"].values())
    lines = script.table(diff)
    assert lines[-1].split()[0] == "total" and float(lines[-1].split()[-1]) == pytest.approx(11 * 2.5)
