"""One section of a kernel planned at one tiling and tile choice, in steps the kernel mapper can
stop after: its stages and streams (:func:`section_work`), their floor (:func:`section_floors`),
its allocation (:func:`section_allocation`), then its placement and routes (:func:`plan_section`).

:mod:`.kernel` searches tilings: it asks a tiling's floor first and skips the tiling if the floor
exceeds the best plan so far, then its allocation, whose floor (the stages' cycles and units known,
the routes not yet) can skip it again, and only then places and routes it. Each step is memoised
under the same key (the socket as planned, the operators, the tiling, the tiers, the tiles in use,
the spills and the budget; the stages under the part of the budget they read,
:func:`stages_budget`), so no step is done twice whichever asks first; the placement and routes
under what they read, the stages and their allocation (:func:`placed_section`); the memos are
bounded and :func:`clear_section_memo` empties them.
"""
from __future__ import annotations

from itertools import pairwise
from typing import TYPE_CHECKING

from sn40l_sim.hardware.spec import SocketSpec
from sn40l_sim.hardware.units._cycles import ceil_cycles
from sn40l_sim.hardware.units.network import mesh_latency_cycles
from sn40l_sim.mapper.allocate import Allocation, allocate
from sn40l_sim.mapper.attention import with_combines
from sn40l_sim.mapper.budget import NO_LIMITS, UnitBudget
from sn40l_sim.mapper.fill_path import compute_graph, longest_path
from sn40l_sim.mapper.keys import IdentityMemo, operators_key
from sn40l_sim.mapper.layout import RoutedStream, mesh_cycles_per_tile, place_stages, route_streams
from sn40l_sim.mapper.plans import SectionPlan
from sn40l_sim.mapper.spending import Calls, pricing
from sn40l_sim.mapper.stage_limits import clear_limits_memo
from sn40l_sim.mapper.stages import (
    StageWork,
    Stream,
    clear_tiling_memo,
    operator_tiling,
    paced_cycles,
    producers,
    section_stages,
    some_stages,
)
from sn40l_sim.mapper.tier_split import TierSplit
from sn40l_sim.mapper.tiling_floor import SectionFloor, clear_stage_floor_memo, section_floor

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sn40l_sim.ir import Operator

#: section plans by (socket as planned, operators, tiling, tiers, tiles, spills, budget)
_section_memo: dict[tuple, SectionPlan | None] = {}
#: sections' stages and streams, their floors and their allocations under the same keys
_stages_memo: dict[tuple, tuple[list[StageWork], list[Stream]]] = {}
_floor_memo: dict[tuple, SectionFloor] = {}
_alloc_memo: dict[tuple, Allocation | None] = {}
#: entries each memo keeps (cleared when full): a section's stages take about 15 kB, and a kernel's
#: search asks for a few dozen sections' again (its retries, its loops), not for older searches'
_SECTION_MEMO_SIZE, _STAGES_MEMO_SIZE, _FLOOR_MEMO_SIZE, _ALLOC_MEMO_SIZE = 50_000, 4_000, 20_000, 10_000
#: sections placed and routed, by their stages (the memoised list's identity) and allocation
_placed_memo: IdentityMemo[SectionPlan] = IdentityMemo(size=_ALLOC_MEMO_SIZE)
#: a one-section call's windows replayed (:func:`~.kernel_cost.plan_kernel`), by its section plan
#: (shared by the keys that place the same section alike) and the call
replay_memo: IdentityMemo[object] = IdentityMemo(size=_ALLOC_MEMO_SIZE)


def clear_section_memo() -> None:
    """Forget every memoised section plan, its steps and every operator tiling."""
    for memo in (_section_memo, _stages_memo, _floor_memo, _alloc_memo, _heavy_memo):
        memo.clear()
    _placed_memo.clear()
    replay_memo.clear()
    clear_tiling_memo()
    clear_stage_floor_memo()
    clear_limits_memo()


def _key(planned: str, ops: Sequence[Operator], n_tiles: int, tiers: TierSplit, chip_tiles: int, spill_in: int,
         spill_out: int, budget: UnitBudget) -> tuple | None:
    """A section's memo key; None (nothing memoised) without ``planned``, the socket as planned
    (:func:`~sn40l_sim.mapper.keys.socket_key`)."""
    if not planned:
        return None
    return (planned, operators_key(ops), n_tiles, tiers, chip_tiles, spill_in, spill_out, budget)


