"""How one stage's work divides over its PCUs: whole work items, splits of M and K, and what a
split K costs.

A stage's work per data tile is a number of **items** a PCU runs back to back; items do not split,
so ``x`` items on ``Q`` PCUs take ``ceil(x / Q)`` items' time on the busiest PCU, plus the
pipeline's fill and drain once (the stage's *latency*, paid in the kernel's fill). Per PCU the
time is also bounded by its streams: each stream between a PCU and a PMU is one PMU port and one
mesh link (streams are statically routed), so ``bytes / min(port, link)`` cycles.

* **GEMM, weight-stationary** (:mod:`sn40l_sim.hardware.units.pcu`): an item is one column block
  over the piece's K blocks and rows. When there are fewer items than PCUs the mapper may split an
  item's rows (``s_m`` PCUs each take ``m / s_m`` rows: each PCU loads the same weights, and a
  K block lasts at least ``stages`` cycles and, for few rows, the partial sum's round trip) or its
  K blocks (``s_k`` PCUs each take ``k_blocks / s_k`` blocks). A K split leaves ``s_k`` partial-sum
  sets of ``rows x lanes`` FP32 values that are added pairwise in ``ceil(log2 s_k)`` rounds: in
  each round the partner's vectors cross the mesh (``hops`` to a partner ``2^round`` PCUs away)
  and go through the receiving PCU's pipeline, one per ``psum vector / stream width`` cycles; the
  ``s_k - 1`` partial sets per item are read, moved and written through PMUs. The partial sums
  of one PCU go out to its output PMU and come back every K block: ``accumulate_latency`` is that
  round trip (a mesh hop each way).
* **GEMM, output-stationary**: an item is one output tile of ``stages`` rows x ``lanes`` columns
  over the piece's K; a K split works and is paid for as above, with ``stages`` rows.
* **SIMD**: an item is one vector (elementwise) or one row (row-wise kinds). A softmax runs three
  passes over each row (row max through the lane tree; ``exp(x - max)`` in the tail stage with the
  row sum through the tree; normalisation), each on PCUs of its own when the stage has at least
  three, so a row's passes pipeline; with fewer PCUs each PCU runs all three.
* **Gather and scatter** use no PCU: a PMU's address generators read the indexed rows and stream
  them to the next PMU (:func:`~sn40l_sim.hardware.units.pmu.pmu_gather_cycles`).

Every quantity comes from the unit parameters of the socket (lanes, stages, pipeline latency,
reduction-tree latency, tail-stage rate, PMU port width, link width, hop latency); nothing here is
fitted.

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
from dataclasses import dataclass
from functools import lru_cache

_EPS = 1e-9


@dataclass(frozen=True)
class Division:
    """A stage's work on ``pcus`` PCUs (all tiles together), per data tile.

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


@dataclass(frozen=True)
class _Split:
    """One way of cutting a GEMM piece's items: ``s_m`` x ``s_k`` sub-items per item."""

    s_m: int
    s_k: int
    items: int            # sub-items per piece
    item_cycles: float    # steady cycles of one more sub-item on a PCU (before efficiency)
    offset: float         # the last sub-item's drain minus a full one (<= 0), paid once
    reduce_cycles: float  # cycles of partial-sum adds per sub-item on its PCU
    stream_cycles: float  # cycles of the busiest PCU stream per sub-item
    latency: int          # fill and drain of the stage with this split
    reduce_bytes: float   # partial-sum bytes moved per sub-item (read twice, written once)

    def cycles(self, n: int, share: float, efficiency: float) -> int:
        """Cycles per data tile of ``n`` sub-items back to back in ``share`` of the data tiles."""
        if n <= 0:
            return 0
        # back to back, the next data tile's items follow: the last item's shorter drain (offset)
        # is paid once, in the latency
        compute = math.ceil(share * n * self.item_cycles / efficiency - _EPS)
        return max(compute + math.ceil(share * n * self.reduce_cycles - _EPS),
                   math.ceil(share * n * self.stream_cycles - _EPS))

    def most_items(self, target: int, share: float, efficiency: float) -> float:
        """Sub-items back to back that fit ``target`` cycles (an upper estimate; callers check)."""
        budget = target / share
        per_item = self.item_cycles / efficiency + self.reduce_cycles
        most = budget / per_item if per_item > 0 else math.inf
        if self.stream_cycles > 0:
            most = min(most, budget / self.stream_cycles)
        return most


