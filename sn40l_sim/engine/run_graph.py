"""Run a placed kernel graph on one socket in SimPy: kernels in dependency order, collectives on
the node's links, and the totals (cycles, busy time per resource, bytes per tier and link class).

Which socket is simulated, and why one is enough: the graph builder gives every kernel as the
shard of the busiest socket (``ir.py``), every socket of a tensor-parallel group runs
the same kernel at the same time, and every collective is a barrier that waits for the slowest
member. The busiest socket's compute therefore sets the step time, and simulating it alone is
exact for the time; the other sockets would only add idle time. Their part in the collectives is
not skipped: :class:`~sn40l_sim.engine.collectives.CollectiveModel` simulates every member's
transfers on the node's links.

Examples
--------
A decode attention kernel followed by an all-reduce of 1 MiB among the 16 sockets:

>>> from dataclasses import replace
>>> from sn40l_sim.hardware.loader import load_hardware
>>> from sn40l_sim.mapper import map_graph
>>> from sn40l_sim.mapper._examples import example_decode_kernel
>>> from sn40l_sim.ir import Collective, KernelGraph, Shape
>>> node = load_hardware("hw_configs/sn40l_node16.yaml")
>>> kernel = replace(example_decode_kernel(), collectives=(Collective("all_reduce", 2**20, 16),))
>>> graph = KernelGraph("toy", Shape("decode", 1, 0, 4096))
>>> graph.add(kernel)
>>> placed = map_graph(node, graph)
>>> run = run_graph(node, placed)
>>> model = CollectiveModel.from_node(node)
>>> coll, boundary = model.run(kernel.collectives[0]), model.boundary
>>> call = boundary.launch_cycles + boundary.barrier_cycles(kernel.shards)
>>> pk = placed.kernels[0]     # called step after step, it keeps its configuration loaded
>>> formula = call + pk.cycles - pk.overhead_cycles + coll.cycles    # launch, barrier, its tiles, the collective
>>> 0 <= run.cycles - formula <= 8    # the stream's chunks (8) each end on a whole cycle
True
>>> run.tier_bytes["hbm"] == placed.kernels[0].tier_bytes["hbm"] + run.link_bytes["p2p_staged"]
True
"""
from __future__ import annotations

from dataclasses import dataclass

import simpy

from sn40l_sim.engine.boundary import BoundaryModel
from sn40l_sim.engine.collectives import CollectiveModel
from sn40l_sim.engine.kernel_costs import KernelCosts
from sn40l_sim.engine.kernel_process import KernelRecord
from sn40l_sim.engine.resources import SocketResources
from sn40l_sim.engine.trace import TraceEvent
from sn40l_sim.engine.units import KernelEntry, chain_units, run_units, start_kernels
from sn40l_sim.hardware import figures
from sn40l_sim.hardware.spec import NodeSpec, SocketSpec
from sn40l_sim.mapper.loops import Loop, find_loops
from sn40l_sim.mapper.placement import PlacedGraph, PlacedKernel
from sn40l_sim.mapper.read_ahead import CHUNKS_PER_SECTION
from sn40l_sim.mapper.residency import call_residency, load_bytes


@dataclass(frozen=True)
class EngineOptions:
    """Knobs of the engine (none of them is a hardware number).

    Attributes
    ----------
    collective_algorithm : {"auto", "ring", "direct", "tree"}
        ``auto`` takes the faster algorithm for each collective.
    chunks_per_section : int
        Most chunks a kernel section's tiles are grouped into (events per kernel are bounded by
        this, whatever the sequence length). Totals do not depend on it, but for a loop
        iteration's read-ahead, which moves whole chunks; the mapper scores loops for the default
        (:mod:`sn40l_sim.mapper.read_ahead`).
    kernel_boundaries : bool
        Charge each kernel call its launch, barrier and configuration load (:mod:`.boundary`);
        off, only the streaming model remains (tests of it, and "what if calls were free").
    kernel_looping : bool
        Run consecutive calls of the same kernel (:func:`~sn40l_sim.mapper.loops.find_loops`) as
        one call with a pipelined outer loop: the boundary once, each iteration streaming while
        the previous one finishes its collectives (a deployment option; SN40L runs decode so).
    stage_collectives : bool
        Whether collectives read what they send from, and write what they receive to, the
        socket's memory (sharing its bandwidth with the kernels' streams).
    """

    collective_algorithm: str = "auto"
    chunks_per_section: int = CHUNKS_PER_SECTION
    kernel_boundaries: bool = True
    kernel_looping: bool = True
    stage_collectives: bool = True


