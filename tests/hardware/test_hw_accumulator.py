"""The width of a GEMM's partial sums is the hardware file's ``pcu.accumulator_dtype``, not a
constant of the mapper: the SN40L file states FP32, the PMU traffic the mapper charges follows the
field, and a datatype no PCU accumulates in is refused naming the field."""
from __future__ import annotations

from pathlib import Path

import pytest

from sn40l_sim.commands.cli import main
from sn40l_sim.errors import InputError
from sn40l_sim.hardware.loader import load_hardware, with_overrides
from sn40l_sim.hardware.units.pcu import accumulator_bytes
from sn40l_sim.ir import Operator
from sn40l_sim.mapper.keys import socket_key
from sn40l_sim.mapper.pmu_traffic import os_traffic, ws_traffic

ROOT = Path(__file__).resolve().parents[2]
NODE = load_hardware(ROOT / "hw_configs" / "sn40l_node16.yaml")
BF16_SUMS = with_overrides(NODE, {"socket.pcu.accumulator_dtype": "bf16"})


def test_the_sn40l_file_accumulates_in_fp32():
    assert NODE.socket.pcu.accumulator_dtype == "fp32"
    assert accumulator_bytes(NODE.socket.pcu) == 4 and accumulator_bytes(BF16_SUMS.socket.pcu) == 2
    assert socket_key(BF16_SUMS.socket) != socket_key(NODE.socket)     # the mapper's cache tells them apart


def test_weight_stationary_partial_sum_bytes_follow_the_accumulator():
    # one 64 x 64 x 64 piece on 32 lanes x 6 stages: 2 column blocks x 11 K blocks x 64 rows = 1,408
    # partial-sum rows written, 1,280 read back (all but the first K block's); a row is 32 sums
    op = Operator("g", "gemm", m=64, k=64, n=64)
    piece = {"count": 1, "m": 64, "k": 64, "n": 64}
    fp32 = ws_traffic(NODE.socket.pcu, op, piece, 0, 0, split_k=False)
    bf16 = ws_traffic(BF16_SUMS.socket.pcu, op, piece, 0, 0, split_k=False)
    assert fp32.writes - bf16.writes == 1408 * 32 * (4 - 2)
    assert fp32.reads - bf16.reads == 1280 * 32 * (4 - 2)
    assert fp32.addresses == bf16.addresses


def test_a_split_k_output_tile_is_written_and_reloaded_at_the_accumulators_width():
    # output-stationary, K split: each of the 2 x 11 tiles of 6 rows x 32 columns is written and
    # reloaded as partial sums; unsplit, the output is written once in BF16 whatever the accumulator
    piece = {"count": 1, "m": 64, "k": 64, "n": 64}
    sums = 2 * 11 * 6 * 32
    fp32 = os_traffic(NODE.socket.pcu, piece, 0, 0, split_k=True)
    bf16 = os_traffic(BF16_SUMS.socket.pcu, piece, 0, 0, split_k=True)
    assert (fp32.writes - bf16.writes, fp32.reads - bf16.reads) == (sums * 2, sums * 2)
    assert os_traffic(NODE.socket.pcu, piece, 0, 0, split_k=False) == \
        os_traffic(BF16_SUMS.socket.pcu, piece, 0, 0, split_k=False)


@pytest.mark.parametrize("value", ["int8", "fp8", "int32", "float32"])
def test_a_datatype_no_pcu_accumulates_in_is_refused(value):
    with pytest.raises(InputError, match=r"pcu\.accumulator_dtype.*'fp32', 'bf16' or 'fp16'"):
        with_overrides(NODE, {"socket.pcu.accumulator_dtype": value})


def test_run_set_names_the_field_and_exits_2(tmp_path, capsys):
    args = ["run", str(ROOT / "experiments" / "deepseek_tp16.yaml"), "--out", str(tmp_path / "out"), "--no-plot",
            "--set", "hardware.socket.pcu.accumulator_dtype=int8"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "accumulator_dtype" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_socket_file_without_the_accumulator_is_refused_naming_it(tmp_path):
    text = (ROOT / "hw_configs" / "sn40l.yaml").read_text()
    kept = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("accumulator_dtype:"))
    (tmp_path / "socket.yaml").write_text(kept + "\n")
    with pytest.raises(InputError, match=r"socket\.yaml.*pcu\.accumulator_dtype"):
        load_hardware(tmp_path / "socket.yaml")
