"""How one stage's work divides over its PCUs: whole work items, splits of a GEMM's rows or K,
and what a split K costs.

A stage's work per data tile is a number of **items** (:mod:`sn40l_sim.mapper.work`) a PCU runs
back to back; items do not split, so ``x`` items on ``Q`` PCUs take ``ceil(x / Q)`` items' time on
the busiest PCU, plus the stage's fill and drain once (its *latency*, paid in the kernel's fill).
When a GEMM piece has fewer items than PCUs, the division may split an item's rows or K blocks over
several PCUs; :func:`fewest_pcus` finds the fewest PCUs (over every split worth trying) that bring
the stage under a target, :func:`stage_division` the best on a given number. A softmax's three
passes each take PCUs of their own when there are enough, so a row's passes pipeline.

Examples
--------
A 64 x 64 x 64 BF16 GEMM as one piece: two column blocks, so two PCUs split it without a
reduction, and 128 would only add partial sums:

>>> from sn40l_sim.mapper._examples import example_socket
>>> from sn40l_sim.ir import Operator
>>> from sn40l_sim.mapper.budget import UnitBudget
>>> from sn40l_sim.mapper.tiling import tile_operator
>>> socket = example_socket()
>>> ws = UnitBudget(dataflows=("weight_stationary",))
>>> t = tile_operator(socket, Operator("g", "gemm", m=64, k=64, n=64), 1, efficiency=1.0, budget=ws)
>>> one, two = stage_division(t.work, 1.0, 1), stage_division(t.work, 1.0, 2)
>>> one.cycles, two.cycles, two.split
(1408, 704, (1, 1))
>>> many = stage_division(t.work, 1.0, 128)
>>> many.cycles < two.cycles, many.split[1] > 1, many.latency_cycles > two.latency_cycles
(True, True, True)
"""
from __future__ import annotations

import math
from functools import lru_cache
from typing import NamedTuple

from sn40l_sim.mapper.work import GemmWork, PmuWork, SimdWork, Split, StageModel

_EPS = 1e-9


class Division(NamedTuple):
    """A stage's work on ``pcus`` PCUs (all tiles together), per data tile (a named tuple: the
    allocator builds tens of thousands, and a frozen dataclass takes several times as long to make).

    Attributes
    ----------
    pcus : int
        PCUs the work is divided over.
    cycles : int
        Steady cycles per data tile of the busiest PCU (compute, reductions and its streams).
    latency_cycles : int
        Fill and drain of the stage, paid once (pipeline, hops to and from its PMUs, reduction rounds).
    split : tuple of int
        ``(s_m, s_k)`` of a GEMM (``(1, 1)``: whole items); ``(1, 1)`` for SIMD work.
    sram_read_bytes, sram_write_bytes, mesh_bytes : float
        Extra PMU reads and writes and mesh bytes per data tile that the split costs.
    """

    pcus: int
    cycles: int
    latency_cycles: int
    split: tuple[int, int] = (1, 1)
    sram_read_bytes: float = 0.0
    sram_write_bytes: float = 0.0
    mesh_bytes: float = 0.0


def sequence(items: int, pieces: float, pcus: int) -> tuple[int, float]:
    """``(n, share)``: the busiest of ``pcus`` PCUs runs ``n`` items back to back in ``share`` of the
    data tiles, ``pieces`` pieces of ``items`` each arriving per data tile on average (fewer than
    one: a piece every ``1 / pieces`` data tiles).

    >>> sequence(3, 1.0, 2), sequence(3, 2.0, 2), sequence(4, 0.5, 2)
    ((2, 1.0), (3, 1.0), (2, 0.5))
    """
    if pieces >= 1:
        return math.ceil(pieces * items / pcus - _EPS), 1.0
    return math.ceil(items / pcus - _EPS), pieces


def items_per_pcu(items: int, pieces: float, pcus: int) -> float:
    """Items the busiest of ``pcus`` PCUs runs per data tile, on average.

    >>> items_per_pcu(3, 1.0, 2), items_per_pcu(3, 2.0, 2), items_per_pcu(4, 0.5, 2)
    (2.0, 3.0, 1.0)
    """
    n, share = sequence(items, pieces, pcus)
    return n * share


def fewest_pcus_for(items: int, pieces: float, most_in_sequence: float) -> int | None:
    """Fewest PCUs whose busiest one runs at most ``most_in_sequence`` items back to back, or None.

    >>> fewest_pcus_for(3, 1.0, 2), fewest_pcus_for(3, 1.0, 0.5), fewest_pcus_for(4, 0.5, 2)
    (2, None, 2)
    """
    whole = math.floor(most_in_sequence + _EPS)
    if whole < 1:
        return None
    return math.ceil(max(1.0, pieces) * items / whole - _EPS)


