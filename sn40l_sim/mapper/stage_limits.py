"""What the allocator (:mod:`.allocate`) knows of a compute stage whatever the target, kept across
allocations: its fewest PMUs (its buffers), most useful PCUs and most PMUs, the bounds of the
search it gives, and its answers found so far (fewest units under a target, and the span of targets
each holds for: :func:`~sn40l_sim.mapper.allocate._stage_units`).

A stage's answers depend on its work, its PMU traffic, these limits, the tiles in use and the
socket's PMU and mesh link alone, so one :class:`StageLimits` serves every allocation asking for
the same: a kernel's tilings, sections, tile choices and budgets ask for the same stage again (in a
cold ``validate``, three stages in four, a third of the answers).
"""
from __future__ import annotations

import math
from bisect import insort
from collections import OrderedDict
from dataclasses import dataclass, field

from sn40l_sim.hardware.spec import SocketSpec
from sn40l_sim.hardware.units.pmu import pmus_for_buffer
from sn40l_sim.mapper.budget import UnitBudget
from sn40l_sim.mapper.division import Division, PmuWork
from sn40l_sim.mapper.keys import IdentityMemo
from sn40l_sim.mapper.pmus import PmuRates, pmu_rates
from sn40l_sim.mapper.stages import StageWork

#: a stage's units per tile: PCUs, PMUs and the division of its work over them
Units = tuple[int, int, Division]


def min_pmus(socket: SocketSpec, stage: StageWork, chip_tiles: int) -> int:
    """PMUs per tile holding the stage's buffers double-buffered (one if it only reads or writes)."""
    needs = stage.buffer_bytes or stage.sram_read_bytes or stage.sram_write_bytes
    held = pmus_for_buffer(socket.pmu, math.ceil(stage.buffer_bytes / chip_tiles), double_buffered=True)
    return max(held, 1 if needs else 0)


def max_pcus(socket: SocketSpec, stage: StageWork, chip_tiles: int, budget: UnitBudget) -> int:
    """PCUs per tile the stage can use: none for a gather or scatter, else at least one."""
    if isinstance(stage.model, PmuWork):
        return 0
    return max(1, min(budget.pcus_for(stage.name, socket.tile.pcus), math.ceil(stage.parallelism / chip_tiles)))


class Answers(dict):
    """A stage's answers by target (a dict), and the targets in order, for the allocator to find
    the two around a target by bisection (:func:`~sn40l_sim.mapper.allocate._known_units`): kept
    across allocations (``_limits_memo``), a stage's answers run to dozens of targets."""

    __slots__ = ("targets",)

    def __init__(self) -> None:
        super().__init__()
        self.targets: list[int] = []

    def keep(self, target: int, units: Units | None) -> None:
        """Keep the answer at a target not asked before."""
        self[target] = units
        insort(self.targets, target)


# not frozen: a frozen dataclass sets each field through object.__setattr__, and an allocation makes
# one per stage (tens of thousands per mapping)
@dataclass(slots=True)
class StageLimits:
    """What a stage needs whatever the target: fewest PMUs (buffers), most useful PCUs, most PMUs;
    and the answers of :func:`~sn40l_sim.mapper.allocate._stage_units` found so far for the same
    work under the same limits, in this allocation or an earlier one (one object per work and
    limits: ``_limits_memo``), each with the targets it holds for."""

    min_pmus: int
    max_pcus: int
    max_pmus: int
    #: ``(lowest target, highest target, units)`` of every answer found so far
    spans: list[tuple[int, int, Units | None]] = field(default_factory=list, compare=False)
    #: the answers the allocator's ``_fits`` was given, by target (``_known_units`` infers others)
    seen: Answers = field(default_factory=lambda: Answers(), compare=False)
    #: the bounds of :func:`~sn40l_sim.mapper.allocate.allocate`'s search this stage gives, once worked out (-1 before): its
    #: cycles on one PCU (none for a gather or scatter) and its fewest PMUs, at least 1, and the
    #: cycles of its best division on its most PCUs (0 when it may take none)
    top: int = field(default=-1, compare=False)
    least: int = field(default=-1, compare=False)


#: each stage's limits, with its answers and its bounds, by what they
#: depend on, shared by every allocation asking for the same work under the same limits (a
#: kernel's tilings, sections and budgets ask for the same stage again: a third of a cold
#: ``validate``'s answers, three stages in four, were asked before)
_limits_memo: OrderedDict[tuple, StageLimits] = OrderedDict()
#: stages whose answers the memo keeps, the least recently asked for dropped first: a cold
#: ``validate`` asks for ~5,500, which keep ~9 answers each and ~9 MB together. A cold
#: ``calibrate`` asks for ~38,000 over its passes, and a pass that moves only the HBM's efficiency
#: (or a sync, P2P or set-up value) asks again for the compute stages of the passes before it;
#: cleared when full, the memo had dropped them, and a third of its stages were asked for afresh
#: (full, the memo holds some 80 MB at ~1.6 kB a stage)
_LIMITS_MEMO_SIZE = 50_000


def clear_limits_memo() -> None:
    """Forget every stage's answers kept across allocations (a cold mapping)."""
    _limits_memo.clear()
    _by_stage.clear()


#: each stage object's limits by what they read of the socket and budget beside the stage (its
#: PMU rates and capacity, tiles, PCU and PMU caps): a memoised stage is asked for again at every
#: allocation of its section, and this skips working out its fewest PMUs and the value key
_by_stage: IdentityMemo[StageLimits] = IdentityMemo(size=_LIMITS_MEMO_SIZE)


def stage_limits(socket: SocketSpec, stage: StageWork, chip_tiles: int, budget: UnitBudget,
                 rates: PmuRates | None = None) -> StageLimits:
    """The :class:`StageLimits` of compute ``stage`` on ``chip_tiles`` tiles under ``budget``, the
    one every allocation asking for the same work and limits shares (``rates``: the socket's
    :func:`~sn40l_sim.mapper.pmus.pmu_rates`, if the caller has them)."""
    rates = rates or pmu_rates(socket)
    tile = socket.tile
    caps = (rates, socket.pmu.capacity_bytes, chip_tiles, budget.pcus_for(stage.name, tile.pcus),
            budget.pmus_for(stage.name, tile.pmus))
    return _by_stage.get(stage, caps, lambda: _shared_limits(socket, stage, chip_tiles, budget, rates))


def _shared_limits(socket: SocketSpec, stage: StageWork, chip_tiles: int, budget: UnitBudget,
                   rates: PmuRates) -> StageLimits:
    """:func:`stage_limits` by value: one object per work and limits, however many stages ask."""
    fewest, most = min_pmus(socket, stage, chip_tiles), max_pcus(socket, stage, chip_tiles, budget)
    most_pmus = budget.pmus_for(stage.name, socket.tile.pmus)
    # everything _stage_units_at and allocate's bounds read: the stage's work, its PMU traffic, the
    # limits, the tiles and the socket's PMU and mesh link (one PmuRates per distinct pair: pmu_rates)
    key = (rates, stage.model, stage.pieces, stage.sram_read_bytes, stage.sram_write_bytes,
           stage.sram_addresses, fewest, most, most_pmus, chip_tiles)
    got = _limits_memo.get(key)
    if got is None:
        if len(_limits_memo) >= _LIMITS_MEMO_SIZE:
            _limits_memo.popitem(last=False)
        got = _limits_memo[key] = StageLimits(fewest, most, most_pmus)
    else:
        _limits_memo.move_to_end(key)
    return got


