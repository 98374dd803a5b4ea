"""Memos a calibration's passes share: operator tilings keyed on the socket as tilings read it
(:func:`~sn40l_sim.mapper.keys.tiling_key`), and each stage's answers kept least recently asked first
(:mod:`sn40l_sim.mapper.stage_limits`). Each shared answer must be the one a cold computation gives."""
from __future__ import annotations

from conftest import deepseek_graph

from sn40l_sim.hardware.loader import with_overrides
from sn40l_sim.ir import Operator
from sn40l_sim.mapper import disk_cache, map_graph, stage_limits, stages
from sn40l_sim.mapper.graph import clear_memo
from sn40l_sim.mapper.keys import UNPLANNED_CALIBRATED, socket_key, tiling_key
from sn40l_sim.mapper.tiling import tile_operator


def _cold(node, graph):
    with disk_cache.cache_in(None):
        clear_memo()
        return map_graph(node, graph)


def test_a_pass_moving_the_hbm_efficiency_shares_tilings_and_maps_as_a_cold_mapping(node):
    graph = deepseek_graph("decode", kv_len=32768, batch=8)
    hbm = node.socket.memory["hbm"].efficiency
    moved = with_overrides(node, {"socket.memory.hbm.efficiency": hbm * 0.97})
    slower = with_overrides(node, {"socket.calibrated.systolic_efficiency": node.socket.calibrated.systolic_efficiency * 0.97})
    cold_moved, cold_slower = _cold(moved, graph), _cold(slower, graph)
    with disk_cache.cache_in(None):
        clear_memo()
        map_graph(node, graph)
        tiled = len(stages._tiling_memo)
        warm_moved = map_graph(moved, graph)              # after the start, as calibrate's HBM pass
        # the operators tiled as on the start (the search, its floors moved, may try a tiling more)
        assert len(stages._tiling_memo) - tiled < tiled / 20
        tiled = len(stages._tiling_memo)
        warm_slower = map_graph(slower, graph)            # GEMMs tiled again, SIMD operators not
        grown = len(stages._tiling_memo) - tiled
    assert tiled / 4 < grown < tiled
    assert warm_moved.kernels == cold_moved.kernels
    assert warm_slower.kernels == cold_slower.kernels


def test_sockets_that_tile_otherwise_do_not_share_a_tiling(node):
    socket = node.socket
    moved = with_overrides(node, {"socket.memory.hbm.efficiency": socket.memory["hbm"].efficiency / 2,
                                  "socket.calibrated.config_load_bytes_per_s": 3e9}).socket
    assert tiling_key(moved) == tiling_key(socket)
    assert socket_key(moved, UNPLANNED_CALIBRATED) != socket_key(socket, UNPLANNED_CALIBRATED)
    # what a tiling reads: the PCU, the PMU and the tile's networks
    for field, value in [("socket.tile.pcus", socket.tile.pcus - 4), ("socket.pcu.lanes", 2 * socket.pcu.lanes),
                         ("socket.pmu.capacity_bytes", socket.pmu.capacity_bytes / 2),
                         ("socket.tile.vector_network.link_bytes_per_cycle",
                          socket.tile.vector_network.link_bytes_per_cycle // 2)]:
        assert tiling_key(with_overrides(node, {field: value}).socket) != tiling_key(socket), field
    # a GEMM's tiling is keyed on the systolic efficiency too; a SIMD operator's does not read it
    slower = with_overrides(node, {"socket.calibrated.systolic_efficiency": 0.5}).socket
    gemm = Operator("g", "gemm", m=64, k=7168, n=2048, weight_bytes=7168 * 2048 * 2)
    simd = Operator("s", "elementwise", elements=64 * 7168)
    with disk_cache.cache_in(None):
        clear_memo()
        for s in (socket, slower):
            for op in (gemm, simd):
                got = stages.operator_tiling(s, op, 16, socket_key=socket_key(s, UNPLANNED_CALIBRATED))
                assert got == tile_operator(s, op, 16, s.calibrated.systolic_efficiency), (s.calibrated, op.name)
        assert len(stages._tiling_memo) == 2 * 3 + 1      # a GEMM entry and its two dataflows per efficiency; one SIMD
    assert tile_operator(socket, gemm, 16, 0.5) != tile_operator(socket, gemm, 16, 1.0)


def test_stage_limits_drop_the_least_recently_asked_when_full(node, monkeypatch):
    from sn40l_sim.mapper.budget import NO_LIMITS

    socket = node.socket
    ops = [Operator(f"g{i}", "gemm", m=64, k=1024 * (i + 1), n=2048) for i in range(3)]
    first, second, third = (stages.compute_stage(tile_operator(socket, op, 8, 1.0), 8) for op in ops)
    monkeypatch.setattr(stage_limits, "_LIMITS_MEMO_SIZE", 2)
    stage_limits.clear_limits_memo()
    try:
        kept = stage_limits.stage_limits(socket, first, 4, NO_LIMITS)
        stage_limits.stage_limits(socket, second, 4, NO_LIMITS)
        assert stage_limits.stage_limits(socket, first, 4, NO_LIMITS) is kept      # asked again: most recent
        stage_limits.stage_limits(socket, third, 4, NO_LIMITS)                   # full: drops the second
        assert stage_limits.stage_limits(socket, first, 4, NO_LIMITS) is kept
        assert len(stage_limits._limits_memo) == 2
        # two stages of other work never share an entry
        assert stage_limits.stage_limits(socket, second, 4, NO_LIMITS) is not kept
    finally:
        stage_limits.clear_limits_memo()
