"""A prefill attention kernel whose FlashAttention tiles are of several shapes carries a version
with its edge tiles padded to whole tiles (sn40l_sim/models/flash.py): the same pairs of one shape,
the same memory traffic as the whole tiles' kernel and the memory sizing of the prompt's."""
from __future__ import annotations

import pytest

from sn40l_sim.ir import ParallelPlan, Shape
from sn40l_sim.models.builder import build_graph
from sn40l_sim.models.flash import causal_tile_pairs, padded_tile_pairs
from sn40l_sim.models.loader import load_model
from sn40l_sim.models.template import GRAPHS_DIR

MODELS = [("llama3_1_8b.yaml", 8, "attention"), ("deepseek_r1.yaml", 16, "mha")]


def _attention(model_file: str, tp: int, kind: str, prompt: int):
    graph = build_graph(load_model(GRAPHS_DIR / model_file), Shape("prefill", 1, prompt), ParallelPlan(tp))
    return next(k for k in graph.kernels() if k.kind == kind), graph


@pytest.mark.parametrize("length, block, prefix", [(16383, 8192, 0), (24577, 8192, 0), (10, 4, 0), (4, 4, 6),
                                                   (9000, 4096, 3000)])
def test_padding_keeps_the_pairs_and_only_grows_them(length, block, prefix):
    tiles = causal_tile_pairs(length, block, block, prefix)
    assert len(tiles) > 1 and all(r <= block and c <= block for r, c, _ in tiles)
    assert padded_tile_pairs(length, block, block, prefix) == [(block, block, sum(p for _, _, p in tiles))]


@pytest.mark.parametrize("model_file, tp, kind", MODELS)
def test_a_prompt_one_short_of_whole_tiles_carries_the_whole_tiles_kernel(model_file, tp, kind):
    short, short_graph = _attention(model_file, tp, kind, 16383)
    whole, whole_graph = _attention(model_file, tp, kind, 16384)
    assert whole.padded is None and len(short.operators) == len(whole.operators) + 4   # two flash GEMMs x 3 shapes
    padded = short.padded
    assert [op.name for op in padded.operators] == [op.name for op in whole.operators]
    for mine, theirs in zip(padded.operators, whole.operators, strict=True):
        # the same shapes, FLOPs and streamed bytes as 16,384 tokens: only the last output row is not written
        assert (mine.m, mine.n, mine.k, mine.count, mine.flops) == (theirs.m, theirs.n, theirs.k, theirs.count,
                                                                     theirs.flops)
        assert (mine.act_in_bytes, mine.kv_read_bytes, mine.elements) == (theirs.act_in_bytes, theirs.kv_read_bytes,
                                                                          theirs.elements)
    # the padding is traffic: what is resident is the prompt's, as the memory sizing counts it
    assert padded.resident_activation_bytes == short.resident_activation_bytes
    assert padded.flops > short.flops
    # only the attention kernels have a second version, and every layer's is the same one
    versions = {id(k.padded) for k in short_graph.kernels() if k.padded is not None}
    assert len(versions) == 1 and all(k.padded is None for k in short_graph.kernels() if k.kind != kind)


@pytest.mark.parametrize("prompt", [1000, 8192, 131072])
def test_tiles_of_one_shape_have_no_padded_version(prompt):
    _, graph = _attention("llama3_1_8b.yaml", 8, "attention", prompt)
    assert all(k.padded is None for k in graph.kernels())
