"""Giving PCUs and PMUs to the stages of a section so that the pipeline is balanced.

The pipeline streams one data tile per ``cycles_per_tile``, set by its slowest stage. For a target
``C`` every compute stage takes the fewest PCUs that bring its work under ``C`` (whole work items
over its PCUs, splitting a GEMM's rows or K when that helps, at most as many PCUs as it can use:
:mod:`~sn40l_sim.mapper.division`) and the fewest PMUs that hold its buffers double-buffered
(:func:`~sn40l_sim.hardware.units.pmu.pmus_for_buffer`) and serve its reads, writes and
addresses, and a split K's partial sums, within ``C`` (:func:`~sn40l_sim.hardware.units.pmu.pmu_cycles`;
each PMU's read and write streams also cross one mesh link). Memory stages take no units; their
cycles are fixed by their tier. The smallest ``C`` whose allocation fits a tile's PCUs and PMUs
(or a :class:`~sn40l_sim.mapper.budget.UnitBudget`) is found by bisection. The units that minimal
allocation leaves idle may then go to the slower stages (:mod:`.spending`): a stage's cycles per
data tile add to the pipeline fill, and the slowest stage's to every data tile, but each extra unit
has its configuration to load.

Every stage is spread evenly over the ``chip_tiles`` tiles in use: each tile holds the same number
of its PCUs and PMUs and processes its share of every data tile, so per-tile counts are what is
limited.

Examples
--------
>>> from sn40l_sim.mapper._examples import example_socket, example_decode_kernel
>>> from sn40l_sim.mapper.stages import section_stages
>>> from sn40l_sim.mapper.tier_split import TierSplit
>>> socket = example_socket()
>>> stages, _ = section_stages(socket, example_decode_kernel().operators, 16, TierSplit.all_in("hbm"), 4)
>>> alloc = allocate(socket, stages, 4)
>>> alloc.bounds[0], alloc.cycles_per_tile == alloc.cycles[0]      # the decode kernel waits on HBM
('hbm', True)
>>> sum(alloc.pcus) <= socket.tile.pcus and sum(alloc.pmus) <= socket.tile.pmus
True
"""
from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import dataclass, replace
from typing import NamedTuple

from sn40l_sim.hardware.spec import SocketSpec
from sn40l_sim.hardware.units._cycles import ceil_div
from sn40l_sim.mapper.budget import NO_LIMITS, UnitBudget
from sn40l_sim.mapper.division import Division, fewest_pcus, least_work
from sn40l_sim.mapper.lowest_target import Probe, galloping_fit, lowest_reached, probe_tile
from sn40l_sim.mapper.pmus import PmuRates, fewest_pmus, pmu_rates, sram_cycles
from sn40l_sim.mapper.spending import Pricing, call_cycles, division_on, spend_spare_units
from sn40l_sim.mapper.stage_limits import Answers as _Seen
from sn40l_sim.mapper.stage_limits import StageLimits as _Limits
from sn40l_sim.mapper.stage_limits import max_pcus as _max_pcus
from sn40l_sim.mapper.stage_limits import min_pmus as _min_pmus
from sn40l_sim.mapper.stage_limits import stage_limits as _limits
from sn40l_sim.mapper.stages import StageWork

_EPS = 1e-9


@dataclass(frozen=True)
class Allocation:
    """PCUs and PMUs per stage (on each tile in use) and the resulting cycles per data tile."""

    chip_tiles: int
    pcus: tuple[int, ...]
    pmus: tuple[int, ...]
    cycles: tuple[int, ...]
    bounds: tuple[str, ...]
    #: how each compute stage's work is divided (None for memory stages)
    divisions: tuple[Division | None, ...] = ()

    @property
    def latency_cycles(self) -> int:
        """Fill and drain of the compute stages, each paid once."""
        return sum(d.latency_cycles for d in self.divisions if d is not None)

    @property
    def reduction_mesh_bytes(self) -> float:
        """Partial-sum bytes split K reductions move over the mesh per data tile."""
        return sum(d.mesh_bytes for d in self.divisions if d is not None)

    @property
    def cycles_per_tile(self) -> int:
        """Cycles per data tile of the pipeline: its slowest stage."""
        return max(self.cycles, default=0)


