"""Step costs for the serving model: a prefill, or one decode step, built, mapped and simulated.

:class:`StepCosts` is the small protocol the serving simulation asks for every prefill and decode
step (and for the activation bytes of a step's graph, which size the memory). :class:`StepTimer`
is the real one: it builds the fused-kernel graph of the step with the builder it was given, places
it with the mapper it was given, and runs it in SimPy (:func:`~sn40l_sim.engine.run_graph.run_graph`).
The study layer's assembly step (:func:`sn40l_sim.study.assemble.step_timer`) hands it
:func:`sn40l_sim.models.builder.build_graph` and :func:`sn40l_sim.mapper.map_graph`; tests hand it
stand-ins, or use :class:`~sn40l_sim.serving.fixed_costs.FixedStepCosts` instead.

A step streams its tensors from the memory tiers a placement put them in (``memory=``, a
:class:`~sn40l_sim.mapper.placement.MemoryPlacement`; by default all in the socket's first tier).

Identical steps are memoised (docs/design.md §3): a decode step is determined by its phase, batch,
cache length, speculative drafts (:attr:`~sn40l_sim.ir.Shape.drafts`: a verify step of ``k``
drafts runs the main model over ``k + 1`` rows per sequence and the draft model ``k`` times) and
the tiers its tensors live in, so thousands of steps of a static decode graph cost little more than the distinct
ones. Each graph is built once per shape and shared by the memory sizing and the timing.
Collectives are memoised across steps too (same kind, bytes and group on idle links).

Examples
--------
DeepSeek-R1 on the 16-socket node, one decode step at batch 16 with a 128K cache:

>>> from sn40l_sim.hardware.loader import load_hardware
>>> from sn40l_sim.kvcache import make_policy
>>> from sn40l_sim.mapper import map_graph
>>> from sn40l_sim.models.builder import build_graph
>>> from sn40l_sim.models.loader import load_model
>>> node = load_hardware("hw_configs/sn40l_node16.yaml")
>>> r1, full = load_model("graphs/deepseek_r1.yaml"), make_policy("full", {})
>>> timer = StepTimer(node, ParallelPlan(tp=16), ParallelPlan(tp=16, attention_dp=16),
...                   build=lambda shape, plan: build_graph(r1, shape, plan, full),
...                   place=lambda graph: map_graph(node, graph))
>>> step = timer.decode_step(batch=16, kv_len=131072)
>>> {"mla", "ffn"} <= set(step.kernel_cycles), step.cycles == sum(step.kernel_cycles.values())
(True, True)
>>> timer.decode_step(16, 131072) is step, timer.stats["decode_runs"], timer.stats["decode_hits"]
(True, 1, 1)
"""
from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import Protocol

from sn40l_sim.engine.breakdown import byte_seconds
from sn40l_sim.engine.collectives import CollectiveModel
from sn40l_sim.engine.phase import PhaseTiming, phase_timing
from sn40l_sim.engine.run_graph import EngineOptions, run_graph
from sn40l_sim.errors import InputError
from sn40l_sim.hardware.spec import NodeSpec
from sn40l_sim.ir import KernelGraph, ParallelPlan, Shape
from sn40l_sim.mapper import disk_cache
from sn40l_sim.mapper.placement import MemoryPlacement, PlacedGraph
from sn40l_sim.mapper.tier_split import TierSplit
from sn40l_sim.serving.prefill_pairs import CallRecords, call_records

#: ``(shape, plan) -> graph``: the graph builder, bound to a model, a KV policy and graph options
GraphBuilder = Callable[[Shape, ParallelPlan], KernelGraph]
#: ``graph -> placed graph`` (or ``(graph, memory) -> placed graph`` when the step's tensors are
#: not all in the first memory tier): the mapper, bound to a node
GraphPlacer = Callable[..., PlacedGraph]


class StepCosts(Protocol):
    """What the serving model needs to know about steps: their timings, and the activation bytes
    of their graphs (the working set that memory sizing reserves)."""

    def prefill(self, prompt_len: int, memory: MemoryPlacement | None = None, earlier: int = 0) -> PhaseTiming:
        """Timing of the prefill of one prompt (batch 1), its tensors where ``memory`` put them; or,
        with ``earlier`` > 0, of a chunk of ``prompt_len`` tokens after ``earlier`` cached ones."""

    def decode_step(self, batch: int, kv_len: int, drafts: int = 0,
                    memory: MemoryPlacement | None = None) -> PhaseTiming:
        """Timing of one decode step of ``batch`` sequences each reading ``kv_len`` cached tokens and
        verifying ``drafts`` speculative tokens, its tensors where ``memory`` put them."""

    def prefill_activation_bytes(self, prompt_len: int) -> int:
        """Peak resident activation bytes per socket of the prefill graph of one prompt."""

    def decode_activation_bytes(self, batch: int, kv_len: int, drafts: int = 0) -> int:
        """Peak resident activation bytes per socket of the decode graph at ``(batch, kv_len, drafts)``."""


