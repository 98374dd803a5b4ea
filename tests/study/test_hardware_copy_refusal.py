"""``validate --hardware`` and ``calibrate --hardware`` refuse a socket the reference experiments do
not simulate, naming a field that moves the simulation: not the socket's name, nor the ``stated:``
totals a hypothetical socket must set to null (the loader checks them, no figure reads them)."""
from __future__ import annotations

from pathlib import Path

from sn40l_sim.commands.cli import main

REPO = Path(__file__).resolve().parents[2]
SHIPPED = (REPO / "hw_configs" / "sn40l.yaml").read_text()
NULL_TOTALS = (("  pcus: 1040 ", "  pcus: null "), ("  pmus: 1040 ", "  pmus: null "),
               ("  sram_bytes: 520 MiB ", "  sram_bytes: null "), ("  bf16_flops: 638 TFLOPS ", "  bf16_flops: null "))


def _socket_file(tmp_path: Path, *edits: tuple[str, str]) -> Path:
    text = SHIPPED
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    path = tmp_path / "copy.yaml"
    path.write_text(text)
    return path


def test_validate_names_the_geometry_not_the_nulled_totals(tmp_path, capsys):
    # 8 tiles a socket, its published totals nulled and the file renamed, as a hypothetical socket is
    # written: the refusal named stated.bf16_flops (the first difference in sorted order)
    path = _socket_file(tmp_path, ("name: SN40L\n", "name: SN40L-8-tiles\n"),
                        ("tiles_per_die: 2 ", "tiles_per_die: 4 "), *NULL_TOTALS)
    assert main(["validate", "--hardware", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and " in tiles_per_die: validate simulates" in err, err


def test_calibrate_names_the_geometry_not_the_nulled_totals(tmp_path, capsys):
    path = _socket_file(tmp_path, ("tiles_per_die: 2 ", "tiles_per_die: 4 "), *NULL_TOTALS)
    before = path.read_text()
    assert main(["calibrate", "--write", "--hardware", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and " in tiles_per_die: the fit would be of that socket" in err, err
    assert path.read_text() == before


def test_validate_accepts_a_renamed_copy_without_totals(tmp_path, capsys):
    # the same socket under another name and without its published totals simulates the same
    # figures; it was refused ("differs ... in name: ... its figures would not be ...'s")
    path = _socket_file(tmp_path, ("name: SN40L\n", "name: SN40L-copy\n"), *NULL_TOTALS)
    ref = tmp_path / "r.yaml"
    ref.write_text("kind: reference\nmeasurements:\n  - {id: x, quantity: max_batch, source: s, experiment: "
                   f"{REPO / 'experiments' / 'deepseek_tp16.yaml'}, point: full, calibration: false}}\n")
    assert main(["validate", str(ref), "--hardware", str(path), "--quiet"]) == 0, capsys.readouterr().err
    assert "max_batch" in capsys.readouterr().out
