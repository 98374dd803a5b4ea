"""A looped kernel's iteration as the mapper scores it (:mod:`sn40l_sim.mapper.read_ahead`) is the
engine's: chunk by chunk against ``_stream_ahead`` on random streams, gates and buffers, and for
whole looped decoders, within SRAM (Llama-3.1-8B at batch 1) and far beyond what half the SRAM can
read ahead (Llama-3.1-8B at batch 64 with 33K-token caches on 8 sockets)."""
from __future__ import annotations

import math
import random
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import simpy

from sn40l_sim.engine.collectives import CollectiveModel
from sn40l_sim.engine.kernel_costs import SectionCosts
from sn40l_sim.engine.kernel_process import KernelRecord, _first_tile_cycles, _stream_ahead
from sn40l_sim.engine.resources import SocketResources
from sn40l_sim.engine.run_graph import EngineOptions, run_graph
from sn40l_sim.frozen import copied
from sn40l_sim.hardware import figures
from sn40l_sim.hardware.loader import load_hardware
from sn40l_sim.ir import ParallelPlan, Shape
from sn40l_sim.kvcache import make_policy
from sn40l_sim.mapper.graph import map_graph
from sn40l_sim.mapper.kernel import LoopContext, best_plan, map_kernel
from sn40l_sim.mapper.loops import find_loops
from sn40l_sim.mapper.read_ahead import RunOn, chunk_tiles, read_ahead_bytes, stream_ahead_cycles
from sn40l_sim.mapper.windows import overlap_windows
from sn40l_sim.models.builder import build_graph
from sn40l_sim.models.loader import load_model

ROOT = Path(__file__).resolve().parents[2]
NODE8 = load_hardware(ROOT / "hw_configs" / "sn40l_node8.yaml")


def _engine_cycles(tiles, per_tile, fill, gate, buffer, bytes_per_cycle, n_bytes):
    env = simpy.Environment()
    res = SocketResources.build(env, NODE8)
    res.buffer_bytes = buffer
    costs = SectionCosts(chunks=tiles, compute_cycles_per_tile=per_tile, tier_bytes={"hbm": n_bytes},
                         tier_caps={"hbm": bytes_per_cycle}, fill_cycles=fill)
    record = KernelRecord("k", "decoder", 0, None, tier_bytes={"hbm": 0})
    env.process(_stream_ahead(res, record, costs, env.timeout(gate)))
    env.run()
    return env.now


