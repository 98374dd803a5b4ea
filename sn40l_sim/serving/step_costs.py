"""Step timing for the serving model: a prefill, or one decode step, built, mapped and simulated.

:class:`StepTimer` is what the serving simulation calls for every prefill and decode step. It
builds the fused-kernel graph of the step (:func:`sn40l_sim.models.builder.build_graph`), places it
(:func:`sn40l_sim.mapper.map_graph`) and runs it in SimPy (:func:`~sn40l_sim.engine.run_graph.run_graph`).
Identical steps are memoised (DESIGN.md §3): a decode step is determined by its phase, batch and
cache length, so thousands of steps of a static decode graph cost little more than the distinct
ones. Collectives are memoised across steps too (same kind, bytes and group on idle links).

Examples
--------
DeepSeek-R1 on the 16-socket node, one decode step at batch 16 with a 128K cache:

>>> from sn40l_sim.hardware.loader import load_hardware
>>> from sn40l_sim.kvcache import make_policy
>>> from sn40l_sim.models.loader import load_model
>>> node = load_hardware("hw_configs/sn40l_node16.yaml")
>>> r1 = load_model("graphs/deepseek_r1.yaml")
>>> timer = StepTimer(node, r1, make_policy("full", {}), ParallelPlan(tp=16),
...                   ParallelPlan(tp=16, attention_dp=16))
>>> step = timer.decode_step(batch=16, kv_len=131072)
>>> {"mla", "ffn"} <= set(step.kernel_cycles), step.cycles == sum(step.kernel_cycles.values())
(True, True)
>>> timer.decode_step(16, 131072) is step, timer.stats["decode_runs"], timer.stats["decode_hits"]
(True, 1, 1)
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sn40l_sim.engine.collectives import CollectiveModel
from sn40l_sim.engine.phase import PhaseTiming, phase_timing
from sn40l_sim.engine.run_graph import EngineOptions, run_graph
from sn40l_sim.errors import InputError
from sn40l_sim.hardware.spec import NodeSpec
from sn40l_sim.ir import KernelGraph, ParallelPlan, Shape
from sn40l_sim.mapper.placement import MemoryPlacement, PlacedGraph
from sn40l_sim.mapper.stages import TierSplit


def _default_builder(model, shape, plan, policy, **options) -> KernelGraph:
    from sn40l_sim.models.builder import build_graph

    return build_graph(model, shape, plan, policy, **options)


def _default_mapper(node, graph, memory=None) -> PlacedGraph:
    from sn40l_sim.mapper import map_graph

    return map_graph(node, graph, memory)


class StepTimer:
    """Times prefills and decode steps of one model on one node under one KV policy.

    Parameters
    ----------
    node : NodeSpec
        The hardware.
    model : ModelSpec
        The model.
    policy : KVPolicy or None
        KV-cache policy (its extra prefill kernels enter the prefill graph).
    prefill_plan, decode_plan : ParallelPlan
        Parallel plans of the two phases.
    engine : EngineOptions
        Engine knobs (collective algorithm, chunking, call overhead).
    graph_builder, graph_mapper : callable, optional
        Replace :func:`build_graph` / :func:`map_graph` (tests).
    **graph_options
        Passed to the graph builder unchanged.

    Attributes
    ----------
    stats : dict
        Simulated and memoised calls per phase (``decode_runs``, ``decode_hits``, ...).
    """

    def __init__(self, node: NodeSpec, model: Any, policy: Any, prefill_plan: ParallelPlan | None,
                 decode_plan: ParallelPlan | None, *, engine: EngineOptions | None = None,
                 graph_builder: Callable[..., Any] | None = None,
                 graph_mapper: Callable[..., PlacedGraph] | None = None, **graph_options: Any) -> None:
        self.node = node
        self.model = model
        self.policy = policy
        self.prefill_plan = prefill_plan
        self.decode_plan = decode_plan
        self.engine = engine if engine is not None else EngineOptions()
        self.graph_builder = graph_builder or _default_builder
        self.graph_mapper = graph_mapper or _default_mapper
        self.graph_options = dict(graph_options)
        self.stats = {"prefill_runs": 0, "prefill_hits": 0, "decode_runs": 0, "decode_hits": 0}
        self._memo: dict[tuple[str, int, int, TierSplit | None], PhaseTiming] = {}
        self._collectives = CollectiveModel.from_node(node, self.engine.collective_algorithm)

    def prefill(self, prompt_len: int, memory: MemoryPlacement | None = None) -> PhaseTiming:
        """Timing of the prefill of one prompt of ``prompt_len`` tokens (batch 1), its tensors
        where ``memory`` placed them (default: all in the socket's first memory tier)."""
        _positive("prompt_len", prompt_len)
        return self._timed("prefill", 1, prompt_len, Shape("prefill", 1, prompt_len, 0),
                           self.prefill_plan, memory)

    def decode_step(self, batch: int, kv_len: int, memory: MemoryPlacement | None = None) -> PhaseTiming:
        """Timing of one decode step of ``batch`` sequences, each reading ``kv_len`` cached tokens,
        its tensors where ``memory`` placed them (default: all in the socket's first memory tier)."""
        _positive("batch", batch)
        _positive("kv_len", kv_len)
        return self._timed("decode", batch, kv_len, Shape("decode", batch, 0, kv_len),
                           self.decode_plan, memory)

    def placed(self, shape: Shape, memory: MemoryPlacement | None = None) -> PlacedGraph:
        """The placed graph of ``shape`` (built and mapped, not simulated), for inspection."""
        plan = self.prefill_plan if shape.phase == "prefill" else self.decode_plan
        graph = self.graph_builder(self.model, shape, plan, self.policy, **self.graph_options)
        if memory is None:
            return self.graph_mapper(self.node, graph)
        return self.graph_mapper(self.node, graph, memory)

    def _timed(self, phase: str, batch: int, length: int, shape: Shape, plan,
               memory: MemoryPlacement | None = None) -> PhaseTiming:
        split = memory.tiers() if memory is not None else None
        # a placement that keeps everything in the socket's first tier times like no placement at all
        if split == TierSplit.all_in(next(iter(self.node.socket.memory))):
            memory = split = None
        key = (phase, batch, length, split)
        if key in self._memo:
            self.stats[f"{phase}_hits"] += 1
            return self._memo[key]
        self.stats[f"{phase}_runs"] += 1
        placed = self.placed(shape, memory)
        run = run_graph(self.node, placed, self.engine, self._collectives)
        timing = phase_timing(run, phase=phase, batch=batch, prompt_len=shape.prompt_len,
                              kv_len=shape.kv_len, clock_hz=self.node.socket.clock_hz)
        self._memo[key] = timing
        return timing


def _positive(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InputError(f"{name} must be a positive integer, got {value!r}", field=name)
