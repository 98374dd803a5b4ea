"""A floor under the plan of one tiling of a kernel, before any allocation: :func:`tiling_floor`.

The kernel mapper (:func:`~sn40l_sim.mapper.kernel.best_plan`) tries every tiling (``n_tiles``
data tiles) of every tile choice, because a kernel's cycles against its tiling can have two
minima. Allocating, placing and routing a tiling's sections is most of the mapper's time, so each
tiling first gets a floor from its sections' stages alone; a tiling whose floor exceeds the best
plan found so far cannot win (nor tie: ties need an equal objective) and is not planned. The
floor only decides what is skipped, never what is chosen.

What it rests on, per section (:func:`~sn40l_sim.mapper.allocate.stage_floor` gives each compute
stage's part):

* a memory stage takes exactly its cycles per data tile; a compute stage on ``q`` PCUs per tile
  at least ``max(f, V / (q x chip_tiles))`` (``f`` its cycles on the most PCUs and PMUs it may
  use, ``V`` the least PCU-cycles of its work), with ``q`` between its fewest and most PCUs and
  the stages' PCUs adding up to at most a tile's;
* the section streams ``fill + n_tiles x C`` cycles (``C`` its slowest stage) and the fill is at
  least the memory stages' cycles, the memory latency and, along any one path of the stage graph
  (:mod:`.fill_path`; the longest by the stages' floors, a chain's every stage), its stages' cycles
  and fills and drains and a control hop per hand-over, less ``C``; a looped kernel's iteration at least its compute chain after the gate or
  its stream (see :mod:`.read_ahead`);
* its configuration covers the PCUs, at least the PMUs holding its buffers, and every switch of
  the tiles in use; a kernel called ``L`` times in a row pays a single section's ``1 / L`` times;
* a call whose collectives overlap it ends no sooner than its first section's configuration, fill
  and first data tile, then the collectives (:mod:`.kernel_cost`): where they outlast the kernel,
  this is the floor that binds.

Once a tiling's sections are allocated, :func:`allocated_floor` knows their stages' cycles and
units exactly (only the routes are still to come) and can skip the tiling before it is placed.

The stages' PCUs are the unknowns. For any weights ``mu`` (the share of the slowest stage each
stage stands for) and price ``lam`` of a PCU, the least over each stage's PCUs alone of its
weighted cycles plus the priced PCUs, less ``lam`` times a tile's PCUs, is below the least over
every allocation that fits (weak duality), so every such sum is a floor; the weights and price are
chosen where the PCU budget would balance the stages.

Examples
--------
>>> from sn40l_sim.mapper._examples import example_socket, example_decode_kernel
>>> from sn40l_sim.mapper.kernel import best_plan
>>> from sn40l_sim.mapper.stages import section_stages
>>> from sn40l_sim.mapper.tier_split import TierSplit
>>> socket, kernel, tiers = example_socket(), example_decode_kernel(), TierSplit.all_in("hbm")
>>> plan = best_plan(socket, kernel, tiers)
>>> stages, streams = section_stages(socket, kernel.operators, plan.n_tiles, tiers, plan.chip_tiles)
>>> sections = [section_floor(socket, stages, streams, plan.chip_tiles)]
>>> tiling_floor(socket, sections, plan.n_tiles, plan.chip_tiles) <= plan.objective[0]
True
"""
from __future__ import annotations

import math
from itertools import pairwise
from typing import TYPE_CHECKING, NamedTuple

from sn40l_sim.hardware import figures
from sn40l_sim.hardware.spec import SocketSpec
from sn40l_sim.hardware.units.network import mesh_latency_cycles
from sn40l_sim.mapper.allocate import Allocation, StageFloor, stage_floor
from sn40l_sim.mapper.budget import NO_LIMITS, UnitBudget
from sn40l_sim.mapper.fill_path import compute_graph, longest_path
from sn40l_sim.mapper.keys import IdentityMemo

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sn40l_sim.mapper.stages import StageWork, Stream

#: the floor is lowered by this share (and one cycle per section) so that float rounding in the
#: plans' arithmetic (``ceil(x - 1e-9)`` and the like) can never put a plan below it
_SLACK = 1e-6


def _least(floors: Sequence[StageFloor], weights: Sequence[float], price: float, chip_tiles: int) -> float:
    """The least over each stage's PCUs ``q`` of ``weight x max(f, V / (q x chip_tiles)) + price x q``."""
    total = 0.0
    for fl, w in zip(floors, weights, strict=True):
        q = fl.fewest_pcus
        if fl.work > 0 and fl.most_pcus > 0:
            # convex in q: the unconstrained least (where the work's share stops binding at most)
            # moved into the allowed range
            best = fl.work / (fl.cycles * chip_tiles) if fl.cycles > 0 else math.inf
            if price > 0:
                best = min(best, math.sqrt(w * fl.work / (chip_tiles * price)))
            q = min(max(best, q), fl.most_pcus)
        total += w * (max(fl.cycles, fl.work / (q * chip_tiles)) if q > 0 else fl.cycles) + price * q
    return total


