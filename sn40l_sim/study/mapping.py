"""One phase of an experiment built, placed in a socket's memory tiers and mapped, as ``map``
reports it (docs/validation.md, "Reading map's totals").

The graph is built for the experiment's shape: decode at ``shape.batch`` sequences reading the
policy's static cache (:func:`~sn40l_sim.kvcache.base.slot_new_tokens`: the output and the last
step's drafts) and verifying the experiment's speculative drafts; prefill one prompt at a time
(batch 1, as the engine runs it) unless a batch is given, at the compiled prefill length that holds
the prompt, on the prefill nodes' hardware when the experiment names one (``prefill_hardware``), as
``run`` times it. Weights, KV and the resident
activations are placed as ``run`` places them
(:func:`~sn40l_sim.serving.socket_memory.place_socket`): in the experiment's tier order, the uses
``memory.may_spill`` does not name kept in the first tier, the KV per socket what ``run`` reserves.

Building (:func:`build_phase`) and mapping (:func:`map_phase`) are two steps, so that a caller can
refuse what it asks of the graph (kernels to draw) before the mapping and time each step.

Examples
--------
>>> from sn40l_sim.study.experiment import load_experiment
>>> built = build_phase(load_experiment("experiments/map_deepseek_tp16.yaml"), "decode")
>>> built.phase, built.batch, built.cache_len > built.prompt_len, built.plan.tp
('decode', 16, True, 16)
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from sn40l_sim.engine.collectives import CollectiveModel
from sn40l_sim.engine.staging import lone_collective_cycles, lone_staging_bytes
from sn40l_sim.errors import InfeasibleError, InputError, shown
from sn40l_sim.hardware.spec import NodeSpec
from sn40l_sim.ir import KernelGraph, ParallelPlan, Shape
from sn40l_sim.kvcache.base import context_room, slot_new_tokens
from sn40l_sim.kvcache.footprint import kv_bytes_by_use
from sn40l_sim.kvcache.sizing import kv_bytes_per_socket, prefill_kv_bytes_per_socket
from sn40l_sim.mapper import map_graph
from sn40l_sim.mapper.placement import MemoryPlacement, PlacedGraph
from sn40l_sim.models.builder import build_graph
from sn40l_sim.models.spec import ModelSpec
from sn40l_sim.serving.batching import compiled_size
from sn40l_sim.serving.socket_memory import in_first_tier, place_socket
from sn40l_sim.serving.step_costs import activation_bytes
from sn40l_sim.study.assemble import assemble, plan_of, prefill_lens
from sn40l_sim.study.experiment import Experiment, PolicyEntry, load_experiment
from sn40l_sim.study.preflight import check_mapping, check_tree_groups


@dataclass(frozen=True)
class PhaseGraph:
    """One phase's graph as ``map`` builds it, with its tensors placed on one socket."""

    experiment: Experiment
    #: the experiment's ``policies`` entry the graph was built for
    entry: PolicyEntry
    #: the node the phase runs on (the prefill nodes' hardware for a prefill when the experiment names one)
    node: NodeSpec
    model: ModelSpec
    plan: ParallelPlan
    phase: str
    batch: int
    prompt_len: int
    #: tokens of cache per sequence decode attention reads (the static slot); in prefill the compiled
    #: prefill length the prompt runs (the graph's, at least the prompt)
    cache_len: int
    #: speculative drafts per sequence a decode step verifies (a prefill runs the MTP module for them)
    drafts: int
    graph: KernelGraph
    #: one socket's placement of the weights, the KV and the resident activations
    memory: MemoryPlacement
    #: a KV policy's store in a tier of its own: tier -> bytes per socket (empty without one)
    store: dict[str, int]


def policy_entry(exp: Experiment, name: str | None) -> tuple[int, PolicyEntry]:
    """The index and entry of the experiment's ``policies`` entry called ``name`` (the first if None).

    Raises
    ------
    InputError
        Naming ``--policy`` when no entry has that name.
    """
    entries = exp.spec.policies
    if name is None:
        return 0, entries[0]
    for i, entry in enumerate(entries):
        if entry.name == name:
            return i, entry
    raise InputError(f"--policy {name!r} is not a policy of the experiment (it has "
                     f"{[e.name for e in entries]})", file=exp.path, field="policies")


