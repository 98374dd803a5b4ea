"""A faster link never makes a collective slower (a physical invariant), on rings and tori.

Each case raises one link of a uniform node to twice its bandwidth, every link in turn, and
compares the collective's cycles with those on the uniform node. Before the tree's rounds were a
rendezvous (:meth:`~sn40l_sim.engine.collectives._Run.doubling`), a pair that finished a round
early started the next one at once, and its flows took a share of links that a slower pair still
needed for the round before (a tree reduce-scatter of 16 MiB on a 16-socket ring: 1,377,070 cycles,
1,854,703 with link 0-1 doubled).
"""
from __future__ import annotations

import pytest

from sn40l_sim.engine.collectives import CollectiveModel
from sn40l_sim.engine.links import LinkTable
from sn40l_sim.hardware.topology import lattice_dims, socket_pairs
from sn40l_sim.ir import Collective

CLOCK, BW, LAT, EFF = 1.6e9, 50e9, 93.75e-9, 0.8
SETUP_S, SYNC_S = 1.9e-6, 3.2e-6


def node_links(p: int, kind: str, fast: tuple[int, int] | None = None) -> LinkTable:
    """The links of a ``kind`` node of ``p`` sockets, the pair ``fast`` at twice the bandwidth."""
    links = [(a, b, 2 * BW if (a, b) == fast else BW, LAT) for a, b in socket_pairs(p, kind)]
    return LinkTable(p, links, CLOCK, EFF, lattice_dims(p, kind))


def cycles(table: LinkTable, coll: Collective, algorithm: str, **options) -> int:
    model = CollectiveModel(table, SETUP_S, sync_latency_s=SYNC_S, **options)
    return model.simulate(coll, algorithm).cycles


@pytest.mark.parametrize("p,kind", [(8, "ring"), (16, "ring"), (8, "torus2d"), (16, "torus2d")])
@pytest.mark.parametrize("algorithm", ["tree", "ring"])
def test_a_faster_link_never_slows_a_collective(p, kind, algorithm):
    for coll_kind in ("all_reduce", "all_gather", "reduce_scatter"):
        for n_bytes in (64 * 1024, 16 * 2**20):
            coll = Collective(coll_kind, n_bytes, p)
            uniform = cycles(node_links(p, kind), coll, algorithm)
            for fast in socket_pairs(p, kind):
                faster = cycles(node_links(p, kind, fast), coll, algorithm)
                assert faster <= uniform, (coll_kind, n_bytes, fast, uniform, faster)


def test_the_schedule_gives_the_event_loops_tree_when_pairs_reach_a_round_apart():
    # a full mesh with one faster link: pair 0-1 ends round 0 first and waits in round 1 for its
    # partners 2 and 3; the links are never shared, so the schedule answers, with the event
    # loop's figures, and the faster pair ends the collective no sooner than the uniform mesh's
    def mesh(fast_bytes_per_s: float) -> LinkTable:
        return LinkTable(8, [(a, b, fast_bytes_per_s if (a, b) == (0, 1) else BW, LAT)
                             for a in range(8) for b in range(a + 1, 8)], CLOCK, EFF)

    for kind in ("all_reduce", "all_gather", "reduce_scatter"):
        coll = Collective(kind, 3 * 2**20 + 17, 8)
        scheduled = CollectiveModel(mesh(2 * BW), SETUP_S, sync_latency_s=SYNC_S)
        result = scheduled.simulate(coll, "tree")
        assert scheduled.scheduled == 1
        assert result == CollectiveModel(mesh(2 * BW), SETUP_S, sync_latency_s=SYNC_S,
                                         schedule=False).simulate(coll, "tree")
        assert result.cycles == cycles(mesh(BW), coll, "tree")
