"""The cache a decode step's attention reads is the cache its socket holds: the memory rule
(kvcache/sizing.py) and the attention formulas (models/families) agree on every parallel plan,
including sockets sharing a KV head (each holds a replica) and attention groups of several
sockets (1 < attention_dp < tp)."""
from __future__ import annotations

from pathlib import Path

import pytest

from sn40l_sim.ir import ParallelPlan, Shape
from sn40l_sim.kvcache.sizing import kv_bytes_per_socket
from sn40l_sim.models.builder import build_graph
from sn40l_sim.models.loader import load_model

GRAPHS = Path(__file__).resolve().parents[2] / "graphs"


@pytest.mark.parametrize("name", ["llama3_1_8b", "llama3_1_70b", "deepseek_r1"])
@pytest.mark.parametrize("tp, dp", [(8, 1), (16, 1), (16, 2), (16, 4), (16, 16)])
@pytest.mark.parametrize("batch", [1, 5, 16])
def test_a_decode_step_reads_exactly_the_cache_its_socket_holds(name: str, tp: int, dp: int, batch: int) -> None:
    model, plan, kv_len = load_model(GRAPHS / f"{name}.yaml"), ParallelPlan(tp, dp), 1000
    graph = build_graph(model, Shape("decode", batch, 0, kv_len), plan)
    read = sum(op.kv_read_bytes for kernel in graph.kernels() for op in kernel.operators)
    assert read == kv_bytes_per_socket(model, plan, batch, kv_len)


def test_a_socket_whose_query_heads_span_two_kv_groups_holds_and_reads_both() -> None:
    # 24 query heads in 6 groups of 4 over 8 sockets: the second socket runs heads 3-5, of groups
    # 0 and 1, so it needs the K and V of two heads, not ceil(6 / 8) = 1
    llama = load_model(Path(__file__).parents[2] / "graphs" / "llama3_1_8b.yaml")
    model = llama.model_copy(update={"attention": llama.attention.model_copy(update={"heads": 24, "kv_heads": 6})})
    plan, kv_len = ParallelPlan(8), 1024
    graph = build_graph(model, Shape("decode", 1, 0, kv_len=kv_len), plan)
    qk = next(op for op in graph.graph.nodes["L00.decoder"]["kernel"].operators if op.name == "gqa_qk")
    head_dim = model.attention.head_dim
    assert qk.kv_read_bytes == 2 * kv_len * head_dim * 2
    assert kv_bytes_per_socket(model, plan, 1, kv_len) == 2 * kv_len * 2 * head_dim * 2 * model.layers