def _memoised(memo: dict, size: int, key: tuple | None, compute):
    if key is None:
        return compute()
    got = memo.get(key)
    if got is None and key not in memo:
        if len(memo) >= size:
            memo.clear()
        got = memo[key] = compute()
    return got


def section_work(socket: SocketSpec, ops: Sequence[Operator], n_tiles: int, tiers: TierSplit, chip_tiles: int,
                 spill_in: int, spill_out: int, budget: UnitBudget, planned: str = ""
                 ) -> tuple[list[StageWork], list[Stream]]:
    """A section's stages and streams, decode attention spread over the tiles merging its partial
    results (split-KV); memoised when ``planned`` is given.

    They read of ``budget`` only the GEMM dataflows and cuts (:func:`stages_budget`), so they are
    built and memoised under that part of it: the rooms :mod:`.side_by_side` tries differ by a few
    units per tile, and each asked for every section's stages again."""
    reads = stages_budget(budget)
    return _memoised(_stages_memo, _STAGES_MEMO_SIZE,
                     _key(planned, ops, n_tiles, tiers, chip_tiles, spill_in, spill_out, reads),
                     lambda: section_stages(socket, with_combines(socket, ops, chip_tiles), n_tiles, tiers, chip_tiles,
                                            spill_in, spill_out, reads, planned))


def stages_budget(budget: UnitBudget) -> UnitBudget:
    """What of ``budget`` a section's stages depend on: its GEMM dataflows and cuts, which
    :func:`~sn40l_sim.mapper.stages.section_stages` passes to each GEMM's tiling (and which of its
    equally small pieces it takes); the units and
    tiles it allows are the allocation's business (:mod:`.allocate`), not the stages'.

    >>> narrow = UnitBudget(pcus_per_tile=40, chip_tiles=1, dataflows=("weight_stationary",))
    >>> stages_budget(narrow) == UnitBudget(dataflows=("weight_stationary",)), stages_budget(NO_LIMITS) is NO_LIMITS
    (True, True)
    """
    if (budget.dataflows == NO_LIMITS.dataflows and budget.gemm_cuts == NO_LIMITS.gemm_cuts
            and budget.gemm_piece == NO_LIMITS.gemm_piece):
        return NO_LIMITS   # the common case, without building a budget
    return UnitBudget(dataflows=budget.dataflows, gemm_cuts=budget.gemm_cuts, gemm_piece=budget.gemm_piece)


def gemms_all_in(socket: SocketSpec, ops: Sequence[Operator], n_tiles: int, budget: UnitBudget, dataflow: str,
                 planned: str = "") -> bool:
    """Whether ``ops`` have the same stages and streams at ``n_tiles`` under ``budget`` and under
    ``dataflow`` alone (the plans are then the same): whether every GEMM's tiling under ``budget``
    is in ``dataflow``. A GEMM's tiling under one dataflow is that dataflow's option of the choice
    under both, and no other operator's tiling reads the dataflows, so the stages agree then;
    otherwise a GEMM's work differs. Asked of the operator tilings alone (memoised under
    ``planned``, :func:`~.stages.operator_tiling`), without building stages a search may never build.

    >>> from sn40l_sim.ir import Operator
    >>> from sn40l_sim.mapper._examples import example_socket
    >>> from sn40l_sim.mapper.budget import OUTPUT_STATIONARY
    >>> k = Operator("k", "gemm", m=1024, k=4096, n=128, weight_bytes=4096 * 128 * 2)
    >>> gemms_all_in(example_socket(), [k], 32, UnitBudget(dataflows=(OUTPUT_STATIONARY,)), OUTPUT_STATIONARY)
    True
    """
    return all(operator_tiling(socket, op, n_tiles, budget, planned).dataflow == dataflow
               for op in ops if op.kind == "gemm")


