"""Bytes per member of each collective algorithm against the textbook counts (Thakur, Rabenseifner
and Gropp, "Optimization of collective communication operations in MPICH", IJHPCA 2005): with
``n`` bytes per member over ``p`` members, ring and recursive halving/doubling reduce-scatter and
all-gather each send ``n (p - 1) / p`` bytes per member, a ring all-reduce twice that, and recursive
doubling all-reduce ``n log2 p``."""
from __future__ import annotations

import pytest

from sn40l_sim.engine.collective_sizes import most_sent, ring_sizes, split_bytes, tree_sizes
from sn40l_sim.engine.collectives import CollectiveModel
from sn40l_sim.engine.links import LinkTable
from sn40l_sim.errors import InputError
from sn40l_sim.ir import Collective


@pytest.mark.parametrize("p", [2, 4, 8, 16])
def test_recursive_halving_and_doubling_send_the_textbook_bytes(p):
    n = 3 * 2**20   # a multiple of every p: no rounding
    rounds = p.bit_length() - 1
    scatter, gather = tree_sizes("reduce_scatter", n, p), tree_sizes("all_gather", n, p)
    assert len(scatter) == len(gather) == rounds
    assert sum(scatter) == sum(gather) == n * (p - 1) // p
    # halving: half of what is left at each round; doubling the reverse
    assert scatter == [n // 2 ** (r + 1) for r in range(rounds)] == gather[::-1]
    assert tree_sizes("all_reduce", n, p) == [n] * rounds


@pytest.mark.parametrize("p", [2, 3, 8, 16])
def test_a_ring_sends_the_textbook_bytes_per_member(p):
    n = 5 * 2**20 + 3
    chunk = split_bytes(n, p)
    for kind, factor in (("reduce_scatter", 1), ("all_gather", 1), ("all_reduce", 2)):
        per_member = [sum(steps) for steps in ring_sizes(kind, chunk, n, p)]
        # every member sends every chunk but one (twice for an all-reduce): n (p - 1) / p on average
        assert sum(per_member) == factor * (p - 1) * n


@pytest.mark.parametrize("kind, p", [("all_reduce", 6), ("all_gather", 3), ("reduce_scatter", 12), ("all_to_all", 16)])
def test_recursive_doubling_refuses_a_group_it_cannot_pair_at_the_algorithm(kind, p):
    # a group of 6 indexed its partners past the last member (an IndexError through run), and an
    # all-to-all was timed as a halving reduce-scatter
    with pytest.raises(InputError, match=r"needs a power-of-two group and no all-to-all") as info:
        tree_sizes(kind, 1 << 20, p)
    assert info.value.field == "collective_algorithm"


@pytest.mark.parametrize("p", [2, 6, 8])
def test_most_sent_bounds_what_socket_0_sends_under_every_algorithm(p):
    # a ring of p sockets: the ring's order and the routes as simulated; the bound is reached
    table = LinkTable(p, [(a, (a + 1) % p, 50e9, 1e-7) for a in range(p)] if p > 2 else [(0, 1, 50e9, 1e-7)],
                      clock_hz=1.6e9, efficiency=0.8)
    model = CollectiveModel(table, setup_s=1e-6)
    checked = False
    for kind in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"):
        for n in (1, 7, 48, 1001, 65537):
            coll = Collective(kind, n, p)
            sent = [model.simulate(coll, a).sent_bytes for a in ("ring", "direct", "tree") if model.applies(coll, a)]
            assert max(sent) <= most_sent(kind, n, p), (kind, n)
            if kind != "all_to_all" and n % p == 0:
                checked = True
                assert max(sent) == most_sent(kind, n, p), (kind, n)
    assert checked
