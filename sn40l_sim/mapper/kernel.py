"""Mapping one fused kernel onto one socket: :func:`map_kernel`.

For each candidate tiling (``n_tiles`` = 1, 2, 4, ... data tiles) and each choice of tiles (all
of the socket's, or one when the kernel is tiny) the kernel's sections are staged
(:mod:`.stages`), given PCUs and PMUs (:mod:`.allocate`), placed and routed (:mod:`.layout`); the
candidate with the fewest cycles wins (ties: fewer tiles in use, then fewer data tiles), and the
best is tried again with every GEMM in one dataflow; a prefill attention kernel whose FlashAttention
tiles are of several shapes is mapped as built and with its edge tiles padded
(:attr:`~sn40l_sim.ir.FusedKernel.padded`), and the faster kept. Each candidate's cycles, and the objective it
is chosen by (a lone call, consecutive calls sharing a configuration, a looped call, overlapped
collectives), are :mod:`.kernel_cost`'s.

Examples
--------
>>> from sn40l_sim.mapper._examples import example_socket, example_decode_kernel
>>> socket = example_socket()
>>> pk = map_kernel(socket, example_decode_kernel(kv_len=65536))
>>> pk.sections, pk.chip_tiles   # a lone call: four tiles' configuration would cost more than it saves
(1, 1)
>>> pk.cycles == pk.overhead_cycles + pk.fill_cycles + math.ceil(pk.n_tiles * pk.cycles_per_tile)
True
"""
from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import replace

from sn40l_sim.errors import InfeasibleError, InputError
from sn40l_sim.frozen import copied
from sn40l_sim.hardware import figures
from sn40l_sim.hardware.spec import SocketSpec
from sn40l_sim.ir import FusedKernel
from sn40l_sim.mapper.bounds import plan_floor
from sn40l_sim.mapper.budget import FINEST_PIECE, NO_LIMITS, UnitBudget
from sn40l_sim.mapper.kernel_cost import LONE_CALL, LoopContext, mean_gate_cycles, plan_kernel
from sn40l_sim.mapper.keys import UNPLANNED_CALIBRATED, socket_key
from sn40l_sim.mapper.placement import PlacedKernel
from sn40l_sim.mapper.planning import (
    gemms_all_in,
    gemms_cut_alike,
    section_allocation,
    section_floors,
    section_part_floor,
)
from sn40l_sim.mapper.plans import KernelPlan, placed_kernel
from sn40l_sim.mapper.sections import output_bytes, split_sections
from sn40l_sim.mapper.spending import section_calls, section_chain_paced
from sn40l_sim.mapper.tier_split import TierSplit
from sn40l_sim.mapper.tiling import max_pieces
from sn40l_sim.mapper.tiling_floor import allocated_floor, tiling_floor
from sn40l_sim.mapper.windows import streams_ahead
from sn40l_sim.models.flash import PADDED_SAVING_NOTE
from sn40l_sim.quantities import format_bytes

#: finest tiling tried (data tiles per section); beyond it fills are negligible anyway
MAX_TILES = 2**22


def _candidate_tiles(socket: SocketSpec, kernel: FusedKernel) -> list[int]:
    finest = max(max_pieces(socket, op) for op in kernel.operators)
    top = min(MAX_TILES, 1 << max(0, math.ceil(math.log2(max(1, finest)))))
    return [1 << i for i in range(top.bit_length())]


