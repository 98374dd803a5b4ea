"""The step's longest repeated kernel confined to some of the tiles, the others mapped in what it
leaves: :func:`remap_confined`, one more placement :func:`~.side_by_side.remap_side_by_side` is
offered, kept only where the step's total is shorter.

A kernel is mapped on one tile or on every tile (docs/architecture.md, "Tiles per kernel"), and the
side-by-side search maps the others in the units per tile the longest leaves. On every tile a
faster stream lets the longest kernel's lone call take more of each, and the kernel beside it gets
too little room on every one: DeepSeek-R1's MoE FFN took 98 PCUs a tile at 409.6 GB/s per HBM module
and 189 at 512, the MLA beside it 71 PCUs instead of 162, and the two evicted each other at every
layer (docs/validation.md, "Still open after it"). Confined to ``k`` tiles (``k`` from 1 to all
but one), the longest kernel leaves whole tiles to the others: each, the longest first, is mapped on
one tile in the most units a tile has left beside those already placed (its configuration free; it
stays loaded there, :mod:`.residency`), or keeps its first mapping when it does not fit. The longest
is tried as a lone call on its ``k`` tiles (paying its configuration, it leaves units idle) and with
its configuration free (it takes what speeds it up).

Only what could win is made: the others are not mapped beside a confined kernel whose calls alone,
each at the least the score can charge it (found loaded, no collective after it), already take the
step's best total; the capped placement is made only where a cap takes units from a room. Neither
changes what the search chooses (docs/architecture.md, "What the cold figures cost, change by change").
"""
from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import replace

from sn40l_sim.errors import InfeasibleError
from sn40l_sim.hardware import figures
from sn40l_sim.hardware.spec import SocketSpec
from sn40l_sim.ir import FusedKernel
from sn40l_sim.mapper.budget import UnitBudget
from sn40l_sim.mapper.calls import as_called
from sn40l_sim.mapper.kernel import LoopContext
from sn40l_sim.mapper.placement import PlacedKernel
from sn40l_sim.mapper.sections import min_units
from sn40l_sim.mapper.side_by_side import (
    Mapper,
    Scorer,
    _mapped_or_none,
    _on_one_tile,
    _room_on_one_tile,
    _units,
    remap_side_by_side,
)


def remap_confined(socket: SocketSpec, order: Sequence[FusedKernel], plans: Sequence[PlacedKernel],
                   calls: Sequence[LoopContext], kernels: tuple[PlacedKernel, ...],
                   calls_of: dict[int, list[int]], mapped: Mapper, scored: Scorer,
                   decode: bool = True) -> tuple[PlacedKernel, ...]:
    """:func:`~.side_by_side.remap_side_by_side` of the same arguments or, when the step is shorter
    that way and the graph is a ``decode`` step, the graph with its longest repeated kernel confined
    to fewer tiles than the socket's and the others mapped beside it (see the module docstring)."""
    mapped = one_section_only(socket, mapped)
    best = remap_side_by_side(socket, order, plans, calls, kernels, calls_of, mapped, scored)
    if not decode:
        return best
    best_cycles = sum(pk.call_cycles for pk in best)
    for confined, contexts, longest, others in _confined(socket, order, plans, calls, calls_of, mapped):
        if _least_cycles(socket, confined, contexts, calls_of[longest]) >= best_cycles:
            # the longest kernel's calls alone take the best total: mapping the others beside it
            # cannot make the step shorter (a cold ``validate`` mapped 60 kernels for nothing)
            continue
        for capped in (False, True):
            new_plans, new_contexts, binds = _beside(socket, order, confined, contexts, calls_of, mapped, longest,
                                                     others, capped)
            other = scored(new_plans, new_contexts)
            cycles = sum(pk.call_cycles for pk in other)
            if cycles < best_cycles:
                best, best_cycles = other, cycles
            if not binds:
                break   # no room capped: the capped placement is this one (a cold ``validate``: 136 -> 100 calls)
    return best


