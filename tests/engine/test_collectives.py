"""Collectives on P2P links: bandwidth lower bounds, algorithm choice, byte conservation."""
from __future__ import annotations

import itertools
from collections import OrderedDict

import pytest

from sn40l_sim.engine import collectives
from sn40l_sim.engine.collective_sizes import split_bytes
from sn40l_sim.engine.collectives import CollectiveModel
from sn40l_sim.engine.links import LinkTable
from sn40l_sim.errors import InfeasibleError
from sn40l_sim.hardware.units.network import link_cycles
from sn40l_sim.ir import Collective

CLOCK = 1.6e9
BW = 50e9
LAT = 93.75e-9
EFF = 0.8
SETUP = 1e-6


def mesh(p):
    return LinkTable(p, [(a, b, BW, LAT) for a, b in itertools.combinations(range(p), 2)], CLOCK, EFF)


def ring_topology(p):
    return LinkTable(p, [(i, (i + 1) % p, BW, LAT) if i < (i + 1) % p else ((i + 1) % p, i, BW, LAT)
                         for i in range(p)], CLOCK, EFF)


def link_bytes_per_cycle():
    return BW * EFF / CLOCK


@pytest.mark.parametrize("p", [2, 4, 8, 16])
@pytest.mark.parametrize("size", [4096, 7 * 2**20 + 3])
def test_ring_all_reduce_respects_the_bandwidth_bound(p, size):
    result = CollectiveModel(mesh(p), SETUP).simulate(Collective("all_reduce", size, p), "ring")
    bound = 2 * (p - 1) / p * size / link_bytes_per_cycle()
    assert result.cycles >= bound
    # and is no slower than 2(p-1) lone transfers of the largest chunk
    chunk = max(split_bytes(size, p))
    lone = link_cycles(BW, LAT, CLOCK, chunk, efficiency=EFF, setup_s=SETUP)
    assert result.cycles <= 2 * (p - 1) * (lone + 1)


def test_lone_transfer_matches_the_unit_model():
    # a 2-socket all-gather of 2S bytes is one transfer of S bytes each way
    size = 3 * 2**20
    result = CollectiveModel(mesh(2), SETUP).simulate(Collective("all_gather", 2 * size, 2), "direct")
    assert abs(result.cycles - link_cycles(BW, LAT, CLOCK, size, efficiency=EFF, setup_s=SETUP)) <= 1


@pytest.mark.parametrize("kind", ["all_reduce", "all_gather", "reduce_scatter", "all_to_all"])
def test_direct_is_faster_on_a_full_mesh(kind):
    model = CollectiveModel(mesh(16), SETUP)
    coll = Collective(kind, 32 * 2**20, 16)
    assert model.simulate(coll, "direct").cycles < model.simulate(coll, "ring").cycles
    assert model.run(coll).algorithm == "direct"


def test_ring_is_faster_than_direct_on_a_ring_for_large_messages():
    model = CollectiveModel(ring_topology(8), SETUP)
    coll = Collective("all_reduce", 64 * 2**20, 8)
    ring, direct = model.simulate(coll, "ring"), model.simulate(coll, "direct")
    assert ring.cycles < direct.cycles
    assert model.run(coll) == ring


@pytest.mark.parametrize("kind,factor", [("all_reduce", 2), ("all_gather", 1), ("reduce_scatter", 1)])
@pytest.mark.parametrize("algorithm", ["ring", "direct"])
def test_link_bytes_are_conserved_on_a_full_mesh(kind, factor, algorithm):
    p, size = 16, 10**6 + 7
    result = CollectiveModel(mesh(p), SETUP).simulate(Collective(kind, size, p), algorithm)
    # every member ends up receiving all other members' share once per phase, each over one link
    assert result.link_bytes == factor * (p - 1) * size


def test_all_to_all_moves_what_every_member_sends():
    p, size = 8, 8 * 10**5 + 5
    direct = CollectiveModel(mesh(p), SETUP).simulate(Collective("all_to_all", size, p), "direct")
    assert direct.link_bytes == p * size and direct.sent_bytes == size