def best_plan(socket: SocketSpec, kernel: FusedKernel, tiers: TierSplit,
              budget: UnitBudget = NO_LIMITS, loop: LoopContext = LONE_CALL) -> KernelPlan:
    """The fastest tiling and tile choice of ``kernel`` within ``budget``, called as ``loop``
    says (see the module docstring).

    The sections are cut by each operator's fewest units (:func:`~.sections.split_sections`), which
    on a small tile (a few PMUs, or PMUs of a few KiB) can fall short of what a tiling's buffers and
    partial sums then need together; a kernel none of whose tilings fits is then cut one operator a
    section, as a compiler splits a graph that does not fit. Under a ``budget`` (a room left by
    other kernels, a hand-placed layout) it is not: the caller asked for that room.
    """
    all_tiles = figures.tiles(socket)
    tile_choices = budget.tiles_for(all_tiles)
    ranges = split_sections(socket, kernel.operators, max(tile_choices), kernel.name, budget)
    best = _best_of_sections(socket, kernel, tiers, budget, loop, tile_choices, ranges)
    if best is None and budget == NO_LIMITS and len(ranges) < len(kernel.operators):
        best = _best_of_sections(socket, kernel, tiers, budget, loop, tile_choices,
                                 [(i, i + 1) for i in range(len(kernel.operators))])
    if best is None and budget != NO_LIMITS:
        # a section's fewest units fit the budget, but no tiling's allocation of them does (its
        # buffers and partial sums need more): the room is too small, as when a section does not fit
        limits = ", ".join(f"{name} {getattr(budget, name)}" for name in ("chip_tiles", "pcus_per_tile",
                                                                          "pmus_per_tile", "n_tiles")
                           if getattr(budget, name) is not None)
        raise InfeasibleError(f"kernel {kernel.name!r}: no tiling fits within {limits}, "
                              "though each section's fewest units do")
    if best is None:
        # bad input, not a bug: a hypothetical socket whose tiles are too small for the model
        names = ", ".join(op.name for op in kernel.operators[:4]) + (", ..." if len(kernel.operators) > 4 else "")
        raise InfeasibleError(
            f"kernel {kernel.name!r} ({names}): no tiling fits a tile of {socket.tile.pcus} PCUs and "
            f"{socket.tile.pmus} PMUs of {format_bytes(socket.pmu.capacity_bytes)}, even one operator a section "
            f"on 1 or {all_tiles} tiles; expected larger tiles (tile.pcus, tile.pmus, pmu.capacity_bytes "
            f"of socket {socket.name!r}) or a wider tensor parallelism")
    return best


def _best_of_sections(socket: SocketSpec, kernel: FusedKernel, tiers: TierSplit, budget: UnitBudget,
                      loop: LoopContext, tile_choices: tuple[int, ...],
                      ranges: list[tuple[int, int]]) -> KernelPlan | None:
    """The fastest plan of ``kernel`` cut into the sections ``ranges`` over the ``tile_choices``,
    or None when no tiling fits."""
    spills = [output_bytes(socket, kernel.operators[stop - 1]) for _, stop in ranges[:-1]]
    planned = socket_key(socket, UNPLANNED_CALIBRATED)
    # the tile choices in order of their floors (the likeliest winner first), so that a choice
    # whose floor exceeds the best plan so far is skipped (:mod:`.bounds`); ties still go to the
    # choice listed first
    floors = {t: plan_floor(socket, kernel.operators, ranges, spills, tiers, t, budget, loop.calls_per_load)
              for t in tile_choices} if len(tile_choices) > 1 else {t: 0.0 for t in tile_choices}
    best: KernelPlan | None = None
    best_rank = (0.0, 0)
    for index, chip_tiles in sorted(enumerate(tile_choices), key=lambda e: (floors[e[1]], e[0])):
        if best is not None and floors[chip_tiles] > best.objective[0]:
            continue
        local = _best_tiling(socket, kernel, ranges, spills, tiers, chip_tiles, budget, loop, planned,
                             best.objective[0] if best is not None else math.inf)
        if local is not None and (best is None or (local.objective, index) < best_rank):
            best, best_rank = local, (local.objective, index)
    return best


def _sections(ranges: list[tuple[int, int]], spills: list[int]):
    """``(start, stop, spill in, spill out)`` of each section."""
    return [(start, stop, spills[i - 1] if i > 0 else 0, spills[i] if i < len(spills) else 0)
            for i, (start, stop) in enumerate(ranges)]