def _balanced(floors: Sequence[StageFloor], pcus: int, chip_tiles: int, least: float) -> float:
    """The slowest stage's cycles (at least ``least``) when each stage takes the PCUs bringing its
    work to them, with every PCU of a tile in use: where the weights and price are chosen."""
    target = least
    for _ in range(8):
        busy = [fl.work > fl.fewest_pcus * chip_tiles * target for fl in floors]
        rest = pcus - sum(fl.fewest_pcus for fl, b in zip(floors, busy, strict=True) if not b)
        if not any(busy) or rest <= 0:
            return target
        need = sum(fl.work for fl, b in zip(floors, busy, strict=True) if b) / (chip_tiles * rest)
        if need <= target:
            return target
        target = need
    return target


def _chain_floor(floors: Sequence[StageFloor], n_tiles: int, pcus: int, chip_tiles: int, slowest: float,
                 pcu_price: float) -> float:
    """A floor under ``sum of the compute stages' cycles + (n_tiles - 1) x their slowest + pcu_price
    x their PCUs``, the slowest being at least ``slowest`` (see the module docstring)."""
    ones = [1.0] * len(floors)
    # weights all on the known floor of the slowest, PCUs unpriced beyond their configuration
    plain = _least(floors, ones, pcu_price, chip_tiles) + (n_tiles - 1) * slowest
    if n_tiles <= 1 or not floors:
        return plain
    target = _balanced(floors, pcus, chip_tiles, slowest)
    busy = [fl.work > fl.fewest_pcus * chip_tiles * target for fl in floors]
    work = sum(fl.work for fl, b in zip(floors, busy, strict=True) if b)
    if work <= 0:
        return plain
    # where every busy stage sits at the target on just enough PCUs, the stationarity conditions
    # give the price and the weights
    price = max(pcu_price, (n_tiles - 1 + sum(busy)) * target * target * chip_tiles / work)
    mu = [max(0.0, price * fl.work / (target * target * chip_tiles) - 1) / (n_tiles - 1) if b else 0.0
          for fl, b in zip(floors, busy, strict=True)]
    scale = sum(mu)
    if scale > 1:
        mu = [m / scale for m in mu]
    weights = [1 + (n_tiles - 1) * m for m in mu]
    dual = (_least(floors, weights, price, chip_tiles) - (price - pcu_price) * pcus
            + (n_tiles - 1) * (1 - sum(mu)) * slowest)
    return max(plain, dual)


class SectionFloor(NamedTuple):
    """What a section's stages alone say of any plan of it (:func:`section_floor`)."""

    #: each compute stage's floor
    stages: tuple[StageFloor, ...]
    #: the memory stages' cycles per data tile (their streams' shares, unrounded), together and the
    #: slowest
    memory_cycles: float
    memory_slowest: float
    #: the slowest compute stage's floor (its own, or the section's PCU work over every PCU)
    compute: float
    #: the fill's fixed part: memory latency, hand-overs, the stages' fills and drains
    latency: int
    #: the slowest memory tier's stream over the whole section
    stream: int
    #: configuration bytes of its fewest PMUs and of every switch of the tiles in use
    fixed_config: float
    #: the compute stages (positions in ``stages``) on the longest path of the section's stage
    #: graph by their floors (:mod:`.fill_path`): the fill is at least theirs; every stage of a chain
    path: tuple[int, ...] = ()

    def on_path(self) -> list[StageFloor]:
        """The floors of the stages on :attr:`path`."""
        return [self.stages[k] for k in self.path]

    def off_path_pcus(self) -> int:
        """The fewest PCUs of the stages off :attr:`path`, which the fill's floor does not count."""
        on = set(self.path)
        return sum(fl.fewest_pcus for k, fl in enumerate(self.stages) if k not in on)


#: stage floors by (the stage's identity, tiles in use, its PCU and PMU limits): equal sections of
#: other kernels (a run's points) ask again for the floors of the same stages (stages are shared
#: objects when memoised, :mod:`.stages`; a third of a cold validate's asks)
_stage_floor_memo: IdentityMemo[StageFloor] = IdentityMemo()


def _stage_floor(socket: SocketSpec, stage: StageWork, chip_tiles: int, budget: UnitBudget) -> StageFloor:
    """:func:`~sn40l_sim.mapper.allocate.stage_floor` through the memo. Of the socket it reads what
    the stage's tiling was memoised under (its PCU, PMU and tile, :func:`~.keys.tiling_key`), and
    of the budget only the stage's limits."""
    tile = socket.tile
    limits = (chip_tiles, budget.pcus_for(stage.name, tile.pcus), budget.pmus_for(stage.name, tile.pmus))
    return _stage_floor_memo.get(stage, limits, lambda: stage_floor(socket, stage, chip_tiles, budget))


