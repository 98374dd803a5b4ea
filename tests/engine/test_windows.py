"""An overlapped collective's window (sn40l_sim/engine/windows.py): it runs beside its operator's part
of the stream, the later data tiles wait for it, and its last data tile's share takes the links."""
from __future__ import annotations

import dataclasses
import math

import simpy
from engine_doubles import chain, node16, placed_kernel

from sn40l_sim.engine import windows as windows_module
from sn40l_sim.engine.collectives import CollectiveModel
from sn40l_sim.engine.resources import SocketResources
from sn40l_sim.engine.run_graph import EngineOptions, run_graph
from sn40l_sim.ir import Collective
from sn40l_sim.mapper.windows import window_fractions, window_tiles

NODE = node16()
MODEL = CollectiveModel.from_node(NODE)
PLAIN = EngineOptions(kernel_boundaries=False, kernel_looping=False, stage_collectives=False)
TILES, PER_TILE = 100, 400


def _two_operators(collectives: tuple[Collective, ...]):
    """A kernel of two equal operators, ``a`` then ``b``, 100 data tiles of 400 compute cycles."""
    pk = placed_kernel(NODE, "k", n_tiles=TILES, compute_cycles_per_tile=PER_TILE)
    op = pk.kernel.operators[0]
    half = dataclasses.replace(op, flops=op.flops // 2)
    ops = (dataclasses.replace(half, name="a"), dataclasses.replace(half, name="b"))
    return dataclasses.replace(pk, kernel=dataclasses.replace(pk.kernel, operators=ops, collectives=collectives))


def _run(pk):
    return run_graph(NODE, chain([pk]), PLAIN).records[0]


def test_a_window_closing_mid_stream_holds_the_later_tiles():
    coll = Collective("all_reduce", 2**22, 16, overlapped=True, after="a")
    pk = _two_operators((coll,))
    assert window_fractions(NODE.socket, pk.kernel, coll) == (0.0, 0.5)
    first, stop = window_tiles((0.0, 0.5), TILES)
    rec = _run(pk)
    run = rec.collectives[0]
    cycles = MODEL.run(coll).cycles
    assert cycles > (stop - first) * PER_TILE          # it outlasts its operator's part
    assert run.start == rec.stream_start + PER_TILE    # its first tile out
    # the tiles of ``b`` read the reduced rows: they follow the collective, not its operator
    assert rec.stream_end >= run.end + (TILES - stop) * PER_TILE
    assert rec.end == rec.stream_end
    assert rec.gate_cycles == run.end - (rec.stream_start + stop * PER_TILE)


def test_a_window_after_its_operator_starts_with_its_operator():
    coll = Collective("all_reduce", 2**16, 16, overlapped=True, after="b")
    rec = _run(_two_operators((coll,)))
    run = rec.collectives[0]
    first, stop = window_tiles((0.5, 1.0), TILES)
    assert (first, stop) == (50, 100)
    assert run.start == rec.stream_start + (first + 1) * PER_TILE
    share = MODEL.run(dataclasses.replace(coll, bytes=math.ceil(coll.bytes / (stop - first)))).cycles
    assert rec.end == max(run.end, rec.stream_end + share)


def test_the_last_share_takes_the_links_after_another_collective():
    # an overlapped all-reduce done before the stream ends leaves its last share for after it; the
    # kernel's plain all-to-all holds the links then, so the two follow each other on them
    small = Collective("all_reduce", 2**16, 16, overlapped=True)
    other = Collective("all_to_all", 2**24, 16)
    rec = _run(placed_kernel(NODE, "k", n_tiles=TILES, compute_cycles_per_tile=PER_TILE, collectives=(small, other)))
    share = MODEL.run(dataclasses.replace(small, bytes=math.ceil(small.bytes / TILES))).cycles
    assert rec.collectives[0].end < rec.stream_end
    assert rec.end - rec.stream_end == share + MODEL.run(other).cycles


def test_windows_without_contention_end_as_before():
    # a whole-stream window: the kernel ends with its collective or its share after the stream
    for n_bytes in (2**12, 2**26):
        coll = Collective("all_reduce", n_bytes, 16, overlapped=True)
        rec = _run(placed_kernel(NODE, "k", n_tiles=TILES, compute_cycles_per_tile=PER_TILE, collectives=(coll,)))
        share = MODEL.run(dataclasses.replace(coll, bytes=math.ceil(n_bytes / TILES))).cycles
        assert rec.end == max(rec.collectives[0].end, rec.stream_end + share)


def test_window_tiles_cover_at_least_one_tile():
    assert window_tiles((0.999, 1.0), 8) == (7, 8)
    assert window_tiles((0.0, 0.0001), 8) == (0, 1)
    assert window_tiles((0.25, 0.5), 8) == (2, 4)


def test_no_window_opens_or_closes_before_its_tiles_data_has_arrived(monkeypatch):
    # a memory-bound stream whose compute would reach the window's end long before the memory
    # brings its operator's last tile: the window closes (and the stream waits there) only once
    # the data up to that tile has streamed in at the channel's rate, whatever the chunking
    reached: list[tuple[int, int]] = []
    plain_reach = windows_module.Windows.reach

    def logged_reach(self, tile):
        reached.append((tile, self.res.env.now))
        yield from plain_reach(self, tile)

    monkeypatch.setattr(windows_module.Windows, "reach", logged_reach)
    n_bytes = 2**31
    coll = Collective("all_reduce", 2**16, 16, overlapped=True, after="a")
    pk = _two_operators((coll,))
    pk = dataclasses.replace(pk, kernel=dataclasses.replace(pk.kernel, operators=tuple(
        dataclasses.replace(op, weight_bytes=n_bytes // 2) for op in pk.kernel.operators)))
    moved = placed_kernel(NODE, "k", n_tiles=TILES, compute_cycles_per_tile=PER_TILE, hbm_bytes=n_bytes)
    pk = dataclasses.replace(moved, kernel=pk.kernel)
    rec = _run(pk)
    bytes_per_cycle = SocketResources.build(simpy.Environment(), NODE).path_bytes_per_cycle("hbm")
    assert n_bytes / TILES / bytes_per_cycle > 2 * PER_TILE          # memory-bound by far
    stop = window_tiles(window_fractions(NODE.socket, pk.kernel, coll), TILES)[1]
    assert 0 < stop < TILES
    for tile, now in reached:
        if 0 < tile < TILES:
            assert now - rec.stream_start >= math.floor(tile * n_bytes / TILES / bytes_per_cycle), tile
    assert any(tile == stop for tile, _ in reached)


def test_a_whole_stream_windows_last_share_is_of_one_sections_tiles():
    # a kernel of 2 sections streams 2 x 100 data tiles; a collective naming no operator has the
    # whole stream and "its share of tiles" (Windows' docstring), one section's: its last share is
    # 1/100 of its bytes, as for one section, not 1/200
    coll = Collective("all_reduce", 2**22, 16, overlapped=True)
    rec = _run(placed_kernel(NODE, "k", n_tiles=TILES, compute_cycles_per_tile=PER_TILE, sections=2,
                             collectives=(coll,)))
    share = MODEL.run(dataclasses.replace(coll, bytes=math.ceil(coll.bytes / TILES))).cycles
    assert share > MODEL.run(dataclasses.replace(coll, bytes=math.ceil(coll.bytes / (2 * TILES)))).cycles
    assert rec.collectives[0].end < rec.stream_end
    assert rec.end == rec.stream_end + share
