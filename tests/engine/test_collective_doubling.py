"""Recursive doubling timed in step gives the event loop's figures, and steps aside when members
would drift apart (engine/collective_doubling.py)."""
from __future__ import annotations

import itertools

import pytest

from sn40l_sim.engine.collective_doubling import doubling_in_step
from sn40l_sim.engine.collective_sizes import tree_sizes
from sn40l_sim.engine.collectives import CollectiveModel
from sn40l_sim.engine.links import LinkTable
from sn40l_sim.hardware.topology import lattice_dims, socket_pairs
from sn40l_sim.hardware.units._cycles import ceil_cycles
from sn40l_sim.ir import Collective

CLOCK, BW, LAT, EFF = 1.6e9, 50e9, 93.75e-9, 0.8
KINDS = ("all_reduce", "all_gather", "reduce_scatter")
#: (set-up s, sync s, DMA engines), as in test_fluid_quotient.py
SETTINGS = ((1.9e-6, 3.2e-6, 1), (1.9e-6, 3.2e-6, 3), (0.0, 0.0, 1))


def node(p: int, kind: str, bandwidth=lambda a, b: BW, latency=lambda a, b: LAT) -> LinkTable:
    return LinkTable(p, [(a, b, bandwidth(a, b), latency(a, b)) for a, b in socket_pairs(p, kind)], CLOCK, EFF,
                     lattice_dims(p, kind))


def both(table: LinkTable, coll: Collective, setup_s: float, sync_s: float, engines: int):
    """The model's tree (in step where it applies) and the event loop's, as tuples."""
    def model(quotient: bool) -> CollectiveModel:
        return CollectiveModel(table, setup_s, "tree", sync_latency_s=sync_s, dma_engines=engines, schedule=False,
                               quotient=quotient)

    fast, slow = model(True).simulate(coll, "tree"), model(False).simulate(coll, "tree")
    return fast, slow


def in_step(table: LinkTable, coll: Collective, setup_s: float = 1.9e-6, sync_s: float = 3.2e-6):
    return doubling_in_step(table, ceil_cycles(setup_s * CLOCK), sync_s, list(range(coll.group)),
                            tree_sizes(coll.kind, coll.bytes, coll.group))


@pytest.mark.parametrize("p,topology,groups,sizes,settings", [
    (8, "ring", (2, 4, 8), (1, 7, 4096, 2**20 + 3, 8 * 2**20 + 5), SETTINGS),
    (16, "ring", (8, 16), (7, 65_537, 8 * 2**20 + 5), SETTINGS),
    (16, "torus2d", (4, 8, 16), (7, 65_537, 8 * 2**20 + 5), SETTINGS),
    (16, "hypercube", (16,), (7, 65_537, 8 * 2**20 + 5), SETTINGS),
    (32, "torus2d", (32,), (4096, 3 * 2**20 + 1), SETTINGS[:1]),
    # the main experiment's nodes: 64 members, whose rounds on a ring cross up to 32 links
    (64, "ring", (64,), (100_003, 7 * 2**20 + 11), SETTINGS[:1]),
    (64, "torus2d", (64,), (100_003,), SETTINGS[:1]),
])
def test_doubling_in_step_gives_the_event_loops_figures(p, topology, groups, sizes, settings):
    table, timed = node(p, topology), 0
    for (setup_s, sync_s, engines), group, kind, n_bytes in itertools.product(settings, groups, KINDS, sizes):
        coll = Collective(kind, n_bytes, group)
        fast, slow = both(table, coll, setup_s, sync_s, engines)
        assert fast == slow, (group, kind, n_bytes, setup_s, engines)
        timed += in_step(table, coll, setup_s, sync_s) is not None
    assert timed >= 1   # the shortcut was taken, not only declined


def test_every_tree_of_the_main_experiments_nodes_is_timed_in_step():
    # a round's flows on a ring or torus all meet a link they share with as many flows as any
    # link of the round carries: one rate for all
    for topology in ("ring", "torus2d"):
        for kind in KINDS:
            assert in_step(node(64, topology), Collective(kind, 2**20, 64)) is not None


def test_members_that_would_drift_apart_are_left_to_the_event_loop():
    # a slower link: the round-0 pair across it streams at half the rate of the others
    slow_link = node(8, "ring", bandwidth=lambda a, b: BW / 2 if (a, b) == (0, 1) else BW)
    # a longer latency: that pair starts streaming later than the others
    late_link = node(8, "ring", latency=lambda a, b: 3 * LAT if (a, b) == (2, 3) else LAT)
    for table, kind in itertools.product((slow_link, late_link), KINDS):
        coll = Collective(kind, 2**20 + 1, 8)
        assert in_step(table, coll) is None
        fast, slow = both(table, coll, 1.9e-6, 3.2e-6, 1)
        assert fast == slow

