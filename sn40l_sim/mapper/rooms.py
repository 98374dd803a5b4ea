"""The rooms of the side-by-side search (:mod:`.side_by_side`) and the least of them a kernel
needs: :func:`least_rooms`.

A kernel mapped again with its configuration free within a room spends every unit of it that
shortens one of its stages (:mod:`.spending`), whether or not the call is the shorter for it, and
the kernels mapped after it in the step's rooms get what it leaves. The rooms are chosen longest
kernel first, from what the others' first mappings hold (lone calls paying their configuration),
so the room a kernel ends with depended on those first mappings: Llama-3.1-8B's 64-row prefill
chunk on 8 sockets, after 2,624 earlier tokens, left its FFN 131 PCUs a tile (60,873 cycles a
call; 60,870 on 67) and its attention, mapped after, 32 (9,934 cycles a call), where after 2,688
tokens they got 67 and 66 (5,352 cycles a call): the chunk after fewer earlier tokens cost more
(docs/validation.md, "A chunk after more earlier tokens, cheaper").

So the placement the search keeps is tried once more with each kernel called more than once, in
turn and longest first, mapped again in the room the others leave (those mapped again here their
new units, the others those of the placement) and then within the fewest PCUs per tile, and with those the fewest PMUs,
in which its call, its configuration free, is no longer (each found by bisection: the time need
not fall steadily with the units, so what is found is one such room, not always the least of
all); it is kept where the step's total, its residency replayed, is shorter. After 2,624 tokens
the FFN then takes 69 PCUs a tile and the attention 68 (5,186 cycles a call): ``map`` 3,176,607
cycles against 3,183,018 after 2,688 (3,362,175 and 3,183,146 before).

Examples
--------
>>> from sn40l_sim.mapper._examples import example_node
>>> # a kernel mapped again on every tile beside a one-tile kernel has on each what that one's tile leaves
>>> _balanced_room(example_node().socket, [((146, 0, 0, 0), (154, 0, 0, 0))])
(114, 106)
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from sn40l_sim.errors import InfeasibleError
from sn40l_sim.frozen import copied
from sn40l_sim.hardware import figures
from sn40l_sim.hardware.spec import SocketSpec
from sn40l_sim.ir import FusedKernel
from sn40l_sim.mapper.budget import UnitBudget
from sn40l_sim.mapper.kernel import LoopContext
from sn40l_sim.mapper.placement import PlacedKernel
from sn40l_sim.mapper.pmus import least_fitting
from sn40l_sim.mapper.residency import spread_over_tiles

#: maps a kernel called as a context within a budget (the mapper's memo)
Mapper = Callable[[FusedKernel, LoopContext, UnitBudget], PlacedKernel]
#: the graph's plans as called (their residency replayed, :mod:`.residency`)
Scorer = Callable[[list[PlacedKernel], list[LoopContext]], tuple[PlacedKernel, ...]]
#: PCUs and PMUs per tile
Units = tuple[tuple[int, ...], tuple[int, ...]]


def _balanced_room(socket: SocketSpec, held: Sequence[Units]) -> tuple[int, int]:
    """The PCUs and PMUs every tile has left beside the ``held`` footprints (the least over the
    tiles), those on one tile spread over the tiles: the largest first, each on the tile with the
    most left (a kernel spread on every tile needs its room on each).

    >>> from sn40l_sim.mapper._examples import example_node
    >>> _balanced_room(example_node().socket, [((146, 0, 0, 0), (154, 0, 0, 0)), ((36, 0, 0, 0), (34, 0, 0, 0)),
    ...                                        ((96, 0, 0, 0), (98, 0, 0, 0))])
    (114, 106)
    """
    tiles = figures.tiles(socket)
    free, singles = spread_over_tiles(list(held), (socket.tile.pcus, socket.tile.pmus), tiles)
    for pcus, pmus in sorted(singles, reverse=True):
        roomiest = max(range(tiles), key=lambda t: (free[0][t], free[1][t]))
        free[0][roomiest] -= pcus
        free[1][roomiest] -= pmus
    return min(free[0]), min(free[1])


def _mapped_calls(order: Sequence[FusedKernel], calls: Sequence[LoopContext], indices: list[int], mapped: Mapper,
                  budget: UnitBudget, resident: bool) -> dict[int, tuple[PlacedKernel, LoopContext]]:
    """Each call ``indices`` names mapped within ``budget`` (its configuration free when
    ``resident``), with the context it was mapped for, once per call context (the identical layers
    share a plan); raises :class:`~sn40l_sim.errors.InfeasibleError` when one does not fit."""
    # by the context object: the identical layers' calls share one (map_graph), made resident and
    # looked up once for them all, not a replace and a hash of its windows at every layer of every
    # room tried; equal contexts that are other objects get the same plan from the mapper's memo
    plans: dict[int, tuple[LoopContext, LoopContext, PlacedKernel]] = {}
    out = {}
    for i in indices:
        got = plans.get(id(calls[i]))
        if got is None:
            call = replace(calls[i], resident=True) if resident else calls[i]
            got = plans[id(calls[i])] = (calls[i], call, mapped(order[i], call, budget))
        out[i] = copied(got[2], kernel=order[i]), got[1]
    return out


def _mapped_or_none(order: Sequence[FusedKernel], calls: Sequence[LoopContext], indices: list[int], mapped: Mapper,
                    budget: UnitBudget, resident: bool) -> dict[int, tuple[PlacedKernel, LoopContext]] | None:
    """:func:`_mapped_calls`, or None where a call does not fit ``budget`` (every room search
    skips such a room)."""
    try:
        return _mapped_calls(order, calls, indices, mapped, budget, resident)
    except InfeasibleError:
        return None

def _units(pk: PlacedKernel) -> Units:
    """The PCUs and PMUs per tile of ``pk``."""
    return tuple(pk.pcus_per_tile), tuple(pk.pmus_per_tile)


def least_rooms(socket: SocketSpec, order: Sequence[FusedKernel], calls: Sequence[LoopContext],
                calls_of: dict[int, list[int]], mapped: Mapper, scored: Scorer, kinds: list[int],
                plans: Sequence[PlacedKernel], contexts: Sequence[LoopContext],
                best: tuple[PlacedKernel, ...]) -> tuple[PlacedKernel, ...]:
    """``best`` (the placement ``plans`` for ``contexts``, as called) or, when the step is shorter
    that way, that placement with each of ``kinds`` (kernels of one section, longest first) called
    more than once mapped again in the room the others leave, within the least of it its call needs
    (see the module docstring); ``calls`` are the calls' lone contexts, ``calls_of`` each kernel's
    calls."""
    # the kernels called once keep their room: what they would give back is a few units beside the
    # layers' kernels, and bisecting theirs too made a cold ``validate`` map 651 kernels, not 522
    # (443 without this pass)
    plans, contexts = list(plans), list(contexts)
    footprint = {kind: _units(plans[indices[0]]) for kind, indices in calls_of.items()}
    for kind in (kind for kind in kinds if len(calls_of[kind]) > 1):
        first = calls_of[kind][0]
        free = _balanced_room(socket, [units for other, units in footprint.items() if other != kind])
        if min(free) < 1:
            continue
        budget = _least_budget(order[first], replace(calls[first], resident=True), mapped,
                               UnitBudget(pcus_per_tile=free[0], pmus_per_tile=free[1]))
        if budget is None:
            continue
        again = _mapped_or_none(order, calls, calls_of[kind], mapped, budget, resident=True)
        if again is None:
            continue
        if any(placed.sections != 1 for placed, _ in again.values()):
            continue
        for i, (placed, call) in again.items():
            plans[i], contexts[i] = placed, call
        footprint[kind] = _units(plans[first])
    other = scored(plans, contexts)
    return other if sum(pk.call_cycles for pk in other) < sum(pk.call_cycles for pk in best) else best


def _least_budget(kernel: FusedKernel, call: LoopContext, mapped: Mapper, room: UnitBudget) -> UnitBudget | None:
    """The budget of the fewest PCUs, then of those the fewest PMUs, per tile (each bisected) in
    which ``kernel``, called as ``call``, is mapped in one section on the same tiles with a call no
    longer than within ``room``; None when it does not fit ``room`` in one."""
    try:
        whole = mapped(kernel, call, room)
    except InfeasibleError:
        return None
    pcus, pmus = max(whole.pcus_per_tile, default=0), max(whole.pmus_per_tile, default=0)
    if whole.sections != 1 or max(pcus, pmus) < 1:
        return None

    def fits(budget: UnitBudget) -> bool:
        try:
            placed = mapped(kernel, call, budget)
        except InfeasibleError:
            return False
        return placed.sections == 1 and placed.call_cycles <= whole.call_cycles

    # a budget holds at least one of each unit; a kernel using none of one (a gather on PMUs) holds that one
    pcus = least_fitting(1, pcus, lambda n: fits(UnitBudget(chip_tiles=whole.chip_tiles, pcus_per_tile=n,
                                                  pmus_per_tile=max(1, pmus)))) if pcus else 1
    pmus = least_fitting(1, pmus, lambda n: fits(UnitBudget(chip_tiles=whole.chip_tiles, pcus_per_tile=pcus,
                                                  pmus_per_tile=n))) if pmus else 1
    return UnitBudget(chip_tiles=whole.chip_tiles, pcus_per_tile=pcus, pmus_per_tile=pmus)

