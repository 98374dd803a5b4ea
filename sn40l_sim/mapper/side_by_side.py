"""A step's kernels mapped again to stay loaded side by side, their rooms chosen by the step's
total: :func:`remap_side_by_side`.

Configurations stay loaded where no other kernel takes their units (:mod:`.residency`), so a step
whose kernels fit on the tiles together loads none of them. Each kernel of one section is mapped
again with its configuration free, the longest first, within the units per tile the others leave.
What the others leave is a choice. Mapped greedily, the longest kernel's room is whatever the
others' first mappings do not take, and those were made for each kernel alone, as a lone call
paying its whole configuration: a faster machine may let a kernel the step calls once (``lm_head``,
the embedding) take a few more units, or a whole tile, and the decoder, mapped in what is left,
then gets fewer or nothing. The step, and the mapper's own total, were longer on the faster machine
(docs/validation.md, "Kernels mapped to stay loaded side by side").

So the rooms are tried a few ways and the placement whose step is shortest by the mapper's total
(the calls as the graph calls them, their residency replayed) is kept. The greedy one is tried
first, so the result is never longer than it; then the kernels called once, while they are not yet
mapped again, hold only a share of their first mapping's units per tile (:data:`RESERVED_SHARES`),
which leaves the kernels called many times (whose calls each gain what their room buys) more room,
and are then mapped in what those leave, the longest first, each within what the ones after it
hold. The kernels called many times hold all their first mapping's units as in the greedy
placement: shrinking them moved a prefill whose four layer kernels share the tiles from one split
to another with the configuration rate, both ways (docs/validation.md). Each of those is tried again
with the longest kernel's first mapping made on every tile when it was made on one
(:func:`_spread_longest`): a lone call's choice of one tile or all, made paying its configuration,
can flip from one batch to the next, and the kernels beside it then take whole tiles or leave it
room on each. And the longest kernel called more than once that its first mapping put on one tile
is also mapped again, its configuration free, on every tile within what the other repeated kernels
hold (:func:`_spread_repeated`), kept as it is or with the others mapped again beside it: spread as
a lone call it takes every unit of every tile, and the kernels called once, which may reload each
step for little, should not keep a layer kernel on one tile. The kernels called more than once,
but the longest, that their first mappings spread over the tiles are also tried first-mapped on one
(:func:`_gathered`): spread, such a kernel leaves the others no room on any tile (DeepSeek-R1's MTP
FFN at 819.2 GB/s per HBM module, docs/validation.md), and so, with them, are the kernels called
once that spread. Each placement found is also tried with the rooms that lengthen their kernel's
call given back one at a time (:func:`_rooms_given_back`), and the placement kept once more with
each kernel within the least room its call needs (:func:`~.rooms.least_rooms`): mapped again, a
kernel spends all of its room, whether or not its call is the shorter for it.

Examples
--------
>>> [reserved((10, 0, 7), share) for share in (1.0, *RESERVED_SHARES)]
[(10, 0, 7), (8, 0, 6), (5, 0, 4), (3, 0, 2)]
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Collection, Sequence

from sn40l_sim.errors import InfeasibleError
from sn40l_sim.hardware import figures
from sn40l_sim.hardware.spec import SocketSpec
from sn40l_sim.ir import FusedKernel
from sn40l_sim.mapper.budget import UnitBudget
from sn40l_sim.mapper.kernel import LoopContext
from sn40l_sim.mapper.placement import PlacedKernel
from sn40l_sim.mapper.residency import packed_largest_first
from sn40l_sim.mapper.rooms import (
    Mapper,
    Scorer,
    Units,
    _balanced_room,
    _mapped_calls,
    _mapped_or_none,
    _units,
    least_rooms,
)

#: shares of its first mapping's units per tile a kernel called once holds while the others are
#: mapped again, besides all of them (the greedy placement)
RESERVED_SHARES = (0.75, 0.5, 0.25)

#: a graph's plans with one kernel's calls mapped again, the footprints with its new one, and the
#: calls' contexts
Spread = tuple[list[PlacedKernel], dict[int, Units], list[LoopContext]]


def reserved(units: tuple[int, ...], share: float) -> tuple[int, ...]:
    """``share`` of ``units`` (per tile), rounded up: a kernel that uses a tile holds some of it."""
    return tuple(math.ceil(n * share) for n in units)


def remap_side_by_side(socket: SocketSpec, order: Sequence[FusedKernel], plans: Sequence[PlacedKernel],
                       calls: Sequence[LoopContext], kernels: tuple[PlacedKernel, ...],
                       calls_of: dict[int, list[int]], mapped: Mapper, scored: Scorer) -> tuple[PlacedKernel, ...]:
    """``kernels`` or, when the step is shorter that way, the graph mapped again for its kernels to
    stay loaded side by side (see the module docstring): ``plans`` are the kernels' first mappings
    for ``calls``, ``kernels`` them as called, ``calls_of`` the indices of each distinct kernel's
    calls, ``mapped`` maps a kernel within a budget and ``scored`` gives plans as called. A kernel
    that leaves no room to the others (one on every PCU of every tile) leaves nothing to try."""
    kinds = sorted((kind for kind, i in calls_of.items() if plans[i[0]].sections == 1),
                   key=lambda k: -sum(kernels[i].call_cycles for i in calls_of[k]))
    first = {kind: _units(plans[i[0]]) for kind, i in calls_of.items()}
    once = {kind for kind in kinds if len(calls_of[kind]) == 1}
    # a share is tried only where the others' holdings leave the longest kernel some room
    shares = [1.0] + [share for share in RESERVED_SHARES if once and kinds and
                      _room(socket, {k: u for k, u in first.items() if k != kinds[0]}, once, share)]
    best, best_cycles, chosen = kernels, sum(pk.call_cycles for pk in kernels), None
    placements: set[tuple[Units, ...]] = set()
    tried = [(share, packed, plans, first, calls) for share in shares for packed in (False, True)]
    spread = _spread_longest(socket, order, plans, calls, calls_of, mapped, kinds, first)
    if spread is not None:
        tried += [(share, packed, *spread) for share in shares for packed in (False, True)]
    for once_too in (False, True):
        gathered = _gathered(socket, order, plans, calls, calls_of, mapped, kinds, first, once_too)
        if gathered is not None:
            tried += [(share, packed, *gathered) for share in shares for packed in (False, True)]
    for in_room in _spread_repeated(socket, order, plans, calls, calls_of, mapped, kinds, first):
        # as it is (the kernels called once reload where it leaves them no room), and with the others
        # mapped again beside it
        other = scored(*in_room[::2])
        if sum(pk.call_cycles for pk in other) < best_cycles:
            best, best_cycles, chosen = other, sum(pk.call_cycles for pk in other), in_room[::2]
        # with its contexts: its calls were mapped with their configuration free, and a kernel
        # that then finds no room beside the others keeps that plan, so it must keep that context
        tried += [(share, packed, *in_room) for share in shares for packed in (False, True)]
    # each also with the rooms that would make a kernel's call longer than its first mapping's left
    # untaken (``lean``), the others then mapped beside that first mapping, and with the one-tile
    # kernels a room is read beside spread over the tiles (``balanced``)
    variants = [(lean, balanced) for lean in (False, True) for balanced in (False, True)]
    for (share, packed, firsts, footprints_first, first_calls), (lean, balanced) in itertools.product(tried, variants):
        got = _mapped_beside(socket, order, firsts, first_calls, calls_of, mapped, kinds, footprints_first, once, share,
                             packed, lean, balanced)
        if got is None:
            continue
        new_plans, contexts = got
        footprints = tuple(_units(pk) for pk in new_plans)
        if footprints in placements:
            continue   # the placement of a larger share again: the same total
        placements.add(footprints)
        other = scored(new_plans, contexts)
        other, *placement = _rooms_given_back(plans, calls, calls_of, kinds, new_plans, contexts, other, scored)
        cycles = sum(pk.call_cycles for pk in other)
        if cycles < best_cycles:
            best, best_cycles, chosen = other, cycles, placement
    # the kernels mapped again took all of their rooms: each within what it needs (:mod:`.rooms`)
    return best if chosen is None else least_rooms(socket, order, calls, calls_of, mapped, scored, kinds, *chosen, best)


def _rooms_given_back(plans: Sequence[PlacedKernel], calls: Sequence[LoopContext], calls_of: dict[int, list[int]],
                      kinds: list[int], new_plans: list[PlacedKernel], contexts: list[LoopContext],
                      best: tuple[PlacedKernel, ...], scored: Scorer,
                      ) -> tuple[tuple[PlacedKernel, ...], list[PlacedKernel], list[LoopContext]]:
    """``best`` (the placement ``new_plans`` and ``contexts`` as called) or, when the step is
    shorter that way, it with some of the kernels mapped again in a room that makes their call
    longer than their first mapping's put back on that first mapping, one kernel at a time, the
    longest first.

    ``lean`` in :func:`_mapped_beside` gives every room that lengthens a call back, or none: a room
    that lengthens its own call may keep another kernel loaded, and one that does not pay may sit
    in the same placement. DeepSeek-R1's decode at batch 32 with 2K caches and two drafts at 2 GHz:
    the MLA in 67 PCUs beside the four-tile MoE FFN keeps both loaded (the FFN's call 481 us against
    705 reloading), while the dense layers' FFN in the 6 PCUs left is many times its first mapping's
    call; the placement keeping both rooms, and the lean one keeping neither, were longer than the
    placement of 1.6 GHz: 47.9 -> 56.0 ms (docs/validation.md, "Short prefills on a faster
    machine"). Each candidate is scored as called, its residency replayed, so a first mapping put
    back that evicts another kernel is charged for it. Returned with the plans and contexts of the
    placement kept."""
    new_plans, contexts = list(new_plans), list(contexts)
    best_cycles = sum(pk.call_cycles for pk in best)
    for kind in kinds:
        indices = calls_of[kind]
        if new_plans[indices[0]].cycles <= plans[indices[0]].cycles:
            # only a room that lengthens the call, as ``lean`` reads it: scoring every room given
            # back cost a cold ``validate`` 29% more CPU time
            continue
        tried_plans, tried_calls = list(new_plans), list(contexts)
        for i in indices:
            tried_plans[i], tried_calls[i] = plans[i], calls[i]
        other = scored(tried_plans, tried_calls)
        cycles = sum(pk.call_cycles for pk in other)
        if cycles < best_cycles:
            best, best_cycles, new_plans, contexts = other, cycles, tried_plans, tried_calls
    return best, new_plans, contexts


def _spread_longest(socket: SocketSpec, order: Sequence[FusedKernel], plans: Sequence[PlacedKernel],
                    calls: Sequence[LoopContext], calls_of: dict[int, list[int]], mapped: Mapper,
                    kinds: list[int], first: dict[int, Units]) -> Spread | None:
    """The first mappings with the longest kernel's made on every tile when it was made on one
    (still a lone call paying its configuration), with their footprints and call contexts; None
    when there is nothing to try.

    A lone call chooses one tile or all of them by its time with its whole configuration to load,
    and near a tie the choice flips with the batch (DeepSeek-R1's MoE kernel with touched experts:
    one tile at 10 sequences, 328 us, four at 11, 343 us). Once the step keeps configurations loaded
    the choice decides the step: beside a one-tile kernel the others take whole tiles, beside a
    four-tile one they leave it room on each and its calls are shorter (188 us against 272)."""
    if not kinds or figures.tiles(socket) < 2 or not _on_one_tile(first[kinds[0]]):
        return None
    return _spread(order, plans, calls, calls_of[kinds[0]], mapped, first, kinds[0],
                   UnitBudget(chip_tiles=figures.tiles(socket)), resident=False)


def _gathered(socket: SocketSpec, order: Sequence[FusedKernel], plans: Sequence[PlacedKernel],
              calls: Sequence[LoopContext], calls_of: dict[int, list[int]], mapped: Mapper,
              kinds: list[int], first: dict[int, Units], once_too: bool = False) -> Spread | None:
    """The first mappings with each kernel called more than once, but the longest, that its first
    mapping spread made on one tile (lone calls), with their footprints and call contexts, or None.

    ``once_too``: the kernels called once that spread are gathered too (None when none spreads).
    Such a kernel holds a share of every tile while the others are mapped again: DeepSeek-R1's
    ``lm_head`` at 10 GB/s of configuration load left the MLA 100 PCUs instead of 165, a step
    longer than at 7 GB/s (docs/validation.md, "Short prefills on a faster machine")."""
    if figures.tiles(socket) < 2:
        return None
    spread_out = [kind for kind in kinds[1:]
                  if (once_too or len(calls_of[kind]) > 1) and not _on_one_tile(first[kind])]
    if not spread_out or once_too and all(len(calls_of[kind]) > 1 for kind in spread_out):
        return None   # none to gather, or the same as without the kernels called once
    plans, calls, first = list(plans), list(calls), dict(first)
    for kind in spread_out:
        got = _spread(order, plans, calls, calls_of[kind], mapped, first, kind, UnitBudget(chip_tiles=1),
                      resident=False)
        if got is None:
            return None
        plans, first, calls = got
    return plans, first, calls


def _spread_repeated(socket: SocketSpec, order: Sequence[FusedKernel], plans: Sequence[PlacedKernel],
                     calls: Sequence[LoopContext], calls_of: dict[int, list[int]], mapped: Mapper,
                     kinds: list[int], first: dict[int, Units]) -> list[Spread]:
    """The first mappings with the longest kernel called more than once whose first mapping is on
    one tile mapped again on every tile, its configuration free, within the units per tile the
    other repeated kernels' first mappings leave; with their footprints and call contexts. Two
    rooms are tried: what every tile has left with the others' one-tile footprints stacked on one
    tile (:func:`_free_per_tile`), and with them spread over the tiles (:func:`_balanced_room`),
    since they are loaded on any tile where they fit (:mod:`.residency`). Stacked, a faster machine
    whose first mappings take a few more units leaves no room at all: Llama-3.1-8B's 128-token
    prefill on 8 sockets, whose QKV, attention and output projection took 73 + 36 + 48 PCUs of
    one tile with configurations loaded at 5.08 GB/s and 146 + 36 + 96 at 7 GB/s, lost its
    spread FFN, and every layer kernel went on a tile of its own: 3.05 -> 3.95 ms
    (docs/validation.md, "Short prefills on a faster machine"). Empty when there is no such kernel
    or no such room.

    :func:`_spread_longest` spreads only the longest kernel, over whole tiles: a lone call spends
    every idle unit, so a kernel spread that way leaves the others no room. A kernel called once
    (``lm_head``, the embedding) may reload at every step for little; one called at every layer
    may not. Mixtral-8x7B's decode on tiles of 520 PCUs: its MoE kernel alone takes one whole tile
    (1,808,429 cycles with its configuration, against 2,163,464 on four tiles of 146 PCUs), and
    mapped again in the room one tile has left it costs 1,131,908 cycles a call against 859,374
    (docs/validation.md, "Found by fuzzing valid experiments")."""
    tiles = figures.tiles(socket)
    repeated = [kind for kind in kinds if len(calls_of[kind]) > 1]
    one_tile = [kind for kind in repeated if _on_one_tile(first[kind])]
    if tiles < 2 or not one_tile:
        return []
    kind = one_tile[0]
    held = [first[other] for other in repeated if other != kind]
    spreads = []
    for free in dict.fromkeys((tuple(_free_per_tile(socket, held)), _balanced_room(socket, held))):
        if min(free) > 0:
            got = _spread(order, plans, calls, calls_of[kind], mapped, first, kind,
                          UnitBudget(chip_tiles=tiles, pcus_per_tile=free[0], pmus_per_tile=free[1]), resident=True)
            if got is not None:
                spreads.append(got)
    return spreads


def _spread(order: Sequence[FusedKernel], plans: Sequence[PlacedKernel], calls: Sequence[LoopContext],
            indices: list[int], mapped: Mapper, first: dict[int, Units], kind: int, budget: UnitBudget,
            resident: bool) -> Spread | None:
    """The graph's plans and call contexts with the calls ``indices`` of ``kind`` mapped within
    ``budget`` (:func:`_mapped_calls`), and the footprints with its new one; None when it does not
    fit or takes more than one section."""
    spread, contexts = list(plans), list(calls)
    try:
        for i, (placed, call) in _mapped_calls(order, calls, indices, mapped, budget, resident).items():
            spread[i], contexts[i] = placed, call
    except InfeasibleError:
        return None
    if spread[indices[0]].sections != 1:
        return None
    return spread, {**first, kind: _units(spread[indices[0]])}, contexts


def _free_per_tile(socket: SocketSpec, held: Sequence[Units]) -> list[int]:
    """The PCUs and PMUs every tile has left beside the ``held`` footprints (the least over the tiles)."""
    return [min(cap - sum(units[u][t] for units in held) for t in range(figures.tiles(socket)))
            for u, cap in enumerate((socket.tile.pcus, socket.tile.pmus))]


def _room(socket: SocketSpec, held: dict[int, Units], shrunk: Collection[int], share: float) -> bool:
    """Whether the ``held`` units, ``share`` of the ``shrunk`` kernels', leave some of every tile free."""
    for u, cap in enumerate((socket.tile.pcus, socket.tile.pmus)):
        for t in range(figures.tiles(socket)):
            if sum(reserved(units[u], share)[t] if kind in shrunk else units[u][t]
                   for kind, units in held.items()) >= cap:
                return False
    return True


def _mapped_beside(socket: SocketSpec, order: Sequence[FusedKernel], plans: Sequence[PlacedKernel],
                   calls: Sequence[LoopContext], calls_of: dict[int, list[int]], mapped: Mapper, kinds: list[int],
                   first: dict[int, Units], once: Collection[int], share: float, packed: bool = False,
                   lean: bool = False, balanced: bool = False) -> tuple[list[PlacedKernel], list[LoopContext]] | None:
    """The graph's plans and contexts with each of ``kinds`` (kernels of one section), in turn,
    mapped with its configuration free within the units per tile the others hold: those mapped
    again their new plan's, those of ``once`` not yet mapped again ``share`` of their ``first``
    mapping's, the others all of it; None when no kernel found room (``packed``: none of those
    the rooms of every tile leave nothing found room on one tile either, :func:`_room_on_one_tile`;
    ``lean``: a kernel keeps its first mapping where its room would make its call, with its
    configuration free, longer than the first mapping's with it; ``balanced``: the room on every tile
    is read with the others' one-tile footprints spread over the tiles, :func:`_balanced_room`, as
    the residency replay may load them, not all on the first tile)."""
    footprint = dict(first)
    pending = set(kinds)
    capacity = (socket.tile.pcus, socket.tile.pmus)
    tiles = figures.tiles(socket)
    new_plans, contexts = list(plans), list(calls)
    found = False
    for kind in kinds:
        pending.discard(kind)
        held = [tuple(reserved(per_tile, share) for per_tile in units) if other in pending and other in once
                else units for other, units in footprint.items() if other != kind]
        # stacked on the first tile, one-tile footprints leave a kernel on every tile no room as soon
        # as a faster machine's first mappings grow: Llama-3.1-8B's output projection took 96 PCUs at
        # 75 GB/s per P2P port, 48 at 50, and the FFN beside it 49 PCUs a tile, not 88
        # (docs/validation.md, "Short prefills on a faster machine")
        free = list(_balanced_room(socket, held)) if balanced else _free_per_tile(socket, held)
        budget = UnitBudget(pcus_per_tile=free[0], pmus_per_tile=free[1]) if min(free) > 0 else \
            _room_on_one_tile(held, capacity, tiles) if packed and _on_one_tile(first[kind]) else None
        if budget is None:
            continue
        again = _mapped_or_none(order, calls, calls_of[kind], mapped, budget, resident=True)
        if again is None:
            continue
        if lean and next(iter(again.values()))[0].cycles > plans[calls_of[kind][0]].cycles:
            # a room in which the call, its configuration free, is longer than its first mapping's
            # call loading its configuration: the residency it buys may not pay for that at every
            # call (DeepSeek-R1's 128-token prefill at 2 GHz put its dense layers' output projection
            # and FFN in 10 PCUs of a tile, 5.6 ms a call against 0.17: docs/validation.md, "Short
            # prefills on a faster machine")
            continue
        if next(iter(again.values()))[0].sections != 1:
            # a room too small for one section: its calls reload a configuration whatever the room,
            # so the first mapping is kept, as _spread keeps it (DeepSeek-R1's dense FFN in 3 PCUs,
            # two sections, 2.0 ms a call against 0.2 ms: docs/validation.md)
            continue
        for i, (placed, call) in again.items():
            new_plans[i], contexts[i] = placed, call
        footprint[kind] = _units(new_plans[calls_of[kind][0]])
        found = True
    return (new_plans, contexts) if found else None


def _on_one_tile(units: Units) -> bool:
    """Whether a footprint uses one tile (a one-tile kernel, mapped alike on every tile)."""
    return sum(1 for pcus, pmus in zip(*units, strict=True) if pcus or pmus) <= 1


def _room_on_one_tile(held: list[Units], capacity: tuple[int, int], tiles: int) -> UnitBudget | None:
    """The most units one tile has left beside the ``held`` footprints, or None when none has any.

    A footprint is a tile index's units, and a one-tile kernel's names the first tile, where the
    rooms of every tile stack them all; but it is loaded on any tile where it fits
    (:mod:`.residency`). So they are packed as the residency replay packs them
    (:func:`~.residency.packed_largest_first`; one that fits on no tile beside the others is left
    out: it evicts some whatever the room), and a one-tile kernel goes where most is left."""
    free, _ = packed_largest_first(held, capacity, tiles)
    pcus, pmus = max(zip(*free, strict=True))
    return UnitBudget(chip_tiles=1, pcus_per_tile=pcus, pmus_per_tile=pmus) if min(pcus, pmus) > 0 else None
