"""Build the fused-kernel graph of one prefill pass or one decode step.

The template (:mod:`sn40l_sim.models.template`) gives the structure, the formulas
(:mod:`sn40l_sim.models.formulas`: shared modules and the attention family) the numbers. The
graph is a chain in execution order: the head kernels (embedding), each layer's kernels (dense or
MoE, then the KV policy's extra kernels of the phase for that layer, :class:`KVPolicyHooks`) and the
tail (final norm + LM head, sampling).

Speculative decoding with the model's multi-token-prediction (MTP) module as the draft: a decode
step of ``shape.drafts = k`` verifies ``k`` draft tokens per sequence, so the main model runs over
``1 + k`` query rows per sequence (every GEMM has ``batch x (1 + k)`` rows, attention reads each
sequence's cache once for its ``1 + k`` rows, ``1 + k`` cache rows are written, and the LM head and
sampling score every row), then the draft runs ``k`` times, one after the other because each run
drafts from the previous one's token and hidden state: its projection, its transformer block (with
its own cache), its LM head and sampling, each over ``batch`` rows. Draft run ``d`` uses MTP module
``d mod modules`` (DeepSeek-V3/R1 has one, run recursively). With ``k = 0`` the step is plain
decode, without the MTP module. A prefill whose decode will draft (``shape.drafts = k`` in prefill)
runs each MTP module the drafts use once over the prompt, after the main model: it fills the MTP
layer's cache for the prompt's positions, which the drafts read, and drafts the first token.

Activation traffic is derived, not written by hand, from the activations each operator names
(:mod:`.activations`: what crosses a kernel boundary, what stays on chip, what is re-read). A
prefill whose FlashAttention tiles are of several shapes is built a second time with its edge tiles
padded, and each kernel that differs carries that version (:mod:`.flash`). Kernel names
are ``L<layer>.<kernel>`` (``MTP<d>.<kernel>`` for draft run ``d``, whose kernels have the MTP
module's layer index); identical layers give kernels with equal
:meth:`~sn40l_sim.ir.FusedKernel.signature`.

Examples
--------
>>> from sn40l_sim.models.loader import load_model
>>> from sn40l_sim.models.template import GRAPHS_DIR
>>> r1 = load_model(GRAPHS_DIR / "deepseek_r1.yaml")
>>> g = build_graph(r1, Shape("decode", batch=16, prompt_len=0, kv_len=131072), ParallelPlan(16, 16))
>>> [k.name for k in g.kernels()][:5]
['embedding', 'L00.mla', 'L00.ffn', 'L01.mla', 'L01.ffn']
>>> k = g.graph.nodes["L03.mla"]["kernel"]
>>> [op.kv_read_bytes for op in k.operators if op.name == "absorbed_qk"]   # 1 sequence x 128K x 576 x 2 B
[150994944]
>>> len(g.kernels()), g.kernels()[-1].name
(125, 'sampling')
>>> g2 = build_graph(r1, Shape("decode", 16, 0, 131072, drafts=2), ParallelPlan(16, 16))
>>> len(g2.kernels()), [k.name for k in g2.kernels()][-6:]
(135, ['MTP0.sampling', 'MTP1.mtp_proj', 'MTP1.mla', 'MTP1.ffn', 'MTP1.lm_head', 'MTP1.sampling'])
>>> [op.m for op in g2.graph.nodes["L03.ffn"]["kernel"].operators if op.name == "shared_gate_up"]
[48]
"""
from __future__ import annotations

import numbers
from dataclasses import fields, replace
from pathlib import Path
from typing import Any, NamedTuple, Protocol, get_args

