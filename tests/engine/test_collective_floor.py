"""The floor under a collective's cycles, and ``auto`` skipping the algorithms it rules out."""
from __future__ import annotations

import itertools
import math
import random

import pytest

from sn40l_sim.engine.collective_floor import Transfers, floor_cycles
from sn40l_sim.engine.collectives import ALGORITHMS, CollectiveModel
from sn40l_sim.engine.links import LinkTable
from sn40l_sim.errors import InfeasibleError
from sn40l_sim.hardware.units._cycles import ceil_cycles
from sn40l_sim.ir import Collective

CLOCK = 1.6e9
BW = 50e9
LAT = 93.75e-9
EFF = 0.54
KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")


def mesh(p):
    return LinkTable(p, [(a, b, BW, LAT) for a, b in itertools.combinations(range(p), 2)], CLOCK, EFF)


def ring(p):
    return LinkTable(p, [(min(i, (i + 1) % p), max(i, (i + 1) % p), BW, LAT) for i in range(p)], CLOCK, EFF)


def line(p):
    """A chain: every route between its ends shares the middle links."""
    return LinkTable(p, [(i, i + 1, BW, LAT) for i in range(p - 1)], CLOCK, EFF)


def model(table, setup_s=1.9e-6, sync_s=3.2e-6, engines=1, algorithm="auto"):
    return CollectiveModel(table, setup_s, algorithm, sync_latency_s=sync_s, dma_engines=engines)


@pytest.mark.parametrize("topology,p", [(mesh, 4), (mesh, 8), (ring, 8), (line, 6), (ring, 5)])
@pytest.mark.parametrize("n_bytes", [1, 4096, 3 * 2**20 + 7])
@pytest.mark.parametrize("setup_s,engines", [(1.9e-6, 1), (1.9e-6, 3), (0.0, 1)])
def test_no_algorithm_runs_below_its_floor(topology, p, n_bytes, setup_s, engines):
    m = model(topology(p), setup_s=setup_s, engines=engines)
    for kind, algorithm in itertools.product(KINDS, ALGORITHMS):
        coll = Collective(kind, n_bytes, p)
        if m.applies(coll, algorithm):
            floor, cycles = m.floor(coll, algorithm), m.simulate(coll, algorithm).cycles
            assert floor <= cycles and (floor > 0) == (cycles > 0), (kind, algorithm, floor, cycles)


@pytest.mark.parametrize("topology,p", [(mesh, 8), (ring, 8), (line, 6), (mesh, 16)])
@pytest.mark.parametrize("n_bytes", [2048, 64 * 1024, 8 * 2**20])
def test_auto_chooses_what_simulating_every_algorithm_chooses(topology, p, n_bytes):
    table = topology(p)
    for kind in KINDS:
        coll = Collective(kind, n_bytes, p)
        every = [model(table).simulate(coll, a) for a in ALGORITHMS if CollectiveModel.applies(coll, a)]
        assert model(table).run(coll) == min(every, key=lambda r: (r.cycles, r.algorithm))


def test_auto_does_not_simulate_an_algorithm_its_floor_rules_out():
    # a small all-reduce on a ring of 32: the direct algorithm's 31 set-ups per sender in each of
    # its two rounds cost more than the whole recursive doubling, so it is never simulated (on these
    # shared links it would be thousands of flows in the fluid network)
    m = model(ring(32), setup_s=1.9e-6, sync_s=3.2e-6)
    coll = Collective("all_reduce", 16384, 32)
    chosen = m.run(coll)
    assert chosen.algorithm == "tree"
    assert m.floor(coll, "direct") > chosen.cycles
    assert ("all_reduce", 16384, 32, "direct") not in m._memo


@pytest.mark.parametrize("group", [8, 16])
def test_auto_times_every_algorithm_by_its_schedule_among_members_one_hop_apart(group):
    # no transfer shares a link on a full mesh: the event-free schedule costs less than the floor
    # that would skip it, and the choice is the same (test_auto_chooses_what_simulating_...)
    m = model(mesh(16))
    for kind in KINDS:
        coll = Collective(kind, 64 * 1024 + 1, group)
        m.run(coll)
        applying = [(kind, coll.bytes, group, a) for a in ALGORITHMS if m.applies(coll, a)]
        assert all(key in m._memo and key not in m._floors for key in applying)
    assert m.scheduled > m.simulated


