"""A window's last share timed only as far as the score needs it gives the scores of the share timed
exactly, on the shared links of a ring and a torus.

The mapper charges a window's share only where it ends after its collective's own time
(``sn40l_sim/mapper/windows.py``, ``_covered``; ``sn40l_sim/mapper/window_replay.py``, the replay's
``needed``), so it asks :meth:`~sn40l_sim.engine.staging.LoneCollectiveCycles.at_most` whether the
share fits in that budget: the collective model's search stops at the first algorithm within it,
and the odd byte counts of shares (a collective's bytes over a window's tiles) make the direct
all-reduce asymmetric, the fluid network's dearest case (it was most of a 64-socket ring's run,
``benchmarks/bench_sockets.py``). The bounded answers, and every score built on them, are checked
against the exact cycles with the models' memos emptied in between, so neither side reads the
other's results.
"""
from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import pytest
import yaml

from sn40l_sim.engine import collectives
from sn40l_sim.engine.collectives import CollectiveModel
from sn40l_sim.engine.staging import lone_collective_cycles
from sn40l_sim.hardware.loader import load_hardware
from sn40l_sim.ir import Collective, FusedKernel, Operator
from sn40l_sim.mapper.window_replay import replay_stream
from sn40l_sim.mapper.windows import exposed_cycles, hidden_cycles, overlap_windows, window_tiles

#: collectives with odd byte counts, as windows' shares have (none splits evenly over 16 members)
SHARES = (Collective("all_reduce", 18443, 16, True), Collective("all_reduce", 141155, 16, True),
          Collective("all_gather", 50001, 16, True), Collective("reduce_scatter", 7, 16, False))


@pytest.fixture(scope="module", params=["ring", "torus2d"])
def node(request, tmp_path_factory):
    """A 16-socket node of the shipped socket whose links form a ring or a 4 x 4 torus."""
    folder = tmp_path_factory.mktemp(request.param)
    socket = Path(__file__).resolve().parents[2] / "hw_configs" / "sn40l.yaml"
    spec = {"kind": "node", "name": f"SN40L-16-{request.param}", "socket": str(socket), "sockets": 16,
            "topology": {"kind": request.param, "links_per_pair": 1},
            "host_link": {"bytes_per_s": "64 GB/s", "latency_s": "1 us"}}
    path = folder / "node.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return load_hardware(path)


def _fresh(node):
    """The lone cycles of ``node``'s collectives, with no collective costed before in the process."""
    collectives._shared.clear()
    model = CollectiveModel.from_node(node)
    return model, lone_collective_cycles(model, node)


@pytest.mark.parametrize("coll", SHARES, ids=lambda c: f"{c.kind}-{c.bytes}")
def test_at_most_is_the_exact_cycles_within_the_budget(node, coll):
    exact = _fresh(node)[1](coll)
    assert exact > 0
    for budget in (-1, 0, exact // 2, exact - 1, exact, exact + 1, 10**9):
        assert _fresh(node)[1].at_most(coll, budget) == (exact <= budget), budget


def test_a_generous_budget_simulates_no_direct_algorithm(node):
    # the tree fits, so the search stops there: the direct all-reduce of an odd byte count (every
    # one of its flows on the event loop) is never simulated
    coll = SHARES[1]
    model, cycles = _fresh(node)
    assert cycles.at_most(coll, 10**9)
    assert model.scheduled + model.simulated == 1


def _windows(node, cycles):
    """A decoder-like kernel of two GEMMs, its all-reduce after the first (an odd byte count)."""
    a = Operator("a", "gemm", flops=2 * 4096 * 4096, m=1, k=4096, n=4096, weight_bytes=2 * 4096 * 4096)
    b = Operator("b", "gemm", flops=2 * 4096 * 4096, m=1, k=4096, n=4096, weight_bytes=2 * 4096 * 4096)
    c = Operator("c", "gemm", flops=2 * 4096 * 1024, m=1, k=4096, n=1024, weight_bytes=2 * 4096 * 1024)
    kernel = FusedKernel("k", "k", "decode", (a, b, c), (Collective("all_reduce", 907_777, 16, True, after="a"),
                                                         Collective("all_reduce", 300_001, 16, True, after="c")))
    return overlap_windows(node.socket, kernel, cycles)


#: (data tiles, cycles per tile, cycles to the first tile): windows of odd tile counts, short and
#: long streams, so some shares are covered by their collective's time and some are not
GRID = [(n, per_tile, first) for n in (3, 7, 21, 77, 321) for per_tile in (40, 400, 4000) for first in (0, 900)]


def _scores(windows, lazy):
    out = []
    for n, per_tile, first in GRID:
        out.append(exposed_cycles(windows, n, per_tile, first))
        out.append(hidden_cycles(windows, n, per_tile, first))
        spans = []
        for w in windows:
            start, stop = window_tiles((w.start, w.end), n)
            tail = functools.partial(w.tail_beyond, stop - start) if lazy else float(w.tail_cycles(stop - start))
            spans.append((start, stop, float(w.body_cycles), tail, 0.0))
        out.append(replay_stream((1,) * n, (1000.0,) * n, (per_tile // 2,) * n, per_tile, 0, 0, 10**9, spans,
                                 first))
    return out


def test_bounded_shares_score_as_exact_ones(node):
    _, cycles = _fresh(node)
    bounded_windows = _windows(node, cycles)
    bounded = _scores(bounded_windows, lazy=True)
    # the same shares, their cycles only through a callable that cannot bound them
    _, cycles = _fresh(node)
    exact = _scores(_windows(node, lambda coll: cycles(coll)), lazy=False)
    assert bounded == exact
    # both cases were met: shares known only to fit their budget, and shares timed
    shares = [w.share for w in bounded_windows]
    assert any(set(s.fits) - set(s.memo) for s in shares)
    assert any(t for s in shares for t in s.memo if t & (t - 1))


@pytest.fixture(scope="module")
def exact_share(node):
    """The first window's share over 21 tiles, timed exactly from a fresh model: the same number for
    every gap of the test below, so timed once per node (each of the five tests then times its own
    window, bounded, from a fresh model again; ~1 s of each test was this share's windows)."""
    _, cycles = _fresh(node)
    return _windows(node, cycles)[0].tail_cycles(21)


@pytest.mark.parametrize("gap", [-2, -1, 0, 1, 2])
def test_a_share_a_cycle_either_side_of_its_cover(node, exact_share, gap):
    # a window over the stream's second half, its 21 tiles' share T: its collective ends ``T + gap``
    # cycles after the stream, so the call's collectives outlast it by max(T + gap, T)
    n, per_tile, share = 42, 20_000, exact_share   # the collective starts after cycle 0 (the links are free from there)
    _, cycles = _fresh(node)
    w = dataclasses.replace(_windows(node, cycles)[0], start=0.5, end=1.0)
    first = share + gap + (n - 21) * per_tile - w.body_cycles
    assert first > 0
    assert exposed_cycles([w], n, per_tile, first) == (0.0, max(share + gap, share))
