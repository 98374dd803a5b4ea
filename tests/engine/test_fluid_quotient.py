"""The quotient network (member 0's flows on one channel per orbit of links) gives the full
network's direct collectives exactly, and steps aside when the collective is not symmetric."""
import pytest

from sn40l_sim.engine.collective_sizes import direct_sizes, split_bytes
from sn40l_sim.engine.collectives import CollectiveModel
from sn40l_sim.engine.fluid_quotient import _symmetry, direct_quotient
from sn40l_sim.engine.links import LinkTable
from sn40l_sim.engine.peer_order import translations
from sn40l_sim.hardware.topology import lattice_dims
from sn40l_sim.hardware.units._cycles import ceil_cycles
from sn40l_sim.ir import Collective

CLOCK, BW, LAT, EFF = 1.6e9, 50e9, 93.75e-9, 0.8
KINDS = ("all_to_all", "all_gather", "all_reduce", "reduce_scatter")
#: the set-up and DMA settings of test_collective_floor.py: (set-up s, sync s, DMA engines)
SETTINGS = ((1.9e-6, 3.2e-6, 1), (1.9e-6, 3.2e-6, 3), (0.0, 0.0, 1))


def lattice(p, kind):
    """Links between neighbours of the lattice ``lattice_dims(p, kind)``, with its dims."""
    dims, links, place = lattice_dims(p, kind), set(), 1
    for size in dims:
        for s in range(p):
            digit = (s // place) % size
            t = s + ((digit + 1) % size - digit) * place
            links.add((min(s, t), max(s, t)))
        place *= size
    return LinkTable(p, [(a, b, BW, LAT) for a, b in sorted(links)], CLOCK, EFF, dims)


def both(table, kind, n_bytes, setup_s, sync_s, engines):
    """The quotient's (cycles, link bytes, sent bytes, transfers) and the full network's."""
    p = table.sockets
    sizes, then = direct_sizes(kind, split_bytes(n_bytes, p), n_bytes, p)
    quotient = direct_quotient(table, ceil_cycles(setup_s * CLOCK), sync_s, engines, list(range(p)), sizes, then)
    full = CollectiveModel(table, setup_s, "direct", sync_latency_s=sync_s, dma_engines=engines,
                           schedule=False, quotient=False).simulate(Collective(kind, n_bytes, p), "direct")
    return quotient, (full.cycles, full.link_bytes, full.sent_bytes, full.transfers)


@pytest.mark.parametrize("p,topology,sizes,settings,kinds", [
    (8, "ring", (4096, 2**16, 2**20, 8 * 2**20), SETTINGS, KINDS),
    (16, "ring", (4096, 8 * 2**20), SETTINGS, KINDS),
    (16, "torus2d", (4096, 8 * 2**20), SETTINGS, KINDS),
    (16, "hypercube", (4096, 8 * 2**20), SETTINGS, KINDS),
    # the 64-socket networks are the slow ones: the kinds that stress them, one setting
    # (an all-to-all of 8 MiB on a ring: 63 blocks of unequal sizes, invariant under rotation)
    (64, "ring", (8 * 2**20,), SETTINGS[:1], ("all_to_all",)),
    (64, "torus2d", (8 * 2**20,), SETTINGS[:1], ("all_gather",)),
])
def test_quotient_gives_the_full_networks_result(p, topology, sizes, settings, kinds):
    table = lattice(p, topology)
    for setup_s, sync_s, engines in settings:
        for kind in kinds:
            for n_bytes in sizes:
                if kind == "all_to_all" and topology != "ring" and n_bytes % (p - 1):
                    continue   # blocks of unequal sizes: not translation-invariant on a torus
                quotient, full = both(table, kind, n_bytes, setup_s, sync_s, engines)
                assert quotient == full, (kind, n_bytes, setup_s, engines)


def test_a_collective_that_is_not_symmetric_runs_the_full_network():
    ring = lattice(8, "ring")
    uneven = direct_sizes("all_gather", split_bytes(1001, 8), 1001, 8)   # chunks of 125 and 126 bytes
    assert direct_quotient(ring, 0, 0.0, 1, list(range(8)), *uneven) is None
    mesh = LinkTable(8, [(a, b, BW, LAT) for a in range(8) for b in range(a + 1, 8)], CLOCK, EFF)
    even = direct_sizes("all_gather", split_bytes(1000, 8), 1000, 8)
    assert direct_quotient(mesh, 0, 0.0, 1, list(range(8)), *even) is None
    assert direct_quotient(ring, 0, 0.0, 1, list(range(8)), *even) is not None
    slow = LinkTable(8, [(i, (i + 1) % 8, BW / 2 if i == 3 else BW, LAT) for i in range(8)], CLOCK, EFF, (8,))
    assert direct_quotient(slow, 0, 0.0, 1, list(range(8)), *even) is None


def test_the_model_times_a_symmetric_direct_collective_by_the_quotient():
    table = lattice(16, "torus2d")
    coll = Collective("all_reduce", 2**20, 16)
    fast = CollectiveModel(table, 1.9e-6, "direct", sync_latency_s=3.2e-6, schedule=False)
    slow = CollectiveModel(table, 1.9e-6, "direct", sync_latency_s=3.2e-6, schedule=False, quotient=False)
    assert fast.simulate(coll, "direct") == slow.simulate(coll, "direct")


@pytest.mark.parametrize("p,topology,sizes,settings,kinds", [
    # chunks of two sizes in a pattern that repeats every 2 or 4 members (or columns): invariant
    # under a subgroup of the translations only
    (8, "ring", (1002, 2**20 + 4, 2**20 + 6), SETTINGS, KINDS),
    (16, "ring", (2**20 + 4, 2**20 + 8), SETTINGS, KINDS),
    (16, "torus2d", (2**20 + 4, 2**20 + 8), SETTINGS, KINDS),
    (16, "hypercube", (2**20 + 4, 2**20 + 8), SETTINGS[:2], KINDS),
    # the main experiment's one: an all-reduce whose chunks are 7,935 and 7,936 bytes
    (64, "torus2d", (507_888,), SETTINGS[:1], ("all_reduce",)),
    (64, "ring", (507_888,), SETTINGS[:1], ("all_gather",)),
])
def test_a_quotient_by_some_translations_gives_the_full_networks_result(p, topology, sizes, settings, kinds):
    table, quotients = lattice(p, topology), 0
    for setup_s, sync_s, engines in settings:
        for kind in kinds:
            for n_bytes in sizes:
                quotient, full = both(table, kind, n_bytes, setup_s, sync_s, engines)
                assert quotient is None or quotient == full, (kind, n_bytes, setup_s, engines)
                quotients += quotient is not None
    assert quotients >= 1


def test_uneven_chunks_are_simulated_on_one_member_of_each_orbit():
    # 1,002 bytes among 8: chunks of 125, 125, 125, 126, repeating every 4 members, so the
    # translations by 0 and 4 leave the all-gather invariant: members 0..3 stand for all 8
    sizes, _ = direct_sizes("all_gather", split_bytes(1002, 8), 1002, 8)
    assert split_bytes(1002, 8) == [125, 125, 125, 126, 125, 125, 125, 126]
    assert _symmetry([sizes], translations(8, (8,)), (8,)) == [0, 4]
    assert _symmetry([[[0] * 8 for _ in range(8)]], translations(8, (8,)), (8,)) == list(range(8))
    quotient, full = both(lattice(8, "ring"), "all_gather", 1002, *SETTINGS[0])
    assert quotient is not None and quotient == full
