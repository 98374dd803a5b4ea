"""A hardware file whose tiles cannot hold a kernel of the model is refused by ``run`` and ``map``
in one line at the experiment field naming that file (``hardware:``, or ``prefill_hardware:`` for
the prefill nodes'), naming the kernel and the socket's fields to change. ``run`` named
``graph_options`` and a nameless kernel ``''``, and ``map`` no file at all."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from sn40l_sim.commands.cli import main

ROOT = Path(__file__).resolve().parents[2]
HW = ROOT / "hw_configs"


def _write(tmp_path: Path, prefill_only: bool) -> Path:
    (tmp_path / "small.yaml").write_text(
        f"base: {HW / 'sn40l.yaml'}\nname: SmallPMU\npmu: {{capacity_bytes: 128 B}}\nstated: null\n"
        "tile: {grid_rows: 1, grid_cols: 2, pcus: 1, pmus: 1, agcus: 1}\n")
    (tmp_path / "node.yaml").write_text(
        f"kind: node\nbase: {HW / 'sn40l_node8.yaml'}\nname: SmallPMU-8\nsocket: small.yaml\n")
    hardware = f"hardware: {HW / 'sn40l_node8.yaml'}\nprefill_hardware: node.yaml" if prefill_only \
        else "hardware: node.yaml"
    path = tmp_path / "exp.yaml"
    path.write_text(f"kind: experiment\nname: small\n{hardware}\nmodel: {ROOT / 'graphs/llama3_1_8b.yaml'}\n"
                    "parallel: {prefill: {tp: 8}, decode: {tp: 8}}\npolicies: [{name: full, policy: full}]\n"
                    "shape: {prompt_len: 1024, batch: 1, max_new_tokens: 16}\n"
                    "workload: {kind: fixed, count: 1, output_len: 16}\n"
                    "serving: {mode: disaggregated, batch: 1, max_new_tokens: 16}\n")
    return path


@pytest.mark.parametrize(("prefill_only", "command", "field", "line"), [
    (False, ["run", "--no-plot"], "hardware", 3),
    (False, ["map", "--phase", "decode"], "hardware", 3),
    (True, ["run", "--no-plot"], "prefill_hardware", 4),
    (True, ["map", "--phase", "prefill"], "prefill_hardware", 4),
])
def test_a_kernel_the_tiles_cannot_hold_is_an_error_at_the_hardware_field(tmp_path, capsys, prefill_only,
                                                                          command, field, line):
    exp = _write(tmp_path, prefill_only)
    extra = ["--out", str(tmp_path / "out")] if command[0] == "run" else []
    assert main([command[0], str(exp), *command[1:], *extra]) == 2
    # run says which point it simulates before the error
    err = [e for e in capsys.readouterr().err.strip().splitlines() if not e.startswith("simulating ")]
    assert len(err) == 1, err
    assert re.match(rf"error: {re.escape(str(exp))}:{line}: {field}: kernel 'L00\.\w+': operator '\w+' cannot be "
                    "placed", err[0]), err
    assert "pmu.capacity_bytes of socket 'SmallPMU'" in err[0] and "kernel ''" not in err[0], err
