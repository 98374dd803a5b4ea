"""``describe`` of a reference file gives each measurement's tolerance as the file states it and,
for a ratio of two records, both points."""
from __future__ import annotations

from pathlib import Path

from sn40l_sim.commands.describe import describe_reference

REPO = Path(__file__).resolve().parents[2]


def test_a_small_relative_tolerance_and_a_ratios_two_points_are_shown(tmp_path):
    # a 0.5% band was shown as '+-0%' and 2.5% as '+-2%'; a ratio showed its first point alone
    experiment = REPO / "experiments" / "llama8b_node8.yaml"
    mine = tmp_path / "mine.yaml"
    mine.write_text("kind: reference\nmeasurements:\n"
                    f"  - {{id: step, quantity: decode_step_s, value: 0.02, tolerance: {{rel: 0.005}}, source: s, "
                    f"experiment: {experiment}, point: full, calibration: false}}\n"
                    f"  - {{id: ratio, quantity: decode_step_s, value: 1.1, tolerance: {{rel: 0.025}}, source: s, "
                    f"experiment: {experiment}, point: full, relative_to: snapstream, calibration: false}}\n")
    rows = {line.split()[0]: line.split() for line in describe_reference(mine).splitlines()[3:]}
    assert rows["step"][3:6] == ["+-0.5%", "llama8b_node8.yaml:", "full"]
    assert rows["ratio"][4:8] == ["+-2.5%", "llama8b_node8.yaml:", "full", "over"] and rows["ratio"][8] == "snapstream"
