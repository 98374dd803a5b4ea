"""Kernel execution in SimPy on hand-made placed kernels: agreement with the tile-level formula,
lower bounds, busy time within elapsed time, byte conservation, overlap of collectives."""
from __future__ import annotations

import dataclasses
import math

import pytest
from engine_doubles import chain, ddr_bytes_per_cycle, hbm_bytes_per_cycle, node16, placed_kernel, tier_bytes_per_cycle

import sn40l_sim.engine.run_graph as run_graph_module
from sn40l_sim.engine.breakdown import step_breakdown_cycles
from sn40l_sim.engine.collectives import CollectiveModel
from sn40l_sim.engine.phase import phase_timing
from sn40l_sim.engine.run_graph import EngineOptions, run_graph
from sn40l_sim.hardware import figures
from sn40l_sim.ir import Collective

NODE = node16()
BOUNDARY = CollectiveModel.from_node(NODE).boundary
#: a TP16 kernel's call: the host's launch and the barrier of its 16 sockets
CALL = BOUNDARY.launch_cycles + BOUNDARY.barrier_cycles(16)
NO_OVERHEAD = EngineOptions(kernel_boundaries=False, kernel_looping=False, stage_collectives=False)


def run(kernels, options=NO_OVERHEAD):
    return run_graph(NODE, chain(kernels), options)


@pytest.mark.parametrize("n_tiles,cpt,hbm,ddr", [
    (64, 100, 0, 0),                 # compute only
    (64, 100, 10**7, 0),             # memory-bound
    (1000, 30, 10**6, 0),            # compute-bound with memory
    (333, 57, 4 * 10**6, 3 * 10**5),  # both tiers
    (1, 5000, 10**5, 0),             # a single tile
])
def test_lone_kernel_matches_the_tile_level_formula(n_tiles, cpt, hbm, ddr):
    pk = placed_kernel(NODE, "k", n_tiles=n_tiles, compute_cycles_per_tile=cpt, hbm_bytes=hbm, ddr_bytes=ddr)
    result = run([pk])
    # the formula rounds each tile's memory time up to whole cycles; the fluid engine rounds
    # once per chunk, so it may be faster by up to a cycle per tile, never slower than a cycle per chunk
    assert pk.cycles - n_tiles <= result.cycles <= pk.cycles + 8


def _alternating(pcus: int) -> list:
    """Kernels ``a, b, a, b`` on ``pcus`` PCUs of every tile each, ``b``'s configuration twice ``a``'s."""
    kinds = ("a", "b", "a", "b")
    pks = [placed_kernel(NODE, f"k{i}", kind, layer=i, config_bytes=10**6 * (1 + (kind == "b")))
           for i, kind in enumerate(kinds)]
    return [dataclasses.replace(pk, pcus_per_tile=(pcus,) * 4, kernel=dataclasses.replace(
        pk.kernel, operators=(dataclasses.replace(pk.kernel.operators[0], name=kind),)))
            for pk, kind in zip(pks, kinds, strict=True)]



