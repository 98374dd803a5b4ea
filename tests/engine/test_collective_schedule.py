"""The event-free schedule of a collective gives the event loop's numbers, or declines.

Every case costs the same collective twice: with the schedule allowed (taken when no link is shared)
and with the SimPy event loop over the fluid network only, and asserts the results are equal field
for field (cycles, link bytes, bytes sent by socket 0, transfers).
"""
from __future__ import annotations

import itertools
import math

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from sn40l_sim.engine.collective_floor import Transfers
from sn40l_sim.engine.collective_schedule import Schedule
from sn40l_sim.engine.collectives import CollectiveModel
from sn40l_sim.engine.fluid import FluidNetwork, lone_flow_cycles
from sn40l_sim.engine.links import LinkTable
from sn40l_sim.hardware.topology import lattice_dims, socket_pairs
from sn40l_sim.ir import Collective

CLOCK = 1.6e9
LAT = 93.75e-9
KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")


def table(p, topology="full_mesh", efficiency=0.5404):
    return LinkTable(p, [(a, b, 50e9, LAT) for a, b in socket_pairs(p, topology)], CLOCK, efficiency)


def both(links, coll, algorithm, setup_s=1.91e-6, sync_s=3.23e-6, engines=1):
    """(schedule-allowed model, its result, the event loop's result)."""
    fast = CollectiveModel(links, setup_s, sync_latency_s=sync_s, dma_engines=engines)
    slow = CollectiveModel(links, setup_s, sync_latency_s=sync_s, dma_engines=engines, schedule=False)
    return fast, fast.simulate(coll, algorithm), slow.simulate(coll, algorithm)


@pytest.mark.parametrize("p", [2, 3, 4, 8, 16])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("size", [5, 14_337, 1_835_011])
def test_full_mesh_schedule_gives_the_event_loops_cycles(p, kind, size):
    links = table(p)
    for algorithm in ("direct", "ring", "tree"):
        coll = Collective(kind, size, p)
        if CollectiveModel.applies(coll, algorithm):
            _, fast, slow = both(links, coll, algorithm)
            assert fast == slow, (algorithm, fast, slow)


@pytest.mark.parametrize("p,kind,algorithm,size", [
    (32, "all_gather", "ring", 917_509),
    (64, "all_reduce", "tree", 14_337), (64, "reduce_scatter", "direct", 3_670_019),
])
def test_large_full_mesh_nodes_take_the_schedule_and_agree(p, kind, algorithm, size):
    fast_model, fast, slow = both(table(p), Collective(kind, size, p), algorithm, setup_s=1.9e-6)
    assert fast == slow
    assert fast_model.scheduled == 1 and fast_model.simulated == 0


@pytest.mark.parametrize("setup_s,sync_s,engines", [(0.0, 0.0, 1), (1e-6, 0.0, 2), (2e-6, 1e-6, 3)])
@pytest.mark.parametrize("efficiency", [0.8, 0.61])
def test_set_up_queues_and_latencies_agree(setup_s, sync_s, engines, efficiency):
    links = table(8, efficiency=efficiency)
    for kind, algorithm in itertools.product(KINDS, ("direct", "ring", "tree")):
        coll = Collective(kind, 300_007, 8)
        if CollectiveModel.applies(coll, algorithm):
            _, fast, slow = both(links, coll, algorithm, setup_s, sync_s, engines)
            assert fast == slow, (kind, algorithm)


@pytest.mark.parametrize("topology,p", [("ring", 8), ("torus2d", 8), ("hypercube", 8), ("ring", 5)])
@pytest.mark.parametrize("kind", KINDS)
def test_shared_links_fall_back_to_the_event_loop_and_agree(topology, p, kind):
    links = table(p, topology)
    declined = 0
    for algorithm in ("direct", "ring", "tree"):
        coll = Collective(kind, 2_000_003, p)
        if CollectiveModel.applies(coll, algorithm):
            model, fast, slow = both(links, coll, algorithm, setup_s=1.3e-6)
            assert fast == slow, algorithm
            declined += model.simulated
    # the direct algorithm's multi-hop routes share links: the schedule must decline it
    assert declined >= 1


def test_transfers_sharing_a_link_are_found():
    # a direct all-gather on an 8-socket ring: routes of two hops and more cross the same links at
    # once; on a full mesh each transfer has a link of its own
    sizes = [[0 if i == j else 250_001 for j in range(8)] for i in range(8)]
    on_ring = Schedule(table(8, "ring"), 3056, 0.0, 1)
    on_ring.direct(list(range(8)), sizes)
    assert on_ring.exact and on_ring.contended() and on_ring.result() is None
    on_mesh = Schedule(table(8), 3056, 0.0, 1)
    on_mesh.direct(list(range(8)), sizes)
    assert not on_mesh.contended() and on_mesh.result() is not None


@pytest.mark.parametrize("topology,p", [("ring", 8), ("torus2d", 16), ("hypercube", 8), ("ring", 5)])
def test_a_shared_link_found_mid_walk_is_one_the_full_check_finds(topology, p):
    # a transfer overlapping the latest one on a link ends the walk at once (the result is
    # discarded); the intervals recorded until then must show that overlap to the full check
    links, flagged = table(p, topology), 0
    model = CollectiveModel(links, 1.3e-6)
    for kind, algorithm, size in itertools.product(KINDS, ("direct", "ring", "tree"), (7, 2_000_003)):
        if not CollectiveModel.applies(Collective(kind, size, p), algorithm):
            continue
        plan = Schedule(links, 2080, 3.2e-6, 1)
        model._issue(plan, kind, size, p, algorithm)
        if plan._overlap:
            flagged += 1
            plan._overlap = False
            every = Transfers()   # the collective's messages, untimed
            model._issue(every, kind, size, p, algorithm)
            assert plan.contended() and plan.transfers < len(every.sends)
    assert flagged >= 1


