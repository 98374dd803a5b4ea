"""A path written empty (``hardware: ""``) resolves to the folder of the file that wrote it, and was
refused as "'' is a folder, not a file"; it is refused as an empty path, at its line, exit status 2,
for every field that names a file (``yamlio.document.not_a_file``)."""
from __future__ import annotations

from pathlib import Path

import pytest

from sn40l_sim.commands.cli import main

REPO = Path(__file__).resolve().parents[2]
EXPERIMENT = (REPO / "experiments" / "llama8b_node8.yaml").read_text()


def _experiment(folder: Path, key: str) -> str:
    text = EXPERIMENT.replace("../hw_configs/", f"{REPO}/hw_configs/").replace("../graphs/", f"{REPO}/graphs/")
    lines = [f'{key}: ""' if line.startswith(f"{key}:") else line for line in text.splitlines()]
    return "\n".join(lines) + "\n"


CASES = {
    "hardware": (lambda d: _experiment(d, "hardware"), "hardware: hardware file '' is an empty path"),
    "model": (lambda d: _experiment(d, "model"), "model: model file '' is an empty path"),
    "base": (lambda d: 'base: ""\nname: x\n', "base: base file '' is an empty path"),
    "socket": (lambda d: f'base: {REPO}/hw_configs/sn40l_node8.yaml\nname: x\nsocket: ""\n',
               "socket: socket file '' is an empty path"),
    "kernels": (lambda d: (REPO / "graphs" / "llama3_1_8b.yaml").read_text().replace(
        "kernels: kernels_llama.yaml", 'kernels: ""'), "kernels: expected a path (relative to this file) to a "
                                                        "kind: kernels file, got ''"),
    "reference": (lambda d: "kind: reference\nmeasurements:\n  - {id: x, quantity: max_batch, source: s, "
                            'experiment: "", point: full, calibration: false}\n',
                  "measurements[0].experiment: experiment file '' is an empty path"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_an_empty_path_is_refused_as_one(tmp_path, capsys, case):
    text, words = CASES[case]
    path = tmp_path / "f.yaml"
    path.write_text(text(tmp_path))
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err and "is a folder" not in err, err


@pytest.mark.parametrize("wrong", [None, 3, b"hw.yaml", ["hw.yaml"], "", "  "])
def test_a_python_caller_passing_no_path_is_told_so(wrong):
    """From Python, a loader given no path (None, a number, bytes, "") raised a TypeError from
    os.path, or read "" as the working folder; the argparse commands refuse an empty one already."""
    from sn40l_sim.errors import InputError
    from sn40l_sim.hardware.loader import load_hardware
    from sn40l_sim.models.loader import load_model
    from sn40l_sim.study.sweep.base import experiment_with_sets

    for load in (load_hardware, load_model, lambda path: experiment_with_sets(path, {})):
        with pytest.raises(InputError, match=r"^path: expected the path of a YAML file, got "):
            load(wrong)
