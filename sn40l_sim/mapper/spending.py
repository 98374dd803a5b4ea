"""Spending the PCUs and PMUs a balanced allocation leaves idle (:func:`spend_spare_units`).

:func:`~sn40l_sim.mapper.allocate.allocate` gives each stage the fewest units that bring it under
the lowest target all stages reach together. Units left over can still shorten a call: every
stage's cycles per data tile add to the pipeline fill, and the slowest stage's to every data tile.
But every unit has its configuration to load (PCU programs, PMU address patterns), so an extra unit
is worth giving only when the cycles it saves on a call exceed the configuration cycles it adds,
shared by the calls that share one load of the configuration (:class:`Pricing`), the call judged
with the collectives it overlaps (:func:`call_cycles`). Given a price, two candidates are made,
each stage priced alone (slowest first) and every useful unit given, and the cheaper call is kept:
the second catches stages that bind together (several at the slowest cycles, none faster alone);
the allocator also tries higher targets, which take fewer units. Without a price (the default, the
experiment's ``execution.idle_units: spend``) every unit that shortens a stage is given; a gather
stage, whose own compute takes no cycles, then takes every idle PMU (docs/validation.md,
"Predictions", measures both). Given slowest first, more idle PCUs could go to a slow stage that
is not the bottleneck and leave a quicker one less than fewer had (DeepSeek-R1's decode MLA: a
longer fill at 140 PCUs a tile than at 136), so the units are also given where they save most
cycles per PCU, and that spending kept when it takes no more units and shortens the chain.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from sn40l_sim.hardware.spec import SocketSpec
from sn40l_sim.hardware.units._cycles import ceil_div
from sn40l_sim.mapper.budget import UnitBudget
from sn40l_sim.mapper.division import Division, fewest_pcus, stage_division
from sn40l_sim.mapper.pmus import PmuRates, fewest_pmus, sram_cycles
from sn40l_sim.mapper.stages import StageWork
from sn40l_sim.mapper.windows import interior_window

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sn40l_sim.mapper.kernel_cost import LoopContext
    from sn40l_sim.mapper.stage_limits import StageLimits as _Limits

#: PCUs, PMUs and division of each stage per tile in use (no division for a memory stage)
Units = list[tuple[int, int, Division | None]]


def division_on(stage: StageWork, pcus: int, chip_tiles: int, max_pcus: int) -> Division:
    """The division of ``stage``'s work over ``pcus`` PCUs on each of ``chip_tiles`` tiles, at
    most ``max_pcus`` per tile."""
    assert stage.model is not None
    return stage_division(stage.model, stage.pieces, max(1, pcus) * chip_tiles, max_pcus * chip_tiles)


def spend_spare_units(socket: SocketSpec, rates: PmuRates, stages: list[StageWork],
                      limits: Sequence[_Limits | None], chip_tiles: int, units: Units, budget: UnitBudget,
                      price: Pricing | None = None) -> Units:
    """The balanced allocation ``units`` with the idle PCUs and PMUs given to stages they shorten:
    all of them without a ``price``; with one, the cheaper call (:func:`call_cycles`) of pricing
    each stage's units alone and giving every useful one."""
    slowest = _slowest_first(units, limits)
    spent = _spend_spare_pcus(socket, rates, stages, limits, chip_tiles, units, budget, slowest)
    if price is None:
        # no more units than the slowest-first spending: the configuration a call loads (unpriced
        # here) is then no larger, so the shorter chain cannot lose it to configuration
        spare = budget.tile_pcus(socket.tile.pcus) - sum(u[0] for u in units)
        # one stage or none is in the same order by any key (a stable sort)
        by_gain = sorted(slowest, key=lambda i: -_gain(stages[i], units[i], limits[i], chip_tiles, spare)) \
            if spare > 0 and len(slowest) > 1 else slowest
        if by_gain == slowest:
            # the same spending in the same order gives the same units (a third of the main
            # command's allocations), which the comparison below would keep
            return spent
        gain = _spend_spare_pcus(socket, rates, stages, limits, chip_tiles, units, budget, by_gain)
        fewer = all(sum(u[k] for u in gain) <= sum(u[k] for u in spent) for k in (0, 1))
        better = _chain(_paced(rates, stages, chip_tiles, gain)) < _chain(_paced(rates, stages, chip_tiles, spent))
        return gain if fewer and better else spent
    frugal = _spend_spare_pcus(socket, rates, stages, limits, chip_tiles, units, budget, slowest, price)
    return min((frugal, spent), key=lambda u: call_cycles(price, rates, stages, chip_tiles, u))