def useful_pcus(items: int, pieces: float) -> int:
    """PCUs beyond which none gets an item of its own."""
    return max(1, math.ceil(max(1.0, pieces) * items - _EPS))


def _division(split: Split, pieces: float, pcus: int, efficiency: float) -> Division:
    n, share = sequence(split.items, pieces, pcus)
    moved = pieces * split.items * split.reduce_bytes
    latency = max(0, split.latency + math.floor(split.offset / efficiency))
    return Division(pcus, split.cycles(n, share, efficiency), latency, (split.s_m, split.s_k),
                    sram_read_bytes=2 * moved, sram_write_bytes=moved, mesh_bytes=moved)


def _divided(split: Split, pieces: float, pcus: int, cycles: int, latency: int) -> Division:
    """:func:`_division` of a split whose cycles and latency on ``pcus`` the caller has worked out
    (in :func:`_division`'s arithmetic): the searches below build one for each answer."""
    moved = pieces * split.items * split.reduce_bytes
    return Division(pcus, cycles, latency, (split.s_m, split.s_k), 2 * moved, moved, moved)


def _passes_on(work: SimdWork, pieces: float, pcus: int) -> int:
    if len(work.pass_cycles) > 1 and pcus >= len(work.pass_cycles):
        # each pass on PCUs of its own: the fewest cycles whose PCUs add up to at most ``pcus``
        lo, hi = 1, _together(work, pieces, len(work.pass_cycles))
        while lo < hi:
            mid = (lo + hi) // 2
            need = _separate_pcus(work, pieces, mid)
            if need is not None and need <= pcus:
                hi = mid
            else:
                lo = mid + 1
        return min(lo, _together(work, pieces, pcus))
    return _together(work, pieces, pcus)


def _together(work: SimdWork, pieces: float, pcus: int) -> int:
    return math.ceil(items_per_pcu(work.items, pieces, pcus) * sum(work.pass_cycles) - _EPS)


def _share(pieces: float) -> float:
    return min(1.0, pieces)


def _separate_pcus(work: SimdWork, pieces: float, target: int) -> int | None:
    total = 0
    for c in work.pass_cycles:
        q = fewest_pcus_for(work.items, pieces, target / (c * _share(pieces))) if c > 0 else 1
        if q is None:
            return None
        total += q
    return total


# the allocator's bisections ask for the same divisions of the same work again and again (the
# models are frozen, hashable values, and the answers depend on nothing else)
@lru_cache(maxsize=65536)
def stage_division(work: StageModel, pieces: float, pcus: int, most_pcus: int | None = None) -> Division:
    """The best division of one data tile's work (``pieces`` pieces) over ``pcus`` PCUs."""
    if isinstance(work, PmuWork):
        return Division(0, 0, work.latency)
    if isinstance(work, SimdWork):
        return Division(pcus, _passes_on(work, pieces, pcus), work.latency)
    if most_pcus:
        return _best_gemm_division(work, pieces, pcus, most_pcus)
    # every split's (cycles, latency) as _division gives them; the division built for the best only
    best_split: Split | None = None
    best_cycles = best_latency = 0
    efficiency = work.efficiency
    whole_pieces = pieces >= 1
    share = 1.0 if whole_pieces else pieces
    for split in work.candidates(pieces, pcus):
        cycles = _cycles_on(split.items, split.item_cycles, split.reduce_cycles, split.stream_cycles, pieces,
                            whole_pieces, share, pcus, efficiency)
        if best_split is not None and cycles > best_cycles:
            continue
        latency = max(0, split.latency + math.floor(split.offset / efficiency))
        if best_split is None or cycles < best_cycles or latency < best_latency:
            best_split, best_cycles, best_latency = split, cycles, latency
    assert best_split is not None
    return _division(best_split, pieces, pcus, efficiency)


@lru_cache(maxsize=131072)
def fewest_pcus(work: StageModel, pieces: float, target: int, most_pcus: int) -> Division | None:
    """The division on the fewest PCUs (at most ``most_pcus``) whose cycles are at most ``target``,
    or None."""
    if isinstance(work, PmuWork):
        return Division(0, 0, work.latency)
    if isinstance(work, SimdWork):
        q = None
        total = sum(work.pass_cycles)
        together = fewest_pcus_for(work.items, pieces, target / (total * _share(pieces))) if total else 1
        if together is not None:
            q = together
        if len(work.pass_cycles) > 1:
            apart = _separate_pcus(work, pieces, target)
            if apart is not None and (q is None or apart < q):
                q = apart
        if q is None or q > most_pcus:
            return None
        q = max(1, q)
        d = Division(q, _passes_on(work, pieces, q), work.latency)
        return d if d.cycles <= target else None
    return _fewest_gemm_pcus(work, pieces, target, most_pcus)