def test_auto_still_floors_members_that_are_not_one_hop_apart():
    m = model(mesh(16))
    too_many = Collective("all_reduce", 4096, 17)
    with pytest.raises(InfeasibleError, match="needs 17 sockets"):
        m.run(too_many)
    m = model(ring(8))
    m.run(Collective("all_to_all", 2048, 8))
    assert m._floors


def _floor_message_by_message(table, sent, setup_cycles, sync_latency_s, dma_engines):
    """The floor's definition walked for every message (floor_cycles walks each pair once)."""
    link_bytes, heads = {}, {}
    for src, dst, n_bytes in sent.sends:
        for link in table.route(src, dst):
            link_bytes[link] = link_bytes.get(link, 0) + n_bytes
        heads.setdefault(src, []).append(ceil_cycles((sum(table._latency_s[x] for x in table.route(src, dst))
                                                      + sync_latency_s) * table.clock_hz))
    links = max((n / table.bytes_per_cycle[link] for link, n in link_bytes.items()), default=0.0)
    setups = max((math.ceil(len(h) / dma_engines) * setup_cycles + min(h) + 1 for h in heads.values()), default=0)
    return max(math.floor(links), setups)


@pytest.mark.parametrize("topology,p", [(mesh, 8), (ring, 8), (line, 6), (ring, 5)])
@pytest.mark.parametrize("engines", [1, 3])
def test_the_floor_of_each_pair_once_is_the_floor_of_every_message(topology, p, engines):
    table, rng = topology(p), random.Random(p * 10 + engines)
    for algorithm, kind in itertools.product(ALGORITHMS, KINDS):
        coll = Collective(kind, rng.choice((1, 4096, 3 * 2**20 + 7)), p)
        if not CollectiveModel.applies(coll, algorithm):
            continue
        sent = Transfers()
        model(table)._issue(sent, kind, coll.bytes, p, algorithm)
        setup, sync = rng.choice((0, 3040)), rng.choice((0.0, 3.2e-6))
        assert floor_cycles(table, sent, setup, sync, engines) == _floor_message_by_message(table, sent, setup, sync,
                                                                                            engines)


def torus(rows, cols):
    """A 2-D torus routed in dimension order (the links of a 64-socket 8 x 8 node)."""
    cells = [(r, c) for r in range(rows) for c in range(cols)]
    pairs = {tuple(sorted((r * cols + c, r * cols + (c + 1) % cols))) for r, c in cells}
    pairs |= {tuple(sorted((r * cols + c, ((r + 1) % rows) * cols + c))) for r, c in cells}
    return LinkTable(rows * cols, [(a, b, BW, LAT) for a, b in sorted(pairs)], CLOCK, EFF, dims=(rows, cols))


@pytest.mark.parametrize("table", [ring(16), torus(4, 4), line(7)], ids=["ring", "torus", "line"])
@pytest.mark.parametrize("size", [141155, 3 * 2**20 + 7, 2**52 + 3, 2**64 + 5])
def test_the_floor_of_a_collective_with_many_routes_is_the_floor_of_every_message(table, size):
    # the busiest link's bytes are summed over every pair's route at once: exactly in doubles for
    # these sizes but the last two, whose sums pass 2**53 and are summed in integers (the last one in
    # Python integers from the start: its bytes do not fit 64 bits)
    p = table.sockets
    for algorithm, kind in itertools.product(ALGORITHMS, KINDS):
        coll = Collective(kind, size, p)
        if not CollectiveModel.applies(coll, algorithm):
            continue
        sent = Transfers()
        model(table)._issue(sent, kind, size, p, algorithm)
        for sync in (0.0, 3.2e-6):
            assert floor_cycles(table, sent, 3040, sync, 1) == _floor_message_by_message(table, sent, 3040, sync, 1)


def test_auto_keeps_its_choice_and_gives_it_again():
    m = model(ring(8))
    for kind in KINDS:
        coll = Collective(kind, 64 * 1024 + 3, 8)
        chosen = m.run(coll)
        every = [m.simulate(coll, a) for a in ALGORITHMS if CollectiveModel.applies(coll, a)]
        assert chosen == min(every, key=lambda r: (r.cycles, r.algorithm))
        assert m.run(Collective(kind, 64 * 1024 + 3, 8, overlapped=True, name="x")) is chosen
