"""A sweep whose experiment's hardware file is itself broken: the error is the hardware file's, at
its line and field, not the sweep's first model axis value's (or a made-up 'unknown axis path')."""
from __future__ import annotations

import shutil

import pytest
from sweep_helpers import REPO

from sn40l_sim.errors import InputError
from sn40l_sim.study.sweep.load import load_sweep


@pytest.fixture
def tree(tmp_path):
    """experiments/kernel_looping.yaml (a sweep over two models) beside copies of the files it names."""
    for folder in ("hw_configs", "graphs"):
        shutil.copytree(REPO / folder, tmp_path / folder)
    (tmp_path / "experiments").mkdir()
    shutil.copy(REPO / "experiments" / "kernel_looping.yaml", tmp_path / "experiments")
    return tmp_path


@pytest.mark.parametrize("old, new, words", [
    # calibrate, validate and run of the kernel-looping references said "sweep.axes.model: unknown
    # axis path 'model': hw_configs/sn40l.yaml:130: calibrated.sync_latency_sec: unknown key"
    ("  sync_latency_s:", "  sync_latency_sec:", "calibrated.sync_latency_sec: unknown key; did you mean 'sync_latency_s'?"),
    # and put a value's error on the model axis's first value, a model file with nothing wrong in it
    ("  systolic_efficiency:", "  systolic_efficiency: 1.2  #",
     "calibrated.systolic_efficiency: expected a fraction greater than 0 and at most 1, got 1.2"),
])
def test_a_broken_hardware_file_under_a_model_sweep_is_that_files_error(tree, old, new, words):
    socket = tree / "hw_configs" / "sn40l.yaml"
    text = socket.read_text()
    assert text.count("\n" + old) == 1
    socket.write_text(text.replace("\n" + old, "\n" + new))
    with pytest.raises(InputError) as err:
        load_sweep(tree / "experiments" / "kernel_looping.yaml")
    assert err.value.file == str(socket) and words in str(err.value), str(err.value)
    assert "axis" not in str(err.value) and "llama" not in str(err.value)


def test_a_broken_model_file_of_a_model_axis_still_names_the_axis_value(tree):
    model = tree / "graphs" / "llama3_1_70b.yaml"
    model.write_text(model.read_text().replace("\nhidden: 8192", "\nhiden: 8192"))
    with pytest.raises(InputError) as err:
        load_sweep(tree / "experiments" / "kernel_looping.yaml")
    text = str(err.value)
    assert "sweep.axes.model.values[0]: value '../graphs/llama3_1_70b.yaml': " in text and str(model) in text, text
