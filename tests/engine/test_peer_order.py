"""The direct algorithm's members set up their transfers in the shifted (pairwise-exchange) order."""
from __future__ import annotations

import itertools
from collections import defaultdict

import pytest

from sn40l_sim.engine import collectives
from sn40l_sim.engine.collectives import CollectiveModel
from sn40l_sim.engine.fluid import FluidNetwork
from sn40l_sim.engine.links import LinkTable
from sn40l_sim.hardware.topology import socket_pairs
from sn40l_sim.ir import Collective

CLOCK = 1.6e9
LAT = 93.75e-9
KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")


def starts_by_cycle(monkeypatch, links, coll):
    """``{cycle: {(source, destination), ...}}`` of the flows the event loop starts."""
    started = defaultdict(set)
    transfer = FluidNetwork.transfer

    def record(self, path, n_bytes, cap=float("inf")):
        started[self.env.now].add((int(path[0].name.split()[1].split("->")[0]),
                                   int(path[-1].name.split("->")[1])))
        return transfer(self, path, n_bytes, cap)

    monkeypatch.setattr(FluidNetwork, "transfer", record)
    CollectiveModel(links, 1.9e-6, sync_latency_s=3.2e-6, schedule=False).simulate(coll, "direct")
    return started


@pytest.mark.parametrize("kind", ["all_to_all", "all_gather"])
def test_on_a_ring_the_flows_starting_together_are_rotations_of_each_other(monkeypatch, kind):
    # in ascending order every member's first message goes to socket 0 or 1 (an incast); shifted,
    # member i's k-th goes to i + k, so each instant's starts are one pair and its 7 rotations
    p = 8
    links = LinkTable(p, [(a, b, 50e9, LAT) for a, b in socket_pairs(p, "ring")], CLOCK, 0.5)
    started = starts_by_cycle(monkeypatch, links, Collective(kind, 3 * 2**20 + 7, p))
    assert len(started) == p - 1
    for pairs in started.values():
        (a, b), = [pair for pair in pairs if pair[0] == 0]
        assert pairs == {(i, (i + b - a) % p) for i in range(p)}


def test_the_schedule_sets_up_in_the_event_loops_order_on_unequal_links():
    # a full mesh whose pairs have different rates and latencies: which message a member sets up
    # last decides the end, so the event-free schedule must follow the event loop's order
    p = 6
    links = LinkTable(p, [(a, b, (20 + 7 * ((3 * a + b) % 5)) * 1e9, LAT * (1 + (a * b) % 3))
                          for a, b in itertools.combinations(range(p), 2)], CLOCK, 0.61)
    for kind in KINDS:
        coll = Collective(kind, 1_000_003, p)
        fast = CollectiveModel(links, 1.9e-6, sync_latency_s=3.2e-6)
        slow = CollectiveModel(links, 1.9e-6, sync_latency_s=3.2e-6, schedule=False)
        assert fast.simulate(coll, "direct") == slow.simulate(coll, "direct"), kind
        assert fast.scheduled == 1


def test_ascending_order_would_give_other_cycles_on_unequal_links(monkeypatch):
    # the order is not a no-op on such links (so the test above can tell the two apart)
    p = 6
    links = LinkTable(p, [(a, b, (20 + 7 * ((3 * a + b) % 5)) * 1e9, LAT * (1 + (a * b) % 3))
                          for a, b in itertools.combinations(range(p), 2)], CLOCK, 0.61)
    coll = Collective("all_reduce", 1_000_003, p)
    shifted = CollectiveModel(links, 1.9e-6, schedule=False).simulate(coll, "direct").cycles
    monkeypatch.setattr(collectives, "peer_order", lambda i, n, dims=None: [j for j in range(n) if j != i])
    collectives._shared.clear()
    ascending = CollectiveModel(links, 1.9e-6, schedule=False).simulate(coll, "direct").cycles
    collectives._shared.clear()
    assert ascending != shifted