def one_section_only(socket: SocketSpec, mapped: Mapper) -> Mapper:
    """``mapped``, raising :class:`~sn40l_sim.errors.InfeasibleError` without mapping a kernel whose
    every plan within the budget takes more than one section (:func:`beyond_one_section`).

    Every placement of this search and of :mod:`.side_by_side` (the only users of ``mapped``, through
    ``_mapped_calls``) treats a kernel that does not fit its room and one that fits only in several
    sections alike, it keeps the kernel's first mapping (or drops the placement), so the search
    chooses what it chose when it mapped them: it is only spared their tiling searches (a cold
    ``run`` of experiments/deepseek_tp16.yaml spent 0.11 of its 2.3 CPU s mapping kernels in
    two such rooms, one of 2 PCUs a tile)."""
    beyond: dict[tuple[FusedKernel, UnitBudget], bool] = {}
    fewest: dict[tuple[FusedKernel, int], list[tuple[int, int]]] = {}   # the rooms share them

    def within(kernel: FusedKernel, call: LoopContext, budget: UnitBudget) -> PlacedKernel:
        key = (kernel.signature(), budget)
        if key not in beyond:
            beyond[key] = beyond_one_section(socket, key[0], budget, fewest)
        if beyond[key]:
            raise InfeasibleError(f"kernel {kernel.name!r}: more than one section within {budget}")
        return mapped(kernel, call, budget)
    return within


def beyond_one_section(socket: SocketSpec, kernel: FusedKernel, budget: UnitBudget,
                       fewest: dict[tuple[FusedKernel, int], list[tuple[int, int]]] | None = None) -> bool:
    """Whether :func:`~.kernel.map_kernel` of ``kernel`` within ``budget`` either raises or returns
    a plan of more than one section, known before any tiling is searched: its sections are cut by
    :func:`~.sections.split_sections` at the most tiles the budget allows, as
    :func:`~.kernel.best_plan` cuts them, and a plan has those sections, or one per operator when
    none fits them, or none (raised); so does the padded version the mapper may keep instead
    (:attr:`~sn40l_sim.ir.FusedKernel.padded`). False when the cut raises (an operator alone over
    the room): the mapper raises as it maps.

    The cut is read off each operator's fewest units (:func:`~.sections.min_units`, kept in
    ``fewest`` by kernel and tiles, which every room shares): with every operator fitting alone,
    ``split_sections`` cuts where the running PCUs or PMUs from the first operator would exceed the
    room, so it cuts at all exactly when the whole kernel's exceed it.

    >>> from sn40l_sim.mapper._examples import example_socket, example_decode_kernel
    >>> socket, kernel = example_socket(), example_decode_kernel()
    >>> beyond_one_section(socket, kernel, UnitBudget()), beyond_one_section(socket, kernel, UnitBudget(pcus_per_tile=1))
    (False, True)
    """
    tiles = max(budget.tiles_for(figures.tiles(socket)))
    pcus, pmus = budget.tile_pcus(socket.tile.pcus), budget.tile_pmus(socket.tile.pmus)
    several = []
    for version in (kernel, kernel.padded):
        if version is None:
            continue
        units = fewest.get((version, tiles)) if fewest is not None else None
        if units is None:
            units = [min_units(socket, op, tiles) for op in version.operators]
            if fewest is not None:
                fewest[(version, tiles)] = units
        if any(q > pcus or r > pmus for q, r in units):
            return False
        several.append(sum(q for q, _ in units) > pcus or sum(r for _, r in units) > pmus)
    return all(several)


def _least_cycles(socket: SocketSpec, plans: Sequence[PlacedKernel], calls: Sequence[LoopContext],
                  indices: list[int]) -> int:
    """The least the calls ``indices`` of ``plans`` can take as the graph is scored, whatever the
    other kernels' plans: each call as :func:`~.calls.as_called` charges it when it finds its
    configuration loaded and waits for no collective (the least of what it adds; a call's time is
    never negative, at least its tiles), so no placement that keeps these plans totals less."""
    # the identical layers' calls share one context object and copies of one plan (_mapped_calls):
    # each context's least is worked out once
    least: dict[int, int] = {}
    for i in indices:
        if id(calls[i]) not in least:
            least[id(calls[i])] = as_called(socket, plans[i], calls[i], 0, True, 0).call_cycles
    return sum(least[id(calls[i])] for i in indices)