def gemms_cut_alike(socket: SocketSpec, ops: Sequence[Operator], n_tiles: int, budget: UnitBudget,
                    other: UnitBudget, planned: str = "") -> bool:
    """Whether every GEMM of ``ops`` has the same tiling at ``n_tiles`` under ``budget`` and
    ``other``: only a GEMM's tiling reads a budget's dataflows and pieces, so the sections' stages
    and plans are then the same, and a search under ``other`` would plan again what ``budget``'s did.

    Llama-3.1-8B's K projection at 1,024 rows in 32 pieces ties two cuts
    (:func:`~.tiling.gemm_tilings`): the finest-piece budget takes the other one.

    >>> from dataclasses import replace
    >>> from sn40l_sim.ir import Operator
    >>> from sn40l_sim.mapper._examples import example_socket
    >>> from sn40l_sim.mapper.budget import FINEST_PIECE, OUTPUT_STATIONARY
    >>> k = Operator("k", "gemm", m=1024, k=4096, n=128, weight_bytes=4096 * 128 * 2)
    >>> cheapest = UnitBudget(dataflows=(OUTPUT_STATIONARY,))
    >>> finest = replace(cheapest, gemm_piece=FINEST_PIECE)
    >>> gemms_cut_alike(example_socket(), [k], 32, cheapest, finest), gemms_cut_alike(example_socket(), [k], 32,
    ...                                                                                 cheapest, cheapest)
    (False, True)
    """
    return all(operator_tiling(socket, op, n_tiles, budget, planned) == operator_tiling(socket, op, n_tiles, other,
                                                                                          planned)
               for op in ops if op.kind == "gemm")


def section_floors(socket: SocketSpec, ops: Sequence[Operator], n_tiles: int, tiers: TierSplit, chip_tiles: int,
                   spill_in: int, spill_out: int, budget: UnitBudget, planned: str = "") -> SectionFloor:
    """:func:`~sn40l_sim.mapper.tiling_floor.section_floor` of a section (memoised as above)."""
    def compute():
        stages, streams = section_work(socket, ops, n_tiles, tiers, chip_tiles, spill_in, spill_out, budget, planned)
        return section_floor(socket, stages, streams, chip_tiles, budget)
    return _memoised(_floor_memo, _FLOOR_MEMO_SIZE,
                     _key(planned, ops, n_tiles, tiers, chip_tiles, spill_in, spill_out, budget), compute)


def heavy_operators(ops: Sequence[Operator], count: int = 2) -> tuple[int, ...]:
    """Indices of the ``count`` GEMMs of most FLOPs among ``ops``, in order (the first on ties)."""
    gemms = sorted((i for i, op in enumerate(ops) if op.kind == "gemm"), key=lambda i: (-ops[i].flops, i))
    return tuple(sorted(gemms[:count]))


def section_part_floor(socket: SocketSpec, ops: Sequence[Operator], n_tiles: int, tiers: TierSplit,
                       chip_tiles: int, spill_in: int, spill_out: int, budget: UnitBudget,
                       planned: str = "") -> SectionFloor:
    """:func:`~sn40l_sim.mapper.tiling_floor.section_floor` of a part of a section's stages: its
    memory stages and its heaviest GEMMs (:func:`heavy_operators`). Its floor is below the whole
    section's: every term of :func:`~sn40l_sim.mapper.tiling_floor.tiling_floor` adds over the
    stages, and the other stages' PCUs can only be taken from these (the decode attention's
    partial results are left out too; merging them only adds memory traffic). Memoised as
    :func:`section_floors` is, apart from it: the tilings searched ask for some sections' part
    floors again (428 of a cold ``validate``'s 3,961 asks)."""
    def compute():
        heavy, path = _heavy_path(ops)
        stages = some_stages(socket, ops, heavy, n_tiles, tiers, chip_tiles, spill_in, spill_out, budget, planned)
        return section_floor(socket, stages, [], chip_tiles, budget, path)
    key = _key(planned, ops, n_tiles, tiers, chip_tiles, spill_in, spill_out, budget)
    return _memoised(_floor_memo, _FLOOR_MEMO_SIZE, key if key is None else (*key, "part"), compute)


#: each section's heaviest GEMMs and whether one path holds them (:func:`_heavy_path`), by its
#: operators' key: a section's part floor is asked for at each of its tilings, tile choices and
#: budgets, and these read the operators alone (cleared with the section memos)
_heavy_memo: dict[object, tuple[tuple[int, ...], tuple[int, ...] | None]] = {}


def _heavy_path(ops: Sequence[Operator]) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
    """:func:`heavy_operators` of ``ops`` and the path :func:`section_part_floor`'s fill counts:
    both GEMMs only when one is upstream of the other (the heavier alone else, None). A function
    of the operators alone, memoised by their key (:func:`~.keys.operators_key`: equal operators,
    equal key), so the answer is the one computed afresh.

    >>> from sn40l_sim.ir import Operator
    >>> ops = [Operator("n", "elementwise"), Operator("q", "gemm", m=4, n=4, k=4, producers=("n",)),
    ...        Operator("o", "gemm", m=4, n=4, k=8, producers=("q",))]
    >>> _heavy_path(ops)
    ((1, 2), (0, 1))
    """
    key = operators_key(ops)
    got = _heavy_memo.get(key)
    if got is None:
        if len(_heavy_memo) >= _FLOOR_MEMO_SIZE:
            _heavy_memo.clear()
        heavy = heavy_operators(ops)
        got = _heavy_memo[key] = (heavy, tuple(range(len(heavy))) if on_one_path(ops, heavy) else None)
    return got


