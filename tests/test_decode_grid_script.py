"""``scripts/decode_grid.py``: a bad ``--batches`` or ``--kv`` is refused in one line with exit
status 2, and ``--loop-scores`` reports the looped decoder's score beside the engine's mean iteration
(docs/validation.md, "Faster links or HBM, a slower step": within -0.03% and +0.91% over its grid)."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
import decode_grid as script  # noqa: E402


@pytest.mark.parametrize("argv,field", [(["--batches", "1,x"], "--batches"), (["--batches", "16,0"], "--batches"),
                                        (["--kv", "-128"], "--kv")])
def test_a_bad_number_exits_2_in_one_line(capsys, argv, field):
    with pytest.raises(SystemExit) as stop:
        script.main(argv + ["--models", "8b"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {field}: expected" in err and "Traceback" not in err


def test_the_loop_score_is_the_engines_mean_iteration_within_one_percent():
    line = script.loop_scores("8b", 8, 1, 16, 128)
    found = re.fullmatch(r"loop score (\d+) / engine mean (\d+) cycles \(([+-][\d.]+)%\)", line)
    assert found, line
    score, mean, percent = int(found[1]), int(found[2]), float(found[3])
    assert abs(score - mean) <= 0.01 * mean
    assert percent == pytest.approx((score - mean) / mean * 100, abs=0.01)


def test_a_node_the_weights_do_not_fit_is_said_not_timed(monkeypatch, capsys):
    # Llama-3.1-405B on 8 sockets: run refuses it whatever the batch, so its steps are no points
    timed = []
    monkeypatch.setattr(script, "point_ms", lambda name, sockets, *rest: timed.append(sockets) or (1.0, 0.5))
    assert script.main(["--models", "405b", "--batches", "1", "--kv", "128"]) == 0
    assert set(timed) == {16}
    assert "405b 8 sockets: does not run" in capsys.readouterr().out


def test_a_cache_longer_than_the_models_context_exits_2(capsys):
    with pytest.raises(SystemExit) as stop:
        script.main(["--models", "8b", "--batches", "1", "--kv", "10000000"])
    assert stop.value.code == 2
    assert "maximum context" in capsys.readouterr().err