def _tiling_floor(socket: SocketSpec, kernel: FusedKernel, ranges: list[tuple[int, int]], spills: list[int],
                  n_tiles: int, tiers: TierSplit, chip_tiles: int, budget: UnitBudget, loop: LoopContext,
                  planned: str, sections_of=section_floors) -> float:
    """:func:`~sn40l_sim.mapper.tiling_floor.tiling_floor` of one tiling of ``kernel``, each section's
    floor from ``sections_of``."""
    sections = [sections_of(socket, kernel.operators[start:stop], n_tiles, tiers, chip_tiles, spill_in, spill_out,
                            budget, planned) for start, stop, spill_in, spill_out in _sections(ranges, spills)]
    return tiling_floor(socket, sections, n_tiles, chip_tiles, budget, loop.calls_per_load,
                        *_floor_call(loop, len(ranges) * n_tiles))


def _part_floor(*args) -> float:
    """:func:`_tiling_floor` of the sections' memory stages and heaviest GEMMs alone, quicker to
    build and no higher (:func:`~sn40l_sim.mapper.planning.section_part_floor`)."""
    return _tiling_floor(*args, sections_of=section_part_floor)


def _allocated_floor(socket: SocketSpec, kernel: FusedKernel, ranges: list[tuple[int, int]], spills: list[int],
                     n_tiles: int, tiers: TierSplit, chip_tiles: int, budget: UnitBudget, loop: LoopContext,
                     planned: str) -> float:
    """:func:`~sn40l_sim.mapper.tiling_floor.allocated_floor` of one tiling of ``kernel`` (infinite
    if a section does not fit)."""
    sections = []
    for index, (start, stop, spill_in, spill_out) in enumerate(_sections(ranges, spills)):
        stages, streams, alloc = section_allocation(socket, kernel.operators[start:stop], n_tiles, tiers, chip_tiles,
                                                    spill_in, spill_out, budget, planned,
                                                    section_calls(loop, len(ranges), index),
                                                    section_chain_paced(loop, index, len(ranges) * n_tiles))
        if alloc is None:
            return math.inf
        sections.append((stages, streams, alloc))
    return allocated_floor(socket, sections, n_tiles, loop.calls_per_load, *_floor_call(loop, len(ranges) * n_tiles))


def _floor_call(loop: LoopContext, tiles: int) -> tuple[bool, int, int]:
    """``(pipelined, gate_cycles, overlap_cycles)`` as the floors take them for a call of ``tiles``
    data tiles. A call whose stream runs ahead of its compute for a window opening or closing
    mid-way is scored as a looped iteration whose stream ran ahead (:func:`~.kernel_cost.plan_kernel`),
    which can be shorter than a lone call's stream, so it is floored as one with no gate (its wait
    and the collectives' time past its tiles only add to it), not as a lone call."""
    if not loop.pipelined and loop.windows and streams_ahead(loop.windows, tiles):
        return True, 0, 0
    # a loop is scored at its mean iteration, and its first, the loop's call, waits for no gate
    gate = math.floor(mean_gate_cycles(loop)) if loop.pipelined else loop.gate_cycles
    return loop.pipelined, gate, loop.overlap_cycles


#: the tilings searched with every GEMM in one dataflow: those within this factor of the
#: per-operator best, its neighbours (a reach of 8 found nothing more on the shipped experiments
#: and made a cold `validate` 13% slower; docs/validation.md)
UNIFORM_REACH = 2
#: when False, every tiling is planned whatever its floor (tests compare the two searches)
PRUNE_TILINGS = True