def test_multi_hop_routes_count_every_link_crossed():
    p, size = 8, 8 * 2**20
    result = CollectiveModel(ring_topology(p), SETUP).simulate(Collective("all_gather", size, p), "direct")
    hops = sum(min(abs(a - b), p - abs(a - b)) for a in range(p) for b in range(p) if a != b)
    assert result.link_bytes == (size // p) * hops


def test_cost_grows_with_size_and_is_memoised():
    model = CollectiveModel(mesh(16), SETUP)
    small, big = (model.run(Collective("all_reduce", s, 16)) for s in (2**16, 2**24))
    assert big.cycles > small.cycles
    assert model.run(Collective("all_reduce", 2**24, 16, name="other")) is big


def test_trivial_and_infeasible_groups():
    model = CollectiveModel(mesh(4), SETUP)
    assert model.run(Collective("all_reduce", 2**20, 1)).cycles == 0
    with pytest.raises(InfeasibleError, match="8 sockets"):
        model.run(Collective("all_reduce", 2**20, 8))


def test_unknown_algorithm_is_an_input_error():
    from sn40l_sim.errors import InputError
    with pytest.raises(InputError):
        CollectiveModel(mesh(4), SETUP, algorithm="butterfly")


def test_ring_order_follows_links():
    hyper = LinkTable(8, [(i, i ^ (1 << k), BW, LAT) for i in range(8) for k in range(3) if i < i ^ (1 << k)],
                      CLOCK, EFF)
    order = hyper.ring_order(range(8))
    assert sorted(order) == list(range(8))
    assert all(len(hyper.route(a, b)) == 1 for a, b in zip(order, order[1:] + order[:1], strict=True))


@pytest.mark.parametrize("kind", ["all_gather", "reduce_scatter"])
@pytest.mark.parametrize("p, size", [(16, 1), (8, 7), (16, 17)])
def test_a_tree_over_a_message_shorter_than_the_group_runs_every_round(kind, p, size):
    # a member's share rounded down to 0 bytes skipped its round: a 1-byte all-gather over 16
    # sockets cost nothing, and 17 bytes moved 240 link bytes where 255 are needed
    result = CollectiveModel(mesh(p), SETUP).simulate(Collective(kind, size, p), "tree")
    rounds = p.bit_length() - 1
    assert result.transfers == rounds * p
    lone = link_cycles(BW, LAT, CLOCK, 1, efficiency=EFF, setup_s=SETUP)
    assert result.cycles >= rounds * lone
    if kind == "all_gather":
        assert result.link_bytes >= (p - 1) * size


@pytest.mark.parametrize("table", [ring_topology(16), mesh(16)], ids=["ring", "mesh"])
@pytest.mark.parametrize("size", [16 * 4000 + 5, 2**20 + 9, 300])
def test_excess_cycles_is_what_the_fastest_algorithm_outlasts(monkeypatch, table, size):
    # an odd size: uneven chunks, the direct algorithm asymmetric (the engine's last shares)
    coll = Collective("all_reduce", size, 16)
    monkeypatch.setattr(collectives, "_shared", OrderedDict())
    full = CollectiveModel(table, SETUP).run(coll).cycles
    tree = CollectiveModel(table, SETUP).simulate(coll, "tree").cycles
    for budget in (0, full - 1, full, full + 1, tree - 1, tree, 10 * tree):
        monkeypatch.setattr(collectives, "_shared", OrderedDict())   # nothing memoised: the search runs
        model = CollectiveModel(table, SETUP)
        assert model.excess_cycles(coll, budget) == max(0, full - budget)
        assert model.run(coll).cycles == full   # a search stopped early kept no choice
    monkeypatch.setattr(collectives, "_shared", OrderedDict())
    model = CollectiveModel(table, SETUP)
    assert model.excess_cycles(coll, tree) == 0
    assert model.scheduled + model.simulated == 1   # the tree fits: nothing else timed