def on_one_path(ops: Sequence[Operator], chosen: Sequence[int]) -> bool:
    """Whether each of the ``chosen`` operators (indices in order) feeds the next through the
    section's dataflow graph (:func:`~sn40l_sim.mapper.stages.producers`), so one path holds them all.

    >>> from sn40l_sim.ir import Operator
    >>> ops = [Operator("n", "elementwise"), Operator("q", "gemm", producers=("n",)),
    ...        Operator("kv", "gemm", producers=("n",)), Operator("o", "gemm", producers=("q", "kv"))]
    >>> on_one_path(ops, (1, 2)), on_one_path(ops, (1, 3)), on_one_path(ops[:1] + [Operator("m", "gemm")], (0, 1))
    (False, True, True)
    """
    ancestors: list[set[int]] = []
    for i in range(len(ops)):
        above = set(producers(ops, i))
        ancestors.append(above.union(*(ancestors[p] for p in above)))
    return all(a in ancestors[b] for a, b in pairwise(chosen))


def _priced(socket: SocketSpec, key: tuple | None, calls: Calls | None) -> tuple | None:
    """``key`` for what depends on how idle units are priced: the calls sharing one configuration
    load and the rate that loads it (the socket as planned leaves the rate out)."""
    if key is None or not calls:
        return key
    return (*key, *calls, socket.calibrated.config_load_bytes_per_s)


def _paced(key: tuple | None, chain_paced: bool) -> tuple | None:
    """``key`` for an allocation whose compute stages are balanced for their own pace
    (:func:`~sn40l_sim.mapper.allocate.allocate`'s ``chain_paced``)."""
    return (*key, "chain_paced") if key is not None and chain_paced else key


def section_allocation(socket: SocketSpec, ops: Sequence[Operator], n_tiles: int, tiers: TierSplit,
                       chip_tiles: int, spill_in: int, spill_out: int, budget: UnitBudget, planned: str = "",
                       calls: Calls | None = None, chain_paced: bool = False
                       ) -> tuple[list[StageWork], list[Stream], Allocation | None]:
    """A section's stages, streams and :func:`~sn40l_sim.mapper.allocate.allocate` (None when they
    do not fit; memoised as above), the units the balanced allocation leaves idle priced for the
    ``calls`` (unpriced without), its compute stages balanced for their own pace when
    ``chain_paced`` (a looped iteration's section that reads ahead while it waits)."""
    stages, streams = section_work(socket, ops, n_tiles, tiers, chip_tiles, spill_in, spill_out, budget, planned)
    price = pricing(socket, chip_tiles, n_tiles, calls) if calls else None
    alloc = _memoised(_alloc_memo, _ALLOC_MEMO_SIZE,
                      _paced(_priced(socket, _key(planned, ops, n_tiles, tiers, chip_tiles, spill_in, spill_out,
                                                  budget), calls), chain_paced),
                      lambda: allocate(socket, stages, chip_tiles, budget, price, chain_paced))
    return stages, streams, alloc


def plan_section(socket: SocketSpec, ops: Sequence[Operator], n_tiles: int, tiers: TierSplit, chip_tiles: int,
                 spill_in: int, spill_out: int, budget: UnitBudget, planned: str = "",
                 calls: Calls | None = None, chain_paced: bool = False) -> SectionPlan | None:
    """:func:`plan_section_cold` through the memo when ``planned`` is given."""
    return _memoised(_section_memo, _SECTION_MEMO_SIZE,
                     _paced(_priced(socket, _key(planned, ops, n_tiles, tiers, chip_tiles, spill_in, spill_out,
                                                 budget), calls), chain_paced),
                     lambda: plan_section_cold(socket, ops, n_tiles, tiers, chip_tiles, spill_in, spill_out, budget,
                                               planned, calls, chain_paced))