def _best_tiling(socket: SocketSpec, kernel: FusedKernel, ranges: list[tuple[int, int]], spills: list[int],
                 tiers: TierSplit, chip_tiles: int, budget: UnitBudget, loop: LoopContext,
                 planned: str, cutoff: float = math.inf) -> KernelPlan | None:
    """The best tiling on ``chip_tiles`` tiles, each GEMM in the dataflow it chose alone or every
    GEMM in one dataflow; None if none fits.

    Every candidate tiling counts: cycles against ``n_tiles`` need not have one minimum. Finer
    data tiles need smaller buffers, hence fewer PMUs and PCUs and less configuration to load, so
    a kernel whose configuration costs as much as its stream can get faster again after a run of
    slower tilings (DeepSeek-R1's all-expert decode FFN: 1024 data tiles, then three slower, then
    65,536 13% faster). Stopping at the first run of slower ones made a slower memory map some
    kernels faster. So each tiling gets floors (:mod:`.tiling_floor`), the second dearer and
    tighter than the first (of its heaviest GEMMs, then once allocated), the tiling of least floor
    so far taken a step further, and those whose floor exceeds the best plan so far are not
    planned: they could neither beat it nor tie with it. The floor of all its stages
    (:func:`_tiling_floor`) is not taken between the two: it skipped one tiling in seven of those
    reaching it, and building it for the others cost more than allocating those it skipped. Ties go
    to the fewer data tiles, as when every tiling was planned in order. ``cutoff`` is the best
    objective of the tile choices searched before.

    The same search is then run with every GEMM in one dataflow (:func:`_uniform_dataflows`) over
    the tilings within :data:`UNIFORM_REACH` of the per-operator best
    (``tests/mapper/test_mapper_dataflow_search.py`` compares the result with every plan)."""
    candidates = (budget.n_tiles,) if budget.n_tiles else tuple(_candidate_tiles(socket, kernel))
    tried: dict[int, KernelPlan] = {}
    local = _search_tilings(socket, kernel, ranges, spills, tiers, chip_tiles, budget, loop, planned, candidates,
                            tried)
    if local is not None:
        local = _uniform_dataflows(socket, kernel, ranges, spills, tiers, chip_tiles, budget, local, loop, planned,
                                   tried, candidates, cutoff)
    return local


def _search_tilings(socket: SocketSpec, kernel: FusedKernel, ranges: list[tuple[int, int]], spills: list[int],
                    tiers: TierSplit, chip_tiles: int, budget: UnitBudget, loop: LoopContext, planned: str,
                    candidates: tuple[int, ...], tried: dict[int, KernelPlan] | None = None,
                    best: KernelPlan | None = None, cutoff: float = math.inf,
                    skip: Callable[[int], bool] = lambda n_tiles: False) -> KernelPlan | None:
    """The best plan of ``candidates`` tilings under ``budget`` (see :func:`_best_tiling`), or
    ``best`` if none beats it; tilings whose floor exceeds the best so far (or ``cutoff``) and
    those ``skip`` names are not planned. The plans built are kept in ``tried`` by tiling."""
    local, local_rank = best, ((best.objective, -1) if best is not None else (0.0, 0))
    # each tiling's floors, quickest first: its heaviest GEMMs', allocated
    floors = (_part_floor, _allocated_floor) if PRUNE_TILINGS and len(candidates) > 1 else ()
    # (floor so far, tiling, floors taken): the tiling of least floor goes a step further
    queue = [(0.0, index, 0) for index, n in enumerate(candidates) if not skip(n)]
    heapq.heapify(queue)
    while queue:
        bound, index, taken = heapq.heappop(queue)
        if bound > min(cutoff, local.objective[0] if local is not None else math.inf):
            break
        n_tiles = candidates[index]
        if taken < len(floors):
            floor = floors[taken](socket, kernel, ranges, spills, n_tiles, tiers, chip_tiles, budget, loop, planned)
            heapq.heappush(queue, (max(bound, floor), index, taken + 1))
            continue
        plan = plan_kernel(socket, kernel, ranges, spills, n_tiles, tiers, chip_tiles, budget, loop, planned)
        if plan is None:
            continue
        if tried is not None:
            tried[n_tiles] = plan
        if local is None or (plan.objective, index) < local_rank:
            local, local_rank = plan, (plan.objective, index)
    return local