def test_the_read_ahead_replays_the_engines_iteration_chunk_by_chunk():
    rng = random.Random(7)
    rate = 500   # bytes per cycle, below the HBM channel's, so every chunk takes whole cycles
    for _ in range(60):
        n_tiles = rng.choice((1, 3, 8, 20, 64))
        tiles = chunk_tiles(n_tiles, 8)
        per_tile, fill, gate = rng.randrange(0, 400), rng.randrange(0, 3000), rng.randrange(0, 40_000)
        per_tile_bytes = rate * rng.randrange(1, 600)
        n_bytes = per_tile_bytes * n_tiles
        buffer = rng.choice((0, per_tile_bytes, 3.5 * per_tile_bytes, n_bytes / 2, 2 * n_bytes))
        sizes = [k * per_tile_bytes for k in tiles]
        loads = [size // rate for size in sizes]
        expected = _engine_cycles(tiles, per_tile, fill, gate, buffer, rate, n_bytes)
        assert stream_ahead_cycles(tiles, sizes, loads, per_tile, fill, gate, buffer) == expected


def test_a_stream_cut_into_chunks_takes_as_long_as_the_whole_stream():
    # 8 chunks of 1,001 bytes at 10 a cycle: one stream of 8,008 bytes ends at cycle 801 and its
    # last tile computes by 802; a chunk's end is no pause of the memory stage, so the chunks'
    # streams take no whole cycle each (8 x 101 + 1 = 809 when each lost its last cycle's rest)
    assert _engine_cycles((1,) * 8, 1, 0, 0, 10**12, 10.0, 8008) == 802
    # a stream held back for buffer space starts its next chunk afresh: with room for one chunk,
    # each chunk's stream waits for the compute of the one before (101 cycles, then 1 of compute)
    assert _engine_cycles((1,) * 8, 1, 0, 0, 1001, 10.0, 8008) == 8 * 102


def test_the_read_ahead_replays_the_engines_stream_running_on_across_chunk_ends():
    rng = random.Random(11)
    for _ in range(60):
        n_tiles = rng.choice((1, 3, 8, 20, 64))
        tiles = chunk_tiles(n_tiles, 8)
        per_tile, fill, gate = rng.randrange(0, 400), rng.randrange(0, 3000), rng.randrange(0, 40_000)
        # a rate that does not divide the chunks' bytes: they end within a cycle
        rate = rng.choice((123.4, 333.3, 499.7))
        n_bytes = rng.randrange(1, 600 * 500) * n_tiles
        # the engine's integer shares of the tier's bytes (SectionCosts.bytes_between)
        edges = [n_bytes * first // n_tiles for first in (0, *(sum(tiles[:k + 1]) for k in range(len(tiles))))]
        sizes = [b - a for a, b in zip(edges, edges[1:], strict=False)]
        buffer = rng.choice((0, n_bytes / n_tiles, 3.5 * n_bytes / n_tiles, n_bytes / 2, 2 * n_bytes))
        loads = [math.ceil(size / rate - 1e-9) for size in sizes]
        expected = _engine_cycles(tiles, per_tile, fill, gate, buffer, rate, n_bytes)
        run_on = RunOn({"hbm": (sizes, rate)})
        assert stream_ahead_cycles(tiles, sizes, loads, per_tile, fill, gate, buffer, arrive=run_on.arrive) == expected


@pytest.mark.parametrize("batch,kv_len,beyond", [(1, 2048, False), (64, 33280, True)])
def test_a_looped_decoders_score_is_the_engines_iteration(batch, kv_len, beyond):
    model = load_model(ROOT / "graphs" / "llama3_1_8b.yaml")
    graph = build_graph(model, Shape("decode", batch, 0, kv_len), ParallelPlan(8, 8 if batch > 1 else 1),
                        make_policy("full", {}))
    collectives = CollectiveModel.from_node(NODE8)
    placed = map_graph(NODE8, graph, looping=True, collective_cycles=lambda c: collectives.run(c).cycles)
    (loop,) = find_loops([pk.kernel for pk in placed.kernels], graph)
    kernel = placed.kernels[loop.first].kernel
    # the mapper's context: the gate of the collectives after the tiles, and the windows of those
    # beside their operator (which cut the stream's chunks as the engine's do)
    gate = round(sum(collectives.run(c).cycles for c in kernel.collectives if not (c.overlapped and c.after)))
    windows = overlap_windows(NODE8.socket, kernel, lambda c: collectives.run(c).cycles)
    context = LoopContext(loop.iterations, gate, True, windows=windows)
    plan = best_plan(NODE8.socket, kernel.signature(), placed.memory.tiers(), loop=context)
    reload = figures.config_cycles(NODE8.socket, plan.sections[0].config_bytes(NODE8.socket)) / loop.iterations
    # the engine runs the plan scored: the step's own search may place the decoder otherwise (side
    # by side with the kernels called once, in a room of its own), whatever this plan's score
    mapped = map_kernel(NODE8.socket, kernel, placed.memory.tiers(), loop=context)
    assert (mapped.n_tiles, mapped.chip_tiles) == (plan.n_tiles, plan.chip_tiles)
    kernels = list(placed.kernels)
    kernels[loop.first:loop.stop] = [copied(mapped, kernel=pk.kernel) for pk in kernels[loop.first:loop.stop]]
    # the collectives' bytes staged through memory would share the stream's channel: left out here
    run = run_graph(NODE8, replace(placed, kernels=tuple(kernels)), EngineOptions(stage_collectives=False))
    # the loop's mean iteration from its call's boundary and configuration load on, the first
    # iteration being the call (no gate, its fill before its stream: tests/mapper/test_loop_first_iteration.py)
    records = run.records[loop.first:loop.stop]
    begun = records[0].start + records[0].launch_cycles + records[0].barrier_cycles + records[0].config_cycles
    # to the last iteration's windows' end, which the kernel after the loop waits for: its end less
    # the collectives after its tiles that do not overlap them, which take the links after the
    # windows' last shares (docs/validation.md, "A loop's last windows")
    last = records[-1]
    windows_end = last.end - sum(c.end - c.start for c in last.collectives if not c.collective.overlapped)
    assert plan.objective[0] - reload == (windows_end - begun) / len(records)
    assert (sum(mapped.tier_bytes.values()) > read_ahead_bytes(NODE8.socket)) == beyond


def test_the_first_tile_leaves_after_its_bytes_in_whole_cycles():
    # 4 tiles of 1001 HBM bytes each at 100 bytes a cycle: the first tile's bytes take 10.01 cycles,
    # so it leaves after 11 whole cycles, not the 10 of its compute
    def on_path(*rates: float) -> SimpleNamespace:   # a socket whose path to HBM crosses channels of these rates
        return SimpleNamespace(memory_path=lambda tier: tuple(SimpleNamespace(bytes_per_cycle=r) for r in rates),
                               path_bytes_per_cycle=lambda tier: min(rates))

    res = on_path(100.0, 4096.0)
    section = SectionCosts(chunks=(4,), compute_cycles_per_tile=10, tier_bytes={"hbm": 4 * 1001},
                           tier_caps={"hbm": 1000.0}, fill_cycles=0)
    assert _first_tile_cycles(section, res) == 11
    slower = SectionCosts(chunks=(4,), compute_cycles_per_tile=10, tier_bytes={"hbm": 4 * 1001},
                          tier_caps={"hbm": 50.0}, fill_cycles=0)
    assert _first_tile_cycles(slower, res) == 21   # the section's own cap binds: 1001 / 50 = 20.02
    # a top-level network narrower than the memory channel binds as it binds the chunks' streams
    assert _first_tile_cycles(section, on_path(100.0, 40.0)) == 26   # 1001 / 40 = 25.03