from sn40l_sim.errors import InputError, shown
from sn40l_sim.ir import DTYPE_BITS, Collective, FusedKernel, KernelGraph, OpKind, ParallelPlan, Shape
from sn40l_sim.models.activations import with_activations
from sn40l_sim.models.context import Ctx, Step
from sn40l_sim.models.families.base import OperatorFormula, SizeFormula
from sn40l_sim.models.flash import padded_tile_pairs, with_padded
from sn40l_sim.models.formulas import operators, sizes
from sn40l_sim.models.graph_inputs import MAX_DRAFTS, check_graph_inputs  # noqa: F401  (MAX_DRAFTS re-exported)
from sn40l_sim.models.spec import ModelSpec
from sn40l_sim.models.template import KernelEntry, KernelTemplates, PhaseTemplate, load_templates, template_for
from sn40l_sim.models.tensors import dense_layer_count

#: options of :func:`build_graph` and their defaults
OPTIONS = {"expert_loading": "touched", "routing_skew": 0.0, "template": None}
#: the largest Zipf exponent of expert popularity (10 already puts almost every token on one expert)
MAX_ROUTING_SKEW = 10


class KVPolicyHooks(Protocol):
    """What the builder asks of a KV-cache policy: the kernels it adds to each layer.

    The builder owns this contract so that models/ does not know kvcache/:
    :class:`sn40l_sim.kvcache.base.KVPolicy` satisfies it, and so does any object with these two
    methods (a prefill shape with ``context_len`` asks ``KVPolicy.context_prefill_kernels``, if any).
    Kernels are per socket shard, as every kernel of the graph: each a :class:`~sn40l_sim.ir.FusedKernel`
    of the graph's phase with ``shards`` the plan's sockets (:func:`check_policy_kernels` refuses
    others); the builder names them ``L<layer>.<name>`` and places them after the layer's own
    kernels, in every layer the graph runs (draft runs of the MTP module included).

    Examples
    --------
    H2O evicts at every decode step once the cache is full, so each layer gains a kernel:

    >>> from sn40l_sim.kvcache import make_policy
    >>> from sn40l_sim.models.loader import load_model
    >>> llama, h2o = load_model("graphs/llama3_1_8b.yaml"), make_policy("h2o", {"budget": 1024})
    >>> shape = Shape("decode", batch=8, prompt_len=0, kv_len=1024, context_len=4096)
    >>> [k.name for k in build_graph(llama, shape, ParallelPlan(tp=8), h2o).kernels()[:4]]
    ['embedding', 'L00.decoder', 'L00.h2o_evict', 'L01.decoder']
    """

    def prefill_kernels(self, model: ModelSpec, prompt_len: int, tp: int) -> list[FusedKernel]:
        """Kernels added to each layer of the prefill of one ``prompt_len``-token prompt under
        tensor parallelism ``tp`` (SnapStream's SnapKV compression and ring-buffer construction)."""
        ...

    def decode_kernels(self, model: ModelSpec, shape: Shape, plan: ParallelPlan) -> list[FusedKernel]:
        """Kernels added to each layer of one decode step of ``shape`` under ``plan`` (a policy
        that scores and evicts every step, as H2O does, or recalls pages from a store, as ArkVale
        does; none for ``full``, ``snapstream``, ``streamingllm`` and ``snapkv``)."""
        ...