class StageFloor(NamedTuple):
    """What any allocation of a compute stage gives it at least (:func:`stage_floor`)."""

    #: cycles per data tile: its work on the most PCUs it may use, its PMU traffic on the most PMUs
    cycles: int
    #: PCU-cycles per data tile: on ``q`` PCUs per tile its cycles are at least this over ``q x chip_tiles``
    work: float
    #: its fill and drain
    latency: int
    #: PCUs per tile, at least (one for PCU work, none for a gather or scatter) and at most
    fewest_pcus: int
    most_pcus: int
    #: PMUs per tile: at least those holding its buffers double-buffered
    pmus: int


def stage_floor(socket: SocketSpec, stage: StageWork, chip_tiles: int, budget: UnitBudget = NO_LIMITS) -> StageFloor:
    """The least cycles and units :func:`allocate` can give compute ``stage`` on ``chip_tiles`` tiles.

    Every division it gives comes from the splits tried on the most PCUs the stage may use, on no
    more PCUs than that, and a division's cycles do not grow with its PCUs (the bisections rest on
    it); its PMUs are at least those holding the buffers, at most the budget's, and their cycles do
    not grow with their number nor shrink with a split's partial sums. So the stage takes at least
    the cycles of the best division on its most PCUs and of its own PMU traffic on its most PMUs,
    and on fewer PCUs at least :func:`~sn40l_sim.mapper.division.least_work` over them."""
    most = _max_pcus(socket, stage, chip_tiles, budget)
    sram = sram_cycles(pmu_rates(socket), stage, budget.pmus_for(stage.name, socket.tile.pmus), chip_tiles)
    assert stage.model is not None
    work = least_work(stage.model, stage.pieces, max(1, most) * chip_tiles)
    return StageFloor(max(work.cycles, sram), work.work, work.latency, 1 if most else 0, most,
                      _min_pmus(socket, stage, chip_tiles))


def _stage_units(rates: PmuRates, stage: StageWork, limits: _Limits, chip_tiles: int,
                 target: int) -> tuple[int, int, Division] | None:
    """Fewest (PCUs, PMUs) per tile bringing a compute stage under ``target`` cycles, and its
    division, or None.

    An answer found at target ``T`` is the answer at every target from the cycles it reaches up
    to ``T``, so it is kept with that span (in ``limits.spans``) and given again for a target in
    it: with fewest PCUs ``q`` (division of ``c`` cycles, the fewest-cycle split first in order
    on ties) at ``T``, a target ``T'`` in ``[c, T]`` is reached on ``q`` PCUs by that division
    and on no fewer (none reached ``T >= T'``), and the splits reaching ``T'`` on ``q`` PCUs are
    some of those that reached ``T``, the winner among them; the fewest PMUs ``r`` serving the
    division within ``T`` serve it within any ``T'`` at least their cycles, and ``r - 1`` did
    not serve it within ``T``. When no division reaches ``T``, none reaches a lower target either;
    when the most PMUs the stage may take cannot serve its division within ``T``, they cannot
    within a target down to the division's cycles either, where the division is the same. (This
    rests on :func:`~sn40l_sim.mapper.division.fewest_pcus` giving the fewest PCUs, as the
    bisection of :func:`allocate` and :func:`_known_units` do; a test compares allocations with
    every answer computed afresh.)"""
    return _stage_span(rates, stage, limits, chip_tiles, target)[0]


def _stage_span(rates: PmuRates, stage: StageWork, limits: _Limits, chip_tiles: int,
                target: int) -> tuple[tuple[int, int, Division] | None, int]:
    """:func:`_stage_units`, and the lowest target its answer holds for."""
    for low, high, units in limits.spans:
        if low <= target <= high:
            return units, low
    units, low = _stage_units_at(rates, stage, limits, chip_tiles, target)
    limits.spans.append((low, target, units))
    return units, low