def _confined(socket: SocketSpec, order: Sequence[FusedKernel], plans: Sequence[PlacedKernel],
              calls: Sequence[LoopContext], calls_of: dict[int, list[int]],
              mapped: Mapper) -> Iterator[tuple[list[PlacedKernel], list[LoopContext], int, list[int]]]:
    """The placements to start from: the graph's plans and contexts with the longest repeated kernel
    on ``k`` tiles, with that kernel and the others, the longest first, to map each on one tile in
    the room left (:func:`_beside`); yielded one at a time, so that those that cannot beat the best
    found so far are not mapped further."""
    tiles = figures.tiles(socket)
    single = [kind for kind, i in calls_of.items() if plans[i[0]].sections == 1]
    length = {kind: sum(plans[i].call_cycles for i in calls_of[kind]) for kind in single}
    repeated = sorted((kind for kind in single if len(calls_of[kind]) > 1), key=lambda k: -length[k])
    if tiles < 2 or not repeated:
        return
    longest, others = repeated[0], sorted((k for k in single if k != repeated[0]), key=lambda k: -length[k])
    for k, resident in itertools.product(range(1, tiles), (False, True)):
        confined = _mapped_or_none(order, calls, calls_of[longest], mapped, UnitBudget(chip_tiles=k), resident)
        if confined is None:
            continue
        new_plans, contexts = list(plans), list(calls)
        for i, (placed, call) in confined.items():
            new_plans[i], contexts[i] = placed, call
        if new_plans[calls_of[longest][0]].sections == 1:
            yield new_plans, contexts, longest, others


def _beside(socket: SocketSpec, order: Sequence[FusedKernel], plans: list[PlacedKernel], calls: list[LoopContext],
            calls_of: dict[int, list[int]], mapped: Mapper, longest: int, others: list[int],
            capped: bool) -> tuple[list[PlacedKernel], list[LoopContext], bool]:
    """``plans`` and ``calls`` with each of ``others``, in turn, mapped on one tile, its configuration
    free, in the most units a tile has left beside ``longest`` and those mapped before it; kept as
    it was when it does not fit. ``capped``: a kernel whose first mapping is on one tile takes no
    more units than that mapping did. Free, a configuration invites a kernel to take a whole tile for
    little: DeepSeek-R1's MLA took 259 PCUs for the cycles of far fewer, and the small kernels after
    it found no room and reloaded at every step.

    Also returns whether capping took units from any room offered: if not, the capped placement
    is the one returned, each kernel offered the same room, mapped alike, in the same order."""
    capacity, tiles = (socket.tile.pcus, socket.tile.pmus), figures.tiles(socket)
    new_plans, contexts = list(plans), list(calls)
    held = [_units(plans[calls_of[longest][0]])]
    binds = False
    for kind in others:
        budget = _room_on_one_tile(held, capacity, tiles)
        if budget is None:
            break
        first = _units(plans[calls_of[kind][0]])
        if _on_one_tile(first):
            tight = replace(budget, pcus_per_tile=min(budget.pcus_per_tile, max(first[0]) or 1),
                            pmus_per_tile=min(budget.pmus_per_tile, max(first[1]) or 1))
            binds = binds or tight != budget
            budget = tight if capped else budget
        again = _mapped_or_none(order, calls, calls_of[kind], mapped, budget, resident=True)
        if again is None:
            continue
        if next(iter(again.values()))[0].sections != 1:
            continue   # a kernel of two sections reloads whatever its room: its first mapping is kept
        for i, (placed, call) in again.items():
            new_plans[i], contexts[i] = placed, call
        held.append(_units(new_plans[calls_of[kind][0]]))
    return new_plans, contexts, binds