def _slowest_first(units: Units, limits: Sequence[_Limits | None]) -> list[int]:
    """The compute stages that may take PCUs, slowest first (the first on ties)."""
    return sorted((i for i, u in enumerate(units) if u[2] is not None and limits[i] and limits[i].max_pcus),
                  key=lambda i: -units[i][2].cycles)


class Calls(NamedTuple):
    """How a section is called, as far as its idle units' worth goes: ``count`` calls share one
    load of its configuration (a kernel of one section keeps it over its run of consecutive calls),
    and each ends no sooner than ``overlap_cycles`` of collectives that start once its first data
    tile is out (:class:`~sn40l_sim.mapper.kernel_cost.LoopContext`)."""

    count: float
    overlap_cycles: int = 0


def section_calls(loop: LoopContext, sections: int, index: int) -> Calls | None:
    """How section ``index`` of ``sections`` is called, for the allocator's price of its idle units
    (None, unpriced, unless ``loop.priced``): a kernel of one section keeps its
    configuration over its run of consecutive calls (a loop's iterations included), several sections
    replace each other at every call; a call not looped ends no sooner than the overlapped
    collectives that start with its first section's first data tile out."""
    if not loop.priced:
        return None
    overlap = loop.overlap_cycles if index == 0 and not loop.pipelined else 0
    return Calls(loop.calls_per_load if sections == 1 else 1, overlap)


def section_chain_paced(loop: LoopContext, index: int, tiles: int = 0) -> bool:
    """Whether section ``index`` of a kernel called as ``loop`` computes at its compute stages'
    pace rather than its stream's: a looped iteration's first section, whose stream runs ahead
    into the PMUs while the iteration waits for the previous one's collectives, so that its data
    tiles then go at the compute chain's pace (:func:`~.read_ahead.looped_iteration_cycles`), and
    the first section of a call of ``tiles`` data tiles whose compute waits mid-way for a
    collective its later operators read (:mod:`.windows`); the allocator then balances the
    compute stages for that pace (:func:`~sn40l_sim.mapper.allocate.allocate`'s ``chain_paced``)."""
    if index != 0:
        return False
    if loop.pipelined:
        return loop.gate_cycles > 0 or loop.overlap_cycles > 0 or bool(loop.windows)
    return bool(loop.windows) and interior_window(loop.windows, tiles)


class Pricing(NamedTuple):
    """What idle units are worth to a section streaming ``n_tiles`` data tiles: the configuration
    cycles one more PCU and one more PMU per tile add to each call, and the overlapped collectives
    the call ends with (:func:`pricing`)."""

    pcu_cycles: float
    pmu_cycles: float
    n_tiles: int
    overlap_cycles: int = 0


def pricing(socket: SocketSpec, chip_tiles: int, n_tiles: int, calls: Calls) -> Pricing:
    """The :class:`Pricing` of a section on ``chip_tiles`` tiles called as ``calls`` says.

    >>> from sn40l_sim.mapper._examples import example_socket
    >>> socket = example_socket()
    >>> one, eight = pricing(socket, 4, 16, Calls(1)), pricing(socket, 4, 16, Calls(8))
    >>> one.pcu_cycles / one.pmu_cycles == socket.configuration.pcu_bytes / socket.configuration.pmu_bytes
    True
    >>> eight.pcu_cycles == one.pcu_cycles / 8
    True
    """
    per_byte = chip_tiles * socket.clock_hz / socket.calibrated.config_load_bytes_per_s / max(1, calls.count)
    c = socket.configuration
    return Pricing(c.pcu_bytes * per_byte, c.pmu_bytes * per_byte, n_tiles, calls.overlap_cycles)