def test_a_duration_on_a_whole_cycle_is_left_to_the_event_loop():
    # 25 bytes per cycle and 2,500-byte chunks: exactly 100 cycles, which float noise could round
    # either way in the event loop
    model, fast, slow = both(table(4, efficiency=0.8), Collective("all_gather", 10_000, 4), "ring", setup_s=1.2e-6)
    assert fast == slow
    assert model.simulated == 1


def test_equal_models_share_their_costs():
    first = CollectiveModel(table(8), 1.7e-6)
    second = CollectiveModel(table(8), 1.7e-6)
    coll = Collective("all_reduce", 123_457, 8)
    assert first.run(coll) is second.run(coll)
    assert second.scheduled == second.simulated == 0
    other = CollectiveModel(table(8), 1.7e-6, sync_latency_s=1e-6)
    assert other.run(coll).cycles > first.run(coll).cycles


def _lone_flow_in_the_network(n_bytes, rate, other_start, other_bytes):
    env = simpy.Environment()
    net = FluidNetwork(env)
    mine, theirs = net.channel("a", rate), net.channel("b", 7.3)
    finished = {}

    def flow():
        yield net.transfer((mine,), n_bytes)
        finished["at"] = env.now

    def unrelated():   # events of another flow, on another channel, during this one
        yield env.timeout(other_start)
        yield net.transfer((theirs,), other_bytes)

    env.process(flow())
    env.process(unrelated())
    env.run()
    return finished["at"]


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 10**8), st.floats(0.5, 200.0), st.integers(0, 3000), st.integers(1, 10**5))
def test_lone_flow_cycles_is_what_the_network_does(n_bytes, rate, other_start, other_bytes):
    cycles = lone_flow_cycles(n_bytes, rate)
    if cycles is not None:
        assert _lone_flow_in_the_network(n_bytes, rate, other_start, other_bytes) == cycles
        assert cycles == max(1, math.ceil(n_bytes / rate))


def test_a_transfer_over_two_hops_streams_at_its_slower_links_rate():
    # a 4-socket ring, the first hop of both routes from 0 to 2 twice as fast: the second hop is
    # the narrower one and sets the transfer's pace, as on the uniform ring
    def ring(fast: set[tuple[int, int]]) -> LinkTable:
        return LinkTable(4, [(a, b, 100e9 if (a, b) in fast else 50e9, LAT) for a, b in socket_pairs(4, "ring")],
                         CLOCK, 1.0)

    def send(table: LinkTable, n_bytes: int) -> int:
        return Schedule(table, 0, 0.0, 1).send(0, 2, n_bytes, 0)

    n_bytes = 2**20
    assert send(ring({(0, 1), (0, 3)}), n_bytes) == send(ring(set()), n_bytes)
    # 50 GB/s at 1.6 GHz is 31.25 bytes a cycle: about 33,554 cycles after the two hops' latency
    assert send(ring(set()), n_bytes) - math.ceil(2 * LAT * CLOCK) == pytest.approx(n_bytes / 31.25, abs=2)


@st.composite
def _deployments(draw):
    """A node (topology, sockets, link rate and latency 0.5 to 2 times the SN40L's, efficiency),
    a collective over its first ``group`` sockets, an algorithm that applies, and the set-up."""
    topology = draw(st.sampled_from(["full_mesh", "ring", "torus2d", "hypercube"]))
    p = draw(st.sampled_from([2, 4, 8]) if topology == "hypercube" else st.integers(2, 12))
    kind = draw(st.sampled_from(KINDS))
    group = draw(st.integers(2, p))
    algorithms = [a for a in ("direct", "ring", "tree") if CollectiveModel.applies(Collective(kind, 1, group), a)]
    scale = draw(st.floats(0.5, 2.0))
    links = LinkTable(p, [(a, b, 50e9 * scale, LAT / scale) for a, b in socket_pairs(p, topology)], CLOCK,
                      draw(st.floats(0.4, 1.0)), lattice_dims(p, topology))
    return (links, Collective(kind, draw(st.integers(1, 3 * 2**20)), group), draw(st.sampled_from(algorithms)),
            draw(st.sampled_from([0.0, 0.685e-6, 1.9e-6])), draw(st.sampled_from([0.0, 1.16e-6])),
            draw(st.integers(1, 2)))


@settings(max_examples=150, deadline=None)
@given(_deployments())
def test_random_deployments_time_alike_by_every_path_and_grow_with_bytes(case):
    # the schedule (links never shared), the quotient and in-step doubling answer what the event
    # loop over every member's flows answers, on any topology, group and message; and a collective
    # of more bytes never costs fewer cycles
    links, coll, algorithm, setup_s, sync_s, engines = case
    fast = CollectiveModel(links, setup_s, sync_latency_s=sync_s, dma_engines=engines)
    slow = CollectiveModel(links, setup_s, sync_latency_s=sync_s, dma_engines=engines, schedule=False, quotient=False)
    result = fast.simulate(coll, algorithm)
    assert result == slow.simulate(coll, algorithm)
    bigger = fast.simulate(Collective(coll.kind, 2 * coll.bytes + 1, coll.group), algorithm)
    assert bigger.cycles >= result.cycles
