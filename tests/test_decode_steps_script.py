"""``scripts/decode_steps.py``: one line per point whose step is the step timer's, and a model file
that does not exist refused with exit status 2."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
import decode_steps  # noqa: E402


def test_one_line_per_point_with_its_step_and_breakdown():
    lines = decode_steps.decode_lines("llama3_1_8b", 8, [1, 1024], [128])
    assert [line.split(":")[0] for line in lines] == ["batch 1 kv 128", "batch 1024 kv 128"]
    steps = [float(line.split(": ")[1].split(" ms")[0]) for line in lines]
    assert 0 < steps[0] < steps[1]
    assert all("'collectives'" in line for line in lines)


def test_an_unknown_model_exits_2(capsys):
    with pytest.raises(SystemExit) as stop:
        decode_steps.main(["llama9", "8"])
    assert stop.value.code == 2
    assert "graphs/llama9.yaml" in capsys.readouterr().err


def test_a_file_of_graphs_that_is_not_a_model_exits_2(capsys):
    # graphs/ holds the kernel templates too: naming one is bad input, one line, not a traceback
    with pytest.raises(SystemExit) as stop:
        decode_steps.main(["kernels_llama", "8", "--batches", "1"])
    assert stop.value.code == 2
    assert "kernels_llama.yaml" in capsys.readouterr().err


def test_a_model_whose_weights_do_not_fit_the_node_exits_2(capsys):
    # run refuses DeepSeek-R1 on 8 sockets whatever the batch; the script printed an 8.5 ms step
    with pytest.raises(SystemExit) as stop:
        decode_steps.main(["deepseek_r1", "8", "--batches", "1"])
    assert stop.value.code == 2
    assert "does not fit" in capsys.readouterr().err


def test_a_cache_longer_than_the_models_context_exits_2(capsys):
    # run refuses such a sequence; the script timed a 10M-token cache of Llama-3.1-8B (104.7 ms)
    with pytest.raises(SystemExit) as stop:
        decode_steps.main(["llama3_1_8b", "16", "--batches", "1", "--kv", "128,10000000"])
    assert stop.value.code == 2
    assert "maximum context" in capsys.readouterr().err