def build_graph(model: ModelSpec, shape: Shape, plan: ParallelPlan, policy: KVPolicyHooks | None = None,
                **options: Any) -> KernelGraph:
    """The kernel graph of ``shape`` (one prefill pass or one decode step) under ``plan``.

    Parameters
    ----------
    model : ModelSpec
    shape : Shape
        ``phase``, ``batch``, ``prompt_len`` (prefill), ``kv_len`` (tokens each sequence's
        decode attention reads, after any compression; in prefill, the prompt's tokens cached
        before a chunk's rows) and ``drafts`` (speculative draft tokens a
        decode step verifies; the MTP module drafts them, so a model needs an ``mtp`` section).
    plan : ParallelPlan
        ``tp`` sockets share the weights; ``attention_dp`` (a divisor of ``tp``) splits the
        sequences of attention.
    policy : KVPolicyHooks, optional
        Its ``prefill_kernels`` (in prefill) or ``decode_kernels`` (in decode) are appended to
        every layer that writes a cache: with ``kv_shared_layers`` (CLA), to the first layer of each
        group sharing one, as the group's cache is selected, evicted or recalled once.
    expert_loading : {"touched", "all"}
        Expert weights streamed per MoE call: those the call's rows route to (default), or every
        expert (a static fused kernel); see :mod:`sn40l_sim.models.moe`.
    routing_skew : float
        Zipf exponent of expert popularity for the touched-expert expectation (0 = uniform).
    template : str or Path or KernelTemplates, optional
        A kernel template file replacing the model's, or that template already loaded.

    Returns
    -------
    KernelGraph
        One socket's shard of every kernel, in call order (:meth:`~sn40l_sim.ir.KernelGraph.kernels`).

    Raises
    ------
    InputError
        For an unknown option or a shape or plan the graph cannot be built for.

    Examples
    --------
    One decode step of Llama-3.1-8B on 8 sockets: an embedding, one fused decoder kernel per layer,
    the LM head and sampling, each with one socket's share of the work:

    >>> from sn40l_sim.models.loader import load_model
    >>> llama = load_model("graphs/llama3_1_8b.yaml")
    >>> graph = build_graph(llama, Shape("decode", batch=8, prompt_len=0, kv_len=1024), ParallelPlan(tp=8))
    >>> kernels = graph.kernels()
    >>> len(kernels), llama.layers, [k.name for k in kernels[:2]], kernels[-1].name
    (35, 32, ['embedding', 'L00.decoder'], 'sampling')
    >>> q = kernels[1].operators[1]        # 8 rows x 512 of the 4,096 query columns (4 heads of 32) x 4,096
    >>> q.name, (q.m, q.n, q.k), q.flops == 2 * 8 * 512 * 4096
    ('q_proj', (8, 512, 4096), True)
    >>> [(c.kind, c.group) for c in kernels[1].collectives]     # after o_proj and after the FFN's down projection
    [('all_reduce', 8), ('all_reduce', 8)]

    Identical layers give kernels with equal signatures, which the mapper maps once:

    >>> kernels[1].signature() == kernels[2].signature()
    True
    """
    opts = check_graph_options(options)
    check_graph_inputs(model, shape, plan)
    template = opts["template"]
    if not isinstance(template, KernelTemplates):
        template = load_templates(template) if template else template_for(model)
    main = Ctx(model, shape, plan, template, opts["expert_loading"], float(opts["routing_skew"]))
    # a draft run advances each sequence by one row: the main context without the drafts
    contexts = {False: main, True: replace(main, shape=replace(shape, drafts=0))}
    phase: PhaseTemplate = getattr(template, shape.phase)
    runs = _mtp_runs(model, shape)
    if runs and not (phase.blocks.mtp_head or phase.blocks.mtp_tail):
        # without them the MTP run would be a bare transformer block, its projection and head missing
        raise InputError(f"template: the kernel template's {shape.phase} blocks have no mtp_head / mtp_tail, but "
                         f"the {shape.phase} runs the MTP module ({shape.drafts} speculative drafts; a prefill "
                         "before drafting fills the MTP layer's cache): add them, as graphs/kernels_deepseek.yaml "
                         "does, or leave serving.speculative out")
    plan_ = _sequence(model, phase, runs)
    extra = {False: _policy_kernels(policy, model, shape, plan),
             True: _policy_kernels(policy, model, contexts[True].shape, plan) if shape.drafts else []}
    kernels = with_activations(_parts(plan_, phase, contexts, template, extra))
    flash = template.flash
    if shape.phase == "prefill" and padded_tile_pairs(shape.prompt_len, flash.block_q, flash.block_kv, shape.kv_len):
        # FlashAttention's edge tiles as their own GEMMs, or padded to whole tiles: the mapper keeps the faster
        padded = {draft: replace(ctx, flash_padded=True) for draft, ctx in contexts.items()}
        kernels = with_padded(kernels, with_activations(_parts(plan_, phase, padded, template, extra)), flash.block_q)

    graph = KernelGraph(model=model.name, shape=shape)
    previous: FusedKernel | None = None
    # identical layers share one tuple of operators: their hand-off is summed once
    out_bytes: dict[int, int] = {}
    for kernel in kernels:
        handoff = 0
        if previous is not None:
            ops = previous.operators
            handoff = out_bytes.get(id(ops), -1)
            if handoff < 0:
                handoff = out_bytes[id(ops)] = sum(op.act_out_bytes for op in ops)
        graph.add(kernel, after=previous, bytes_=handoff)
        previous = kernel
    return graph