def test_a_memory_bound_loop_hides_its_windows_wait_under_the_stream_too():
    # as above, with each iteration's all-reduce in the window of its first operator ("a"), whose
    # later tiles read the reduced rows: the weights stream on through that wait and still set the
    # iteration's length, so the wait is hidden and the iteration all memory-bound (the step
    # breakdown's rule, sn40l_sim/engine/breakdown.py; it booked the wait as collectives before)
    def looped_kernel(i):
        pk = placed_kernel(NODE, f"L{i}.dec", layer=i, n_tiles=64, compute_cycles_per_tile=50,
                           hbm_bytes=10**8, config_bytes=10**6,
                           collectives=(Collective("all_reduce", 2**20, 16, overlapped=True, after="a"),))
        op = pk.kernel.operators[0]
        half = dataclasses.replace(op, flops=op.flops // 2, weight_bytes=op.weight_bytes // 2)
        ops = (dataclasses.replace(half, name="a"), dataclasses.replace(half, name="b"))
        return dataclasses.replace(pk, kernel=dataclasses.replace(pk.kernel, operators=ops))

    looped = run([looped_kernel(i) for i in range(4)], EngineOptions(stage_collectives=False))
    stream_alone = 10**8 / hbm_bytes_per_cycle(NODE)
    for b in looped.records[1:]:
        assert b.stream_end == pytest.approx(b.start + stream_alone, rel=0.02)
        assert b.gate_cycles == 0
        assert b.memory_bound_cycles == b.stream_end - b.start
    timing = phase_timing(looped, phase="decode", batch=1, prompt_len=1, kv_len=1, clock_hz=1.6e9)
    parts = step_breakdown_cycles(timing)
    assert sum(parts.values()) == pytest.approx(timing.cycles, abs=1e-6)
    assert parts["weights_streaming"] > 0.95 * 4 * stream_alone

@pytest.mark.parametrize("pcus", [64, 200])
def test_every_call_pays_its_launch_and_barrier_and_its_configuration_only_when_not_resident(pcus):
    # two kernels alternating, step after step: on 64 PCUs of every tile each they stay loaded side by
    # side, on 200 each call finds the other one's configuration in its units (mapper/residency.py)
    pks = _alternating(pcus)
    options = EngineOptions(stage_collectives=False)
    streaming = run(pks).cycles
    configs = sum(figures.config_cycles(NODE.socket, pk.section_config_bytes[0]) for pk in pks)
    assert run(pks, options).cycles == streaming + 4 * CALL + (configs if pcus > NODE.socket.tile.pcus / 2 else 0)


def test_a_kernel_called_again_and_again_keeps_its_configuration_unless_it_cannot():
    # the same kernel three times: its configuration stays loaded between the calls and the steps
    same = [placed_kernel(NODE, f"k{i}", layer=i, config_bytes=10**6) for i in range(3)]
    unlooped = EngineOptions(stage_collectives=False, kernel_looping=False)
    assert run(same, unlooped).cycles == run(same).cycles + 3 * CALL
    # a kernel of two sections loads both at every call: they take turns on the same units
    two = [placed_kernel(NODE, f"k{i}", layer=i, config_bytes=10**6, sections=2) for i in range(3)]
    assert run(two, unlooped).cycles == run(two).cycles + 3 * CALL + 6 * figures.config_cycles(NODE.socket, 10**6)


def test_a_kernel_loop_pays_one_call_and_streams_ahead():
    # memory-bound: 5 MB of weights outlast 64 tiles of 50 cycles
    same = [placed_kernel(NODE, f"L{i}.dec", layer=i, n_tiles=64, compute_cycles_per_tile=50,
                          hbm_bytes=5 * 10**6, config_bytes=10**6,
                          collectives=(Collective("all_reduce", 2**15, 16),)) for i in range(4)]
    looped = run(same, EngineOptions(stage_collectives=False))
    unlooped = run(same, EngineOptions(stage_collectives=False, kernel_looping=False))
    assert [len(looped.loops), looped.loops[0].iterations] == [1, 4] and unlooped.loops == ()
    assert [r.launch_cycles for r in looped.records] == [BOUNDARY.launch_cycles, 0, 0, 0]
    # each iteration needs the previous one's output, so its pipeline fills again after the gate
    assert [r.fill_cycles for r in looped.records] == [200] * 4
    # iteration i+1 streams once iteration i's tiles are done; its compute waits for i's all-reduce
    for a, b in zip(looped.records, looped.records[1:], strict=False):
        assert b.start == a.stream_end and b.stream_end >= a.end
        assert b.gate_cycles == a.end - b.start > 0
    # beyond the calls, the weights of iteration i+1 stream while iteration i's all-reduce runs
    # (one after the other would take gate + fill + memory + compute; overlapped, the memory hides
    # under the gate and the slower of the two sets the rest)
    memory_alone, compute_alone = 5 * 10**6 / hbm_bytes_per_cycle(NODE), 64 * 50
    for b in looped.records[1:]:
        assert b.stream_end - b.start <= b.gate_cycles + 200 + max(memory_alone, compute_alone) + 1
    assert unlooped.cycles - looped.cycles > 3 * CALL
    assert any(ev.category == "loop" for ev in looped.events)


def test_sections_load_their_configuration_between_them():
    pk = placed_kernel(NODE, "k", n_tiles=10, compute_cycles_per_tile=100, sections=3, config_bytes=2 * 10**6)
    config = figures.config_cycles(NODE.socket, 2 * 10**6)
    result = run([pk], EngineOptions(stage_collectives=False))
    assert result.cycles - CALL == pk.cycles == 3 * (200 + 1000 + config)
    assert result.busy_cycles["overhead"] == CALL + 3 * config and result.busy_cycles["fill"] == 600


@pytest.mark.parametrize("chunks", [1, 3, 8, 64])
def test_lower_bounds_busy_time_and_bytes(chunks):
    pks = [placed_kernel(NODE, "a", n_tiles=64, compute_cycles_per_tile=100, hbm_bytes=10**7),
           placed_kernel(NODE, "b", layer=1, n_tiles=999, compute_cycles_per_tile=31, hbm_bytes=2 * 10**6,
                         ddr_bytes=10**5,
                         collectives=(Collective("all_reduce", 2**20, 16, overlapped=True),)),
           placed_kernel(NODE, "c", layer=2, collectives=(Collective("all_gather", 2**22, 16),))]
    result = run(pks, EngineOptions(chunks_per_section=chunks))
    assert result.link_bytes["p2p_staged"] > 0
    # lower bounds: compute at peak, bytes over achievable bandwidth, kernel by kernel
    for rec in result.records:
        pk = rec.placed
        assert rec.cycles >= pk.compute_cycles
        assert rec.cycles >= pk.tier_bytes["hbm"] / hbm_bytes_per_cycle(NODE)
        assert rec.cycles >= pk.tier_bytes["ddr"] / ddr_bytes_per_cycle(NODE)
        assert rec.tier_bytes == pk.tier_bytes   # every byte of every tier streamed, and no other
    assert result.cycles >= sum(pk.compute_cycles for pk in pks)
    assert result.cycles >= sum(pk.tier_bytes["hbm"] for pk in pks) / hbm_bytes_per_cycle(NODE)
    for name, busy in result.busy_cycles.items():
        assert 0 <= busy <= result.cycles, name
    # the channels never exceeded their capacity
    assert result.tier_bytes["hbm"] / hbm_bytes_per_cycle(NODE) <= result.busy_cycles["hbm"] + chunks * 3
    # bytes conserved: what the engine moved is what the placed graph says
    staged = result.link_bytes["p2p_staged"]
    assert staged == sum(CollectiveModel.from_node(NODE).run(c).sent_bytes * (1 if c.overlapped else 2)
                         for pk in pks for c in pk.kernel.collectives)
    assert result.tier_bytes == {"hbm": sum(pk.tier_bytes["hbm"] for pk in pks) + staged,
                                 "ddr": sum(pk.tier_bytes["ddr"] for pk in pks)}
    assert result.link_bytes["tln"] == result.tier_bytes["hbm"] + result.tier_bytes["ddr"]
    model = CollectiveModel.from_node(NODE)
    assert result.link_bytes["p2p"] == sum(model.run(c).link_bytes for pk in pks for c in pk.kernel.collectives)


def test_chunking_does_not_change_the_totals_much():
    pk = placed_kernel(NODE, "a", n_tiles=4096, compute_cycles_per_tile=40, hbm_bytes=3 * 10**8)
    times = [run([pk], EngineOptions(kernel_boundaries=False, kernel_looping=False, chunks_per_section=c,
                                    stage_collectives=False)).cycles
             for c in (1, 4, 16, 256)]
    assert max(times) - min(times) <= 256


def test_overlapped_collective_runs_beside_the_compute():
    small = Collective("all_reduce", 2**16, 16, overlapped=True)
    big = Collective("all_reduce", 2**26, 16, overlapped=True)
    model = CollectiveModel.from_node(NODE)
    for coll in (small, big):
        pk = placed_kernel(NODE, "moe", n_tiles=500, compute_cycles_per_tile=200, collectives=(coll,))
        rec = run([pk]).records[0]
        coll_run = rec.collectives[0]
        # starts after the first tile, not before
        assert coll_run.start == rec.stream_start + 200
        # the kernel ends no earlier than its collective on the links, nor than the last tile's
        # share of it sent after the last tile is out
        share = model.run(dataclasses.replace(coll, bytes=math.ceil(coll.bytes / 500))).cycles
        assert coll_run.end == coll_run.start + model.run(coll).cycles
        assert rec.end == max(rec.stream_end + share, coll_run.end)
    assert model.run(small).cycles < 500 * 200 < model.run(big).cycles


def test_an_overlapped_collective_of_one_data_tile_hides_nothing():
    # its one tile is its last: the whole collective goes after it, as a plain one does
    for n_bytes in (2**10, 2**16, 2**24):
        ends = [run([placed_kernel(NODE, "o_proj", n_tiles=1, compute_cycles_per_tile=5000,
                                   collectives=(Collective("all_reduce", n_bytes, 16, overlapped=o),))]).records[0].end
                for o in (False, True)]
        assert ends[0] == ends[1]


def test_plain_collective_follows_the_compute():
    coll = Collective("all_reduce", 2**20, 16)
    pk = placed_kernel(NODE, "o_proj", n_tiles=50, compute_cycles_per_tile=100, collectives=(coll,))
    rec = run([pk]).records[0]
    assert rec.collectives[0].start == rec.stream_end
    assert rec.end == rec.stream_end + CollectiveModel.from_node(NODE).run(coll).cycles


def test_two_collectives_of_a_kernel_take_turns_on_the_links():
    colls = (Collective("all_gather", 2**24, 16, overlapped=True), Collective("all_reduce", 2**24, 16, overlapped=True))
    rec = run([placed_kernel(NODE, "k", n_tiles=2, compute_cycles_per_tile=10, collectives=colls)]).records[0]
    a, b = rec.collectives
    assert a.end <= b.start or b.end <= a.start


def test_memory_stage_cap_limits_the_stream():
    pk = placed_kernel(NODE, "k", n_tiles=100, compute_cycles_per_tile=1, hbm_bytes=10**7)
    slow_stage = tuple(s if s.bound != "hbm" else type(s)(**{**s.__dict__, "cycles_per_tile": 4 * s.cycles_per_tile})
                       for s in pk.stages)
    slow = type(pk)(**{**pk.__dict__, "stages": slow_stage})
    fast_t, slow_t = run([pk]).cycles, run([slow]).cycles
    assert slow_t - 200 == pytest.approx(4 * (fast_t - 200), rel=0.01)


def test_independent_kernels_share_the_socket_one_at_a_time():
    from sn40l_sim.ir import KernelGraph, Shape
    from sn40l_sim.mapper.placement import MemoryPlacement, PlacedGraph
    a, b, c = (placed_kernel(NODE, n, n_tiles=10, compute_cycles_per_tile=100) for n in "abc")
    graph = KernelGraph("t", Shape("decode", 1, 1, 1))
    graph.add(a.kernel)
    graph.add(b.kernel, after=a.kernel)
    graph.add(c.kernel, after=a.kernel)
    result = run_graph(NODE, PlacedGraph(graph, (a, b, c), MemoryPlacement({}, {}, ())), NO_OVERHEAD)
    assert result.cycles == 3 * a.cycles
    assert result.busy_cycles["compute"] == 3 * 1000


def test_deterministic_and_breakdown_adds_up():
    pks = [placed_kernel(NODE, "mla", "mla", n_tiles=64, compute_cycles_per_tile=50, hbm_bytes=5 * 10**6,
                         kv_read_bytes=3 * 10**6,
                         collectives=(Collective("all_reduce", 2**18, 16),)),
           placed_kernel(NODE, "ffn", "moe_ffn", layer=0, n_tiles=256, compute_cycles_per_tile=80,
                         hbm_bytes=2 * 10**6,
                         collectives=(Collective("all_reduce", 2**18, 16, overlapped=True),))]
    first, second = run(pks, EngineOptions()), run(pks, EngineOptions())
    assert first == second
    timing = phase_timing(first, phase="decode", batch=1, prompt_len=1, kv_len=1, clock_hz=1.6e9)
    parts = step_breakdown_cycles(timing)
    assert sum(parts.values()) == pytest.approx(timing.cycles, abs=1e-6)
    assert all(v >= -1e-9 for v in parts.values())
    assert parts["kv_reads"] > 0 and parts["weights_streaming"] > 0 and parts["collectives"] > 0
    assert parts["launch"] + parts["synchronisation"] == pytest.approx(2 * CALL)
    assert timing.layer == 0 and set(timing.layer_cycles) == {"mla", "moe_ffn"}
    assert sum(timing.layer_cycles.values()) == timing.cycles
    assert math.isclose(sum(timing.layer_shares().values()), 1.0)


def test_overlapped_collective_and_memory_bound_kernel_share_hbm():
    coll = Collective("all_reduce", 2**28, 16, overlapped=True)
    idle_links = CollectiveModel.from_node(NODE).run(coll)
    hungry = placed_kernel(NODE, "moe", n_tiles=256, compute_cycles_per_tile=1, hbm_bytes=4 * 10**9,
                           collectives=(coll,))
    alone = run([hungry]).records[0]                     # no staging: they do not meet
    shared = run([hungry], EngineOptions(kernel_boundaries=False)).records[0]
    assert shared.stream_end - shared.stream_start > alone.stream_end - alone.stream_start
    # max-min fair: the collective asks less than half the channel, so it keeps its links' pace
    # and the kernel's stream gets the rest
    assert shared.collectives[0].end - shared.collectives[0].start >= idle_links.cycles
    # together they never move more than the channel allows
    total = hungry.tier_bytes["hbm"] + idle_links.sent_bytes
    assert shared.end - shared.stream_start >= total / hbm_bytes_per_cycle(NODE)
    # beside a kernel that leaves HBM idle, the collective runs at the links' pace
    quiet = placed_kernel(NODE, "moe", n_tiles=256, compute_cycles_per_tile=10**4, collectives=(coll,))
    rec = run([quiet], EngineOptions(kernel_boundaries=False)).records[0]
    assert rec.collectives[0].end - rec.collectives[0].start == idle_links.cycles


def test_a_yaml_only_tier_gets_its_own_channel_across_the_tln():
    """A CXL tier added by an override (no Python knows it): the engine builds a channel for it,
    streams the kernel's CXL bytes through it and the TLN, and reports its busy time and bytes."""
    from sn40l_sim.hardware.loader import with_overrides

    node = with_overrides(NODE, {"socket.memory.cxl": {
        "units_per_die": 1, "capacity_bytes_per_unit": "512 GiB", "bytes_per_s_per_unit": "30 GB/s",
        "latency_s": "500 ns", "efficiency": 0.75}})
    rate = tier_bytes_per_cycle(node, "cxl")
    assert rate == pytest.approx(2 * 30e9 * 0.75 / node.socket.clock_hz)
    pk = placed_kernel(node, "k", n_tiles=100, compute_cycles_per_tile=10, hbm_bytes=10**6,
                       tier_bytes={"cxl": 3 * 10**6})
    assert pk.bounding_resource == "cxl"
    result = run_graph(node, chain([pk]), NO_OVERHEAD)
    assert list(result.tier_bytes) == ["hbm", "ddr", "cxl"]
    assert result.tier_bytes == {"hbm": 10**6, "ddr": 0, "cxl": 3 * 10**6}
    assert result.link_bytes["tln"] == 4 * 10**6            # every tier's stream crosses the TLN
    assert result.busy_cycles["cxl"] >= 3 * 10**6 / rate - 100
    assert result.cycles >= 3 * 10**6 / rate                  # the CXL stream paces the kernel
    assert pk.cycles - 100 <= result.cycles <= pk.cycles + 8
    timing = phase_timing(result, phase="decode", batch=1, prompt_len=1, kv_len=1, clock_hz=node.socket.clock_hz)
    assert timing.kernels[0].tier_bytes["cxl"] == 3 * 10**6 and "cxl" in timing.resource_busy_cycles


def test_a_memory_bound_loop_hides_its_gate_under_the_stream():
    # 100 MB of weights per iteration (~100k cycles) outlast the previous iteration's all-reduce
    # (~35k cycles) and the compute (3,200): the stream alone sets each iteration's length
    same = [placed_kernel(NODE, f"L{i}.dec", layer=i, n_tiles=64, compute_cycles_per_tile=50,
                          hbm_bytes=10**8, config_bytes=10**6,
                          collectives=(Collective("all_reduce", 2**15, 16),)) for i in range(4)]
    looped = run(same, EngineOptions(stage_collectives=False))
    stream_alone = 10**8 / hbm_bytes_per_cycle(NODE)
    for a, b in zip(looped.records, looped.records[1:], strict=False):
        assert b.start == a.stream_end and b.stream_end == pytest.approx(b.start + stream_alone, rel=0.02)
        # the wait for the gate and the fill after it were hidden: nothing of them is exposed
        assert b.gate_cycles == 0 and b.fill_cycles == 0
        assert b.memory_bound_cycles == b.stream_end - b.start
    timing = phase_timing(looped, phase="decode", batch=1, prompt_len=1, kv_len=1, clock_hz=1.6e9)
    parts = step_breakdown_cycles(timing)
    assert sum(parts.values()) == pytest.approx(timing.cycles, abs=1e-6)
    # only the last iteration's all-reduce, which nothing follows, is on the step's path
    last = looped.records[-1]
    assert parts["collectives"] == pytest.approx(last.end - last.stream_end)
    assert parts["weights_streaming"] > 0.9 * 4 * stream_alone


@pytest.mark.parametrize("pcus", [64, 200])
def test_a_graph_run_after_another_pays_its_kernels_loads_once_more_on_the_critical_path(pcus, monkeypatch):
    # the same two kernels alternating: side by side (64 PCUs each) the steady state loads nothing,
    # so after another graph took the units each loads once; evicting each other (200 PCUs) they
    # load at every call anyway and a switch adds nothing
    pks = _alternating(pcus)
    options = EngineOptions(stage_collectives=False)
    steady = run(pks, options)
    loads = sum(figures.config_cycles(NODE.socket, pk.section_config_bytes[0]) for pk in pks[:2])
    assert steady.switch_load_cycles == (loads if pcus <= NODE.socket.tile.pcus / 2 else 0)
    # the same graph with its first calls loading, as after a switch: longer by exactly that
    real = run_graph_module.call_residency

    def after_a_switch(socket, kernels):
        loads, switched = real(socket, kernels)
        return tuple(load + s for load, s in zip(loads, switched, strict=True)), switched

    monkeypatch.setattr(run_graph_module, "call_residency", after_a_switch)
    assert run(pks, options).cycles == steady.cycles + steady.switch_load_cycles


def test_a_collectives_trace_event_carries_the_graphs_bytes_and_what_it_moved():
    # the trace showed a collective's kind and cycles only; its bytes were nowhere in it
    colls = (Collective("all_gather", 2**20, 16, name="latent"), Collective("all_reduce", 3 * 2**18, 16, name="hidden"))
    pks = [placed_kernel(NODE, "mla", "mla", n_tiles=8, compute_cycles_per_tile=50, collectives=colls),
           placed_kernel(NODE, "ffn", "ffn", n_tiles=8, compute_cycles_per_tile=50, collectives=colls[1:])]
    result = run(pks, EngineOptions())
    events = [e for e in result.events if e.category == "collective"]
    assert [(e.name, dict(e.detail)["bytes"], dict(e.detail)["group"]) for e in events] == [
        ("mla.latent", 2**20, 16), ("mla.hidden", 3 * 2**18, 16), ("ffn.hidden", 3 * 2**18, 16)]
    # each socket sends 15/16 of an all-gather's tensor and twice that of an all-reduce's
    assert [dict(e.detail)["sent_bytes"] for e in events] == [2**20 * 15 // 16, 2 * 3 * 2**18 * 15 // 16,
                                                              2 * 3 * 2**18 * 15 // 16]
    for key, total in (("link_bytes", "p2p"), ("sent_bytes", "p2p_sent"), ("staged_bytes", "p2p_staged")):
        assert sum(dict(e.detail)[key] for e in events) == result.link_bytes[total] > 0
    assert all(e.detail == () for e in result.events if e.category != "collective")


@pytest.mark.parametrize("sockets,rounds", [(2, 1), (3, 2), (6, 3), (12, 4), (16, 4)])
def test_a_barrier_takes_the_ceiling_of_log2_sockets_rounds(sockets, rounds):
    # a dissemination barrier among n members needs ceil(log2 n) rounds (engine/boundary.py's
    # docstring); a group that is not a power of two takes the round a floor would drop. Each
    # round on this full mesh: the 93.75 ns link latency plus the synchronisation latency
    per_round = figures.cycles(93.75e-9 + NODE.socket.calibrated.sync_latency_s, NODE.socket)
    assert BOUNDARY.barrier_cycles(sockets) == BOUNDARY.on_chip_cycles + rounds * per_round
