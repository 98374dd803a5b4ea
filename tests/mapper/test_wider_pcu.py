"""A wider PCU does not stream more weight bytes for the same GEMM (docs/validation.md, "Sensitivity
to each hardware field", the lanes ladder).

A column block was charged as ``lanes`` columns wide whatever the piece's ``n``: a piece narrower
than the PCU streamed its weights and output padded to the full width. Doubling
``pcu.lanes`` past a GEMM's columns then doubled its bytes through the PMU ports, and Llama-3.1-8B's
4K prefill on 8 sockets (`map experiments/llama8b_node8.yaml --phase prefill --set
shape.prompt_len=4096 --set hardware.socket.pcu.lanes=N`) took 38.5 ms at 128 lanes, 65.6 ms at
1,024, 692 ms at 65,536 and 877,288 s at 2**31 - 1. Idle lanes are masked, not fed zeros: a block
reads and writes ``min(n, lanes)`` columns (:attr:`sn40l_sim.mapper.work.GemmWork.width`). Its FP32
partial sums stay whole vectors, as the unit-level reference moves them (the mapper agrees with it
within 10%, tests/reference/test_mapper_vs_unit_level.py), so a weight-stationary piece narrower than
the PCU still costs more on a wider one and the output-stationary dataflow, which keeps its sums in
the PCU, is the one checked here.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from sn40l_sim.hardware.loader import load_hardware, with_overrides
from sn40l_sim.ir import Operator, ParallelPlan, Shape
from sn40l_sim.kvcache import make_policy
from sn40l_sim.mapper.kernel import map_kernel
from sn40l_sim.mapper.pmu_traffic import os_traffic
from sn40l_sim.mapper.tiling import max_pieces
from sn40l_sim.mapper.work import gemm_work, simd_work
from sn40l_sim.models.builder import build_graph
from sn40l_sim.models.loader import load_model

ROOT = Path(__file__).resolve().parents[2]
#: the widths the schema accepts go to 4,096 lanes (sn40l_sim/hardware/spec.py, PCU_LANES)
LADDER = [32, 64, 128, 256, 1024, 4096]


def _socket(lanes: int):
    node = load_hardware(ROOT / "hw_configs" / "sn40l.yaml")
    return with_overrides(node, {"socket.pcu.lanes": lanes}).socket


def test_a_gemm_piece_moves_no_more_bytes_on_a_wider_pcu():
    dataflow = "output_stationary"
    # P V of one attention head: 128 output columns, the head dimension
    op = Operator("pv", "gemm", m=256, k=512, n=128)
    piece = {"count": 1, "m": 256, "k": 512, "n": 128}
    stream, moved = [], []
    for lanes in LADDER:
        socket = _socket(lanes)
        work = gemm_work(socket, op, piece, dataflow, 1.0, split_k=False)
        one = work.split(1, 1)
        stream.append(one.items * one.stream_cycles)
        traffic = os_traffic(socket.pcu, piece, 0, 0, False)
        moved.append(traffic.reads + traffic.writes)
    assert stream == sorted(stream, reverse=True), stream
    assert moved == sorted(moved, reverse=True), moved
    # past the piece's 128 columns the width is idle: nothing more to move, nothing less
    assert len(set(stream[2:])) == 1 and len(set(moved[2:])) == 1, (stream, moved)


def test_the_8b_prefill_kernels_do_not_slow_down_with_lanes_past_their_columns():
    node = load_hardware(ROOT / "hw_configs" / "sn40l_node8.yaml")
    model = load_model(ROOT / "graphs" / "llama3_1_8b.yaml")
    graph = build_graph(model, Shape("prefill", 1, 4096), ParallelPlan(8), make_policy("full", {}))
    kernels = {k.name: k.signature() for k in graph.kernels() if k.name in ("L00.qkv", "L00.o_proj", "L00.ffn")}
    seconds = {}
    for lanes in (64, 4096):
        socket = with_overrides(node, {"socket.pcu.lanes": lanes}).socket
        seconds[lanes] = {name: map_kernel(socket, sig).cycles / socket.clock_hz for name, sig in kernels.items()}
    # padded, the QKV projection took 3.9x longer at 4,096 lanes than at 64 (807 against 207 us, alone
    # on a socket); masked, the GEMMs stream the same bytes and only the tilings' granularity moves
    # them (the attention kernel, not checked here, by 6%: docs/validation.md, the lanes ladder)
    for name in kernels:
        assert seconds[4096][name] <= 1.05 * seconds[64][name], (name, seconds)


@pytest.mark.parametrize("kind,n", [("elementwise", 0), ("reduction", 0), ("softmax", 96)])
def test_a_simd_piece_streams_no_more_cycles_on_a_wider_pcu(kind, n):
    # 960 values: fewer than the widest PCUs' lanes, so a vector is mostly idle lanes; a reduction
    # without n reduces rows as long as the lanes
    op = Operator("v", kind, elements=960, n=n, transcendentals=960 if kind == "softmax" else 0)
    cycles = []
    for lanes in LADDER:
        work = simd_work(_socket(lanes), op, 960, op.transcendentals, 2)
        cycles.append(work.items * sum(work.pass_cycles))
    assert cycles == sorted(cycles, reverse=True), cycles


def test_pieces_are_as_fine_on_a_pcu_wider_than_its_stream():
    # a vector wider than the 128-byte stream (64 BF16 values, 32 FP32 partial sums) takes more
    # than a cycle to feed, so the pieces stay cut at the stream's width: FlashAttention's softmax
    # (rows of no stated length) was one piece of 67M values (a 256 MiB buffer) at 2**31 - 1 lanes
    ops = [Operator("softmax", "softmax", elements=2**20, transcendentals=2**20),
           Operator("act", "elementwise", elements=2**20),
           Operator("pv", "gemm", m=4096, k=4096, n=128)]
    finest = {lanes: [max_pieces(_socket(lanes), op) for op in ops] for lanes in (64, 1024, 4096)}
    assert finest[64][:2] == finest[1024][:2] == finest[4096][:2] == [2**14, 2**14], finest
    # GEMM columns are cut to 32 FP32 partial sums, SN40L's lanes, however wide the PCU
    assert finest[64][2] == finest[1024][2] == finest[4096][2] == max_pieces(_socket(32), ops[2]), finest
