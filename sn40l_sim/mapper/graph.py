"""Mapping a whole kernel graph: :func:`map_graph`, memoised on kernel signatures.

Identical layers produce kernels with equal :meth:`~sn40l_sim.ir.FusedKernel.signature`
(name and layer aside), so each distinct kernel is mapped once and the result is re-labelled for
every layer. The memo is kept across calls (bounded), keyed on the socket's description, the
signature and the memory tiers, so an engine timing many decode shapes maps each new shape's
kernels once.

Examples
--------
>>> from sn40l_sim.mapper._examples import example_node, example_decode_kernel
>>> from sn40l_sim.ir import KernelGraph, Shape
>>> from dataclasses import replace
>>> graph = KernelGraph("toy", Shape("decode", 1, 1, 4096))
>>> prev = None
>>> for layer in range(3):
...     k = replace(example_decode_kernel(), name=f"L{layer}.attn", layer=layer)
...     graph.add(k, after=prev)
...     prev = k
>>> placed = map_graph(example_node(), graph)
>>> [pk.kernel.name for pk in placed.kernels], len({pk.cycles for pk in placed.kernels})
(['L0.attn', 'L1.attn', 'L2.attn'], 1)
"""
from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace

from sn40l_sim.errors import InfeasibleError
from sn40l_sim.frozen import copied
from sn40l_sim.hardware import figures
from sn40l_sim.hardware.spec import NodeSpec, SocketSpec
from sn40l_sim.ir import Collective, FusedKernel, KernelGraph
from sn40l_sim.mapper import disk_cache, division
from sn40l_sim.mapper.budget import NO_LIMITS, UnitBudget
from sn40l_sim.mapper.calls import as_called
from sn40l_sim.mapper.confined import remap_confined
from sn40l_sim.mapper.kernel import LONE_CALL, LoopContext, map_kernel
from sn40l_sim.mapper.keys import UNMAPPED_CALIBRATED, socket_key
from sn40l_sim.mapper.loops import find_loops
from sn40l_sim.mapper.memory import all_in_first_tier
from sn40l_sim.mapper.placement import MemoryPlacement, PlacedGraph, PlacedKernel
from sn40l_sim.mapper.planning import clear_section_memo
from sn40l_sim.mapper.residency import Loads, load_bytes, reload_tiles, resident_calls
from sn40l_sim.mapper.shares import overlap_tail
from sn40l_sim.mapper.tier_split import TierSplit
from sn40l_sim.mapper.windows import overlap_windows

#: distinct (socket, kernel, tiers) kept; cleared when full (a decode sweep has a few hundred)
_MEMO_SIZE = 4096
_memo: dict[tuple[str, FusedKernel, TierSplit, LoopContext, UnitBudget], PlacedKernel] = {}
def mapping_key(socket: SocketSpec) -> str:
    """The socket as the mapper sees it: its JSON, less :data:`~.keys.UNMAPPED_CALIBRATED`,
    :data:`~.keys.UNMAPPED_PARTS` and the tiers' capacities (:func:`~.keys.socket_key`)."""
    return socket_key(socket, UNMAPPED_CALIBRATED)


def map_kernel_cached(socket: SocketSpec, kernel: FusedKernel, tiers: TierSplit | None = None,
                      socket_key: str | None = None, loop: LoopContext = LONE_CALL,
                      budget: UnitBudget = NO_LIMITS) -> PlacedKernel:
    """:func:`~sn40l_sim.mapper.kernel.map_kernel` through the memo, then the disk cache
    (:mod:`.disk_cache`); the result carries ``kernel`` itself (its name and layer)."""
    tiers = tiers or TierSplit.all_in(next(iter(socket.memory)))
    signature, sk = kernel.signature(), socket_key or mapping_key(socket)
    key = (sk, signature, tiers, loop, budget)
    placed = _memo.get(key)
    if placed is None:
        if len(_memo) >= _MEMO_SIZE:
            _memo.clear()
        text = f"{sk}\n{signature!r}\n{tiers!r}\n{loop!r}" + (f"\n{budget!r}" if budget != NO_LIMITS else "")
        placed = disk_cache.load("mapped_kernel", text)
        if placed is None:
            with _collector_paused():
                placed = map_kernel(socket, signature, tiers, budget=budget, loop=loop, called=kernel.name)
            disk_cache.store("mapped_kernel", text, placed)
        _memo[key] = placed
    if signature.padded is not None and placed.kernel.padded is None:
        # the mapper kept the kernel's padded version (:func:`~sn40l_sim.mapper.kernel.map_kernel`)
        kernel = copied(placed.kernel, name=kernel.name, layer=kernel.layer)   # with what it saved
    # every kernel of every graph comes through here; ``replace`` was a sixth of a warm map_graph
    return copied(placed, kernel=kernel)


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for the block, back as it was after: a kernel's search
    makes and drops hundreds of thousands of small acyclic objects (divisions, splits, keys), which
    reference counting frees, and each collection they trigger walks every live object of the
    process (a few % of a cold mapping). What the search kept (its memos: stages, allocations,
    plans) then goes to the collector's oldest generation unexamined (:func:`promote_young`)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            promote_young()
            gc.enable()