@dataclass(frozen=True)
class GemmWork:
    """A GEMM piece as work items (see the module docstring), with the unit parameters it needs.

    Built by :func:`sn40l_sim.mapper.tiling.tile_operator`; ``dataflow`` is
    ``"weight_stationary"`` or ``"output_stationary"``.
    """

    dataflow: str
    count: int
    m: int
    k: int
    n_blocks: int
    k_blocks: int
    k_per_stage: int
    row_cycles: int
    stages: int
    lanes: int
    pipeline_latency: int
    accumulate_latency: int
    efficiency: float
    a_bytes: float
    b_bytes: float
    out_bytes: float
    psum_vector_bytes: int
    stream_bytes_per_cycle: int
    hop_cycles: int
    #: latency of each round of a cross-PCU reduction (partner further away each round)
    reduce_round_cycles: tuple[int, ...]
    #: the piece is one K range of an output that earlier pieces started (its first K block
    #: waits on their partial sums like any later block)
    continues_k: bool = False

    @property
    def items(self) -> int:
        """Whole items of one piece (no split)."""
        if self.dataflow == "output_stationary":
            return self.count * self.n_blocks * math.ceil(self.m / self.stages)
        return self.count * self.n_blocks

    def _max_s_m(self) -> int:
        return 1 if self.dataflow == "output_stationary" else self.m

    def _max_s_k(self) -> int:
        return self.k_blocks if self.dataflow == "weight_stationary" else max(1, math.ceil(self.k / self.stages))

    def split(self, s_m: int, s_k: int) -> _Split:
        """The cost model of one split."""
        return _split(self, s_m, s_k)

    def _cost_of(self, s_m: int, s_k: int) -> _Split:
        psum = self.psum_vector_bytes
        vec = math.ceil(psum / self.stream_bytes_per_cycle - _EPS)
        rounds = math.ceil(math.log2(s_k) - _EPS) if s_k > 1 else 0
        reduce_latency = sum(self.reduce_round_cycles[:rounds]) + max(0, rounds - len(self.reduce_round_cycles)) * (
            self.reduce_round_cycles[-1] if self.reduce_round_cycles else 0)
        rate = self.stream_bytes_per_cycle
        if self.dataflow == "output_stationary":
            rows = self.stages
            k_part = math.ceil(self.k / s_k)
            item = max(math.ceil(k_part / self.k_per_stage) * self.row_cycles, self.stages)
            offset = 0.0
            out = psum if s_k > 1 else self.lanes * self.out_bytes
            stream = max(k_part * self.lanes * self.b_bytes, k_part * self.stages * self.a_bytes, rows * out) / rate
            fixed = self.stages + self.pipeline_latency
            items = self.items * s_k
        else:
            rows = math.ceil(self.m / s_m)
            blocks = math.ceil(self.k_blocks / s_k)
            first = max(rows * self.row_cycles, self.stages)
            later = max(first, self.pipeline_latency + self.accumulate_latency)
            if self.continues_k:
                first = later
            item = (blocks - 1) * later + first
            offset = float(rows * self.row_cycles - first)
            k_per_block = self.k_per_stage * self.stages
            stream = max(blocks * rows * psum, blocks * rows * k_per_block * self.a_bytes,
                         blocks * self.stages * self.lanes * self.b_bytes) / rate
            fixed = 1 + self.pipeline_latency
            items = self.items * s_m * s_k
        reduce_cycles = rows * vec * (s_k - 1) / s_k if s_k > 1 else 0.0
        reduce_bytes = rows * psum * (s_k - 1) / s_k if s_k > 1 else 0.0
        latency = 2 * self.hop_cycles + fixed + reduce_latency
        return _Split(s_m, s_k, items, float(item), offset, reduce_cycles, stream, latency, reduce_bytes)

    def candidates(self, pieces: float, most_pcus: int) -> tuple[_Split, ...]:
        """Splits worth trying on up to ``most_pcus`` PCUs: powers of two, not beyond two
        sub-items per PCU."""
        return _candidates(self, pieces, most_pcus)

    def _all_candidates(self, pieces: float, most_pcus: int) -> tuple[_Split, ...]:
        base = max(1.0, pieces) * self.items
        out = [self.split(1, 1)]
        s_m = 1
        while s_m <= self._max_s_m():
            s_k = 1
            while s_k <= self._max_s_k():
                if (s_m, s_k) != (1, 1):
                    if base * s_m * s_k > 2 * most_pcus:
                        break
                    out.append(self.split(s_m, s_k))
                s_k *= 2
            s_m *= 2
            if base * s_m > 2 * most_pcus:
                break
        return tuple(out)


