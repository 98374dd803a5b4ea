"""GEMM pieces where two halvings leave equally small buffers (mapper/tiling.py, ``tied_pieces``):
every tied piece is a candidate and the tiling's cost picks one, so a power of two of rows is
never cut worse than one row more (which has no tie to break)."""
from __future__ import annotations

import math

import pytest

from sn40l_sim.ir import Operator
from sn40l_sim.mapper.halving import clear_halvings, halved, tied_pieces
from sn40l_sim.mapper.tiling import gemm_tilings

CUTS = ("count", "n", "m", "k")
LOW = {"count": 1, "m": 32, "k": 64, "n": 32}


def gemm(m: int, k: int, n: int) -> Operator:
    return Operator("g", "gemm", flops=2 * m * k * n, m=m, k=k, n=n, weight_bytes=k * n * 2)


@pytest.mark.parametrize("target", [1, 2, 32, 256, 4096])
@pytest.mark.parametrize("dims", [{"count": 1, "m": 1024, "k": 4096, "n": 3584},
                                  {"count": 32, "m": 1024, "k": 128, "n": 1024},
                                  {"count": 1, "m": 1025, "k": 4096, "n": 3584}])
def test_tied_pieces_start_with_the_greedy_piece_and_each_reaches_the_target(dims, target):
    pieces = tied_pieces(dims, LOW, 2.0, target, CUTS)
    assert pieces[0] == halved(dims, LOW, 2.0, target, CUTS)
    assert len({tuple(p.values()) for p in pieces}) == len(pieces)
    for piece in pieces:
        assert math.prod(math.ceil(dims[d] / piece[d]) for d in CUTS) >= target
        assert all(LOW[d] <= piece[d] <= dims[d] for d in CUTS)


def test_a_power_of_two_of_rows_costs_no_more_than_one_row_more(socket):
    def cost(m, k, n, target):
        return min(option[0] for option in gemm_tilings(socket, gemm(m, k, n), target, 0.9))

    worse = [(m, k, n, t) for k, n in ((4096, 3584), (1792, 4096), (4096, 768), (4096, 512))
             for m in (128, 512, 1024, 4096, 8192) for t in (1 << i for i in range(14))
             if cost(m, k, n, t) > cost(m + 1, k, n, t)]
    assert not worse


@pytest.mark.parametrize("order", ["rising", "falling", "shuffled"])
def test_tied_pieces_from_a_lower_targets_pieces_are_those_searched_from_the_whole(order):
    """The search for a target goes on from the pieces a lower target found (a halving never
    lowers the count): in any order of targets, the same pieces as a search from scratch."""
    targets = [1 << i for i in range(0, 23, 1)]
    if order == "falling":
        targets.reverse()
    elif order == "shuffled":
        targets = targets[1::2] + targets[::2]
    shapes = [{"count": 1, "m": 1024, "k": 4096, "n": 3584}, {"count": 32, "m": 1024, "k": 128, "n": 1024},
              {"count": 256, "m": 64, "k": 7168, "n": 2048}, {"count": 1, "m": 131072, "k": 512, "n": 512}]
    tied = False
    for dims in shapes:
        for cuts in (CUTS, ("m", "n")):
            clear_halvings()
            memoised = [tied_pieces(dims, LOW, 2.0, t, cuts) for t in targets]
            fresh = []
            for t in targets:
                clear_halvings()
                fresh.append(tied_pieces(dims, LOW, 2.0, t, cuts))
            assert memoised == fresh
            tied = tied or any(len(p) > 1 for p in fresh)
    assert tied   # ties do occur on these shapes (else there is nothing to follow)


def test_a_dimension_may_be_halved_down_to_its_minimum():
    # the minimum is a piece's smallest allowed size, itself allowed: 64 rows with a minimum of 32
    # halve once, to 32, however many pieces are asked for (the only dimension cut)
    dims = {"count": 1, "m": 64, "k": 4096, "n": 4096}
    assert halved(dims, LOW, 2.0, 2, ("m",))["m"] == 32
    assert halved(dims, LOW, 2.0, 4, ("m",))["m"] == 32
    assert [p["m"] for p in tied_pieces(dims, LOW, 2.0, 2, ("m",))] == [32]


def test_one_row_short_of_a_power_of_two_is_offered_the_power_of_twos_pieces():
    # Llama-3.1-8B's attention P V at 511 and 512 tokens on 8 sockets (count 4, n 128, K and V at
    # half a byte an element of B as the operator counts them): at 512 the m and k halvings tie and
    # 128 x 256 pieces are a candidate; at 511 the rounded-up halves made 64 x 511 a row smaller and
    # 128 x 256 was never tried, though on 59 PCUs of a tile it is faster (14,121 against
    # 13,945 cycles a call, so in a room of those PCUs 511 tokens prefilled slower than 512)
    low = {"count": 1, "m": 6, "k": 6, "n": 32}
    pieces = {n: [(p["m"], p["k"]) for p in tied_pieces({"count": 4, "m": n, "k": n, "n": 128}, low, 0.5, 32, CUTS)]
              for n in (511, 512)}
    assert pieces[512] == [(64, 512), (128, 256)]
    assert pieces[511] == [(64, 511), (128, 256)]