@dataclass(frozen=True)
class GraphRun:
    """The outcome of one simulated graph on the simulated socket."""

    cycles: int
    records: tuple[KernelRecord, ...]
    busy_cycles: dict[str, int]
    tier_bytes: dict[str, int]
    link_bytes: dict[str, int]
    events: tuple[TraceEvent, ...]
    #: the kernel loops run as loops (empty without kernel looping)
    loops: tuple[Loop, ...] = ()
    #: configuration loads the graph pays on top of ``cycles`` when it is called right after another
    #: graph took every unit (:func:`~sn40l_sim.mapper.residency.switch_loads`): each is a call's
    #: first section loaded before it streams, on the critical path as every load is
    switch_load_cycles: int = 0


def run_graph(node: NodeSpec, placed: PlacedGraph, options: EngineOptions = EngineOptions(),
              collectives: CollectiveModel | None = None, socket: int = 0) -> GraphRun:
    """Simulate ``placed`` on socket ``socket`` of ``node``.

    Parameters
    ----------
    node : NodeSpec
        The hardware (clock, memory tiers, links, calibrated overheads).
    placed : PlacedGraph
        The mapper's output: every kernel placed on one socket, in the graph's dependency order.
    options : EngineOptions
        Engine knobs.
    collectives : CollectiveModel, optional
        Shared (memoising) collective model; built from ``node`` if not given.
    socket : int
        Label of the simulated socket in records and events.
    """
    if collectives is None:
        collectives = CollectiveModel.from_node(node, options.collective_algorithm)
    env = simpy.Environment()
    # collectives move activations: they stage through the activations' tier
    # where each kernel's bytes live, as the mapper placed them (none: the socket's first tier)
    tiers = placed.memory.tiers() if placed.memory.order else None
    staging = tiers.activations if tiers is not None else None
    res = SocketResources.build(env, node, socket, staging_tier=staging)
    res.lone_streams = True   # nothing but the kernels below and their collectives uses its channels
    boundary = collectives.boundary or BoundaryModel.from_node(node, collectives.table)
    graph = placed.graph
    loops = find_loops([pk.kernel for pk in placed.kernels], placed.graph) if options.kernel_looping else ()
    iteration = {i: i - loop.first for loop in loops for i in range(loop.first, loop.stop)}
    loads, switched = call_residency(node.socket, placed.kernels)
    entries = []
    costs_of: dict[tuple, KernelCosts] = {}
    for i, pk in enumerate(placed.kernels):
        kernel = pk.kernel
        record = KernelRecord(kernel.name, kernel.kind, kernel.layer, pk, tier_bytes=dict.fromkeys(res.memory, 0),
                              iteration=iteration.get(i, 0), config_resident=not loads[i],
                              config_load_cycles=_first_load(node.socket, pk, loads[i], options.kernel_boundaries))
        # the layers of a model share one placed kernel's stages (the mapper's memo re-labels it):
        # their costs, which read nothing else of the kernel than the key, are computed once
        key = (id(pk.stages), pk.sections, pk.n_tiles, pk.fill_cycles, pk.section_config_bytes,
               tuple(pk.tier_bytes.items()), pk.kernel.shards)
        costs = costs_of.get(key)
        if costs is None:
            costs = costs_of[key] = KernelCosts.from_placed(
                pk, node.socket, boundary if options.kernel_boundaries else None, options.chunks_per_section,
                options.stage_collectives, tiers)
        preds = tuple(sorted(graph.predecessors(kernel.name))) if kernel.name in graph else ()
        entries.append(KernelEntry(record, costs, preds))
    records = tuple(entry.record for entry in entries)
    # after another graph, a call loads its configuration on the tiles its steady state loads it
    # on and on those it finds it on in the steady state: the load of all of them, less the steady one
    switch = sum(_first_load(node.socket, entry.record.placed, load + s, options.kernel_boundaries)
                 - entry.record.config_load_cycles for entry, load, s in zip(entries, loads, switched, strict=True) if s)
    units = chain_units(entries, loops)
    if units is not None:
        return _summarise(run_units(node, res, entries, units, collectives), records, res, socket, loops, switch)
    start_kernels(env, res, entries, collectives)
    env.run()
    return _summarise(env.now, records, res, socket, loops, switch)


