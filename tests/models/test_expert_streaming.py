"""DeepSeek-R1's MoE from first principles: the expert bytes a decode step streams follow the
expected distinct experts of its routed rows, the MTP module's weights are stored once however
many drafts run it, and the MoE all-reduce carries every routed row's hidden state.

Every expected figure is worked out here from the model's published shape (docs/reference.md §2:
hidden 7168, 256 routed experts of FFN 2048, top-8, one shared expert, FP8 weights with one FP32
scale per 128x128 block) and the deployment's TP16 (each socket holds 1/16 of every expert), not
read from the simulator.
"""
from __future__ import annotations

import math
from itertools import pairwise

import pytest

from sn40l_sim.ir import ParallelPlan, Shape
from sn40l_sim.models import params as P
from sn40l_sim.models.builder import build_graph

PLAN = ParallelPlan(tp=16, attention_dp=16)
HIDDEN, EXPERTS, TOP_K, EXPERT_FFN, TP = 7168, 256, 8, 2048, 16


def _fp8_bytes(rows: int, cols: int) -> int:
    """FP8 elements plus one FP32 scale per 128x128 block."""
    return rows * cols + math.ceil(rows / 128) * math.ceil(cols / 128) * 4


#: one socket's shard of one expert: gate+up split by columns, down by rows
SHARD = _fp8_bytes(HIDDEN, 2 * EXPERT_FFN // TP) + _fp8_bytes(EXPERT_FFN // TP, HIDDEN)


def distinct(rows: int) -> float:
    """E * (1 - (1 - k/E) ** T): the expected distinct experts ``rows`` uniformly routed rows touch."""
    return EXPERTS * (1 - (1 - TOP_K / EXPERTS) ** rows)


def _step(r1, batch, drafts=0, **kw):
    return build_graph(r1, Shape("decode", batch, 0, 1024, drafts=drafts), PLAN, **kw)


def _ffn(graph, name="L03.ffn"):
    kernel = next(k for k in graph.kernels() if k.name == name)
    ops = {op.name: op for op in kernel.operators}
    return kernel, ops["expert_gate_up"].weight_bytes + ops["expert_down"].weight_bytes, \
        ops["shared_gate_up"].weight_bytes + ops["shared_down"].weight_bytes


@pytest.mark.parametrize("drafts", [0, 2])
def test_expert_bytes_follow_the_distinct_experts_the_rows_touch(r1, drafts):
    streamed, shared = [], set()
    for batch in (1, 2, 4, 16, 64, 128, 1024):
        graph = _step(r1, batch, drafts)
        _, experts, shared_bytes = _ffn(graph)
        rows = batch * (1 + drafts)   # a verify step routes every query row
        # the share of the stream is kept to a millionth of the experts (sn40l_sim/models/moe.py)
        assert experts == pytest.approx(distinct(rows) * SHARD, abs=EXPERTS * SHARD / 1e6)
        if drafts:
            # a draft run routes one row per sequence
            _, draft_experts, _ = _ffn(graph, "MTP1.ffn")
            assert draft_experts == pytest.approx(distinct(batch) * SHARD, abs=EXPERTS * SHARD / 1e6)
        streamed.append(experts)
        shared.add(shared_bytes)
    assert all(b > a for a, b in pairwise(streamed[:-1]))
    # a thousand rows touch every expert, to the byte; the shared expert streams whatever the batch
    assert streamed[-1] == EXPERTS * SHARD
    assert shared == {_fp8_bytes(HIDDEN, 2 * EXPERT_FFN // TP) + _fp8_bytes(EXPERT_FFN // TP, HIDDEN)}


def test_the_static_kernel_streams_every_expert_at_every_batch(r1):
    for batch, drafts in ((1, 0), (16, 2), (64, 2)):
        graph = _step(r1, batch, drafts, expert_loading="all")
        for name in ("L03.ffn", *(("MTP0.ffn",) if drafts else ())):
            kernel, experts, _ = _ffn(graph, name)
            assert experts == EXPERTS * SHARD
            assert dict(kernel.notes)["experts_loaded"] == EXPERTS
            assert dict(kernel.notes)["experts_touched"] == pytest.approx(
                distinct(batch * (1 + drafts) if name == "L03.ffn" else batch), abs=1e-3)


def test_the_mtp_weights_are_stored_once_and_streamed_once_a_draft(r1):
    stored_extra = P.weight_bytes_per_socket(r1, PLAN) - P.weight_bytes_per_socket(r1, PLAN, include_mtp=False)
    graph = _step(r1, 16, 3, expert_loading="all")
    # one draft run's own weights: its projection, its MoE block; the LM head is the main model's
    run = {k.name.split(".", 1)[1]: k.weight_bytes for k in graph.kernels() if k.name.startswith("MTP0.")}
    assert stored_extra == sum(b for name, b in run.items() if name != "lm_head")
    for d in (1, 2):
        assert {k.name.split(".", 1)[1]: k.weight_bytes for k in graph.kernels() if k.name.startswith(f"MTP{d}.")} == run


@pytest.mark.parametrize("batch, drafts", [(1, 0), (16, 2), (64, 2)])
def test_the_moe_all_reduce_carries_every_routed_row(r1, batch, drafts):
    # experts are tensor-parallel, so no dispatch/combine all-to-all: each socket holds every
    # row's partial sum over its expert slices, and one all-reduce of [T, hidden] BF16 sums them
    graph = _step(r1, batch, drafts)
    names = ["L03.ffn"] + [f"MTP{d}.ffn" for d in range(drafts)]
    for name in names:
        kernel = next(k for k in graph.kernels() if k.name == name)
        rows = batch * (1 + drafts) if name == "L03.ffn" else batch
        assert [(c.kind, c.bytes, c.group) for c in kernel.collectives] == [("all_reduce", rows * HIDDEN * 2, 16)]
