"""A leave-one-out prediction must not read the point it leaves out: `calibrate --leave-one-out
refit` on a reference file of the user's, each point's prediction unmoved by its own measured value.
The simulator is replaced by a smooth stand-in of the calibrated values (the fit and its refits are
run as shipped): these tests are of what the refits are fitted to, not of the simulator."""
from __future__ import annotations

from pathlib import Path

import pytest

from sn40l_sim.commands.cli import main
from sn40l_sim.hardware.loader import load_hardware
from sn40l_sim.hardware.spec import calibrated_parameters

REPO = Path(__file__).resolve().parents[2]
SOCKET = load_hardware(REPO / "hw_configs" / "sn40l.yaml").socket
HBM, SYNC = "socket.memory.hbm.efficiency", "socket.calibrated.sync_latency_s"


def step_s(overrides: dict[str, float]) -> float:
    """A decode step that the HBM efficiency and the sync latency lengthen (not linearly)."""
    values = {f"socket.{k}": p.value for k, p in calibrated_parameters(SOCKET).items()} | overrides
    return 1e-3 / values[HBM] ** 2 + 100 * values[SYNC]


@pytest.fixture
def stand_in(monkeypatch):
    def records(self, path, *, serve=True, hardware_overrides=None, reads_prefill=None, reads=None):
        return [{"name": "full", "decode_step_s": step_s(hardware_overrides or {})}]

    monkeypatch.setattr("sn40l_sim.study.evaluation.LoadedExperiments.records", records)
    tables: list[dict[str, float] | None] = []

    def format_table(comparisons, loo=None):
        tables.append(loo)
        return ""

    monkeypatch.setattr("sn40l_sim.study.validation.format_table", format_table)
    return tables


def reference_file(folder: Path, measured: float) -> Path:
    path = folder / f"mine_{measured}.yaml"
    path.write_text("kind: reference\nmeasurements:\n"
                    f"  - {{id: step, quantity: decode_step_s, value: {measured}, tolerance: {{rel: 0.02}}, "
                    f"source: my lab, experiment: {REPO / 'experiments' / 'llama8b_node8.yaml'}, point: full, "
                    "calibration: true}\n", encoding="utf-8")
    return path


def test_a_refit_without_the_only_point_predicts_at_the_hardware_files_values(tmp_path, stand_in):
    # the refits started from the full fit's values and were pulled towards them: without its one
    # point a refit has nothing else to fit, so it 'predicted' the point at the fit to that very
    # point, within tolerance whatever was measured, and moved with the measured value
    at_yaml = step_s({})
    for measured in (0.8 * at_yaml, 1.3 * at_yaml):
        assert main(["calibrate", str(reference_file(tmp_path, measured)), "--quiet", "--max-evaluations", "20",
                     "--leave-one-out", "refit"]) == 0
    assert [loo["step"] for loo in stand_in] == [pytest.approx(at_yaml, rel=1e-12)] * 2


def test_a_linearised_leave_one_out_of_the_only_point_is_its_value_at_the_hardware_files(tmp_path, stand_in, capsys):
    # the only point of a file was predicted on the fit's Jacobian from the values fitted to it, so
    # its prediction moved with its measured value (a decode step measured by hand: -4.5%, 'within
    # tolerance', where the hardware file's values, which a fit of nothing keeps, simulate -10.9%)
    at_yaml = step_s({})
    for measured in (0.8 * at_yaml, 1.3 * at_yaml):
        assert main(["calibrate", str(reference_file(tmp_path, measured)), "--quiet", "--max-evaluations", "20"]) == 0
        out = capsys.readouterr().out   # the socket file as a relative path when run from the repository
        assert "; the only calibration point: a fit without it has no measurement, so it keeps " in out
        assert "hw_configs/sn40l.yaml's values, where the point is predicted\n" in out
    assert [loo["step"] for loo in stand_in] == [pytest.approx(at_yaml, rel=1e-12)] * 2
