"""``run --jobs N`` sets the worker processes of a sweep; an experiment without a ``sweep:``
section runs its points in the one process, and says that the option went unused rather than
leaving the user to think the points ran in parallel."""
from __future__ import annotations

import json
from pathlib import Path

from sn40l_sim.commands.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_jobs_without_a_sweep_is_said_to_be_ignored_and_changes_nothing(tmp_path, capsys):
    experiment = str(ROOT / "experiments" / "llama8b_node8.yaml")
    assert main(["run", experiment, "--out", str(tmp_path / "jobs"), "--quiet", "--no-plot", "--jobs", "2"]) == 0
    err = capsys.readouterr().err
    assert "note: --jobs is ignored: the experiment has no sweep: section" in err
    assert main(["run", experiment, "--out", str(tmp_path / "plain"), "--quiet", "--no-plot"]) == 0
    assert "--jobs" not in capsys.readouterr().err
    # the points' records (wall-clock figures live in status.json, not here)
    jobs, plain = (json.loads((tmp_path / name / "results.json").read_text()) for name in ("jobs", "plain"))
    assert len(jobs) == 2 and jobs == plain