def _first_load(socket: SocketSpec, pk: PlacedKernel, tiles: tuple[int, ...], boundaries: bool) -> int:
    """Cycles of loading ``pk``'s first section on ``tiles`` (:func:`~sn40l_sim.mapper.residency.load_bytes`;
    every tile: the load :class:`KernelCosts` hold), none without kernel boundaries as there."""
    if not boundaries or not pk.section_config_bytes:
        return 0
    return figures.config_cycles(socket, load_bytes(socket, pk, tiles))


def _summarise(cycles: int, records: tuple[KernelRecord, ...], res: SocketResources, socket: int,
               loops: tuple[Loop, ...], switch_load_cycles: int) -> GraphRun:
    runs = [run for r in records for run in r.collectives]
    busy = {
        "compute": sum(r.compute_busy_cycles for r in records),
        **{tier: channel.busy_cycles for tier, channel in res.memory.items()},
        "tln": res.tln.busy_cycles,
        "p2p": sum(run.end - run.start for run in runs),
        "overhead": sum(r.launch_cycles + r.barrier_cycles + r.config_cycles for r in records),
        "fill": sum(r.fill_cycles for r in records),
    }
    tiers = {tier: channel.bytes_moved for tier, channel in res.memory.items()}
    links = {
        "p2p": sum(run.result.link_bytes for run in runs),
        "p2p_sent": sum(run.result.sent_bytes for run in runs),
        "p2p_staged": sum(run.staged_bytes for run in runs),
        "tln": res.tln.bytes_moved,
        "mesh": sum(r.placed.mesh_bytes for r in records),
    }
    events = []
    for r in records:
        events.append(TraceEvent(r.name, r.kind, socket, r.start, r.end, r.layer, "kernel"))
        if r.stream_start > r.start:
            events.append(TraceEvent(r.name, r.kind, socket, r.start, r.stream_start, r.layer, "setup"))
        events.append(TraceEvent(r.name, r.kind, socket, r.stream_start, r.stream_end, r.layer, "stream"))
        for run in r.collectives:
            label = f"{r.name}.{run.collective.name or run.collective.kind}"
            moved = (("bytes", run.collective.bytes), ("group", run.collective.group),
                     ("sent_bytes", run.result.sent_bytes), ("link_bytes", run.result.link_bytes),
                     ("staged_bytes", run.staged_bytes))
            events.append(TraceEvent(label, run.collective.kind, socket, run.start, run.end, r.layer,
                                     "collective", moved))
    for loop in loops:
        first, last = records[loop.first], records[loop.stop - 1]
        events.append(TraceEvent(f"loop {first.name}..{last.name} x{loop.iterations}", first.kind, socket,
                                 first.start, last.end, None, "loop", (("iterations", loop.iterations),)))
    return GraphRun(cycles, records, busy, tiers, links, tuple(events), loops, switch_load_cycles)