def clear_stage_floor_memo() -> None:
    """Forget every memoised stage floor."""
    _stage_floor_memo.clear()


def section_floor(socket: SocketSpec, stages: Sequence[StageWork], streams: Sequence[Stream], chip_tiles: int,
                  budget: UnitBudget = NO_LIMITS, path: tuple[int, ...] | None = None) -> SectionFloor:
    """The parts of :func:`tiling_floor` that one section's stages and streams give, whatever the
    kernel's calls; ``path`` the compute stages (positions among them) known to lie on one path of
    the section's graph, when not the longest path the ``streams`` give."""
    pcus = budget.tile_pcus(socket.tile.pcus)
    floors = tuple(_stage_floor(socket, s, chip_tiles, budget) for s in stages if not s.is_memory)
    memory = [s for s in stages if s.is_memory]
    compute = max([fl.cycles for fl in floors] + [sum(fl.work for fl in floors) / (chip_tiles * pcus)] + [0])
    # the fill is at least any one path's stages and hand-overs (each at least a control hop): the
    # longest by the stages' floors, every stage of a chain
    hop = mesh_latency_cycles(socket.tile.control_network, 1)
    _, edges = compute_graph(stages, streams)
    if path is None:
        _, path = longest_path([fl.cycles + fl.latency for fl in floors], [(a, b, hop) for a, b in edges])
    steps = set(pairwise(path))
    latency = (max([s.latency_cycles for s in memory] + [0])
               + hop * sum(1 for e in edges if e in steps) + sum(floors[k].latency for k in path))
    c = socket.configuration
    fixed = chip_tiles * (sum(fl.pmus for fl in floors) * c.pmu_bytes
                          + figures.switches_per_tile(socket) * c.switch_bytes)
    return SectionFloor(floors, sum(s.paced_cycles for s in memory), max([s.paced_cycles for s in memory] + [0.0]),
                        compute, latency, max([s.stream_cycles for s in memory] + [0]), fixed, path)


def _path_floor(sec: SectionFloor, n_tiles: int, pcus: int, chip_tiles: int, slowest: float,
                pcu_price: float) -> float:
    """:func:`_chain_floor` of the stages on the section's path (the fill counts no others) and
    the configuration of the others' fewest PCUs: a relaxation (their PCUs then leave the path's
    more), so still a floor."""
    return (_chain_floor(sec.on_path(), n_tiles, pcus, chip_tiles, slowest, pcu_price)
            + pcu_price * sec.off_path_pcus())


def _overlapped(config: float, first: float, slowest: float, sections: int, overlap_cycles: int) -> float:
    """A floor under the objective of a call whose overlapped collectives take ``overlap_cycles``
    from its first data tile out (:mod:`.kernel_cost`): the first section's configuration
    (``config``, as the call pays it), its fill and first data tile, then the collectives. Its fill
    and first data tile are at least ``first`` (every stage once, the fills and drains, the
    hand-overs, the memory latency); of several sections the kernel's fill is their mean, so the
    first one's counts one ``sections``-th, and its first data tile (``slowest`` at least) whole."""
    if sections > 1:
        first = first / sections + (1 - 1 / sections) * slowest
    return config + first + overlap_cycles


