"""The prefixes a chunk graph is timed at (serving/chunked_prefill.py, ``ChunkCycles``): every
multiple of the chunk while a prompt has at most ``CHUNK_PREFIX_INTERVALS`` chunks (the cycles as
before, lazily), else at most ``CHUNK_PREFIX_INTERVALS + 1`` chosen where the cycles stray from a
line (serving/earlier_keys.py, ``refined_points``), exact there and linear between. A 1-token chunk
of an 8K prompt timed 8,192 graphs (over half an hour of mapping); it now times at most 65."""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pytest

from sn40l_sim.hardware.loader import load_hardware
from sn40l_sim.ir import ParallelPlan
from sn40l_sim.kvcache import make_policy
from sn40l_sim.mapper import place_memory
from sn40l_sim.models.loader import load_model
from sn40l_sim.serving.chunked_prefill import CHUNK_PREFIX_INTERVALS, ChunkCycles, interpolated_chunk_cycles
from sn40l_sim.serving.earlier_keys import refined_points
from sn40l_sim.serving.fixed_costs import FixedStepCosts
from sn40l_sim.serving.point import PointSetup, simulate_point
from sn40l_sim.serving.workload import Request

REPO = Path(__file__).resolve().parents[2]


def jumpy(tokens: int, earlier: int) -> int:
    """A call's fixed cost, attention over the earlier keys, and the mapper's plan changing at
    three counts of keys (one a narrow bump: a plan that is worse only for a while)."""
    keys = tokens + earlier
    steps = 40_000 * (keys >= 2_100) + 55_000 * (keys >= 5_000) - 30_000 * (keys >= 6_000)
    return 1_000_000 + 300 * tokens + 2 * tokens * earlier + steps + (25_000 if 3_000 <= keys < 3_090 else 0)


def counting(graph):
    calls: list[tuple[int, int]] = []

    def timed(tokens: int, earlier: int) -> int:
        calls.append((tokens, earlier))
        return graph(tokens, earlier)
    return timed, calls


@pytest.mark.parametrize("chunk, prompt_len", [(128, 8192), (1000, 8192), (3000, 8192), (130, 8192), (1, 64)])
def test_a_prompt_of_few_chunks_is_timed_at_every_multiple_as_before(chunk, prompt_len):
    # at most 64 chunks to a prompt: the cycles of every start are those of the two multiples around
    # it (the shipped experiments and every figure the docs quote: 16 chunks at most)
    assert math.ceil(prompt_len / chunk) <= CHUNK_PREFIX_INTERVALS
    cycles = ChunkCycles(jumpy, chunk, prompt_len)
    for tokens in (chunk, max(1, chunk // 3)):
        assert cycles.prefixes(tokens) == tuple(range(0, math.ceil(prompt_len / chunk) * chunk + 1, chunk))
        assert [cycles(e, tokens) for e in range(0, prompt_len, max(1, chunk // 7))] == \
            [interpolated_chunk_cycles(jumpy, chunk, e, tokens) for e in range(0, prompt_len, max(1, chunk // 7))]


@pytest.mark.parametrize("chunk, prompt_len", [(1, 8192), (8, 8192), (64, 8192), (100, 8192), (64, 65 * 64)])
def test_a_prompt_of_many_chunks_is_timed_at_65_prefixes_at_most_exact_there(chunk, prompt_len):
    timed, calls = counting(jumpy)
    cycles = ChunkCycles(timed, chunk, prompt_len)
    prefixes = cycles.prefixes(chunk)
    assert len(set(calls)) == len(prefixes) <= CHUNK_PREFIX_INTERVALS + 1
    assert prefixes[0] == 0 and prefixes[-1] >= prompt_len - 1 and all(p % chunk == 0 for p in prefixes)
    assert all(cycles(p, chunk) == jumpy(chunk, p) for p in prefixes)
    # every change of plan lies between two timed multiples a chunk apart
    for keys in (2_100, 5_000, 6_000):
        jump = keys - chunk       # the first earlier count whose chunk reaches ``keys`` keys
        after = -(-jump // chunk) * chunk
        assert after > prefixes[-1] or (after in prefixes and after - chunk in prefixes)
    # so every chunk start is within the interpolation's rounding of its own cycles, but where the
    # bump, narrower than two multiples, falls between two timed ones: only timing it finds it
    for start in range(0, prompt_len, chunk):
        error = abs(cycles(start, chunk) - jumpy(chunk, start))
        assert error <= (25_000 if 3_000 <= start + chunk < 3_090 + chunk else 1), start


def test_the_points_find_every_jump_and_are_few_where_the_cycles_are_straight():
    # a straight line needs only the 17 first points; a jump draws them in until it lies between
    # two neighbours
    assert len(refined_points(8191, lambda i: 7 * i + 3, 65, 16)) == 17
    values = refined_points(8191, lambda i: 7 * i + (900 if i >= 5000 else 0), 65, 16)
    assert 4999 in values and 5000 in values and len(values) < 65
    # two jumps in neighbouring spans make them equally steep: against each other neither strays,
    # against the slope elsewhere both do
    values = refined_points(8192, lambda i: 7 * i + 1000 * ((i >= 4200) + (i >= 4700)), 65, 16)
    assert {4199, 4200, 4699, 4700} <= set(values)
    # the first points are a uniform grid; a function that bends everywhere uses all 65
    assert len(refined_points(8191, lambda i: i * i, 65, 16)) == 65
    with pytest.raises(ValueError, match="16 spans"):
        refined_points(8191, lambda i: i, 16, 16)
    with pytest.raises(ValueError):   # no point lies outside them
        ChunkCycles(jumpy, 1, 8192)(8193, 1)


@dataclass
class _Jumpy(FixedStepCosts):
    """Fixed costs whose chunk graphs change plan at 5,000 earlier tokens."""

    def prefill(self, prompt_len, memory=None, earlier=0):
        timing = super().prefill(prompt_len, memory, earlier)
        if earlier >= 5000:
            timing.kernel_cycles["plan"] = 50_000
            return type(timing)(**{**timing.__dict__, "cycles": timing.cycles + 50_000})
        return timing


@pytest.mark.parametrize("costs, jump", [(FixedStepCosts(), False), (_Jumpy(), True)], ids=["straight", "jump"])
def test_a_one_token_chunk_of_an_8k_prompt_times_few_graphs(costs, jump):
    # Llama-3.1-8B on an 8-socket node, two 8K prompts co-located in 1-token chunks: 16,384
    # chunks, at most 65 chunk graphs timed (it was 8,192, one per earlier count)
    node, llama = load_hardware(REPO / "hw_configs/sn40l_node8.yaml"), load_model(REPO / "graphs/llama3_1_8b.yaml")
    s = PointSetup("full", node, llama, make_policy("full"), prompt_len=8192, prefill_plan=ParallelPlan(tp=8),
                   decode_plan=ParallelPlan(tp=8), batch_sizes=(8,), prefill_lens=(1, 8192), max_new_tokens=4,
                   mode="colocated", prefill_chunk=1)
    result = simulate_point(s, lambda slots: [Request(i, 0, 8192, 4) for i in range(2)], costs,
                            partial(place_memory, node, llama))
    chunk_graphs = {call for call in costs.calls if call[:2] == ("prefill", 1)}
    if jump:    # the jump draws points in, at most 65
        assert 17 < len(chunk_graphs) <= CHUNK_PREFIX_INTERVALS + 1
    else:       # a straight line: its 17 first points
        assert len(chunk_graphs) == 17
    assert all(len(r.prefill_chunks) == 8192 for r in result.log.requests)