#: whether a paused search's kept objects go to the oldest generation (:func:`promote_young`). It
#: moves every young object of the process, not only the mapper's, so a host that embeds the
#: library keeps its own collector as it set it; the command line, whose process is the
#: simulator's alone, turns it on (``sn40l_sim.commands.cli``)
PROMOTE_KEPT_OBJECTS = False


def promote_young() -> None:
    """Move every object the collector tracks to its oldest generation without examining them,
    unless some are frozen (``gc.freeze``, which this would undo). With the collector paused, the
    objects a search made and kept pile up in the youngest generation, and the first allocation
    after it resumes would walk them all (about 1 ms per kernel mapped, 4% of a cold ``run``) to
    find what the memos keep alive anyway. Garbage cycles among them, if any, are still collected
    by the next full collection."""
    if PROMOTE_KEPT_OBJECTS and gc.get_freeze_count() == 0:
        gc.freeze()
        gc.unfreeze()


def map_graph(node: NodeSpec, graph: KernelGraph, memory: MemoryPlacement | None = None,
              looping: bool = False, collective_cycles: Callable[[Collective], float] | None = None,
              priced: bool = False, staging_bytes: Callable[[Collective], int] | None = None) -> PlacedGraph:
    """Place every kernel of ``graph`` on one socket of ``node``.

    Parameters
    ----------
    node : NodeSpec
    graph : KernelGraph
        Per-socket kernels (the builder's output).
    memory : MemoryPlacement, optional
        Where weights and KV live (from :func:`~sn40l_sim.mapper.memory.place_memory`); kernels
        stream spilled bytes at their tier's bandwidth. Default: everything in the socket's first
        tier, unchecked.
    looping : bool, optional
        Whether the engine runs the graph's kernel loops (:func:`~sn40l_sim.mapper.loops.find_loops`)
        as looped calls; their kernels are then mapped for their time per iteration (default: no).
        Either way a loop's kernel is charged its configuration once over the loop.
    collective_cycles : callable, optional
        Cycles of one collective (the engine's model, which the mapper does not import): a looped
        kernel's iterations wait for the previous iteration's collectives, and any other call ends
        no sooner than its overlapped collectives, which start after its first tile. Default: free.
    priced : bool, optional
        Whether the units a kernel's balanced allocation leaves idle go only where they pay for
        their configuration (:mod:`.spending`); default: to every stage they shorten.
    staging_bytes : callable, optional
        Bytes one collective stages in the activations' tier (the engine's model): a call's
        overlapped collectives stage them while its own stream runs in the same tier, which the
        engine shares, and the call is charged what that holds its stream back
        (:func:`~sn40l_sim.mapper.kernel_cost.held_back_cycles`). Default: not counted.

    Returns
    -------
    PlacedGraph
        Kernels in the graph's deterministic topological order, each with its time as the graph
        calls it (:func:`~sn40l_sim.mapper.calls.as_called`: ``call_cycles``, the collectives it
        waits for included when ``collective_cycles`` is given).
    """
    memory = memory if memory is not None else all_in_first_tier(node)
    tiers = memory.tiers()
    key = mapping_key(node.socket)
    order = graph.kernels()
    # a call's context reads the kernel's operators and collectives, not its name or layer: worked
    # out once per signature (the identical layers), not for each of a graph's hundreds of kernels
    contexts: dict[FusedKernel, LoopContext] = {}
    calls = []
    for k in order:
        signature = k.signature()
        context = contexts.get(signature)
        if context is None:
            context = contexts[signature] = _call(node.socket, k, collective_cycles, staging_bytes, tiers)
        calls.append(context)
    for loop in find_loops(order, graph):
        kernel = order[loop.first]
        # the next iteration waits for the collectives after the tiles; those that carry one
        # operator's output run beside its part of the stream, as the plan's windows say, and the
        # other overlapped ones beside the whole stream from its first tile out (a token-sliced
        # kernel's, prefill's), as the engine runs a looped iteration's: the next iteration waits
        # for their end (``overlap_cycles``), not for all of their time after the tiles
        gate = sum(collective_cycles(c) for c in kernel.collectives
                   if not c.overlapped) if collective_cycles and looping else 0
        staging = tuple((round(collective_cycles(c)), staging_bytes(c)) for c in kernel.collectives
                        if not c.overlapped) if collective_cycles and staging_bytes and looping else ()
        context = LoopContext(loop.iterations, round(gate), looping, gate_staging=staging,
                              windows=calls[loop.first].windows, overlap_cycles=calls[loop.first].overlap_cycles,
                              overlap_tails=calls[loop.first].overlap_tails)
        if not looping:
            context = replace(context, overlap_staged_bytes=calls[loop.first].overlap_staged_bytes)
        calls[loop.first:loop.stop] = [context] * loop.iterations
    if priced:
        calls = [replace(call, priced=True) for call in calls]
    plans = [map_kernel_cached(node.socket, k, tiers, key, call) for k, call in zip(order, calls, strict=True)]
    kernels = _as_called(node.socket, order, plans, calls, reload_tiles(node.socket, plans), collective_cycles)
    kernels = _remap_side_by_side(node.socket, order, plans, calls, kernels, tiers, key, collective_cycles,
                                  graph.shape.phase == "decode")
    kernels = _remap_one_tile_each(node.socket, order, plans, calls, kernels, tiers, key, collective_cycles)
    return PlacedGraph(graph=graph, kernels=kernels, memory=memory)