def _stage_units_at(rates: PmuRates, stage: StageWork, limits: _Limits, chip_tiles: int,
                    target: int) -> tuple[tuple[int, int, Division] | None, int]:
    """:func:`_stage_units` computed, and the lowest target its answer holds for."""
    if target <= 0:
        return None, target
    assert stage.model is not None
    division = fewest_pcus(stage.model, stage.pieces, target, limits.max_pcus * chip_tiles)
    if division is None:
        return None, 1
    low = division.cycles
    q = ceil_div(division.pcus, chip_tiles)
    if q * chip_tiles != division.pcus:
        division = division_on(stage, q, chip_tiles, limits.max_pcus)
    r = limits.min_pmus
    if r > limits.max_pmus:
        return None, 1
    sram = sram_cycles(rates, stage, r, chip_tiles, division)
    if sram > target:
        lo, hi = max(r, 1), limits.max_pmus
        if sram_cycles(rates, stage, hi, chip_tiles, division) > target:
            # a target below the division's cycles may take more PCUs, whose division may need fewer
            # PMUs; down to them the division is this one (see _stage_units), and its PMUs too slow
            return None, low
        r = fewest_pmus(rates, stage, chip_tiles, division, target, lo, hi)
        sram = sram_cycles(rates, stage, r, chip_tiles, division)
    return (q, r, division), max(low, sram)


_Units = tuple[int, int, Division]
#: what a stage's answers hold for a target not asked yet (its answer may be None)
_UNASKED: object = object()


def _known_units(seen: _Seen, target: int) -> _Units | None:
    """A stage's units at ``target`` (not in ``seen``) if two targets already asked, the nearest
    below and the nearest above it, got the same: the fewest PCUs, the division on them (the first
    split of fewest cycles among those reaching a target on the fewest PCUs) and the fewest PMUs
    serving it within the target move monotonically with the target, so between two equal answers
    the answer is the same."""
    targets = seen.targets
    i = bisect_left(targets, target)
    if i == 0 or i == len(targets):
        return None
    got = seen[targets[i - 1]]
    return got if got is not None and got == seen[targets[i]] else None


def _fits(socket: SocketSpec, rates: PmuRates, stages: list[StageWork], limits: list[_Limits | None], chip_tiles: int,
          target: int, budget: UnitBudget, seen: list[_Seen] | None = None,
          compute_only: bool = False) -> list[tuple[int, int, Division | None]] | None:
    """Each stage's fewest units under ``target`` cycles, or None if a stage cannot get there or
    they exceed a tile (``compute_only``: the memory stages' fixed pace not held to ``target``);
    ``seen`` keeps each stage's answers by target (across allocations: :func:`_limits`)."""
    units: list[tuple[int, int, Division | None]] = []
    pcus = pmus = 0
    tile_pcus, tile_pmus = budget.tile_pcus(socket.tile.pcus), budget.tile_pmus(socket.tile.pmus)
    for stage, lim in zip(stages, limits, strict=True):
        if lim is None:
            if stage.fixed_cycles > target and not compute_only:
                return None
            units.append((0, 0, None))
            continue
        if seen is None:
            got = _stage_units(rates, stage, lim, chip_tiles, target)
        else:
            mine = seen[len(units)]
            got = mine.get(target, _UNASKED)
            if got is _UNASKED:
                got = _known_units(mine, target)
                if got is None:
                    got = _stage_units(rates, stage, lim, chip_tiles, target)
                    mine.keep(target, got)
        if got is None:
            return None
        pcus += got[0]
        pmus += got[1]
        if pcus > tile_pcus or pmus > tile_pmus:
            return None
        units.append(got)
    return units


def _compute_floor(socket: SocketSpec, stages: list[StageWork], limits: list[_Limits | None], chip_tiles: int,
                   budget: UnitBudget) -> int:
    """A target below which the compute stages reach none: each stage's best division on its most
    PCUs (least_work's cycles, the same number, memoised for the stage floors that came before,
    :mod:`.tiling_floor`; :func:`allocate` keeps it in the stage's limits, ``least``), and every
    PCU of the tiles busy."""
    work = sum(s.work_cycles for s in stages if not s.is_memory)
    return max([lim.least if lim.least >= 0 else least_work(s.model, s.pieces, lim.max_pcus * chip_tiles).cycles
                for s, lim in zip(stages, limits, strict=True) if lim and lim.max_pcus and s.model is not None]
               + [math.floor(work / (chip_tiles * budget.tile_pcus(socket.tile.pcus)))])