def _streaming(paced: list[float], price: Pricing) -> float:
    """The end of a call's tiles and overlapped collectives as its stages' cycles per data tile
    set them, from the call's fixed parts: every stage once (the first tile through the pipeline),
    then the slowest for every further tile, or the collectives that start with the first tile out
    (:mod:`.kernel`'s score of a call), whichever ends later."""
    first = sum(paced)
    return first + max((price.n_tiles - 1) * max(paced, default=0.0), price.overlap_cycles)


def _pays(price: Pricing | None, paced: list[float], i: int, cycles: float, extra: int, unit_cycles: float) -> bool:
    """Whether stage ``i`` going from ``paced[i]`` to ``cycles`` per data tile with ``extra`` more
    units per tile saves more cycles per call than their configuration (``unit_cycles`` each) adds;
    always, unpriced."""
    if price is None:
        return True
    after = paced[:i] + [cycles] + paced[i + 1:]
    return _streaming(paced, price) - _streaming(after, price) > extra * unit_cycles


def call_cycles(price: Pricing, rates: PmuRates, stages: list[StageWork], chip_tiles: int,
                 units: Units) -> float:
    """A section's fill and stream with ``units`` and the configuration of its PCUs and PMUs per
    call, the parts an allocation decides (the switches and latencies are the same for all)."""
    return (_streaming(_paced(rates, stages, chip_tiles, units), price)
            + price.pcu_cycles * sum(u[0] for u in units) + price.pmu_cycles * sum(u[1] for u in units))


def _paced(rates: PmuRates, stages: list[StageWork], chip_tiles: int,
           units: Units) -> list[float]:
    """Each stage's cycles per data tile: a memory stage's unrounded stream share, a compute
    stage's PCU or PMU cycles, whichever is slower."""
    return [s.paced_cycles if s.is_memory or d is None else max(d.cycles, sram_cycles(rates, s, r, chip_tiles, d))
            for s, (_, r, d) in zip(stages, units, strict=True)]


def _spend_spare_pcus(socket: SocketSpec, rates: PmuRates, stages: list[StageWork], limits: Sequence[_Limits | None],
                      chip_tiles: int, units: Units, budget: UnitBudget, order: list[int],
                      price: Pricing | None = None) -> Units:
    """Give the PCUs the bottleneck leaves idle to the slowest other stages (then the idle PMUs to
    the stages their PMUs slow down): a stage's cycles per data tile also add to the pipeline fill.
    A stage takes the fewest extra PCUs that reach its best cycles, only while its PMUs, with the
    fewest idle ones it needs added, still serve it in the cycles it had (a split K's partial sums
    add PMU traffic), and, with a ``price``, only if they pay for their configuration
    (:func:`_pays`). Without those PMUs a stage whose PMUs were balanced to a quicker memory stream
    kept its few PCUs, and faster HBM could slow a looped decoder down (docs/validation.md, "A
    faster machine is not always faster"). ``order``: the stages in the order they are offered
    the idle PCUs, slowest first (:func:`_slowest_first`) or by the cycles per PCU the idle ones
    would save them (:func:`spend_spare_units`)."""
    units = list(units)
    paced = _paced(rates, stages, chip_tiles, units) if price else []
    spare = budget.tile_pcus(socket.tile.pcus) - sum(u[0] for u in units)
    spare_pmus = budget.tile_pmus(socket.tile.pmus) - sum(u[1] for u in units)
    for i in order:
        q, r, division = units[i]
        lim, stage = limits[i], stages[i]
        top = min(lim.max_pcus, q + spare)
        if spare <= 0 or top <= q or division is None or stage.model is None:
            continue
        faster = division_on(stage, top, chip_tiles, lim.max_pcus)
        if faster.cycles >= division.cycles:
            continue
        got = fewest_pcus(stage.model, stage.pieces, faster.cycles, top * chip_tiles) or faster
        q_new = min(top, ceil_div(got.pcus, chip_tiles))
        got = division_on(stage, q_new, chip_tiles, lim.max_pcus)
        before = max(division.cycles, sram_cycles(rates, stage, r, chip_tiles, division))
        r_new = r
        if sram_cycles(rates, stage, r, chip_tiles, got) > before:
            top_r = min(lim.max_pmus, r + spare_pmus)
            if top_r > r and sram_cycles(rates, stage, top_r, chip_tiles, got) <= before:
                r_new = fewest_pmus(rates, stage, chip_tiles, got, before, r + 1, top_r)
        after = max(got.cycles, sram_cycles(rates, stage, r_new, chip_tiles, got))
        extra = (q_new - q) * price.pcu_cycles + (r_new - r) * price.pmu_cycles if price else 0.0
        if got.cycles < division.cycles and after <= before and (
                price is None or _pays(price, paced, i, after, 1, extra)):
            units[i] = (q_new, r_new, got)
            spare -= q_new - q
            spare_pmus -= r_new - r
            if price:
                paced[i] = after
    return _spend_spare_pmus(socket, rates, stages, limits, chip_tiles, units, budget, price)