def _remap_one_tile_each(socket: SocketSpec, order: list[FusedKernel], plans: list[PlacedKernel],
                         calls: list[LoopContext], kernels: tuple[PlacedKernel, ...], tiers: TierSplit, key: str,
                         collective_cycles: Callable[[Collective], float] | None) -> tuple[PlacedKernel, ...]:
    """``kernels`` or, when the step is shorter that way, the graph with each kernel it calls more
    than once mapped on a tile of its own, its configuration free (:mod:`.residency` keeps it loaded
    there), and each kernel it calls once mapped in the largest room they leave on a tile: possible
    when there are no more kernels called more than once than tiles, each of one section.

    The one-tile plans do not depend on how the kernels were mapped first, as the room
    :func:`_remap_side_by_side` offers does, so a faster machine cannot take this placement away: a
    Llama prefill whose FFN maps onto every tile once configurations load fast enough still has its
    four layer kernels on a tile each to fall back to (docs/validation.md, "Each layer kernel on a
    tile of its own")."""
    tiles = figures.tiles(socket)
    calls_of = _calls_by_kind(order)
    repeated = [indices for indices in calls_of.values() if len(indices) > 1]
    if tiles < 2 or not repeated or len(repeated) > tiles or any(plans[i[0]].sections != 1 for i in repeated):
        return kernels
    if len(repeated) == 1:
        loaded = resident_calls(socket, kernels)
        if all(loaded[i] for i in repeated[0]):
            # one kernel called again and again that stays loaded already (a decoder in a loop): a
            # tile of its own keeps nothing more loaded, and its first mapping tried it on one tile
            return kernels
    budget = UnitBudget(chip_tiles=1)
    plans, contexts = list(plans), list(calls)
    try:
        for indices in repeated:
            again: dict[LoopContext, PlacedKernel] = {}
            for i in indices:
                if calls[i] not in again:
                    again[calls[i]] = map_kernel_cached(socket, order[i], tiers, key, replace(calls[i], resident=True),
                                                        budget)
                plans[i], contexts[i] = copied(again[calls[i]], kernel=order[i]), replace(calls[i], resident=True)
    except InfeasibleError:
        return kernels
    if any(plans[i[0]].sections != 1 for i in repeated):
        return kernels
    # the kernels called once (embedding, lm_head, sampling) in the room the others leave, where it
    # suffices: mapped alone they may take a few units more and evict one of those each step
    room = [[socket.tile.pcus, socket.tile.pmus] for _ in range(tiles)]
    for indices in repeated:
        _take(room, plans[indices[0]])
    for indices in calls_of.values():
        i = indices[0]
        if len(indices) > 1 or plans[i].sections != 1:
            continue
        pcus, pmus = max(room)
        if pcus >= 1 and pmus >= 1:
            try:
                placed = map_kernel_cached(socket, order[i], tiers, key, replace(calls[i], resident=True),
                                           UnitBudget(chip_tiles=1, pcus_per_tile=pcus, pmus_per_tile=pmus))
            except InfeasibleError:
                placed = None
            if placed is not None and placed.sections == 1:
                plans[i], contexts[i] = copied(placed, kernel=order[i]), replace(calls[i], resident=True)
        _take(room, plans[i])
    other = _as_called(socket, order, plans, contexts, reload_tiles(socket, plans), collective_cycles)
    best = other if sum(pk.call_cycles for pk in other) < sum(pk.call_cycles for pk in kernels) else kernels
    return _beside_the_kernels_called_once(socket, order, plans, contexts, best, repeated, calls_of, tiers, key,
                                           collective_cycles)