# a mapping asks for the same splits of the same pieces many times over (one per bisection step)
@lru_cache(maxsize=65536)
def _split(work: GemmWork, s_m: int, s_k: int) -> _Split:
    return work._cost_of(s_m, s_k)


@lru_cache(maxsize=16384)
def _candidates(work: GemmWork, pieces: float, most_pcus: int) -> tuple[_Split, ...]:
    return work._all_candidates(pieces, most_pcus)


@dataclass(frozen=True)
class SimdWork:
    """SIMD work as items (vectors or rows) of one or more passes (see the module docstring)."""

    items: int
    #: steady cycles of one item in each pass (its PCU's compute or its input stream, the larger)
    pass_cycles: tuple[float, ...]
    latency: int


@dataclass(frozen=True)
class PmuWork:
    """Work done by PMUs alone (gather, scatter): nothing for a PCU."""

    latency: int


StageModel = GemmWork | SimdWork | PmuWork


def _division(split: _Split, pieces: float, pcus: int, efficiency: float) -> Division:
    n, share = sequence(split.items, pieces, pcus)
    moved = pieces * split.items * split.reduce_bytes
    latency = max(0, split.latency + math.floor(split.offset / efficiency))
    return Division(pcus, split.cycles(n, share, efficiency), latency, (split.s_m, split.s_k),
                    sram_read_bytes=2 * moved, sram_write_bytes=moved, mesh_bytes=moved)


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


def stage_division(work: StageModel, pieces: float, pcus: int, most_pcus: int | None = None) -> Division:
    """The best division of one data tile's work (``pieces`` pieces) over ``pcus`` PCUs."""
    if isinstance(work, PmuWork):
        return Division(0, 0, work.latency)
    if isinstance(work, SimdWork):
        return Division(pcus, _passes_on(work, pieces, pcus), work.latency)
    best: Division | None = None
    for split in work.candidates(pieces, most_pcus or pcus):
        d = _division(split, pieces, pcus, work.efficiency)
        if best is None or (d.cycles, d.latency_cycles) < (best.cycles, best.latency_cycles):
            best = d
    assert best is not None
    return best


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
    best: Division | None = None
    for split in work.candidates(pieces, most_pcus):
        q = fewest_pcus_for(split.items, pieces, split.most_items(target, _share(pieces), work.efficiency))
        if q is None or q > most_pcus:
            continue
        # the estimate ignores rounding up, so it is a lower bound: search up from it
        lo, hi = max(1, q), most_pcus
        d = _division(split, pieces, lo, work.efficiency)
        if d.cycles <= target:
            if best is None or (d.pcus, d.cycles) < (best.pcus, best.cycles):
                best = d
            continue
        if _division(split, pieces, hi, work.efficiency).cycles > target:
            continue
        while lo < hi:
            mid = (lo + hi) // 2
            if _division(split, pieces, mid, work.efficiency).cycles <= target:
                hi = mid
            else:
                lo = mid + 1
        d = _division(split, pieces, lo, work.efficiency)
        if best is None or (d.pcus, d.cycles) < (best.pcus, best.cycles):
            best = d
    return best


def ideal_cycles(work: StageModel, pieces: float) -> float:
    """PCU-cycles of one data tile's work with no rounding at all (a lower bound for any division)."""
    if isinstance(work, PmuWork):
        return 0.0
    if isinstance(work, SimdWork):
        return pieces * work.items * sum(work.pass_cycles)
    whole = work.split(1, 1)
    return pieces * whole.items * whole.item_cycles / work.efficiency