def _compute_balanced(socket: SocketSpec, rates: PmuRates, stages: list[StageWork], limits: list[_Limits | None],
                      chip_tiles: int, budget: UnitBudget, seen: list[_Seen], floor: int,
                      paced: int) -> list[tuple[int, int, Division | None]] | None:
    """The compute stages' fewest units under the lowest target they reach together on the tile,
    the memory stages' pace aside (None when that target is ``paced``'s, the balanced one's, or
    above: nothing to gain; none is below ``floor``); a stage's cycles never rise as the target
    falls, so a larger budget never makes a stage slower. A target reached is not always reached by
    every higher one (fewer PCUs can need more PMUs), so the search from the floor finds a target
    reached, and the walk of :mod:`.lowest_target` the lowest below it."""
    if not any(lim is not None for lim in limits) or floor >= paced:
        return None
    found: dict[int, list[tuple[int, int, Division | None]]] = {}

    def fits(target: int) -> bool:
        if target >= paced:
            return True
        units = _fits(socket, rates, stages, limits, chip_tiles, target, budget, seen, compute_only=True)
        if units is not None:
            found[target] = units
        return units is not None

    reached = galloping_fit(max(1, floor), paced, fits)
    lowest = lowest_reached(lambda target: _probe(socket, rates, stages, limits, chip_tiles, budget, target), reached)
    if lowest is None:
        return found.get(reached)
    return _fits(socket, rates, stages, limits, chip_tiles, lowest, budget, compute_only=True)


def _probe(socket: SocketSpec, rates: PmuRates, stages: list[StageWork], limits: list[_Limits | None],
           chip_tiles: int, budget: UnitBudget, target: int) -> Probe:
    """What the compute stages' answers at ``target`` say (:func:`.lowest_target.probe_tile`)."""
    answers = (_stage_span(rates, s, lim, chip_tiles, target) for s, lim in zip(stages, limits, strict=True) if lim)
    return probe_tile(answers, budget.tile_pcus(socket.tile.pcus), budget.tile_pmus(socket.tile.pmus), target)


