"""``map`` holds a graph's memory to what ``run`` allows: weights and KV in the first tier (HBM)
unless ``memory.may_spill`` names them. It mapped Llama-3.1-405B's BF16 weights on 8 sockets, or a
decode batch whose KV ``run`` refuses, streaming what spilled from DDR (sn40l_sim/study/mapping.py,
sn40l_sim/study/preflight.py)."""
from __future__ import annotations

from pathlib import Path

import pytest

from sn40l_sim.commands.cli import main

REPO = Path(__file__).resolve().parents[2]


def map_experiment(tmp_path: Path, model: str, batch: int, extra: str = "") -> Path:
    """A map experiment (no workload): ``model`` on an 8-socket node, 32K prompts, full cache."""
    path = tmp_path / "m.yaml"
    path.write_text(f"kind: experiment\nname: m\nhardware: {REPO}/hw_configs/sn40l_node8.yaml\n"
                    f"model: {REPO}/graphs/{model}\nparallel:\n  prefill: {{tp: 8}}\n  decode: {{tp: 8}}\n"
                    f"policies:\n  - {{name: full, policy: full}}\n"
                    f"shape: {{prompt_len: 32768, batch: {batch}}}\n{extra}")
    return path


@pytest.mark.parametrize("command", [["check"], ["map", "--phase", "decode"], ["map", "--phase", "prefill"]])
def test_weights_that_spill_out_of_hbm_are_refused_by_check_and_map(tmp_path, capsys, command):
    # 405B parameters in BF16 are 94.5 GiB a socket on 8 sockets, beyond the 56 GiB of usable HBM
    path = map_experiment(tmp_path, "llama3_1_405b.yaml", 1)
    assert main([command[0], str(path), *command[1:]]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert "m.yaml:4: model: the model does not fit on the decode node at tp=8" in err, err
    assert "weights 38.50 GiB would spill to DDR" in err, err


def test_a_decode_batch_whose_kv_spills_is_refused_by_map_as_by_run(tmp_path, capsys):
    # Llama-3.1-8B's full 32K cache is 0.51 GiB a sequence a socket: 64 fit in 56 GiB, 128 do not
    path = map_experiment(tmp_path, "llama3_1_8b.yaml", 128)
    assert main(["map", str(path), "--phase", "decode"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "m.yaml:10: shape.batch: decode at batch 128: " in err, err
    assert "kv 9.87 GiB would spill to DDR" in err, err
    assert main(["map", str(path), "--phase", "decode", "--batch", "64"]) == 0


def test_kv_that_may_spill_is_mapped_in_ddr(tmp_path, capsys):
    # memory.may_spill names the KV: the batch of 128 is mapped, its KV beyond HBM in DDR
    path = map_experiment(tmp_path, "llama3_1_8b.yaml", 128, "memory: {may_spill: [activations, kv]}\n")
    assert main(["map", str(path), "--phase", "decode"]) == 0
    assert "kv 54.1 GiB HBM + 9.9 GiB DDR" in capsys.readouterr().out


def test_check_refuses_the_decode_batch_map_refuses(tmp_path, capsys):
    # check said "ok" of a map experiment whose shape.batch map then refused: check held the
    # experiment to what map needs of it (sn40l_sim/study/preflight.py) but never placed its graphs
    path = map_experiment(tmp_path, "llama3_1_8b.yaml", 128)
    assert main(["map", str(path), "--phase", "decode"]) == 2
    expected = capsys.readouterr().err
    assert main(["check", str(path)]) == 2
    assert capsys.readouterr().err == expected