def _beside_the_kernels_called_once(socket: SocketSpec, order: list[FusedKernel], plans: list[PlacedKernel],
                                    contexts: list[LoopContext], best: tuple[PlacedKernel, ...],
                                    repeated: list[list[int]], calls_of: dict[int, list[int]], tiers: TierSplit,
                                    key: str, collective_cycles: Callable[[Collective], float] | None,
                                    ) -> tuple[PlacedKernel, ...]:
    """``best`` or, when the step is shorter that way, the one-tile placement ``plans`` with one of
    the kernels called many times (``repeated``) mapped again on its tile less the units the kernels
    called once hold, where some of those found no room beside the others and reload each step.

    Mapped on a tile alone, a layer kernel may take every unit of it on a faster machine (Llama-3.1-8B's
    output projection at 200 GB/s per P2P port: 260 PCUs and PMUs, 240 and 154 at 100): lm_head
    and sampling then reload and evict the first layer's kernels each step, a longer step than on
    the slower machine (docs/validation.md, "Faster links or HBM, a slower step")."""
    once = [indices[0] for indices in calls_of.values() if len(indices) == 1 and plans[indices[0]].sections == 1]
    loaded = resident_calls(socket, plans)
    if not once or all(loaded[i] for i in once):
        return best
    pcus = socket.tile.pcus - sum(max(plans[i].pcus_per_tile, default=0) for i in once)
    pmus = socket.tile.pmus - sum(max(plans[i].pmus_per_tile, default=0) for i in once)
    if min(pcus, pmus) < 1:
        return best
    budget = UnitBudget(chip_tiles=1, pcus_per_tile=pcus, pmus_per_tile=pmus)
    for indices in repeated:
        tried, again = list(plans), {}
        try:
            for i in indices:
                if contexts[i] not in again:
                    again[contexts[i]] = map_kernel_cached(socket, order[i], tiers, key, contexts[i], budget)
                tried[i] = copied(again[contexts[i]], kernel=order[i])
        except InfeasibleError:
            continue
        if tried[indices[0]].sections != 1:
            continue
        got = _as_called(socket, order, tried, contexts, reload_tiles(socket, tried), collective_cycles)
        if sum(pk.call_cycles for pk in got) < sum(pk.call_cycles for pk in best):
            best = got
    return best


def _remap_side_by_side(socket: SocketSpec, order: list[FusedKernel], plans: list[PlacedKernel],
                        calls: list[LoopContext], kernels: tuple[PlacedKernel, ...], tiers: TierSplit, key: str,
                        collective_cycles: Callable[[Collective], float] | None, decode: bool) -> tuple[PlacedKernel, ...]:
    """``kernels`` or, when the step is shorter that way, the graph mapped again for its kernels to
    stay loaded side by side, their rooms per tile chosen by the step's total, or (a ``decode`` step)
    with its longest repeated kernel on fewer tiles than all (:func:`~.confined.remap_confined`)."""
    def mapped(kernel: FusedKernel, call: LoopContext, budget: UnitBudget) -> PlacedKernel:
        return map_kernel_cached(socket, kernel, tiers, key, call, budget)

    def scored(new_plans: list[PlacedKernel], contexts: list[LoopContext]) -> tuple[PlacedKernel, ...]:
        return _as_called(socket, order, new_plans, contexts, reload_tiles(socket, new_plans), collective_cycles)

    return remap_confined(socket, order, plans, calls, kernels, _calls_by_kind(order), mapped, scored, decode)


def _calls_by_kind(order: list[FusedKernel]) -> dict[int, list[int]]:
    """The indices of ``order``'s calls of each distinct kernel (by signature), in order of first
    call."""
    ids: dict[FusedKernel, int] = {}
    calls_of: dict[int, list[int]] = {}
    for i, kernel in enumerate(order):
        calls_of.setdefault(ids.setdefault(kernel.signature(), len(ids)), []).append(i)   # one hash a call
    return calls_of