def activation_bytes(graph: KernelGraph) -> int:
    """Peak resident activation bytes of a kernel graph on one socket: the largest, over kernels,
    of the activations a kernel reads plus those it writes between kernels (both buffers live at
    once), each tensor counted once at its full size
    (:attr:`~sn40l_sim.ir.FusedKernel.resident_activation_bytes`).

    Streamed re-reads are traffic, not memory: a causal FlashAttention kernel reads each K/V tile
    once per query tile, so its reads grow as the square of the prompt, but K and V are in memory
    once; counting the re-reads made a 1M-token prompt of DeepSeek-R1 "need" 328 GiB per socket.
    The re-reads still cost time (they are in ``act_in_bytes``, which the mapper and the engine
    stream)."""
    return max((k.resident_activation_bytes for k in graph.kernels()), default=0)


class StepTimer:
    """Times prefills and decode steps of one model on one node under one KV policy.

    Parameters
    ----------
    node : NodeSpec
        The hardware the engine simulates.
    prefill_plan, decode_plan : ParallelPlan
        Parallel plans of the two phases (handed to ``build``).
    build : callable
        ``(shape, plan) -> KernelGraph``: the graph builder bound to the model, the KV policy (its
        extra prefill kernels enter the prefill graph) and the graph options.
    place : callable
        ``graph -> PlacedGraph``: the mapper bound to the node; called as ``place(graph, memory)``
        for a step whose tensors are not all in the socket's first memory tier.
    engine : EngineOptions, optional
        Engine knobs (collective algorithm, chunking, call overhead).
    context_len : int, optional
        Tokens of context a sequence has at most in decode (prompt + max_new_tokens - 1 + drafts): the
        decode and prefill shapes carry it (:attr:`~sn40l_sim.ir.Shape.context_len`) for a KV policy
        whose decode work grows with the whole context, or whose prefill prepares decode's eviction
        or recall state when the context outgrows its budget. 0 (default): not given.
    disk_key : str, optional
        Text naming everything ``place`` does beyond mapping the graph on ``node`` (the real
        mapper's options). Given, a step is also looked up in, and kept in, the disk cache
        (:mod:`~sn40l_sim.mapper.disk_cache`) under the node, the engine options, the graph's
        kernels and edges, the memory tiers, this text and the code version; empty (default, and
        for stand-in builders and placers): memoised in this timer only.
    graphs : dict, optional
        Where built graphs are kept, by shape (default: a dict of this timer's own). Timers whose
        ``build`` is the same function of the shape and plan (the same model, policy, plans and
        graph options on other hardware: calibration passes) may share one.
    prefill_drafts : int, optional
        Speculative drafts the decode after a prefill verifies: the prefill shapes carry them, so
        the prefill runs the MTP module over the prompt to fill its cache (0, default: none).

    Attributes
    ----------
    stats : dict
        Simulated and memoised calls per phase (``decode_runs``, ``decode_hits``, ...).
    """

    def __init__(self, node: NodeSpec, prefill_plan: ParallelPlan | None, decode_plan: ParallelPlan | None, *,
                 build: GraphBuilder, place: GraphPlacer, engine: EngineOptions | None = None,
                 context_len: int = 0, disk_key: str = "", graphs: dict[Shape, KernelGraph] | None = None,
                 prefill_drafts: int = 0) -> None:
        self.node = node
        self.prefill_plan = prefill_plan
        self.decode_plan = decode_plan
        self.build = build
        self.place = place
        self.engine = engine if engine is not None else EngineOptions()
        self.context_len = context_len
        self.prefill_drafts = prefill_drafts
        self.disk_key = disk_key
        self._node_json: str | None = None
        self.stats = {"prefill_runs": 0, "prefill_hits": 0, "decode_runs": 0, "decode_hits": 0, "graphs_built": 0}
        self._memo: dict[tuple[Shape, TierSplit | None], PhaseTiming] = {}
        self._calls: dict[tuple[Shape, TierSplit | None], CallRecords] = {}
        self._graphs: dict[Shape, KernelGraph] = graphs if graphs is not None else {}
        self._collectives = CollectiveModel.from_node(node, self.engine.collective_algorithm)

    def prefill(self, prompt_len: int, memory: MemoryPlacement | None = None, earlier: int = 0) -> PhaseTiming:
        """Timing of the prefill of one prompt of ``prompt_len`` tokens (batch 1), its tensors
        where ``memory`` placed them (default: all in the socket's first memory tier). With
        ``earlier`` > 0: a later chunk of a chunked prefill, ``prompt_len`` tokens whose attention
        also covers the ``earlier`` tokens of the prompt already cached (its own graph: the
        :attr:`~sn40l_sim.ir.Shape.kv_len` of a prefill shape).

        Parameters
        ----------
        prompt_len : int
            Prompt tokens, > 0 (``run`` times the compiled length that holds the prompt, the
            record's ``prefill_len_compiled``; this times the length given).
        memory : MemoryPlacement, optional
            Where the step's tensors live (default: all in the socket's first memory tier).
        earlier : int
            Tokens of the prompt already cached, >= 0 (a later chunk of a chunked prefill).

        Returns
        -------
        PhaseTiming
            ``cycles`` and ``seconds`` of the prefill, per-kernel cycles, resource busy cycles,
            bytes per memory tier and link; the same object for the same arguments (memoised:
            read it, do not change it).

        Raises
        ------
        InputError
            Naming the argument, for a ``prompt_len`` that is not a positive integer or an
            ``earlier`` that is not a non-negative one. Memory is not checked here (the serving
            model checks it: :func:`~sn40l_sim.serving.point.simulate_point`).

        See Also
        --------
        sn40l_sim.study.assemble.Assembly.step_timer : the timer of an experiment's point, with an example.
        """
        prompt_len, earlier = _count("prompt_len", prompt_len, 1), _count("earlier", earlier, 0)
        return self._timed(_prefill_shape(prompt_len, self.prefill_drafts, earlier, self.context_len), memory)

    def decode_step(self, batch: int, kv_len: int, drafts: int = 0,
                    memory: MemoryPlacement | None = None) -> PhaseTiming:
        """Timing of one decode step of ``batch`` sequences, each reading ``kv_len`` cached tokens
        and verifying ``drafts`` speculative tokens (0: plain decode), its tensors where ``memory``
        placed them (default: all in the socket's first memory tier).

        Parameters
        ----------
        batch : int
            Sequences in the step, > 0 (the compiled batch: a record's ``batch``).
        kv_len : int
            Cached tokens each sequence reads, > 0 (a record's ``kv_len``: what its KV policy keeps).
        drafts : int
            Speculative tokens each sequence verifies (0: plain decode; ``serving.speculative.drafts``).
        memory : MemoryPlacement, optional
            Where the step's tensors live (default: all in the socket's first memory tier).

        Returns
        -------
        PhaseTiming
            ``cycles`` and ``seconds`` of the step and where they went
            (:func:`~sn40l_sim.engine.breakdown.decode_step_breakdown` splits ``seconds`` by cause);
            the same object for the same arguments (memoised: read it, do not change it).

        Raises
        ------
        InputError
            Naming the argument, for a ``batch`` or ``kv_len`` that is not a positive integer or
            ``drafts`` that is not a non-negative one.

        See Also
        --------
        sn40l_sim.study.assemble.Assembly.step_timer : the timer of an experiment's point, with an example.
        """
        batch, kv_len, drafts = _count("batch", batch, 1), _count("kv_len", kv_len, 1), _count("drafts", drafts, 0)
        return self._timed(_decode_shape(batch, kv_len, drafts, self.context_len), memory)

    def prefill_activation_bytes(self, prompt_len: int) -> int:
        """Peak activation bytes per socket of the prefill graph of one prompt."""
        return activation_bytes(self.graph(_prefill_shape(prompt_len, self.prefill_drafts, 0, self.context_len)))

    def decode_activation_bytes(self, batch: int, kv_len: int, drafts: int = 0) -> int:
        """Peak activation bytes per socket of the decode graph at ``(batch, kv_len, drafts)``."""
        return activation_bytes(self.graph(_decode_shape(batch, kv_len, drafts, self.context_len)))

    def graph(self, shape: Shape) -> KernelGraph:
        """The kernel graph of ``shape``, built once and shared by memory sizing and timing."""
        if shape not in self._graphs:
            plan = self.prefill_plan if shape.phase == "prefill" else self.decode_plan
            self.stats["graphs_built"] += 1
            self._graphs[shape] = self.build(shape, plan)
        return self._graphs[shape]

    def built_graphs(self) -> tuple[KernelGraph, ...]:
        """The graphs built so far (by memory sizing or timing), in the order they were built."""
        return tuple(self._graphs.values())

    def placed(self, shape: Shape, memory: MemoryPlacement | None = None) -> PlacedGraph:
        """The placed graph of ``shape`` (built and mapped, not simulated), for inspection."""
        if memory is None:
            return self.place(self.graph(shape))
        return self.place(self.graph(shape), memory)

    def prefill_placed(self, prompt_len: int, memory: MemoryPlacement | None = None, earlier: int = 0) -> PlacedGraph:
        """The placed graph :meth:`prefill` times for the same arguments (built and mapped, not
        simulated)."""
        shape = _prefill_shape(prompt_len, self.prefill_drafts, earlier, self.context_len)
        return self.placed(shape, self._timed_memory(memory))

    def prefill_calls(self, prompt_len: int, memory: MemoryPlacement | None = None, earlier: int = 0) -> CallRecords:
        """The calls of :meth:`prefill_placed`'s graph as a co-located node's reload between two
        prefill graphs reads them (:mod:`sn40l_sim.serving.prefill_pairs`), kept in the disk cache
        beside the timing: a warm run then places no graph for them."""
        memory = self._timed_memory(memory)
        shape = _prefill_shape(prompt_len, self.prefill_drafts, earlier, self.context_len)
        key = (shape, memory.tiers() if memory is not None else None)
        if key not in self._calls:
            text = self._disk_text(shape, memory) if self.disk_key and disk_cache.cache_root() is not None else ""
            records = disk_cache.load("prefill_calls", text) if text else None
            if records is None:
                self._keep_calls(key, text, call_records(self.node.socket, self.engine.kernel_boundaries,
                                                         self.placed(shape, memory).kernels))
            else:
                self._calls[key] = records
        return self._calls[key]

    def _keep_calls(self, key: tuple[Shape, TierSplit | None], text: str, records: CallRecords) -> None:
        self._calls[key] = records
        if text:
            disk_cache.store("prefill_calls", text, records)

    def _timed_memory(self, memory: MemoryPlacement | None) -> MemoryPlacement | None:
        """``memory``, or None when it keeps everything in the socket's first tier: such a
        placement times like no placement at all."""
        if memory is not None and memory.tiers() == TierSplit.all_in(next(iter(self.node.socket.memory))):
            return None
        return memory

    def _timed(self, shape: Shape, memory: MemoryPlacement | None = None) -> PhaseTiming:
        phase, batch = shape.phase, shape.batch
        memory = self._timed_memory(memory)
        split = memory.tiers() if memory is not None else None
        key = (shape, split)
        if key in self._memo:
            self.stats[f"{phase}_hits"] += 1
            return self._memo[key]
        self.stats[f"{phase}_runs"] += 1
        # the key spells out the node and the whole graph: not worth writing with the cache off
        text = self._disk_text(shape, memory) if self.disk_key and disk_cache.cache_root() is not None else ""
        timing = disk_cache.load("step", text) if text else None
        if timing is None:
            placed = self.placed(shape, memory)
            run = run_graph(self.node, placed, self.engine, self._collectives)
            if phase == "prefill":   # its calls, while the graph is placed (prefill_calls)
                self._keep_calls(key, text, call_records(self.node.socket, self.engine.kernel_boundaries,
                                                         placed.kernels))
            timing = phase_timing(run, phase=phase, batch=batch, prompt_len=shape.prompt_len,
                                  kv_len=shape.kv_len, clock_hz=self.node.socket.clock_hz,
                                  byte_seconds=byte_seconds(self.node.socket, split) if split else ())
            if text:
                disk_cache.store("step", text, timing)
        self._memo[key] = timing
        return timing

    def _disk_text(self, shape: Shape, memory: MemoryPlacement | None) -> str:
        """Every input of a step's timing, as text: the node, the engine options, the graph (its
        kernels' distinct signatures, their names and layers in order, its edges), where the
        tensors live (the tiers, and whether a placement order is given: the engine stages
        collectives through the activations' tier) and what ``place`` does beyond that."""
        if self._node_json is None:
            self._node_json = self.node.model_dump_json()
        graph = self.graph(shape)
        signatures: dict = {}
        sequence = [(k.name, k.layer, signatures.setdefault(k.signature(), len(signatures))) for k in graph.kernels()]
        edges = sorted(graph.edges())
        where = "first tier" if memory is None else f"{memory.tiers()!r} ordered={bool(memory.order)}"
        return "\n".join([self.disk_key, self._node_json, repr(self.engine), repr(shape), graph.model,
                          repr(list(signatures)), repr(sequence), repr(edges), where])


def _prefill_shape(prompt_len: int, drafts: int = 0, earlier: int = 0, context_len: int = 0) -> Shape:
    return Shape("prefill", 1, prompt_len, earlier, drafts, context_len)


def _decode_shape(batch: int, kv_len: int, drafts: int = 0, context_len: int = 0) -> Shape:
    return Shape("decode", batch, 0, kv_len, drafts, context_len)


def _count(name: str, value: int, least: int) -> int:
    """``value`` as a plain ``int`` when it is an integer of at least ``least``: numpy's integers too
    (a notebook's ``2 ** np.arange(8)``), which were refused as not integers, and converted, so that
    a step's shape, memo and disk-cache key are the same whichever integer type asked for it."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < least:
        expected = "a positive integer" if least == 1 else f"an integer >= {least}"
        raise InputError(f"{name} must be {expected}, got {value!r}", field=name)
    return int(value)