def _parts(plan_: list[_Entry], phase: PhaseTemplate, contexts: dict[bool, Ctx], template: KernelTemplates,
           extra: dict[bool, list[FusedKernel]]) -> list[tuple[str, int | None, list[list[Step]], FusedKernel]]:
    """``(node, layer, steps, kernel)`` of each kernel of the sequence ``plan_``, built once per
    template kernel and run (main or draft), each layer followed by the policy's ``extra`` kernels."""
    formulas = operators(template.attention), sizes(template.attention)
    built: dict[tuple[str, bool], tuple[list[list[Step]], FusedKernel]] = {}
    parts: list[tuple[str, int | None, list[list[Step]], FusedKernel]] = []
    # the last kernel of each layer (a group's last entry), after which a policy's kernels go
    last_of = {entry.group: entry.node for entry in plan_}
    model = contexts[False].model
    for entry in plan_:
        key = (entry.kernel_id, entry.draft)
        if key not in built:
            built[key] = _kernel(contexts[entry.draft], entry.kernel_id, phase.kernels[entry.kernel_id], *formulas)
        steps, kernel = built[key]
        parts.append((entry.node, entry.layer, steps, kernel))
        if (extra[entry.draft] and entry.layer is not None and last_of[entry.group] == entry.node
                and writes_cache(model, entry.layer)):
            for k in extra[entry.draft]:
                parts.append((f"{entry.group}.{k.name}", entry.layer, [], k))
    return parts


def writes_cache(model: ModelSpec, layer: int) -> bool:
    """Whether ``layer`` writes a KV cache of its own: with CLA only the first of each group of
    ``kv_shared_layers`` (:mod:`sn40l_sim.models.kv_format`) does, and an MTP layer
    (``layer >= layers``) shares with none.

    Examples
    --------
    >>> from sn40l_sim.models.loader import load_model
    >>> cla = load_model("graphs/llama3_1_8b.yaml", overrides={"kv_shared_layers": 2})
    >>> [writes_cache(cla, layer) for layer in (0, 1, 2)], writes_cache(cla, cla.layers)   # the MTP layer's own
    ([True, False, True], True)
    """
    return layer >= model.layers or layer % model.kv_shared_layers == 0


def _policy_kernels(policy: KVPolicyHooks | None, model: ModelSpec, shape: Shape, plan: ParallelPlan) -> list[FusedKernel]:
    if policy is None:
        return []
    prefill = shape.phase == "prefill"   # the context reached in decode decides what a prefill prepares
    in_context = getattr(policy, "context_prefill_kernels", None) if prefill and shape.context_len > 0 else None
    hook = "context_prefill_kernels" if in_context else "prefill_kernels" if prefill else "decode_kernels"
    kernels = (in_context(model, shape.prompt_len, shape.context_len, plan.tp) if in_context
               else policy.prefill_kernels(model, shape.prompt_len, plan.tp) if prefill
               else policy.decode_kernels(model, shape, plan))
    check_policy_kernels(getattr(policy, "name", type(policy).__name__), hook, kernels, shape.phase, plan.sockets)
    return list(kernels)


