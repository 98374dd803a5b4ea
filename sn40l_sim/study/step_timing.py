"""The step costs and memory placer of a point, bound to the real graph builder and mapper:
what :class:`~sn40l_sim.study.assemble.Assembly` hands the serving model, and what a notebook
or script times single steps with (``step_timer``, re-exported by :mod:`sn40l_sim.study.assemble`),
and the parallel plans and compiled prompt lengths a point's steps are timed at.
"""
from __future__ import annotations

from typing import Any

from sn40l_sim.engine.collectives import CollectiveModel
from sn40l_sim.engine.run_graph import EngineOptions
from sn40l_sim.engine.staging import lone_collective_cycles, lone_staging_bytes
from sn40l_sim.hardware.spec import NodeSpec
from sn40l_sim.ir import ParallelPlan
from sn40l_sim.kvcache.base import KVPolicy
from sn40l_sim.mapper import map_graph
from sn40l_sim.mapper.memory import place_memory
from sn40l_sim.models.builder import build_graph
from sn40l_sim.models.spec import ModelSpec
from sn40l_sim.serving.memory_fit import MemoryPlacer
from sn40l_sim.serving.step_costs import StepTimer
from sn40l_sim.study.experiment_files import mapped_at
from sn40l_sim.study.serving_section import prefill_lens  # noqa: F401 (imported from here by assemble)


def plan_of(phase_plan: Any) -> ParallelPlan:
    """The IR's :class:`ParallelPlan` of an experiment's ``parallel.<phase>`` section."""
    return ParallelPlan(phase_plan.tp, phase_plan.attention_dp)


def step_timer(node: NodeSpec, model: ModelSpec, policy: KVPolicy | None, prefill_plan: ParallelPlan | None,
               decode_plan: ParallelPlan | None, graph_options: dict[str, Any] | None = None,
               idle_units: str = "spend", hardware_field: str = "hardware", **timer_options: Any) -> StepTimer:
    """A :class:`StepTimer` with the real graph builder (bound to ``model``, ``policy`` and
    ``graph_options``) and the real mapper (bound to ``node``; a step's memory placement, when
    given, says which tier each tensor streams from; a kernel no tile can hold is an error at
    ``hardware_field``).

    :meth:`Assembly.step_timer` makes the one ``run`` uses for a point (engine options, context
    length, drafts from the experiment), and has an example.

    Parameters
    ----------
    node : NodeSpec
        The hardware.
    model : ModelSpec
        The model.
    policy : KVPolicy or None
        The KV policy (:func:`~sn40l_sim.kvcache.make_policy`); None: the full cache.
    prefill_plan, decode_plan : ParallelPlan or None
        The parallel plans of the two phases.
    graph_options : dict, optional
        The experiment's ``graph_options`` (``expert_loading``, ``routing_skew``, ``template``).
    idle_units : str
        The mapper's use of idle units, ``spend`` (default) or ``priced`` (``execution.idle_units``).
    hardware_field : str
        The experiment field naming ``node``'s file (``hardware`` or ``prefill_hardware``), where a
        kernel the mapper cannot place on its tiles is reported.
    **timer_options
        Passed to :class:`StepTimer` (``engine``, ``context_len``, ``graphs``, ``prefill_drafts``).

    Returns
    -------
    StepTimer
        Times prefills and decode steps (:class:`~sn40l_sim.engine.phase.PhaseTiming`).
    """
    options = dict(graph_options or {})
    # the compiler maps a looped kernel for its time per iteration, which waits on its collectives;
    # without engine options the timer runs the default engine (kernel looping on), so the kernels
    # are mapped for it: a mapping for unlooped calls run looped made a 4096-token Llama-70B step
    # 30% slower than a 4097-token one
    engine = timer_options.get("engine")
    if engine is None:
        engine = timer_options["engine"] = EngineOptions()
    looping = engine.kernel_looping
    algorithm = engine.collective_algorithm
    collectives = CollectiveModel.from_node(node, algorithm)
    # a step is a pure function of the node, the engine options, the graph and this: the disk
    # cache keys it so (the graph itself stands for the model, the policy and the graph options)
    priced = idle_units == "priced"
    disk_key = f"map_graph looping={looping} collective_algorithm={algorithm}" + (" idle_units=priced" if priced else "")
    return StepTimer(node, prefill_plan, decode_plan,
                     build=lambda shape, plan: build_graph(model, shape, plan, policy, **options),
                     place=lambda graph, memory=None: mapped_at(hardware_field, lambda: map_graph(
                         node, graph, memory, looping,
                         lone_collective_cycles(collectives, node, memory, engine.stage_collectives), priced,
                         lone_staging_bytes(collectives, engine.stage_collectives))),
                     disk_key=disk_key, **timer_options)


def memory_placer(node: NodeSpec, model: ModelSpec, order: tuple[str, ...] | None = None) -> MemoryPlacer:
    """:func:`~sn40l_sim.mapper.memory.place_memory` bound to ``node``, ``model`` and the tier
    ``order`` (default: the node's tiers, fastest first)."""
    def place(plan: ParallelPlan, kv_bytes: int, activation_bytes: int, kv_offload=None, priority=None):
        return place_memory(node, model, plan, kv_bytes, activation_bytes, order, kv_offload=kv_offload,
                            priority=priority)

    return place