def build_phase(exp: Experiment | str | Path, phase: str, policy: str | None = None, batch: int | None = None,
                hardware_overrides: dict | None = None) -> PhaseGraph:
    """Build ``phase``'s graph for the experiment's (or its file's) policy entry called ``policy``
    (the first if None) at ``batch`` sequences (None: ``shape.batch`` in decode, 1 in prefill), and
    place its tensors on one socket of the experiment's node with ``hardware_overrides`` (dotted
    fields, as ``--set hardware.<field>``).

    Raises
    ------
    InputError
        What ``map`` refuses of the experiment (:func:`~sn40l_sim.study.preflight.check_mapping`),
        located in its file; an unknown ``policy`` or a ``batch`` that is not an integer >= 1,
        naming ``--policy`` or ``--batch``; a ``phase`` other than ``"prefill"`` and ``"decode"``.
    InfeasibleError
        When the tensors do not fit the socket: at ``--batch`` when it was given, else at the
        experiment's ``shape.batch`` (decode) or the prompt's field (prefill): ``shape.prompt_len``, or
        the ``prompt_lens`` entry mapped when that list leaves the shape's prompt out.
    """
    if phase not in ("prefill", "decode"):   # from Python: an AttributeError on the parallel section otherwise
        raise InputError(f"phase: expected 'prefill' or 'decode', got {shown(phase)}")
    if batch is not None and (isinstance(batch, bool) or not isinstance(batch, int)):
        raise InputError(f"--batch must be a positive integer, got {shown(batch)}")
    exp = exp if isinstance(exp, Experiment) else load_experiment(exp)   # a path, as assemble takes
    spec = exp.spec
    index, entry = policy_entry(exp, policy)
    asm = assemble(exp, hardware_overrides=hardware_overrides)
    check_mapping(asm)   # what check refuses of a map experiment
    # the chosen policy's point at the shape's prompt, else its first: a prompt_lens list without
    # shape.prompt_len once fell back to the experiment's first point, another policy's
    own = [p for p in asm.points if p.policy_index == index]
    point = next((p for p in own if p.prompt_len == spec.shape.prompt_len), own[0])
    if phase == "prefill" and asm.prefill_node is not None:
        # the prefill runs on the prefill nodes' hardware (the experiment's prefill_hardware), as in run
        asm = replace(asm, node=asm.prefill_node, prefill_node=None)
    model = asm.model_for(point)
    kv_policy = asm.policy(point)
    plan = plan_of(getattr(spec.parallel, phase))
    # the point's prompt, which its policy was resolved at and check_mapping checked: the shape's
    # when prompt_lens lists it, else the point run simulates (a 1,024-token point's 256-token
    # SnapStream cache was mapped under shape.prompt_len 4096, and a shape prompt past the
    # model's maximum context was mapped)
    prompt_len = point.prompt_len
    given = batch
    batch = given if given is not None else (spec.shape.batch if phase == "decode" else 1)
    if batch < 1:
        raise InputError(f"--batch must be a positive integer, got {batch}")
    drafts = exp.speculation.drafts
    # as run reads it (serving's, else shape's); a map experiment may leave it out (0)
    new_tokens = slot_new_tokens(spec.serving.max_new_tokens or spec.shape.max_new_tokens, drafts,
                                 context_room(model, prompt_len))
    if phase == "decode":
        # the static slot as run reserves it: the generated tokens and the drafts after the last one
        cache_len = kv_policy.static_cache_len(prompt_len, new_tokens)
        shape = Shape("decode", batch, prompt_len, cache_len, drafts, context_len=prompt_len + new_tokens)
    else:
        # the graph run times and sizes: the prompt runs the smallest compiled prefill length that
        # holds it (a 196,608-token prompt on DeepSeek-R1 mapped its own length, 25% fewer
        # activations and cycles than run's 262,144-token graph); the cache rows it writes are its
        try:
            cache_len = compiled_size(prompt_len, prefill_lens(spec.serving, model), "prompt length")
        except InfeasibleError as exc:   # as run names it
            raise exp.error(("serving", "prefill_lens"), str(exc)) from None
        # the MTP module over the prompt; the context decides what a policy's prefill prepares
        shape = Shape("prefill", batch, cache_len, 0, drafts, context_len=prompt_len + new_tokens)
    try:
        graph = build_graph(model, shape, plan, kv_policy, **dict(spec.graph_options))
    except InputError as exc:
        # a policy's kernels the builder refused: at the policy's entry, as run names it
        raise (asm.locate(exc, point) if exc.field == "policy" else exc) from None
    activations = activation_bytes(graph)   # resident, as run reserves them
    # the KV a socket reserves, as run does: the caches of the MTP modules the graph's drafts run
    include_mtp = drafts
    store = {}
    if phase == "decode":
        # what run reserves: the cache attention reads, the policy's state, a store in its own tier
        footprint = kv_policy.footprint(model, prompt_len, new_tokens)
        uses = kv_bytes_by_use(model, plan, batch, footprint, include_mtp=include_mtp)
        kv = uses["kv"]
        store = {footprint.store_tier: uses["kv_offload"]} if uses["kv_offload"] else {}
    elif spec.serving.mode == "disaggregated":
        # as run's prefill node: the prompts' caches, the compressed ones and the policy's state waiting for the transfer
        kv = prefill_kv_bytes_per_socket(model, plan, batch, cache_len, kv_policy.cache_len(cache_len, 0),
                                         include_mtp=include_mtp,
                                         state_bytes=kv_policy.prefill_state_bytes(model, cache_len, new_tokens))
    else:
        kv = kv_bytes_per_socket(model, plan, batch, cache_len, include_mtp=include_mtp, phase=phase)
    # in the experiment's tier order, keeping the uses that may not spill in the first tier, as run does
    try:
        memory = place_socket(asm.memory_placer(model), spec.memory.may_spill, plan, kv, activations, store)
        # as run refuses it: a batch whose KV spilled out of HBM was mapped streaming from DDR
        in_first_tier(memory, spec.memory.may_spill, "the graph's memory")
    except InfeasibleError as exc:
        # name what chose the batch: the option, or the experiment's shape
        what = f"{phase} at batch {batch}: {exc}"
        if given is not None:
            raise InfeasibleError(f"{exp.path}: {what}", field="--batch") from None
        prompt_field = ("shape", "prompt_len") if prompt_len == spec.shape.prompt_len else \
            ("prompt_lens", exp.prompt_lens.index(prompt_len))
        raise exp.error(("shape", "batch") if phase == "decode" else prompt_field, what) from None
    return PhaseGraph(exp, entry, asm.node, model, plan, phase, batch, prompt_len, cache_len, drafts, graph,
                      memory, store)


