"""One simulation point end to end: memory and maximum batch, step timings, then serving.

Given spec objects (node, model, KV policy, parallel plans) and the serving options of a point,
:func:`simulate_point`

1. finds the largest compiled decode batch whose memory fits on every socket of a decode node
   (:class:`~sn40l_sim.serving.memory_fit.MemoryFit`: :func:`sn40l_sim.mapper.memory.place_memory`
   in the experiment's tier order; the uses not in ``may_spill`` must stay in the first tier, by
   default weights and KV in HBM as in the paper's deployment), and checks that one prompt fits on
   a prefill node;
2. times one prefill (batch 1) per compiled prefill length and one decode step of the static
   graph (the compiled batch at the static cache length, verifying the point's speculative drafts,
   :mod:`sn40l_sim.serving.speculation`) with the step costs it is given
   (:class:`~sn40l_sim.serving.step_costs.StepTimer`, which memoises them and builds each graph
   once for both the memory sizing and the timing), each streaming its tensors from the tiers the
   memory placement put them in;
3. serves the workload with :func:`sn40l_sim.serving.loop.simulate`.

With ``k`` speculative drafts the decode graph runs the MTP module, whose layer has a cache of its
own (reserved, and sent with the rest), and a step writes ``k + 1`` cache rows per sequence of which
the rejected ones are overwritten by the next step: a static slot that grows with the generated
tokens (a full cache) holds ``max_new_tokens + k`` of them, so the last step's rows fit
(:func:`~sn40l_sim.kvcache.base.slot_new_tokens`).

The step costs and the memory placer come from the caller (the study layer's assembly step binds
the real graph builder, mapper and placer; tests use :class:`~sn40l_sim.serving.fixed_costs.FixedStepCosts`
and a placer of their own). Errors name the :class:`PointSetup` field they are about (``batch``,
``prompt_len``, ...); the study layer turns those into the experiment's field paths. The KV
transfer's time is :mod:`sn40l_sim.serving.kv_transfer`'s.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Literal

from sn40l_sim.engine.phase import PhaseTiming
from sn40l_sim.errors import InfeasibleError, InputError
from sn40l_sim.hardware.spec import NodeSpec
from sn40l_sim.ir import ParallelPlan
from sn40l_sim.kvcache.base import KVPolicy, context_room, slot_new_tokens
from sn40l_sim.kvcache.footprint import KVFootprint
from sn40l_sim.kvcache.sizing import kv_tokens_fitting
from sn40l_sim.mapper.placement import MemoryPlacement
from sn40l_sim.models.params import kv_bytes_per_token
from sn40l_sim.models.spec import ModelSpec
from sn40l_sim.serving.batching import compiled_size
from sn40l_sim.serving.context_limit import check_context
from sn40l_sim.serving.kv_transfer import held_tokens, sent_bytes, socket_shares, transfer_seconds
from sn40l_sim.serving.loop import ServingLog, ServingSetup, simulate
from sn40l_sim.serving.memory_fit import MemoryFit, MemoryPlacer, fit_memory, located
from sn40l_sim.serving.prefill_graphs import PrefillGraphs
from sn40l_sim.serving.prefix_cache import PrefixCaching
from sn40l_sim.serving.speculation import Speculation
from sn40l_sim.serving.step_costs import StepCosts
from sn40l_sim.serving.workload import Request


@dataclass(frozen=True)
class PointSetup:
    """The inputs of one point (spec objects and plain numbers; nothing is parsed here).

    The study layer makes one from an experiment (:meth:`sn40l_sim.study.assemble.Assembly.setup`);
    :func:`simulate_point` shows one made by hand. Lengths are in tokens, ``batch`` and
    ``batch_sizes`` in sequences per decode node.
    """

    name: str
    node: NodeSpec
    model: ModelSpec
    policy: KVPolicy
    prompt_len: int
    prefill_plan: ParallelPlan
    decode_plan: ParallelPlan
    mode: Literal["disaggregated", "colocated"] = "disaggregated"
    prefill_nodes: int = 1
    decode_nodes: int = 1
    batch: int | str = "max"
    batch_sizes: tuple[int, ...] = (1,)
    prefill_lens: tuple[int, ...] = (1,)
    max_new_tokens: int = 1
    #: speculative decoding: drafts the decode step verifies and their acceptance rate
    speculation: Speculation = field(default_factory=Speculation)
    #: seeds the serving loop's draws of accepted drafts
    seed: int = 0
    kv_transfer: Literal["host_link", "p2p"] = "host_link"
    graph_options: dict = field(default_factory=dict)
    #: uses (weights, kv, activations) that may be placed outside the first memory tier
    may_spill: tuple[str, ...] = ("activations",)
    #: reuse shared prompt prefixes (serving/prefix_cache.py)
    prefix_cache: bool = False
    #: co-located: prompt tokens prefilled between two decode steps (serving/chunked_prefill.py)
    prefill_chunk: int | None = None
    #: the prefill nodes' hardware when it is not ``node``'s (disaggregated; None: the same)
    prefill_node: NodeSpec | None = None
    #: the experiment field that sets the model's max_context (None: the model file's), which the
    #: messages refusing a longer sequence name (serving/context_limit.py)
    max_context_set: str | None = None


@dataclass
class PointResult:
    """Everything the report needs about one point (cycles; seconds are the report's job)."""

    setup: PointSetup
    clock_hz: float
    kv_bytes_per_token: int
    static_cache_len: int
    batch: int
    max_batch: int
    #: why the next compiled batch size does not fit (None when all fit)
    next_failure: str | None
    #: a decode node's memory at ``batch``, and a prefill node's (None when co-located)
    memory: MemoryPlacement
    prefill_memory: MemoryPlacement | None
    prefill_len_compiled: int
    #: one prefill of the point's prompt (None: not simulated), one decode step at
    #: (batch, static_cache_len)
    prefill: PhaseTiming | None
    decode: PhaseTiming
    #: KV bytes sent from a prefill node to a decode node per request, and their time (0 when co-located)
    transfer_bytes: int
    transfer_cycles: int
    #: kernel kinds the KV policy adds to prefill (their share is the policy's prefill overhead)
    policy_kernel_kinds: tuple[str, ...]
    #: None for a steps-only evaluation (no requests were served)
    log: ServingLog | None
    #: what one sequence keeps per layer, and where (the decode node's reservation per sequence)
    footprint: KVFootprint | None = None
    #: the drafts of the decode graph: the MTP modules they run have caches of their own
    #: (:func:`~sn40l_sim.models.kv_format.kv_cache_layers`); 0 without speculative decoding
    include_mtp: bool | int = False
    #: with ``batch: max`` and KV allowed to spill, where the chosen batch's KV left the first
    #: tier: the largest compiled batch whose KV stays there (memory_fit.FittedMemory)
    kv_first_tier_batch: int | None = None
    #: the point's prefill with no KV policy's kernels, on the same node and memory placement (None
    #: when the policy adds none, the prefill was not simulated or no policy-free costs were given):
    #: what the policy adds to the prefill, configuration reloads it causes in other kernels included
    prefill_without_policy: PhaseTiming | None = None
    #: the served requests' prompts prefilled whole at their compiled lengths, with and without the
    #: policy's kernels, in cycles (None as ``prefill_without_policy``, or without served requests)
    served_prefill_cycles: tuple[int, int] | None = None


def check_plans(s: PointSetup) -> None:
    """Each phase's plan must fit on the node, a co-located node's two alike (before simulating).

    Raises
    ------
    InfeasibleError
        Naming the :class:`PointSetup` field (``prefill_plan`` or ``decode_plan``): a well-formed plan
        on a node too small for it, which a sweep over socket counts may skip (``infeasible: skip``).
    """
    prefill_node = s.prefill_node if s.prefill_node is not None else s.node
    for phase, plan, node in (("prefill", s.prefill_plan, prefill_node), ("decode", s.decode_plan, s.node)):
        if plan.sockets > node.sockets:
            raise InfeasibleError(f"the {phase} plan needs {plan.sockets} sockets; {node.name} has "
                             f"{node.sockets}", field=f"{phase}_plan")
    if s.mode == "colocated" and s.prefill_plan.tp != s.decode_plan.tp:
        # memory_fit places the weights once, by the decode plan: a 70B prefill at tp 1 read 141 GB from 16.4 GiB
        raise InfeasibleError(f"a co-located node prefills and decodes with one copy of the weights, split "
                              f"{s.decode_plan.tp} ways by the decode plan; a prefill at tp={s.prefill_plan.tp} would "
                              f"need a second copy split its own way, which the memory model does not hold: set "
                              f"parallel.prefill.tp to {s.decode_plan.tp}, or serve disaggregated", field="prefill_plan")


def free_cache_tokens(s: PointSetup, memory: MemoryPlacement, include_mtp: bool | int) -> int:
    """Cached tokens (every layer) that fit in what ``memory``, a node's placement per socket,
    leaves free of its first tier, counted as the prompt's own cache is under the prefill plan
    (:func:`~sn40l_sim.kvcache.sizing.kv_tokens_fitting`: a KV head's share, for MLA the whole
    latent rows a socket writes of the tokens split over the sockets)."""
    first = memory.first_tier
    free = memory.capacity[first] - sum(memory.by_tier[first].values())
    return kv_tokens_fitting(s.model, s.prefill_plan, int(free), include_mtp=include_mtp, phase="prefill")


def prefix_caching(s: PointSetup, kv_bytes_per_token: int, free_tokens: int) -> PrefixCaching | None:
    """How the point reuses shared prefixes (None without ``prefix_cache``): decode nodes share a
    prefix's KV only when the policy keeps the whole prompt up to the slot's last row (not a compressed
    cache, a ring wrapping over the prompt or H2O evicting from it: serving/prefix_cache.py); a prefill
    node keeps prefixes in the ``free_tokens`` its placement leaves free (:func:`free_cache_tokens`),
    but a co-located node sharing them needs none: it reuses the cache of a request in flight."""
    if not s.prefix_cache:
        return None
    rows = slot_new_tokens(s.max_new_tokens, s.speculation.drafts, context_room(s.model, s.prompt_len))
    share = s.policy.cache_len(s.prompt_len, rows) >= s.prompt_len + rows
    capacity = None if share and s.mode == "colocated" else free_tokens
    return PrefixCaching(share_decode_kv=share, kv_bytes_per_token=kv_bytes_per_token, capacity_tokens=capacity)


def point_memory(s: PointSetup, costs: StepCosts, place: MemoryPlacer, prefill_costs: StepCosts | None = None,
                 prefill_place: MemoryPlacer | None = None) -> MemoryFit:
    """The memory checks of point ``s`` (:func:`~sn40l_sim.serving.memory_fit.fit_memory` makes
    them): its KV footprint, with the MTP module's cache when it drafts, and the prefill graph
    compiled for its prompt."""
    drafts = s.speculation.drafts
    new_tokens = slot_new_tokens(s.max_new_tokens, drafts, context_room(s.model, s.prompt_len))
    footprint = s.policy.footprint(s.model, s.prompt_len, new_tokens)
    with located("prefill_lens"):
        prefill_len = compiled_size(s.prompt_len, s.prefill_lens, "prompt length")
    return MemoryFit(s, drafts, footprint, place, costs, prefill_place, prefill_costs or costs, prefill_len)


def simulate_point(s: PointSetup, requests_for: Callable[[int], list[Request]], costs: StepCosts,
                   place: MemoryPlacer, *, prefill_costs: StepCosts | None = None,
                   prefill_place: MemoryPlacer | None = None, prefill_step: bool = True,
                   policy_free_costs: StepCosts | None = None,
                   policy_free_prefill: StepCosts | None = None) -> PointResult:
    """Simulate one point.

    Parameters
    ----------
    s : PointSetup
        The point.
    requests_for : callable
        ``total decode slots -> requests`` (a workload may ask for as many requests as slots).
    costs : StepCosts
        Prefill and decode-step timings, and the activation bytes of their graphs.
    place : callable
        ``(plan, kv_bytes_per_socket, activation_bytes) -> MemoryPlacement`` of one socket
        (:func:`~sn40l_sim.mapper.memory.place_memory` bound to the node and the model).
    prefill_costs, prefill_place : optional
        The same bound to the prefill node, required when ``s.prefill_node`` is set (prefill nodes
        of other hardware than the decode nodes); their prefill cycles are counted in the decode
        node's clock by the serving loop.
    prefill_step : bool
        Whether to time the prefill of the point's prompt (:attr:`PointResult.prefill`). False
        leaves it None: a steps-only evaluation that reads nothing of the prefill (a calibration
        point on the decode step) skips its simulation. The requests, if any, are still prefilled.
    policy_free_costs : StepCosts, optional
        With ``prefill_chunk`` or ``prefix_cache``: the prefill costs of the same (prefill) node and
        model with no KV policy's kernels, which time a chunk's graph and a prefix hit's suffix
        graph; a compressing policy's kernels, which select from the whole prompt's cache, then run
        once, after the last chunk or the suffix, for what they add to the whole prompt's prefill.
        Without it those graphs carry the policy's kernels over their own tokens.
    policy_free_prefill : StepCosts, optional
        The same policy-free prefill costs, given only to time the point's prompt without the policy's
        kernels (:attr:`PointResult.prefill_without_policy`); ``policy_free_costs`` serves when given.

    Raises
    ------
    InfeasibleError
        When no compiled batch fits, an explicit batch does not fit, a prompt does not fit on a
        prefill node, or a request is longer than the compiled graphs; the error names the
        :class:`PointSetup` field it is about.

    Examples
    --------
    Llama-3.1-8B on an 8-socket node, 4K prompts, a full cache, with hand-checkable step costs
    (:class:`~sn40l_sim.serving.fixed_costs.FixedStepCosts`) and the real memory placement: the
    largest compiled batch whose weights and KV stay in HBM is 512 (64 sequences of 4,352 cached
    tokens a socket), and the placement says why 1,024 is not:

    >>> from functools import partial
    >>> from sn40l_sim.hardware.loader import load_hardware
    >>> from sn40l_sim.kvcache import make_policy
    >>> from sn40l_sim.mapper import place_memory
    >>> from sn40l_sim.models.loader import load_model
    >>> from sn40l_sim.serving.fixed_costs import FixedStepCosts
    >>> node, llama = load_hardware("hw_configs/sn40l_node8.yaml"), load_model("graphs/llama3_1_8b.yaml")
    >>> s = PointSetup("full", node, llama, make_policy("full"), prompt_len=4096,
    ...                prefill_plan=ParallelPlan(tp=8), decode_plan=ParallelPlan(tp=8, attention_dp=8),
    ...                batch_sizes=(256, 512, 1024, 2048), prefill_lens=(4096,), max_new_tokens=256)
    >>> costs = FixedStepCosts()    # prefill 1,000 cycles a token; decode 40M + 10 a cached token read
    >>> result = simulate_point(s, lambda slots: [Request(i, 0, 4096, 4) for i in range(2)],
    ...                         costs, partial(place_memory, node, llama))
    >>> result.max_batch, result.static_cache_len, result.kv_bytes_per_token
    (512, 4351, 131072)
    >>> print(result.next_failure)
    decode batch 1024 does not fit in HBM per socket: weights 1.87 GiB + kv 67.98 GiB + activations 0.00 GiB > 56.00 GiB usable HBM (kv 13.85 GiB would spill to DDR; the serving model keeps weights and KV in HBM)
    >>> result.prefill.cycles, result.decode.cycles == 40_000_000 + 10 * 512 * 4351
    (4096000, True)
    >>> [r.first_token for r in result.log.requests]      # one prefill node: the second prompt waits for the first
    [4096000, 8192000]
    """
    clock_hz = s.node.socket.clock_hz
    drafts = s.speculation.drafts
    if drafts and s.model.mtp is None:
        raise InputError(f"model {s.model.name!r} has no mtp section: speculative decoding drafts with the "
                         "model's multi-token-prediction module", field="speculation")
    # the drafts run MTP modules, whose attention layers have caches of their own: reserve those of
    # the modules the drafts run (not of one no draft runs), and send them with the rest
    include_mtp = drafts
    per_token = kv_bytes_per_token(s.model, include_mtp=include_mtp)
    # a step writes 1 + drafts rows per sequence: the slot holds the drafts after the last token
    # (within the model's context: no sequence goes past it)
    new_rows = slot_new_tokens(s.max_new_tokens, drafts, context_room(s.model, s.prompt_len))
    static_len = s.policy.static_cache_len(s.prompt_len, new_rows)
    check_plans(s)
    check_context(s)
    if s.prefill_node is not None and (prefill_costs is None or prefill_place is None):
        raise ValueError("a prefill node of its own needs its step costs and memory placer")
    prefill_costs = prefill_costs or costs
    memory = point_memory(s, costs, place, prefill_costs, prefill_place)
    footprint, prefill_len = memory.footprint, memory.prefill_len
    fitted = fit_memory(s, memory)
    search, batch, placement, prefill_memory = fitted.search, fitted.batch, fitted.placement, fitted.prefill_memory
    # each phase streams its tensors from where its node's placement put them
    prefill_node_memory = prefill_memory if prefill_memory is not None else placement
    memory_for = partial(memory.prefill_placement, batch, placement=prefill_node_memory)
    with located("graph_options"):
        prefill = prefill_costs.prefill(prefill_len, memory=memory_for(prefill_len)) if prefill_step else None
        decode = costs.decode_step(batch, static_len, drafts, memory=placement)
    colocated = s.mode == "colocated"

    def transfer_for(prompt_len: int) -> int:   # the cache and the policy's state prefill builds for decode
        if colocated:   # a co-located node prefills into its own cache: no bytes cross a link
            return 0
        n_bytes = sent_bytes(s.model, s.policy, prompt_len, s.max_new_tokens, drafts)
        # the busiest prefill socket sends whole rows of the prompt's cache (MLA's split by tokens)
        shares = socket_shares(s.model, s.prefill_plan, s.decode_plan, include_mtp, rows=s.policy.cache_len(prompt_len, 0))
        return math.ceil(transfer_seconds(s.node, s.kv_transfer, n_bytes, s.prefill_node, shares=shares) * clock_hz)

    transfer_bytes = 0 if colocated else sent_bytes(s.model, s.policy, s.prompt_len, s.max_new_tokens, drafts)
    with located("kv_transfer"):
        transfer_cycles = transfer_for(s.prompt_len)

    graphs = PrefillGraphs(s, clock_hz, prefill_costs, memory_for, policy_free_costs)

    with located("requests"):
        requests = requests_for(batch * s.decode_nodes)
        for r in requests:  # the decode graph's slots are sized for the point's lengths
            if r.prompt_len > s.prompt_len or r.output_len > s.max_new_tokens:
                raise InfeasibleError(f"request {r.id} (prompt {r.prompt_len}, output {r.output_len}) is "
                                      f"longer than the static graphs (prompt {s.prompt_len}, "
                                      f"max_new_tokens {s.max_new_tokens})")
    with located("prefill_lens"):
        for r in requests:  # every prompt must have a compiled prefill graph before serving starts
            graphs.whole(r.prompt_len)
    # a prefill node's room for the caches waiting to leave it and the prefixes it keeps
    free_tokens = free_cache_tokens(s, prefill_node_memory, include_mtp)
    setup = ServingSetup(mode=s.mode, prefill_nodes=s.prefill_nodes, decode_nodes=s.decode_nodes, slots=batch,
                         decode_step_cycles=int(decode.cycles), transfer_cycles=transfer_for,
                         cache_tokens=s.policy.cache_len, kv_bytes_per_token=per_token,
                         slot_cache_tokens=footprint.context_rows, speculation=s.speculation, seed=s.seed,
                         prefix_caching=prefix_caching(s, per_token, free_tokens), prefill_chunk=s.prefill_chunk,
                         decode_switch_cycles=int(decode.switch_load_cycles), **graphs.serving_fields(),
                         prefill_hold_tokens=None if colocated else free_tokens,
                         held_tokens=partial(held_tokens, s.model, s.policy, s.prefill_plan, s.max_new_tokens, drafts))
    # no requests: a steps-only evaluation (validation, calibration); there is nothing to serve
    log = simulate(requests, setup) if requests else None
    # the kernels the prefill graph holds: what the prompt's sequence reaches in decode decides them
    policy_kernels = s.policy.context_prefill_kernels(s.model, prefill_len, s.prompt_len + new_rows, s.prefill_plan.tp)
    kinds = tuple(sorted({k.kind for k in policy_kernels}))
    # the same prompts without those kernels: their own cycles are not all they cost, since the units
    # they take can make the other kernels reload their configurations at every layer
    bare_costs = policy_free_costs or policy_free_prefill
    without, served = None, None
    if kinds and bare_costs is not None:
        with located("graph_options"):
            if prefill is not None:
                without = bare_costs.prefill(prefill_len, memory=memory_for(prefill_len))
            if log is not None:   # every served prompt whole, at its compiled length
                served = tuple(sum(graphs.of(r.request.prompt_len, bare=bare, free=bare_costs)[0]
                                   for r in log.requests) for bare in (False, True))
    return PointResult(s, clock_hz, per_token, static_len, batch, search.max_batch,
                       str(search.next_failure) if search.next_failure else None, placement, prefill_memory,
                       prefill_len, prefill, decode, transfer_bytes, transfer_cycles, kinds, log, footprint,
                       include_mtp, fitted.kv_first_tier_batch, without, served)