def _uniform_dataflows(socket: SocketSpec, kernel: FusedKernel, ranges: list[tuple[int, int]], spills: list[int],
                       tiers: TierSplit, chip_tiles: int, budget: UnitBudget, plan: KernelPlan,
                       loop: LoopContext = LONE_CALL, planned: str = "",
                       tried: dict[int, KernelPlan] | None = None, candidates: tuple[int, ...] = (),
                       cutoff: float = math.inf) -> KernelPlan:
    """The best of ``plan`` and the same kernel with every GEMM in one dataflow, searched over the
    ``candidates`` tilings as :func:`_best_tiling` searches them: the per-operator choice of
    :mod:`.tiling` judges a piece on one PCU and cannot see how whole items divide over the PCUs
    the allocation gives.

    ``tried`` holds the per-operator search's plans by tiling, none better than ``plan``: where one
    already has every GEMM in the dataflow, the dataflow's plan is that plan (each operator's
    tiling is the one it chose from both), so it cannot beat ``plan`` and is not built; nor is a
    tiling whose stages are the per-operator search's (:func:`~.planning.gemms_all_in`: its plan was built, or
    did not fit, or had a floor above a plan no better than ``plan``). A plan above ``cutoff``
    (another tile choice's best) loses whatever it replaces here, so tilings whose floor exceeds
    it are not planned either. Each dataflow is also searched with every GEMM cut to its tied
    piece of most items (:data:`~.budget.FINEST_PIECE`), which the one-PCU cost does not take."""
    if len(budget.dataflows) < 2 or not any(op.kind == "gemm" for op in kernel.operators):
        return plan
    def near(n_tiles: int) -> tuple[int, ...]:
        return tuple(n for n in candidates if n_tiles <= n * UNIFORM_REACH and n <= n_tiles * UNIFORM_REACH)

    around, searched = near(plan.n_tiles) or (plan.n_tiles,), set()
    ops = [op for start, stop in ranges for op in kernel.operators[start:stop]]
    while around:
        searched.update(around)
        before = plan
        for dataflow in budget.dataflows:
            only = replace(budget, dataflows=(dataflow,))
            done = {n for n, p in (tried or {}).items() if _all_in(p, dataflow)}

            def same(n_tiles: int, dataflow: str = dataflow, done: set[int] = done) -> bool:
                return n_tiles in done or gemms_all_in(socket, ops, n_tiles, budget, dataflow, planned)

            plan = _search_tilings(socket, kernel, ranges, spills, tiers, chip_tiles, only, loop, planned, around,
                                   best=plan, cutoff=cutoff, skip=same)
            # and every GEMM cut to its equally small piece of most whole items, which a stage spreads more
            # evenly over its PCUs than the piece cheapest on one (:func:`.gemm_tilings`), unless cut so already
            finest = replace(only, gemm_piece=FINEST_PIECE)
            plan = _search_tilings(socket, kernel, ranges, spills, tiers, chip_tiles, finest, loop, planned, around,
                                   best=plan, cutoff=cutoff,
                                   skip=lambda n, a=only, b=finest: gemms_cut_alike(socket, ops, n, a, b, planned))
        # a better plan found at the reach's edge: its neighbours past it too, until none is better
        # (DeepSeek-R1's MoE prefill kernel at 416 tokens on 8 sockets, a lone call: 2,138,379
        # cycles at 32,768 data tiles, the edge, and 2,108,129 every GEMM output-stationary at
        # 131,072, on half the PCUs: docs/validation.md, "A random hunt of prefills")
        around = () if plan is before else tuple(n for n in near(plan.n_tiles) if n not in searched)
    return plan


def _all_in(plan: KernelPlan, dataflow: str) -> bool:
    """Whether every GEMM stage of ``plan`` runs in ``dataflow``."""
    return all(st.tiling.dataflow in ("", dataflow) for sec in plan.sections for st in sec.stages if st.tiling)


