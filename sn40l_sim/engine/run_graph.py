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
>>> coll = CollectiveModel.from_node(node).run(kernel.collectives[0])
>>> run.cycles == placed.kernels[0].cycles + coll.cycles    # the mapper's formula, then the collective
True
>>> run.tier_bytes["hbm"] == placed.kernels[0].tier_bytes["hbm"] + run.link_bytes["p2p_staged"]
True
"""
from __future__ import annotations

from dataclasses import dataclass

import simpy

from sn40l_sim.engine.collectives import CollectiveModel
from sn40l_sim.engine.kernel_process import KernelCosts, KernelRecord, run_kernel
from sn40l_sim.engine.resources import SocketResources
from sn40l_sim.engine.trace import TraceEvent
from sn40l_sim.hardware import figures
from sn40l_sim.hardware.spec import NodeSpec
from sn40l_sim.mapper.placement import PlacedGraph


@dataclass(frozen=True)
class EngineOptions:
    """Knobs of the engine (none of them is a hardware number).

    Attributes
    ----------
    collective_algorithm : {"auto", "ring", "direct"}
        ``auto`` takes the faster algorithm for each collective.
    chunks_per_section : int
        Most chunks a kernel section's tiles are grouped into (events per kernel are bounded by
        this, whatever the sequence length; totals do not depend on it).
    add_call_overhead : bool
        Whether the engine charges ``calibrated.kernel_call_overhead_s`` to every kernel call.
        The mapper's ``PlacedKernel.cycles`` includes the same overhead, but the engine never
        reads ``cycles``: it rebuilds the kernel's time from its parts, so it is counted once.
    stage_collectives : bool
        Whether collectives read what they send from, and write what they receive to, the
        socket's memory (sharing its bandwidth with the kernels' streams).
    """

    collective_algorithm: str = "auto"
    chunks_per_section: int = 8
    add_call_overhead: bool = True
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
    staging = placed.memory.tiers().activations if placed.memory.order else None
    res = SocketResources.build(env, node, socket, staging_tier=staging)
    overhead = (figures.cycles(node.socket.calibrated.kernel_call_overhead_s, node.socket)
                if options.add_call_overhead else 0)
    graph = placed.graph.graph
    done: dict[str, simpy.Event] = {}
    records = []
    for pk in placed.kernels:
        kernel = pk.kernel
        record = KernelRecord(kernel.name, kernel.kind, kernel.layer, pk, tier_bytes=dict.fromkeys(res.memory, 0))
        costs = KernelCosts.from_placed(pk, overhead, options.chunks_per_section, options.stage_collectives)
        preds = [done[p] for p in sorted(graph.predecessors(kernel.name))] if kernel.name in graph else []
        done[kernel.name] = env.process(_after(env, preds, run_kernel(res, record, costs, collectives)))
        records.append(record)
    env.run()
    return _summarise(env.now, tuple(records), res, socket)


def _after(env: simpy.Environment, preds: list, body):
    if preds:
        yield env.all_of(preds)
    yield env.process(body)


def _summarise(cycles: int, records: tuple[KernelRecord, ...], res: SocketResources, socket: int) -> GraphRun:
    runs = [run for r in records for run in r.collectives]
    busy = {
        "compute": sum(r.compute_busy for r in records),
        **{tier: channel.busy_cycles for tier, channel in res.memory.items()},
        "tln": res.tln.busy_cycles,
        "p2p": sum(run.end - run.start for run in runs),
        "overhead": sum(r.overhead_cycles + r.reconfig_cycles for r in records),
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
            events.append(TraceEvent(label, run.collective.kind, socket, run.start, run.end, r.layer,
                                     "collective"))
    return GraphRun(cycles, records, busy, tiers, links, tuple(events))