def check_policy_kernels(policy: str, hook: str, kernels: Any, phase: str, sockets: int) -> None:
    """Refuse what a policy's ``hook`` returned unless it is a list of :class:`FusedKernel` of the
    graph's ``phase`` on its ``sockets`` (a plug-in's, docs/architecture.md, "Extending the
    simulator"): ``None`` or an operator stopped the build with a traceback, and a kernel on other
    sockets than the graph's was timed with their barrier, a silently different step.

    >>> check_policy_kernels("mine", "decode_kernels", None, "decode", 8)
    Traceback (most recent call last):
    ...
    sn40l_sim.errors.InputError: policy: KV policy 'mine': decode_kernels returned None; expected a list of FusedKernel (sn40l_sim.ir), [] for none
    """
    if not isinstance(kernels, (list, tuple)) or not all(isinstance(k, FusedKernel) for k in kernels):
        shown = repr(kernels)
        raise InputError(f"KV policy {policy!r}: {hook} returned {shown[:120]}{'...' if len(shown) > 120 else ''}; "
                         "expected a list of FusedKernel (sn40l_sim.ir), [] for none", field="policy")
    for k in kernels:
        if k.phase != phase:
            raise InputError(f"KV policy {policy!r}: {hook} returned kernel {k.name!r} of phase {k.phase!r}; "
                             f"expected {phase!r}", field="policy")
        if k.shards != sockets:
            raise InputError(f"KV policy {policy!r}: {hook} returned kernel {k.name!r} on {k.shards} sockets "
                             f"(shards); the {phase} graph runs every kernel on its plan's {sockets}", field="policy")
        # an operator's counts reach the mapper unchecked: a negative one stopped with a traceback
        # deep in it, an unknown dtype was costed as bf16 and an unknown kind as nothing, silently
        for op in k.operators:
            bad = [f"{f.name}={getattr(op, f.name)!r}" for f in fields(op) if f.type == "int"
                   and (isinstance(getattr(op, f.name), bool) or not isinstance(getattr(op, f.name), numbers.Integral)
                        or getattr(op, f.name) < 0)]
            bad += [f"kind={op.kind!r}"] * (op.kind not in get_args(OpKind)) + [f"dtype={op.dtype!r}"] * (op.dtype not in DTYPE_BITS)
            if bad:
                raise InputError(f"KV policy {policy!r}: {hook} returned kernel {k.name!r} whose operator {op.name!r} has "
                                 f"{', '.join(bad)}; expected counts and bytes that are integers >= 0, a kind of "
                                 f"{', '.join(get_args(OpKind))} and a dtype of {', '.join(DTYPE_BITS)} (sn40l_sim.ir)",
                                 field="policy")


def check_graph_options(options: dict[str, Any]) -> dict[str, Any]:
    """The options of :func:`build_graph` with their defaults, checked without building a graph
    (``check`` calls it for an experiment's ``graph_options``).

    >>> check_graph_options({"routing_skew": 0.5})["expert_loading"]
    'touched'
    >>> check_graph_options({"routing_skew": float("inf")})
    Traceback (most recent call last):
    ...
    sn40l_sim.errors.InputError: routing_skew: expected a finite number from 0 to 10 (0 = uniform), got inf

    Raises
    ------
    InputError
        For an unknown option or a bad value; the message starts with the option's name.
    """
    if "include_mtp" in options:
        raise InputError("include_mtp: the MTP module runs as the draft of speculative decoding, once per "
                         "draft: state the drafts instead (Shape.drafts; in an experiment, serving.speculative)")
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise InputError(f"unknown graph option(s) {', '.join(map(str, unknown))}; known: {', '.join(OPTIONS)}")
    opts = {**OPTIONS, **options}
    if opts["expert_loading"] not in ("all", "touched"):
        raise InputError(f"expert_loading: expected 'touched' or 'all', got {shown(opts['expert_loading'])}")
    skew = opts["routing_skew"]
    if isinstance(skew, bool) or not isinstance(skew, (int, float)) or not 0 <= skew <= MAX_ROUTING_SKEW:
        raise InputError(f"routing_skew: expected a finite number from 0 to {MAX_ROUTING_SKEW} (0 = uniform), "
                         f"got {shown(skew)}")
    template = opts["template"]
    if template is not None and not isinstance(template, (str, Path, KernelTemplates)):
        raise InputError(f"template: expected the path of a kind: kernels file, got {shown(template)}")
    return opts