def allocate(socket: SocketSpec, stages: list[StageWork], chip_tiles: int,
             budget: UnitBudget = NO_LIMITS, price: Pricing | None = None,
             chain_paced: bool = False) -> Allocation | None:
    """The balanced allocation of ``stages`` on ``chip_tiles`` tiles, or None if they do not fit.

    Parameters
    ----------
    socket : SocketSpec
    stages : list of StageWork
        Memory and compute stages of one section (see :func:`~sn40l_sim.mapper.stages.section_stages`).
    chip_tiles : int
        Tiles in use; every compute stage gets the same units on each.
    budget : UnitBudget
        Limits on the PCUs and PMUs per tile of the kernel and of named stages.
    price : Pricing, optional
        What the units left idle by the balanced allocation are worth
        (:func:`~sn40l_sim.mapper.spending.pricing`); without it, any that shortens a stage is spent.
    chain_paced : bool, optional
        Whether the compute stages' own pace, not the memory stream's, sets the section's time: a
        looped iteration's first section waits for the previous iteration's collectives while its
        stream reads ahead into the PMUs, then computes every data tile at its slowest compute
        stage's pace (:mod:`.read_ahead`). Unpriced, the compute stages then take the fewest units
        under the lowest target they reach together on the tile, below the stream's pace if they
        can, and those units are the allocation: the spending gives idle units to the slowest
        stage first, up to its best cycles, which could leave another stage the bottleneck at
        nearly the stream's pace (docs/validation.md, "A longer cache can be faster: a looped
        decoder balanced to its stream"), and, given more room, could make the chain longer.

    Returns
    -------
    Allocation or None
        None when even one PCU per stage and the PMUs holding the buffers exceed a tile.
    """
    rates = pmu_rates(socket)
    limits = [None if s.is_memory else _limits(socket, s, chip_tiles, budget, rates) for s in stages]
    hi = lo = 0
    for s, lim in zip(stages, limits, strict=True):
        if lim is None:
            hi = max(hi, s.fixed_cycles)
            lo = max(lo, s.fixed_cycles)
            continue
        if lim.top < 0:
            one = division_on(s, 1 if lim.max_pcus else 0, chip_tiles, 1 if lim.max_pcus else 0)
            lim.top = max(one.cycles, sram_cycles(rates, s, lim.min_pmus, chip_tiles, one), 1)
            # its best division on its most PCUs: least_work's cycles, the same number, memoised
            # for the stage floors that came before (:mod:`.tiling_floor`)
            lim.least = least_work(s.model, s.pieces, lim.max_pcus * chip_tiles).cycles \
                if lim.max_pcus and s.model is not None else 0
        hi = max(hi, lim.top)
        lo = max(lo, lim.least)
    seen: list[_Seen] = [_Seen() if lim is None else lim.seen for lim in limits]
    if _fits(socket, rates, stages, limits, chip_tiles, hi, budget, seen) is None:
        return None
    top = hi
    # lo: no stage goes below its best division on its most PCUs, nor a memory stage below its pace
    floor = _compute_floor(socket, stages, limits, chip_tiles, budget)
    lo = min(hi, max(lo, floor))
    found: dict[int, list[tuple[int, int, Division | None]]] = {}

    def fits(target: int) -> bool:
        units = _fits(socket, rates, stages, limits, chip_tiles, target, budget, seen)
        if units is not None:
            found[target] = units
        return units is not None

    lo = galloping_fit(lo, hi, fits)
    units = found[lo] if lo in found else _fits(socket, rates, stages, limits, chip_tiles, lo, budget, seen)
    assert units is not None
    balanced = None
    if chain_paced and price is None:
        balanced = _compute_balanced(socket, rates, stages, limits, chip_tiles, budget, seen, floor, lo)
    units = balanced or spend_spare_units(socket, rates, stages, limits, chip_tiles, units, budget, price)
    if price is not None:
        # the lowest target takes the most units; a higher one, fewer units and less configuration
        # to load, which can make the call shorter (a stream hidden under overlapped collectives,
        # a call that loads its configuration every time): targets double up to the one a unit each
        # reaches, and the cheapest call is kept
        cost = call_cycles(price, rates, stages, chip_tiles, units)
        target = lo
        while target < top:
            target = min(top, 2 * target)
            other = _fits(socket, rates, stages, limits, chip_tiles, target, budget, seen)
            if other is None:
                continue
            other = spend_spare_units(socket, rates, stages, limits, chip_tiles, other, budget, price)
            other_cost = call_cycles(price, rates, stages, chip_tiles, other)
            if other_cost < cost:
                units, cost = other, other_cost
        if budget.pcus_per_tile is not None or budget.pmus_per_tile is not None:
            # the targets tried double from the lowest one the budget reaches, so a budget that
            # holds the allocation made without it could miss that allocation: Llama-3.1-8B's
            # prefill FFN on four tiles took 118 PCUs and 73 PMUs a tile at 128 data tiles
            # (648,646 cycles a call) and 663,694 cycles within exactly those units
            # (docs/validation.md, "A faster machine is not always faster in the simulator")
            free = allocate(socket, stages, chip_tiles, replace(budget, pcus_per_tile=None, pmus_per_tile=None),
                            price, chain_paced)
            if free is not None and sum(free.pcus) <= budget.tile_pcus(socket.tile.pcus) and \
                    sum(free.pmus) <= budget.tile_pmus(socket.tile.pmus):
                held = list(zip(free.pcus, free.pmus, free.divisions, strict=True))
                if call_cycles(price, rates, stages, chip_tiles, held) < cost:
                    return free
    cycles, bounds = [], []
    for stage, (_, r, division) in zip(stages, units, strict=True):
        if division is None:
            cycles.append(stage.fixed_cycles)
            bounds.append(stage.resource)
            continue
        m = sram_cycles(rates, stage, r, chip_tiles, division)
        cycles.append(max(division.cycles, m))
        bounds.append("sram" if m > division.cycles else stage.resource)
    return Allocation(chip_tiles=chip_tiles, pcus=tuple(u[0] for u in units),
                      pmus=tuple(u[1] for u in units), cycles=tuple(cycles), bounds=tuple(bounds),
                      divisions=tuple(u[2] for u in units))
