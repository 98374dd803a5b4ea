"""An axis's ``labels:`` name its values in every point name, results row and legend: each is a
plain name of at most 100 characters, refused at its own index (a 5,000-character label was accepted
and filled them all; a bad one was refused at ``labels`` without saying which)."""
from __future__ import annotations

from pathlib import Path

import pytest

from sn40l_sim.commands.cli import main

REPO = Path(__file__).resolve().parents[2]


def _with_label(tmp_path: Path, label: str) -> Path:
    text = (REPO / "experiments" / "per_user_speed.yaml").read_text().replace("../", f"{REPO}/")
    old = "labels: [deepseek_r1,"
    assert old in text
    path = tmp_path / "labels.yaml"
    path.write_text(text.replace(old, f"labels: [{label},"))
    return path


@pytest.mark.parametrize("label, words", [
    ("x" * 5000, "got 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...' (5,000 characters)"),
    ("x" * 101, "at most 100 characters"),
    ('"a b"', "got 'a b'"),
    ('""', "got ''"),
    ("7", "got 7"),
])
def test_a_bad_label_is_refused_at_its_index(tmp_path, capsys, label, words):
    assert main(["check", str(_with_label(tmp_path, label))]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and len(err) < 600, err[:300]
    assert "sweep.axes.model.labels[0]: expected a plain name (letters, digits, '.', '-', '_'; at most 100 " \
           "characters)" in err and words in err, err


def test_a_label_of_100_characters_is_taken(tmp_path, capsys):
    assert main(["check", str(_with_label(tmp_path, "x" * 100))]) == 0