def check_phases(exp: Experiment) -> None:
    """Refuse what ``map`` refuses of the experiment before it times a kernel, for every policy entry
    and both phases: each graph built and placed as :func:`build_phase` does it (a decode batch
    whose KV does not fit), and ``execution.collective_algorithm: tree`` where a graph has a
    collective recursive doubling cannot run (``map`` refuses it at the first one it times). ``check``
    of an experiment without a workload held it to :func:`~sn40l_sim.study.preflight.check_mapping`
    alone and said "ok" of both, which ``map`` then refused."""
    for entry in exp.spec.policies:
        for phase in ("prefill", "decode"):
            built = build_phase(exp, phase, entry.name)
            if exp.spec.execution.collective_algorithm == "tree":
                try:
                    check_tree_groups([built.graph])
                except InputError as exc:   # at the option, as map_phase says
                    raise exp.error(("execution", "collective_algorithm"), exc.message) from None


def map_phase(built: PhaseGraph) -> PlacedGraph:
    """Map every kernel of the built graph on one socket of its node, with the experiment's kernel
    looping, collective algorithm and idle-unit pricing (as ``run`` maps it)."""
    if not isinstance(built, PhaseGraph):   # an experiment or its path: an AttributeError deep inside otherwise
        raise InputError(f"built: expected a PhaseGraph (build_phase(experiment, phase)), got {type(built).__name__}")
    execution = built.experiment.spec.execution
    collectives = CollectiveModel.from_node(built.node, execution.collective_algorithm)
    # the prefill maps on the prefill nodes' hardware when the experiment names one (build_phase)
    field = "prefill_hardware" if built.phase == "prefill" and built.experiment.spec.prefill_hardware else "hardware"
    try:
        # as run maps it: each collective timed alone, its staging through the activations' tier included
        return map_graph(built.node, built.graph, built.memory, execution.kernel_looping,
                         lone_collective_cycles(collectives, built.node, built.memory),
                         execution.idle_units == "priced", lone_staging_bytes(collectives))
    except InfeasibleError as exc:   # a kernel the tiles cannot hold: at the field naming the hardware, as run says
        if exc.file is not None or exc.field is not None:
            raise
        raise built.experiment.error((field,), exc.message) from None
    except InputError as exc:   # a tree over a group it cannot pair (engine/collective_sizes.py): at the option, as run says
        if exc.file is None and exc.field == "collective_algorithm":
            raise built.experiment.error(("execution", "collective_algorithm"), exc.message) from None
        raise