def plan_section_cold(socket: SocketSpec, ops: Sequence[Operator], n_tiles: int, tiers: TierSplit, chip_tiles: int,
                      spill_in: int, spill_out: int, budget: UnitBudget, planned: str = "",
                      calls: Calls | None = None, chain_paced: bool = False) -> SectionPlan | None:
    """The section staged, allocated, placed and routed, and its cycles (see :mod:`.kernel`); None
    when it does not fit."""
    stages, streams, alloc = section_allocation(socket, ops, n_tiles, tiers, chip_tiles, spill_in, spill_out, budget,
                                                planned, calls, chain_paced)
    if alloc is None:
        return None
    if not planned:
        return placed_section(socket, stages, streams, alloc, n_tiles, chip_tiles)
    # the same stages given the same units under another key (a room a few units larger or smaller
    # that the section does not fill, another price of idle units that bought none: the side-by-side
    # search's rooms, :mod:`.side_by_side`) are placed and routed alike
    return _placed_memo.get(stages, (planned, n_tiles, chip_tiles, alloc),
                            lambda: placed_section(socket, stages, streams, alloc, n_tiles, chip_tiles))


def placed_section(socket: SocketSpec, stages: list[StageWork], streams: list[Stream], alloc: Allocation,
                   n_tiles: int, chip_tiles: int) -> SectionPlan:
    """The section of ``stages`` (their ``streams``) with ``alloc``'s units placed and routed, and
    its cycles: it reads nothing else, neither the budget nor the price the allocation was made
    under."""
    cells = place_stages(socket, stages, alloc)
    routed = route_streams(socket, stages, cells, streams)
    # a split K's partial sums cross the mesh to a partner two cells away, at least
    mesh = mesh_cycles_per_tile(socket, routed, n_tiles, chip_tiles, extra_byte_hops=2 * alloc.reduction_mesh_bytes)
    # memory streams at their unrounded pace, compute stages at their whole cycles per data tile
    paced = [paced_cycles(s, c) for s, c in zip(stages, alloc.cycles, strict=True)]
    slowest = max(range(len(stages)), key=lambda i: (paced[i], -i))
    cpt, bound = paced[slowest], alloc.bounds[slowest]
    if mesh > cpt:
        cpt, bound = mesh, "mesh"
    chain = sum(handover_cycles(socket, r) for r in routed
                if not stages[r.src].is_memory and not stages[r.dst].is_memory)
    memory = max([s.latency_cycles for s in stages if s.is_memory]
                 + [r.latency_cycles for r in routed if stages[r.src].is_memory or stages[r.dst].is_memory] + [0])
    # the memory streams' shares and the slowest tier's latency bracket the first data tile, which
    # crosses the compute stages along the longest path of their graph (:mod:`.fill_path`): the
    # stages and hand-overs off it fill beside it, and are taken back out of the sum
    fill = ceil_cycles(max(0.0, sum(paced) + alloc.latency_cycles + chain + memory - cpt
                           - off_path_cycles(socket, stages, routed, alloc)))
    compute = max([c for c, st in zip(alloc.cycles, stages, strict=True) if not st.is_memory] + [mesh])
    stream = max([st.stream_cycles for st in stages if st.is_memory] + [0])
    return SectionPlan(stages, alloc, cells, routed, mesh, cpt, fill, bound, compute, stream, n_tiles)


def off_path_cycles(socket: SocketSpec, stages: Sequence[StageWork], routed: Sequence[RoutedStream],
                    alloc: Allocation) -> int:
    """Cycles of the compute stages (their cycles per data tile, fill and drain) and hand-overs
    that are not on the longest path of the section's stage graph (:func:`~.fill_path.longest_path`):
    none for a chain, so its fill is every stage's and every hand-over's sum."""
    compute, edges = compute_graph(stages, routed)
    divisions = alloc.divisions or (None,) * len(stages)
    weights = [alloc.cycles[i] + (divisions[i].latency_cycles if divisions[i] is not None else 0) for i in compute]
    handovers = [handover_cycles(socket, r) for r in routed
                 if not stages[r.src].is_memory and not stages[r.dst].is_memory]
    longest, _ = longest_path(weights, [(a, b, h) for (a, b), h in zip(edges, handovers, strict=True)])
    return sum(weights) + sum(handovers) - longest


def handover_cycles(socket: SocketSpec, stream: RoutedStream) -> int:
    """Cycles a data tile spends between two compute stages beyond their own fill and drain: the
    data's trip past the neighbouring switch (a stage's latency counts one hop out) and the control
    token that hands the buffer over."""
    vector, control = socket.tile.vector_network, socket.tile.control_network
    return (mesh_latency_cycles(vector, max(0, stream.hops - 1))
            + mesh_latency_cycles(control, max(1, stream.hops)))
