"""``scripts/hardware_sensitivity.py`` varies every numeric hardware field but the calibrated ones,
scales each in the file's own units, and tabulates real runs (one cheap workload here)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
import hardware_sensitivity  # noqa: E402


def test_every_numeric_field_but_the_calibrated_ones_is_varied():
    fields = hardware_sensitivity.fields()
    assert fields["clock_hz"] == ("hardware.socket.clock_hz", "1.6 GHz")
    assert fields["node.host_link.bytes_per_s"][0] == "hardware.host_link.bytes_per_s"
    assert "p2p.dma_engines" in fields and "configuration.switch_bytes" in fields
    assert not any(name.startswith(("calibrated", "stated")) for name in fields)
    assert "memory.hbm.efficiency" not in fields and "memory.ddr.efficiency" in fields   # fitted / assumed


def test_values_scale_in_their_own_units_and_integers_are_not_rounded():
    assert hardware_sensitivity.scaled("409.6 GB/s", 2) == "819.2 GB/s"
    assert hardware_sensitivity.scaled("512 KiB", 0.5) == "256 KiB"
    assert hardware_sensitivity.scaled(5, 0.5) == "2.5"     # a fraction of a cycle, to be refused
    assert hardware_sensitivity.scaled(260, 0.5) == "130"


def test_one_field_on_the_prefill_workload(tmp_path, monkeypatch):
    monkeypatch.setattr(hardware_sensitivity, "WORKLOADS",
                        {"llama8b_8k": hardware_sensitivity.WORKLOADS["llama8b_8k"]})
    monkeypatch.setattr(hardware_sensitivity, "COLUMNS", {"l8_8k": hardware_sensitivity.COLUMNS["l8_8k"]})
    table = hardware_sensitivity.measure(["clock_hz"], [0.5, 2.0], tmp_path, jobs=2, reuse=False)
    base, _ = table[("base", 1.0)]["l8_8k"]
    slower, _ = table[("clock_hz", 0.5)]["l8_8k"]
    faster, _ = table[("clock_hz", 2.0)]["l8_8k"]
    assert slower > base > faster   # the prefill is partly compute-bound: the clock moves it both ways
    text = hardware_sensitivity.markdown(table, ["clock_hz"], [0.5, 2.0])
    assert f"| `clock_hz` | 3.2 GHz | {faster / base:.3f} |" in text
    # half a port is bad input: the run is refused (exit 2) and the table says why
    refused = hardware_sensitivity._run("llama8b_8k", {"hardware.socket.pmu.read_ports": "0.5"}, tmp_path / "r", False)
    assert refused.startswith("exit 2:") and "expected an integer, got 0.5" in refused


def test_bad_factors_are_refused():
    with pytest.raises(SystemExit) as exc:
        hardware_sensitivity.main(["--factors", "0"])
    assert exc.value.code == 2


@pytest.mark.parametrize("argv", [["--factors", "2", "2"], ["--factors", "2", "2.0000001"],
                                  ["--fields", "clock_hz", "clock_hz"]])
def test_a_value_given_twice_is_refused(argv, capsys):
    # both would be run into one folder, the second reading the first's results
    with pytest.raises(SystemExit) as exc:
        hardware_sensitivity.main(argv)
    assert exc.value.code == 2
    assert "each value once" in capsys.readouterr().err


def test_flags_name_a_non_monotonic_or_regime_changing_response():
    flag = hardware_sensitivity.flag
    assert flag(1.169, 1.025) == "both up"            # deeper PCUs: slower at both factors
    assert flag(0.98, 0.97) == "both down"
    assert flag(1.305, 0.656) == "not convex"         # doubling saves more than halving costs
    assert flag(1.289, 0.884) == flag(0.897, 1.206) == ""   # a rate, and a size linear in its field
    assert flag(1.003, 0.5) == ""                     # a move within noise is not judged


def test_compact_puts_both_factors_on_one_row_and_lists_the_unmoved_fields(monkeypatch):
    monkeypatch.setattr(hardware_sensitivity, "COLUMNS", {"a": ("w", "full", "decode_step_s")})
    table = {("base", 1.0): {"a": (2.0, 16)},
             ("clock_hz", 0.5): {"a": (2.6, 16)}, ("clock_hz", 2.0): {"a": (1.3, 16)},
             ("tln.latency_s", 0.5): {"a": (2.0, 16)}, ("tln.latency_s", 2.0): {"a": (2.0001, 16)},
             ("memory.hbm.capacity_bytes_per_unit", 0.5): {"a": "exit 2: error: does not fit"},
             ("memory.hbm.capacity_bytes_per_unit", 2.0): {"a": (4.4, 128)}}
    names = ["clock_hz", "tln.latency_s", "memory.hbm.capacity_bytes_per_unit"]
    text = hardware_sensitivity.compact(table, names, [0.5, 2.0])
    assert "| `clock_hz` | 1.300 | 0.650 | a not convex |" in text     # column a's flag
    assert "| `memory.hbm.capacity_bytes_per_unit` | refused | 2.200 (b128) |  |" in text
    assert "\nWithin 0.1% of the shipped figures at every factor: `tln.latency_s`.\n" in text
    assert text.endswith("- `memory.hbm.capacity_bytes_per_unit` x0.5: exit 2: error: does not fit")


def test_an_out_that_is_a_file_is_refused(tmp_path, capsys):
    (tmp_path / "f").write_text("")
    with pytest.raises(SystemExit) as exc:
        hardware_sensitivity.main(["--fields", "clock_hz", "--out", str(tmp_path / "f")])
    assert exc.value.code == 2
    assert "--out" in capsys.readouterr().err


@pytest.mark.parametrize("factor", ["nan", "inf"])
def test_a_factor_that_is_not_a_finite_number_is_refused(factor, tmp_path):
    # NaN passed the "positive" check and each run was then refused, the script exiting 0
    with pytest.raises(SystemExit) as exc:
        hardware_sensitivity.main(["--fields", "clock_hz", "--factors", factor, "--out", str(tmp_path)])
    assert exc.value.code == 2


def test_a_run_that_failed_is_not_called_refused_and_its_reason_follows_both_tables(monkeypatch):
    # exit 3 (a broken invariant) is a bug, not bad input; --compact printed no reason at all
    monkeypatch.setattr(hardware_sensitivity, "COLUMNS", {"a": ("w", "full", "decode_step_s")})
    table = {("base", 1.0): {"a": (2.0, 16)},
             ("clock_hz", 0.5): {"a": "exit 3: invariant violated: units_within_peak"},
             ("clock_hz", 2.0): {"a": (1.3, 16)}}
    for render in (hardware_sensitivity.markdown, hardware_sensitivity.compact):
        text = render(table, ["clock_hz"], [0.5, 2.0])
        assert "failed" in text and "refused" not in text
        assert text.endswith("- `clock_hz` x0.5: exit 3: invariant violated: units_within_peak")