# per candidate split of a piece, what _fewest_gemm_pcus reads of it: the split, its sub-items as
# the busiest PCU's sequence counts them (``pieces x items`` for whole pieces, else ``items``),
# ``max(1, pieces) x items``, its item, partial-sum and stream cycles, and the larger of its
# item-plus-sum and stream cycles per sub-item (the searches ask for the same piece at every
# target of a bisection)
_Terms = tuple[tuple[Split, float, float, float, float, float, float], ...]


@lru_cache(maxsize=16384)
def _gemm_terms(work: GemmWork, pieces: float, most_pcus: int) -> _Terms:
    efficiency = work.efficiency
    scale = max(1.0, pieces)
    whole_pieces = pieces >= 1
    return tuple((split, pieces * split.items if whole_pieces else split.items, scale * split.items,
                  split.item_cycles, split.reduce_cycles, split.stream_cycles,
                  max(split.item_cycles / efficiency + split.reduce_cycles, split.stream_cycles))
                 for split in work.candidates(pieces, most_pcus))


def _best_gemm_division(work: GemmWork, pieces: float, pcus: int, most_pcus: int) -> Division:
    """:func:`stage_division` of a GEMM among the splits tried on ``most_pcus``: the split's
    fields read from :func:`_gemm_terms` (memoised with :func:`fewest_pcus`' searches of the same
    piece) and their cycles from :func:`_cycles_on`, in the same float arithmetic."""
    best_split: Split | None = None
    best_cycles = best_latency = 0
    efficiency = work.efficiency
    whole_pieces = pieces >= 1
    share = 1.0 if whole_pieces else pieces
    floor = math.floor
    for split, _, _, item, reduce, stream, _ in _gemm_terms(work, pieces, most_pcus):
        cycles = _cycles_on(split.items, item, reduce, stream, pieces, whole_pieces, share, pcus, efficiency)
        if best_split is not None and cycles > best_cycles:
            continue
        latency = max(0, split.latency + floor(split.offset / efficiency))
        if best_split is None or cycles < best_cycles or latency < best_latency:
            best_split, best_cycles, best_latency = split, cycles, latency
    assert best_split is not None
    return _divided(best_split, pieces, pcus, best_cycles, best_latency)


def _fewest_gemm_pcus(work: GemmWork, pieces: float, target: int, most_pcus: int) -> Division | None:
    """:func:`fewest_pcus` of a GEMM: over the candidate splits, the fewest PCUs (then fewest
    cycles, then the first split) reaching ``target``.

    The most sub-items a data tile's budget fits, :func:`sequence` and
    :meth:`~sn40l_sim.mapper.work.Split.cycles` are written out in the loop with the same float
    arithmetic, what depends on the split alone worked out once per piece (:func:`_gemm_terms`):
    this is the allocator's innermost search (``tests/mapper/test_mapper_cache.py`` checks it
    against trying every PCU count with :func:`_division`)."""
    # the best so far as (pcus, cycles, split); a split needing more PCUs than it cannot win, so
    # its search stops there
    best_pcus = best_cycles = 0
    best_split: Split | None = None
    efficiency = work.efficiency
    whole_pieces = pieces >= 1
    # the budget of a data tile's share, and sequence's share (at least one piece per data tile: 1.0)
    budget = target / _share(pieces)
    share = 1.0 if whole_pieces else pieces
    top = most_pcus
    ceil, floor = math.ceil, math.floor
    for split, sequenced, scaled, item, reduce, stream, slowest in _gemm_terms(work, pieces, most_pcus):
        # the most items: the least of the budget over the item-plus-sum cycles and over the
        # stream cycles (those that are positive), which is the budget over the larger of the two
        # (a correctly rounded quotient does not grow with its divisor)
        most = budget / slowest if slowest > 0 else math.inf
        whole = floor(most + _EPS)
        if whole < 1:
            continue
        # fewest_pcus_for's arithmetic
        q = ceil(scaled / whole - _EPS)
        if q > top:
            continue
        # the estimate ignores rounding up, so it is a lower bound: search up from it (on the
        # cycles alone; the division is built once, for the answer)
        lo = q if q > 1 else 1
        # _cycles_on(..., lo, ...)
        n = ceil(sequenced / lo - _EPS)
        if n <= 0:
            cycles = 0
        else:
            done = share * n
            cycles = ceil(done * item / efficiency - _EPS) + ceil(done * reduce - _EPS)
            streamed = ceil(done * stream - _EPS)
            if streamed > cycles:
                cycles = streamed
        if cycles > target:
            items = split.items
            hi = top
            if _cycles_on(items, item, reduce, stream, pieces, whole_pieces, share, hi, efficiency) > target:
                continue
            while lo < hi:
                mid = (lo + hi) // 2
                if _cycles_on(items, item, reduce, stream, pieces, whole_pieces, share, mid, efficiency) <= target:
                    hi = mid
                else:
                    lo = mid + 1
            cycles = _cycles_on(items, item, reduce, stream, pieces, whole_pieces, share, lo, efficiency)
        if best_split is None or lo < best_pcus or (lo == best_pcus and cycles < best_cycles):
            best_pcus, best_cycles, best_split = lo, cycles, split
            top = lo
    if best_split is None:
        return None
    return _divided(best_split, pieces, best_pcus, best_cycles,
                    max(0, best_split.latency + floor(best_split.offset / efficiency)))