class _Entry(NamedTuple):
    """One kernel of the sequence: its node name, layer, template kernel id, the name prefix of its
    layer (``L03``, ``MTP0``; ``""`` outside layers) and whether it belongs to a draft run."""

    node: str
    layer: int | None
    kernel_id: str
    group: str
    draft: bool


def _mtp_runs(model: ModelSpec, shape: Shape) -> int:
    """Runs of the MTP module in the graph: one per draft in a decode step; in a prefill, one per
    module the drafts use, over the prompt (to fill its cache)."""
    if not shape.drafts or shape.phase == "decode":
        return shape.drafts
    return min(shape.drafts, model.mtp.modules)


def _sequence(model: ModelSpec, phase: PhaseTemplate, drafts: int) -> list[_Entry]:
    """The graph's kernels in execution order: head, layers, tail, then ``drafts`` MTP runs."""
    b = phase.blocks
    out = [_Entry(k, None, k, "", False) for k in b.head]
    dense = dense_layer_count(model)
    block_of = lambda i: b.dense_layer if i < dense else b.moe_layer  # noqa: E731
    for i in range(model.layers):
        out += [_Entry(f"L{i:02d}.{_name(phase, k)}", i, k, f"L{i:02d}", False) for k in block_of(i)]
    out += [_Entry(_name(phase, k), None, k, "", False) for k in b.tail]
    body = b.moe_layer if model.moe is not None else b.dense_layer
    for d in range(drafts):
        layer = model.layers + d % model.mtp.modules
        out += [_Entry(f"MTP{d}.{_name(phase, k)}", layer, k, f"MTP{d}", True)
                for k in (*b.mtp_head, *body, *b.mtp_tail)]
    names = [e.node for e in out]
    if len(set(names)) != len(names):
        raise InputError("kernel template gives two kernels of one layer the same name")
    return out


def _name(phase: PhaseTemplate, kernel_id: str) -> str:
    return phase.kernels[kernel_id].name or kernel_id


def _kernel(ctx: Ctx, kernel_id: str, entry: KernelEntry, ops: dict[str, OperatorFormula],
            size_of: dict[str, SizeFormula]) -> tuple[list[list[Step]], FusedKernel]:
    per_op = [ops[name](ctx) for name in entry.operators]
    collectives = []
    # a window of the stream is a decode kernel's: its data tiles are weight tiles holding every
    # token's rows. Prefill's are token slices, each carrying its rows as it comes out, so there
    # `after` only places the collective in the kernel's order for the template checks
    # (Collective.after; docs/validation.md, "Decode all-reduces under the GEMM")
    windowed = ctx.phase == "decode"
    for coll in entry.collectives:
        size = size_of[coll.size](ctx)
        if size > 0 and ctx.tp > 1:
            collectives.append(Collective(kind=coll.kind, bytes=size, group=ctx.tp,
                                          overlapped=coll.overlapped, name=coll.size,
                                          after=(coll.after or "") if windowed else ""))
    notes = tuple(n for steps in per_op for s in steps for n in s.notes)
    kernel = FusedKernel(name="", kind=entry.kind or entry.name or kernel_id, phase=ctx.phase, operators=(),
                         collectives=tuple(collectives), shards=ctx.plan.sockets, notes=notes)
    return per_op, kernel
