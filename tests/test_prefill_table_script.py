"""``scripts/prefill_table.py``: its rows are ``run``'s prefill of the experiment it writes, the MFU
it derives is at most 1 and grows with the prompt, a model that does not fit is one line, and an
unknown model exits 2."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from sn40l_sim.study.runner import simulate_experiment
from sn40l_sim.study.sweep.base import experiment_with_sets

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
import prefill_table  # noqa: E402


def test_rows_are_runs_prefill_and_their_mfu_is_physical(tmp_path):
    experiment = tmp_path / "prefill.yaml"
    assert prefill_table.main(["--write-experiment", str(experiment)]) == 0
    lines = prefill_table.rows(["llama3_1_8b"], [8], [1024, 4096], experiment)
    cells = [line.split() for line in lines[1:]]
    assert [c[:3] for c in cells] == [["llama3_1_8b", "8", "1024"], ["llama3_1_8b", "8", "4096"]]
    ttft = [float(c[3]) for c in cells]
    mfu = [float(c[6]) for c in cells]
    assert 0 < ttft[0] < ttft[1] and 0 < mfu[0] < mfu[1] <= 1
    # the 4K row is run's prefill of the experiment written, at the same --set values
    exp, hardware = experiment_with_sets(experiment, {"hardware.sockets": 8, "parallel.prefill.tp": 8,
                                                      "parallel.decode.tp": 8, "shape.prompt_len": 4096})
    with pytest.warns(UserWarning, match="slots no sequence fills"):   # SnapStream's 32K at a 4K prompt
        _, records = simulate_experiment(exp, serve=False, hardware_overrides=hardware)
    assert f"{records[0]['prefill_s'] * 1e3:.2f}" == cells[1][3]


def test_a_model_that_does_not_fit_is_one_line(tmp_path):
    experiment = tmp_path / "prefill.yaml"
    prefill_table.main(["--write-experiment", str(experiment)])
    lines = prefill_table.rows(["llama3_1_405b"], [8], [1024], experiment)
    assert lines[1].split()[:3] == ["llama3_1_405b", "8", "1024"]
    assert "does not run: the model does not fit" in lines[1]


def test_a_prompt_longer_than_the_models_context_is_a_row_that_says_so(tmp_path):
    # before, 200,000 tokens ran as 131,071 and printed a row of that length: two rows alike
    experiment = tmp_path / "prefill.yaml"
    prefill_table.main(["--write-experiment", str(experiment)])
    lines = prefill_table.rows(["llama3_1_8b"], [8], [200_000], experiment)
    assert lines[1].split()[:3] == ["llama3_1_8b", "8", "200000"]
    assert "does not run: longer than the model's max_context (131,072 tokens)" in lines[1]


def test_an_unknown_model_exits_2(capsys):
    with pytest.raises(SystemExit) as stop:
        prefill_table.main(["--models", "llama9"])
    assert stop.value.code == 2
    assert "graphs/llama9.yaml" in capsys.readouterr().err


def test_a_file_of_graphs_that_is_not_a_model_exits_2(capsys):
    # graphs/ holds the kernel templates too: naming one is bad input, one line, not a traceback
    with pytest.raises(SystemExit) as stop:
        prefill_table.main(["--models", "kernels_llama", "--sockets", "8", "--lens", "128"])
    assert stop.value.code == 2
    assert "kernels_llama.yaml" in capsys.readouterr().err


def test_write_experiment_into_a_folder_exits_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        prefill_table.main(["--write-experiment", str(tmp_path)])
    assert stop.value.code == 2
    assert "--write-experiment" in capsys.readouterr().err


def test_a_node_the_socket_cannot_mesh_says_why(tmp_path):
    # --sockets 32 on the 16-port socket: the row said only "does not run: 32" (the value refused)
    experiment = tmp_path / "prefill.yaml"
    prefill_table.main(["--write-experiment", str(experiment)])
    lines = prefill_table.rows(["llama3_1_8b"], [32], [1024], experiment)
    assert "does not run: a full_mesh of 32 sockets" in lines[1] and "P2P ports" in lines[1]