def tiling_floor(socket: SocketSpec, sections: Sequence[SectionFloor], n_tiles: int, chip_tiles: int,
                 budget: UnitBudget = NO_LIMITS, iterations: float = 1, pipelined: bool = False,
                 gate_cycles: int = 0, overlap_cycles: int = 0) -> float:
    """A value the objective of the plan of one tiling (``n_tiles`` data tiles on ``chip_tiles``
    tiles within ``budget``) does not go below, from its sections' :func:`section_floor` (see the
    module docstring); ``iterations``, ``pipelined``, ``gate_cycles`` and ``overlap_cycles`` say
    how the kernel is called (:class:`~sn40l_sim.mapper.kernel_cost.LoopContext`)."""
    pcus = budget.tile_pcus(socket.tile.pcus)
    # configuration cycles per byte, a single section's shared by consecutive calls
    per_byte = socket.clock_hz / socket.calibrated.config_load_bytes_per_s / (iterations if len(sections) == 1 else 1)
    pcu_price = chip_tiles * socket.configuration.pcu_bytes * per_byte
    total = overlapped = 0.0
    for index, sec in enumerate(sections):
        fixed = max(0.0, sec.fixed_config * per_byte - 1)
        least_config = fixed + pcu_price * sum(fl.fewest_pcus for fl in sec.stages)
        if index == 0 and overlap_cycles and not pipelined:
            # its configuration, then every stage once (a compute stage at least its floor's
            # cycles), the fixed part of the fill, and the collectives
            first = sec.memory_cycles + sec.latency + sum(fl.cycles for fl in sec.on_path())
            overlapped = _overlapped(least_config, first, max(sec.compute, sec.memory_slowest), len(sections),
                                     overlap_cycles)
        if pipelined:
            # the iteration (:mod:`.read_ahead`) ends no sooner than its stream, nor than its chain
            # after the gate, which elapses while the first of several sections' configuration loads
            chain = _path_floor(sec, n_tiles, pcus, chip_tiles, sec.compute, pcu_price)
            gate = gate_cycles if index == 0 else 0
            if len(sections) == 1:
                head = gate + fixed + chain
            else:
                # the gate elapses while the whole configuration loads, its PCUs' part too: the
                # chain after the gate pays no PCU price (the price is configuration, not compute)
                bare = _path_floor(sec, n_tiles, pcus, chip_tiles, sec.compute, 0.0) if gate else 0.0
                head = max(gate + bare, fixed + chain)
            total += max(sec.stream + least_config, head + sec.latency)
        else:
            slowest = max(sec.compute, sec.memory_slowest)
            chain = _path_floor(sec, n_tiles, pcus, chip_tiles, slowest, pcu_price)
            total += max(n_tiles * slowest + least_config, sec.memory_cycles + sec.latency + chain + fixed)
    return max(total, overlapped) * (1 - _SLACK) - len(sections)


def _off_path(stages: Sequence[StageWork], streams: Sequence[Stream], alloc: Allocation, hand_over: int) -> int:
    """Cycles of the compute stages and hand-overs (a control hop each) off the longest path of
    the section's stage graph as ``alloc`` gives them: none for a chain."""
    compute, edges = compute_graph(stages, streams)
    divisions = alloc.divisions or (None,) * len(stages)
    weights = [alloc.cycles[i] + (divisions[i].latency_cycles if divisions[i] is not None else 0) for i in compute]
    longest, _ = longest_path(weights, [(a, b, hand_over) for a, b in edges])
    return sum(weights) + hand_over * len(edges) - longest


def allocated_floor(socket: SocketSpec, sections: Sequence[tuple[Sequence[StageWork], Sequence[Stream], Allocation]],
                    n_tiles: int, iterations: float = 1, pipelined: bool = False, gate_cycles: int = 0,
                    overlap_cycles: int = 0) -> float:
    """A floor under the objective of one tiling whose sections are allocated but not yet placed
    and routed (``(stages, streams, allocation)`` each): the stages' cycles and the configuration
    are known; the mesh can only slow the slowest stage, and a hand-over and a memory stream's
    head take at least a control hop and the tier's latency."""
    hand_over = mesh_latency_cycles(socket.tile.control_network, 1)
    configs = [figures.config_cycles(socket, figures.config_bytes(socket, sum(alloc.pcus), sum(alloc.pmus),
                                                                  alloc.chip_tiles)) for _, _, alloc in sections]
    reload = configs[0] / iterations if len(configs) == 1 else sum(configs)
    total = overlapped = 0.0
    for index, (stages, streams, alloc) in enumerate(sections):
        hand_overs = sum(1 for s in streams if not stages[s.src].is_memory and not stages[s.dst].is_memory)
        # the fill counts the stages and hand-overs on its longest path only (:mod:`.fill_path`)
        latency = (alloc.latency_cycles + hand_over * hand_overs - _off_path(stages, streams, alloc, hand_over)
                   + max([s.latency_cycles for s in stages if s.is_memory] + [0]))
        if pipelined:
            compute = [c for c, s in zip(alloc.cycles, stages, strict=True) if not s.is_memory]
            slowest = max(compute + [0])
            chain = max(n_tiles * slowest, sum(compute) + latency + (n_tiles - 1) * slowest)
            stream = max([s.stream_cycles for s in stages if s.is_memory] + [0])
            # of several sections, the gate elapses while the first one's configuration loads
            gate = (gate_cycles if len(sections) == 1 else max(0, gate_cycles - configs[0])) if index == 0 else 0
            total += max(stream, gate + chain)
        else:
            # a memory stream's share of a data tile unrounded, as the plan streams it
            paced = [s.paced_cycles if s.is_memory else c for s, c in zip(stages, alloc.cycles, strict=True)]
            slowest = max(paced, default=0)
            total += max(n_tiles * slowest, sum(paced) + latency + (n_tiles - 1) * slowest)
            if index == 0 and overlap_cycles:
                config = configs[0] / iterations if len(configs) == 1 else configs[0]
                overlapped = _overlapped(config, sum(paced) + latency, slowest, len(sections), overlap_cycles)
    return max(total + reload, overlapped) * (1 - _SLACK) - len(sections)
