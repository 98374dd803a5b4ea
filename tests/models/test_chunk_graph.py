"""The graph of a later chunk of a chunked prefill (a prefill ``Shape`` with ``kv_len`` earlier
tokens): its attention covers the earlier tokens' keys, the rest of the graph is the chunk's own."""
from __future__ import annotations

import pytest

from sn40l_sim.errors import InputError
from sn40l_sim.ir import ParallelPlan, Shape
from sn40l_sim.models.builder import build_graph
from sn40l_sim.models.flash import causal_tile_pairs

TP8 = ParallelPlan(tp=8)


def scores(length, block_q, block_kv, prefix=0):
    return sum(r * c * n for r, c, n in causal_tile_pairs(length, block_q, block_kv, prefix))


@pytest.mark.parametrize("length, chunk", [(10, 3), (64, 16), (100, 100), (37, 1)])
def test_chunks_with_one_token_tiles_compute_exactly_the_prompts_pairs(length, chunk):
    parts = [(s, min(length, s + chunk) - s) for s in range(0, length, chunk)]
    assert [scores(n, 1, 1, s) for s, n in parts] == [n * s + n * (n + 1) // 2 for s, n in parts]
    assert sum(scores(n, 1, 1, s) for s, n in parts) == scores(length, 1, 1) == length * (length + 1) // 2


@pytest.mark.parametrize("block_q, block_kv", [(4, 4), (8, 4), (3, 5), (8192, 8192)])
def test_a_chunk_computes_more_the_later_it_comes_and_the_chunks_no_more_than_the_prompt(block_q, block_kv):
    length, chunk = 96, 16
    per_chunk = [scores(chunk, block_q, block_kv, s) for s in range(0, length, chunk)]
    assert per_chunk == sorted(per_chunk) and per_chunk[0] < per_chunk[-1]
    # block skipping is finer within a chunk: the whole prompt computes at least as many scores
    assert sum(per_chunk) <= scores(length, block_q, block_kv)


@pytest.mark.parametrize("model_name, attention", [("llama8b", "attention"), ("r1", "mha")])
def test_only_the_attention_kernels_grow_with_the_earlier_tokens(model_name, attention, request):
    model = request.getfixturevalue(model_name)
    graphs = {s: build_graph(model, Shape("prefill", 1, 1024, s), TP8) for s in (0, 1024, 7168)}
    kernels = {s: {k.name: k for k in g.kernels()} for s, g in graphs.items()}
    flops = {s: sum(op.flops for k in ks.values() if k.kind == attention for op in k.operators)
             for s, ks in kernels.items()}
    reads = {s: sum(op.act_in_bytes + op.kv_read_bytes for k in ks.values() if k.kind == attention
                    for op in k.operators) for s, ks in kernels.items()}
    assert flops[0] < flops[1024] < flops[7168] and reads[0] < reads[1024] < reads[7168]
    for name, kernel in kernels[0].items():
        if kernel.kind != attention:
            assert kernels[7168][name] == kernel, name


def test_a_negative_count_of_earlier_tokens_is_refused(llama8b):
    with pytest.raises(InputError, match="kv_len must be >= 0"):
        build_graph(llama8b, Shape("prefill", 1, 1024, -1), TP8)