def _gain(stage: StageWork, unit: tuple[int, int, Division | None], lim: _Limits, chip_tiles: int,
          spare: int) -> float:
    """Cycles per data tile a stage saves per PCU when given up to ``spare`` more."""
    q, _, division = unit
    top = min(lim.max_pcus, q + spare)
    if top <= q or division is None or stage.model is None:
        return 0.0
    faster = division_on(stage, top, chip_tiles, lim.max_pcus)
    if faster.cycles >= division.cycles:
        # no cycles saved: the gain is 0.0 whatever the PCUs it would take (at least one)
        return 0.0
    got = fewest_pcus(stage.model, stage.pieces, faster.cycles, top * chip_tiles) or faster
    extra = max(1, min(top, ceil_div(got.pcus, chip_tiles)) - q)
    return max(0.0, division.cycles - faster.cycles) / extra


def _chain(paced: list[float]) -> tuple[float, float]:
    """The slowest stage per data tile, then the sum of all (the fill): what spending shortens."""
    return max(paced, default=0.0), sum(paced)


def _spend_spare_pmus(socket: SocketSpec, rates: PmuRates, stages: list[StageWork], limits: Sequence[_Limits | None],
                      chip_tiles: int, units: Units, budget: UnitBudget,
                      price: Pricing | None = None) -> Units:
    """Give the PMUs the bottleneck leaves idle to the stages their PMUs slow down, slowest first:
    the fewest that bring the stage's PMU cycles down to its PCU cycles, or all that are left; with
    a ``price``, only if they pay for their configuration (:func:`_pays`)."""
    spare = budget.tile_pmus(socket.tile.pmus) - sum(u[1] for u in units)
    if spare <= 0:
        return units
    paced = _paced(rates, stages, chip_tiles, units) if price else []
    # each stage's PMU cycles as it stands: its units change only when its turn comes
    sram = {i: sram_cycles(rates, stages[i], u[1], chip_tiles, u[2])
            for i, u in enumerate(units) if u[2] is not None and limits[i]}
    for i in sorted(sram, key=lambda i: -sram[i]):
        q, r, division = units[i]
        lim, stage = limits[i], stages[i]
        assert lim is not None and division is not None
        top = min(lim.max_pmus, r + spare)
        now = sram[i]
        if spare <= 0 or top <= r or now <= division.cycles:
            continue
        # the fewest PMUs above r serving it within its PCU cycles, or all it may take if none do
        enough = sram_cycles(rates, stage, top, chip_tiles, division) <= division.cycles
        lo = fewest_pmus(rates, stage, chip_tiles, division, division.cycles, r + 1, top) if enough else top
        then = sram_cycles(rates, stage, lo, chip_tiles, division)
        if then < now and (price is None
                           or _pays(price, paced, i, max(then, division.cycles), lo - r, price.pmu_cycles)):
            units[i] = (q, lo, division)
            spare -= lo - r
            if price:
                paced[i] = max(then, division.cycles)
    return units