def map_kernel(socket: SocketSpec, kernel: FusedKernel, tiers: TierSplit | None = None,
               budget: UnitBudget = NO_LIMITS, loop: LoopContext = LONE_CALL, called: str = "") -> PlacedKernel:
    """Place ``kernel`` on one socket and predict its cycles.

    Parameters
    ----------
    socket : SocketSpec
    kernel : FusedKernel
        One socket's shard of the kernel.
    tiers : TierSplit, optional
        Where its weights and KV live (default: all in the socket's first memory tier).
    budget : UnitBudget, optional
        Limits on the tiles, PCUs, PMUs and GEMM dataflows it may use (default: none).
    loop : LoopContext, optional
        Consecutive calls run as one looped call and the wait for their collectives (default: a
        plain call); a looped kernel's plan is chosen for its time per iteration (see the module
        docstring).
    called : str, optional
        The name an error gives the kernel when ``kernel`` is a nameless signature (the graph's).

    Returns
    -------
    PlacedKernel

    Raises
    ------
    InfeasibleError
        If an operator cannot be placed even alone at its finest tiling.
    InputError
        For a ``socket`` that is not a SocketSpec (a node's is ``node.socket``) or a ``kernel`` that
        is not a FusedKernel.

    Examples
    --------
    Llama-3.1-8B's LM head on one socket of eight, a decode step of 8 sequences: it streams the
    socket's 131 MB share of the vocabulary's weights from HBM on one tile, so HBM bounds it; its
    cycles are the configuration load, the pipeline fill and the data tiles:

    >>> from sn40l_sim.hardware.loader import load_hardware
    >>> from sn40l_sim.ir import ParallelPlan, Shape
    >>> from sn40l_sim.models.builder import build_graph
    >>> from sn40l_sim.models.loader import load_model
    >>> socket = load_hardware("hw_configs/sn40l.yaml").socket
    >>> graph = build_graph(load_model("graphs/llama3_1_8b.yaml"), Shape("decode", 8, 0, 1024), ParallelPlan(tp=8))
    >>> head = graph.kernels()[-2]
    >>> pk = map_kernel(socket, head)
    >>> head.name, head.weight_bytes, pk.bounding_resource, pk.cycles, pk.pcus_per_tile
    ('lm_head', 131342336, 'hbm', 342463, (33, 0, 0, 0))
    >>> pk.cycles == pk.overhead_cycles + pk.fill_cycles + math.ceil(pk.n_tiles * pk.cycles_per_tile)
    True
    """
    if not isinstance(socket, SocketSpec) or not isinstance(kernel, FusedKernel):   # a node, a graph: from Python
        raise InputError(f"map_kernel: expected a SocketSpec (node.socket) and a FusedKernel (graph.kernels()[i]), "
                         f"got {type(socket).__name__} and {type(kernel).__name__}")
    tiers = tiers or TierSplit.all_in(next(iter(socket.memory)))
    all_tiles = figures.tiles(socket)
    if not kernel.operators:
        zeros = (0,) * all_tiles
        return PlacedKernel(kernel=kernel, stages=(), sections=0, reconfig_cycles=0, n_tiles=0,
                            cycles_per_tile=0, fill_cycles=0, tier_bytes=dict.fromkeys(socket.memory, 0),
                            mesh_bytes=0,
                            compute_cycles=0, memory_cycles=0, bounding_resource="overhead",
                            cycles=0, pcus_per_tile=zeros, pmus_per_tile=zeros,
                            sram_bytes_per_tile=zeros, overhead_cycles=0, chip_tiles=0)
    try:
        plan = best_plan(socket, kernel, tiers, budget, loop)
    except InfeasibleError as exc:
        if not called or kernel.name:
            raise
        raise InfeasibleError(exc.message.replace("kernel ''", f"kernel {called!r}", 1)) from None
    if kernel.padded is not None:
        # FlashAttention's edge tiles padded to whole tiles: fewer GEMM stages for more work
        # (:mod:`sn40l_sim.models.flash`); the version of the lower objective is kept, ties the exact one
        try:
            padded = best_plan(socket, kernel.padded, tiers, budget, loop)
        except InfeasibleError:
            padded = None
        if padded is not None and padded.objective < plan.objective:
            # what it saved goes with it: ``map`` names the version it kept and by how much (mapper/summary.py)
            saved = (PADDED_SAVING_NOTE, round(plan.objective[0] - padded.objective[0]))
            kept = copied(kernel.padded, name=kernel.name, layer=kernel.layer, notes=kernel.padded.notes + (saved,))
            return placed_kernel(socket, kept, padded)
    return placed_kernel(socket, kernel, plan)