def _take(room: list[list[int]], placed: PlacedKernel) -> None:
    """Take a one-tile kernel's units from the first tile of ``room`` (free PCUs and PMUs per tile)
    where they fit, as :mod:`.residency` loads it; a kernel on several tiles, or one that fits on no
    tile, evicts others and leaves the room as it was."""
    pcus, pmus = max(placed.pcus_per_tile, default=0), max(placed.pmus_per_tile, default=0)
    if sum(1 for p, q in zip(placed.pcus_per_tile, placed.pmus_per_tile, strict=True) if p or q) != 1:
        return
    for free in room:
        if free[0] >= pcus and free[1] >= pmus:
            free[0] -= pcus
            free[1] -= pmus
            return


def _as_called(socket: SocketSpec, order: list[FusedKernel], plans: list[PlacedKernel], calls: list[LoopContext],
               loads: tuple[Loads, ...], collective_cycles: Callable[[Collective], float] | None,
               ) -> tuple[PlacedKernel, ...]:
    """``plans`` (mapped for ``calls``) as the graph calls them, each charged the configuration of
    the tiles it ``loads`` it on (:func:`~.residency.reload_tiles`): none when it stays loaded."""
    # the collectives' waits read the kernel's collectives, whether the call is looped and its
    # data tiles: worked out once for the identical layers
    waits: dict[tuple[FusedKernel, bool, int], tuple[int, tuple[tuple[float, float], ...]]] = {}
    out = []
    for k, pk, call, tiles in zip(order, plans, calls, loads, strict=True):
        key = (k.signature(), call.pipelined, pk.n_tiles)
        wait = waits.get(key)
        if wait is None:
            wait = waits[key] = (_after(k, call, collective_cycles), _tails(pk.n_tiles, call))
        out.append(as_called(socket, pk, call, wait[0], not tiles, 0, wait[1], load_bytes(socket, pk, tiles)))
    return tuple(out)


def _after(kernel: FusedKernel, call: LoopContext, collective_cycles: Callable[[Collective], float] | None) -> int:
    """Cycles of the collectives that follow a call whatever its plan (those not overlapped; a
    looped call's wait for them is the next iteration's gate, in its plan's time already)."""
    if collective_cycles is None or call.pipelined:
        return 0
    return round(sum(collective_cycles(c) for c in kernel.collectives if not c.overlapped))


def _tails(n_tiles: int, call: LoopContext) -> tuple[tuple[float, float], ...]:
    """A call's overlapped collectives naming no operator, in order, as their cycles and their last
    data tile's share's, which goes after the call's last tile (a looped call's are in the next
    iteration's gate). Those naming their operator are in the plan's time (:mod:`.windows`)."""
    if call.pipelined or not n_tiles:
        return ()
    return tuple((t.cycles, t.share_cycles(n_tiles)) for t in call.overlap_tails)


def _call(socket: SocketSpec, kernel: FusedKernel, collective_cycles: Callable[[Collective], float] | None,
          staging_bytes: Callable[[Collective], int] | None = None, tiers: TierSplit | None = None) -> LoopContext:
    """A lone call of ``kernel``, with its overlapped collectives' cycles when they are known (the
    engine runs them one after the other on the socket's links), the bytes they stage in the
    activations' tier, and the windows of those naming an operator placed by its bytes' tiers."""
    if collective_cycles is None:
        return LONE_CALL
    overlapped = [c for c in kernel.collectives if c.overlapped and not c.after]
    overlap = sum(collective_cycles(c) for c in overlapped)
    staged = sum(staging_bytes(c) for c in overlapped) if staging_bytes is not None and overlap else 0
    windows = overlap_windows(socket, kernel, collective_cycles, staging_bytes, tiers)
    if not overlap and not windows:
        return LONE_CALL
    tails = tuple(overlap_tail(c, collective_cycles) for c in overlapped) if overlap else ()   # :mod:`.shares`
    return LoopContext(overlap_cycles=round(overlap), overlap_staged_bytes=staged, windows=windows,
                       overlap_tails=tails)


def clear_memo() -> None:
    """Forget every mapped kernel and every memoised piece of a mapping (tests that compare a cold
    mapping with a warm one; hardware edited in place)."""
    _memo.clear()
    clear_section_memo()
    division.clear_caches()