def _cycles_on(items: int, item_cycles: float, reduce_cycles: float, stream_cycles: float, pieces: float,
               whole_pieces: bool, share: float, pcus: int, efficiency: float) -> int:
    """The cycles :func:`_division` gives a split with these fields (:func:`sequence`, then
    :meth:`~sn40l_sim.mapper.work.Split.cycles`, in the same float arithmetic)."""
    n = math.ceil(pieces * items / pcus - _EPS) if whole_pieces else math.ceil(items / pcus - _EPS)
    if n <= 0:
        return 0
    done = share * n
    compute = math.ceil(done * item_cycles / efficiency - _EPS)
    return max(compute + math.ceil(done * reduce_cycles - _EPS), math.ceil(done * stream_cycles - _EPS))


def ideal_cycles(work: StageModel, pieces: float) -> float:
    """PCU-cycles of one data tile's work with no rounding at all (a lower bound for any division)."""
    if isinstance(work, PmuWork):
        return 0.0
    if isinstance(work, SimdWork):
        return pieces * work.items * sum(work.pass_cycles)
    whole = work.split(1, 1)
    return pieces * whole.items * whole.item_cycles / work.efficiency


class WorkFloor(NamedTuple):
    """What no division of one data tile's work goes below (:func:`least_work`)."""

    #: PCU-cycles: on ``p`` PCUs its cycles are at least this over ``p``
    work: float
    #: fill and drain
    latency: int
    #: cycles on the most PCUs it may use (its best division there)
    cycles: int


@lru_cache(maxsize=65536)
def least_work(work: StageModel, pieces: float, most_pcus: int) -> WorkFloor:
    """The floor of one data tile's work (``pieces`` pieces) over every division among the splits
    tried on ``most_pcus`` PCUs, on at most that many: the busiest PCU runs at least its share of
    the sub-items, each taking its compute and partial-sum adds, or its stream; a division's
    cycles do not grow with its PCUs, so none goes below the best on ``most_pcus``.

    A K split can take fewer PCU-cycles than the whole items (a K block after the first waits
    on the partial sum, the first does not), so the PCU-cycles are the least over the splits, not
    :func:`ideal_cycles`.
    """
    if isinstance(work, PmuWork):
        return WorkFloor(0.0, work.latency, 0)
    if isinstance(work, SimdWork):
        return WorkFloor(pieces * work.items * sum(work.pass_cycles), work.latency,
                         _passes_on(work, pieces, most_pcus))
    efficiency = work.efficiency
    whole_pieces = pieces >= 1
    share = 1.0 if whole_pieces else pieces
    least = math.inf
    latency = cycles = -1
    for split in work.candidates(pieces, most_pcus):
        items, item, reduce, stream = split.items, split.item_cycles, split.reduce_cycles, split.stream_cycles
        least = min(least, pieces * items * max(item / efficiency + reduce, stream))
        fill = max(0, split.latency + math.floor(split.offset / efficiency))
        latency = fill if latency < 0 else min(latency, fill)
        # stage_division's cycles of this split on most_pcus PCUs
        on_most = _cycles_on(items, item, reduce, stream, pieces, whole_pieces, share, most_pcus, efficiency)
        cycles = on_most if cycles < 0 else min(cycles, on_most)
    return WorkFloor(least, latency, cycles)


def clear_caches() -> None:
    """Forget the memoised divisions (a cold mapping, for tests that compare it with a warm one)."""
    stage_division.cache_clear()
    fewest_pcus.cache_clear()
    least_work.cache_clear()
    _gemm_terms.cache_clear()
