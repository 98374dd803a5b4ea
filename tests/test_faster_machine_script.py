"""``scripts/faster_machine.py`` finds a curve that rises as a hardware field gets faster, and only
such curves (its sweeps themselves are the simulator's; this checks the reading of their results)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
import faster_machine  # noqa: E402

COLUMN = "sweep.hardware.socket.p2p.bytes_per_s_per_port"


def _row(rate: float, batch: int, decode: float, prefill: float, policy: str = "full") -> dict[str, str]:
    # results.csv writes the value as the simulator parsed it, a float that need not print as given
    return {COLUMN: repr(rate * (1 + 1e-12)), "sweep.serving.batch": str(batch), "kv_policy": policy,
            "decode_step_s": str(decode), "prefill_s": str(prefill)}


def test_a_rising_curve_is_reported_and_a_falling_or_flat_one_is_not():
    order = [50e9, 100e9, 200e9]
    rows = ([_row(r, 1, d, 1.0) for r, d in zip(order, (3.0, 2.0, 2.0), strict=True)]      # falls, then flat
            + [_row(r, 16, 5.0, p) for r, p in zip(order, (9.0, 8.0, 8.5), strict=True)])  # prefill rises
    found = faster_machine._rising(rows, COLUMN, order)
    assert len(found) == 1
    assert found[0].startswith("prefill_s rises") and "'sweep.serving.batch': '16'" in found[0]


def test_a_curve_missing_a_value_is_not_judged():
    order = [50e9, 100e9, 200e9]
    rows = [_row(r, 1, d, 1.0) for r, d in zip(order[:2], (1.0, 2.0), strict=True)]
    assert faster_machine._rising(rows, COLUMN, order) == []


def test_a_rise_too_small_for_the_printed_times_is_given_itself():
    # Llama-3.1-405B's decode step with a faster clock rose by 17 ns: 32.4974 ms twice in the
    # times printed, so the report names the rise and its share of the time before it
    order = [50e9, 100e9, 200e9]
    rows = [_row(r, 1, d, 1.0) for r, d in zip(order, (0.0324985, 0.03249740, 0.032497417), strict=True)]
    found = faster_machine._rising(rows, COLUMN, order)
    assert len(found) == 1
    assert "[32.4985, 32.4974, 32.4974] ms (up by 17 ns, 5.2e-07 of the time before)" in found[0]
    assert faster_machine._duration(2.1e-5) == "21.0 us" and faster_machine._duration(0.0021) == "2.100 ms"


def test_an_out_that_is_a_file_is_refused_not_read_as_a_rise(tmp_path, capsys):
    # a traceback is exit 1, which this script's callers read as "a curve rose"
    (tmp_path / "f").write_text("")
    with pytest.raises(SystemExit) as exc:
        faster_machine.main(["--fields", "hbm_latency", "--out", str(tmp_path / "f")])
    assert exc.value.code == 2
    assert "--out" in capsys.readouterr().err
