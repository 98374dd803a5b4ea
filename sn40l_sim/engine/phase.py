"""The result of one simulated phase (a prefill, or one decode step): :class:`PhaseTiming`.

Built from a :class:`~sn40l_sim.engine.run_graph.GraphRun` by :func:`phase_timing`; immutable,
and equal for equal inputs (the engine is deterministic), so memoised steps can be shared.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from sn40l_sim.engine.kernel_process import KernelRecord
from sn40l_sim.engine.run_graph import GraphRun
from sn40l_sim.engine.trace import TraceEvent
from sn40l_sim.ir import FusedKernel, Operator

#: operators that belong to the attention itself (not its projections): they read the KV cache,
#: or are its softmax, or are a GEMM beside a softmax (:func:`attention_flags`)
ATTENTION_OP_KINDS = frozenset({"softmax"})


def is_attention_op(op: Operator) -> bool:
    """Whether ``op`` alone shows that it is part of the attention proper: it reads the KV cache or
    is a softmax. The weighted sum of values need not read the cache (:func:`attention_flags`).

    >>> is_attention_op(Operator("scores", "gemm", kv_read_bytes=10)), is_attention_op(Operator("q_a", "gemm"))
    (True, False)
    """
    return op.kv_read_bytes > 0 or op.kind in ATTENTION_OP_KINDS


def attention_flags(ops: Sequence[Operator]) -> list[bool]:
    """Which of a kernel's operators (in order) are the attention proper: scores, softmax, weighted
    sum of values. Those that read the KV cache or are a softmax (:func:`is_attention_op`), and the
    GEMMs just before and after a softmax: its scores and the weighted sum of its probabilities.
    MLA's absorbed decode reads the cached latent once, with the scores' tile, so its weighted sum
    reads no cache bytes of its own (``absorbed_pv``, :mod:`sn40l_sim.models.families.mla`), and a
    prefill's scores and weighted sum read K and V as activations; counted by cache reads alone,
    their FLOPs went to ``other_compute`` (docs/validation.md, "Sequences per socket").

    >>> ops = (Operator("q", "gemm"), Operator("qk", "gemm", kv_read_bytes=8), Operator("p", "softmax"),
    ...        Operator("pv", "gemm"), Operator("o", "gemm"))
    >>> attention_flags(ops)
    [False, True, True, True, False]
    >>> attention_flags(ops[:4] + (Operator("pv#2", "gemm"), Operator("o", "gemm")))
    [False, True, True, True, True, False]
    """
    flags = [is_attention_op(op) for op in ops]
    for i, op in enumerate(ops):
        if op.kind in ATTENTION_OP_KINDS:
            for j in (i - 1, i + 1):
                if 0 <= j < len(ops) and ops[j].kind == "gemm":
                    flags[j] = True
    # a GEMM cut into shapes (``name#2``: GQA decode's KV heads with a query head fewer on an uneven
    # split) is one operator, whose traffic its first shape carries
    attention = {op.name for op, flag in zip(ops, flags, strict=True) if flag and op.kind == "gemm"}
    return [flag or (op.kind == "gemm" and op.name.split("#")[0] in attention) for op, flag in zip(ops, flags, strict=True)]


@dataclass(frozen=True)
class KernelTiming:
    """One kernel of the phase on the simulated socket (cycles from the start of the phase)."""

    name: str
    kind: str
    layer: int | None
    start_cycle: int
    end_cycle: int
    #: kernel-call boundary and configuration: launch + barrier + configuration loads
    overhead_cycles: int
    fill_cycles: int
    #: cycles the compute stages worked
    compute_busy_cycles: int
    #: streaming time bounded by memory / by compute: with ``gate_cycles`` (and a loop iteration's
    #: ``fill_cycles``, paid after its stream started) they add up to the streaming time
    memory_bound_cycles: int
    compute_bound_cycles: int
    #: time after the compute finished spent waiting for collectives
    collective_exposed_cycles: int
    #: sum of the kernel's collectives' durations (overlapped or not)
    collective_cycles: int
    #: tier -> bytes the kernel moved to and from it (every tier of the socket)
    tier_bytes: dict[str, int]
    #: the graph's byte and FLOP counts of the kernel, by use (from its operators)
    weight_bytes: int
    kv_bytes: int
    activation_bytes: int
    flops: int
    attention_flops: int
    #: the parts of ``overhead_cycles``: the host's launch, the barrier, the configuration loads
    launch_cycles: int = 0
    barrier_cycles: int = 0
    config_cycles: int = 0
    #: when the tiles were done (collectives may go on)
    stream_end_cycle: int = 0
    #: waits inside the stream for a collective: a loop iteration's compute for the previous
    #: iteration's, later data tiles for an earlier operator's overlapped one (``Collective.after``)
    gate_cycles: int = 0
    #: index of the iteration in its kernel loop (0: a call)
    iteration: int = 0
    #: bytes moved to and from a KV policy's store (ArkVale's recall; :class:`~sn40l_sim.ir.Operator`)
    kv_offload_bytes: int = 0

    @property
    def cycles(self) -> int:
        """Cycles from the kernel's call to its end (collectives included)."""
        return self.end_cycle - self.start_cycle


@dataclass(frozen=True)
class PhaseTiming:
    """Time and resource use of one prefill or one decode step on the simulated socket.

    Attributes
    ----------
    phase, batch, prompt_len, kv_len
        What was simulated.
    cycles, seconds : int, float
        Length of the phase.
    kernel_cycles : dict
        Cycles per kernel kind (``qkv``, ``mha``, ``moe_ffn``, ...), summed over the graph, each
        cycle of the socket counted once (:func:`socket_cycles`).
    kernel_cycles_by_name : dict
        Cycles per kernel, counted the same way.
    layer : int or None
        The representative MoE layer (see :func:`representative_layer`).
    layer_cycles : dict
        Cycles per kernel kind within :attr:`layer` (Table 4 compares these shares).
    resource_busy_cycles : dict
        ``compute`` (compute stages working), one entry per memory tier (``hbm``, ``ddr``, ...) and
        ``tln`` (at least one stream on the channel), ``p2p`` (a collective on the socket's links), ``overhead`` (kernel-call
        launches, barriers and configuration loads), ``fill`` (pipeline fills).
    tier_bytes : dict
        Bytes moved per memory tier (``hbm``, ``ddr``, ...).
    link_bytes : dict
        ``p2p`` (summed over every link the collectives crossed, all sockets), ``p2p_sent`` (what the
        simulated socket sent), ``tln``, ``mesh`` (the mapper's on-tile mesh bytes).
    events : tuple of TraceEvent
        Intervals for Chrome traces.
    kernels : tuple of KernelTiming
        Per-kernel detail, in execution order.
    switch_load_cycles : int
        Configuration loads the phase pays on top of ``cycles`` when the node ran another graph
        just before (:attr:`~sn40l_sim.engine.run_graph.GraphRun.switch_load_cycles`): the serving
        loop charges them where a co-located node switches between prefill and decode.
    byte_seconds : tuple of (str, float)
        Seconds one byte of each use (``weights``, ``kv``, ``activations``, a KV policy's store
        ``kv_offload``) takes at the achievable bandwidths of the tiers holding it, when the uses
        live in tiers of different speeds (the breakdown shares memory-bound time by these times,
        not bytes); empty when every use lives in one tier.
    """

    phase: str
    batch: int
    prompt_len: int
    kv_len: int
    cycles: int
    seconds: float
    kernel_cycles: dict[str, int]
    kernel_cycles_by_name: dict[str, int]
    layer: int | None
    layer_cycles: dict[str, int]
    resource_busy_cycles: dict[str, int]
    tier_bytes: dict[str, int]
    link_bytes: dict[str, int]
    events: tuple[TraceEvent, ...]
    kernels: tuple[KernelTiming, ...]
    switch_load_cycles: int = 0
    byte_seconds: tuple[tuple[str, float], ...] = ()

    def layer_shares(self) -> dict[str, float]:
        """Fraction of the representative layer's time per kernel kind."""
        total = sum(self.layer_cycles.values())
        return {k: v / total for k, v in self.layer_cycles.items()} if total else {}


def operator_sums(ops: tuple[Operator, ...]) -> tuple[int, int, int, int, int]:
    """Weight, KV, activation bytes, FLOPs and attention FLOPs of a kernel's operators.

    >>> operator_sums((Operator("scores", "gemm", flops=8, kv_read_bytes=10), Operator("q", "gemm", flops=2)))
    (0, 10, 0, 10, 8)
    """
    return (sum(op.weight_bytes for op in ops), sum(op.kv_read_bytes + op.kv_write_bytes for op in ops),
            sum(op.act_in_bytes + op.act_out_bytes for op in ops), sum(op.flops for op in ops),
            sum(op.flops for op, attention in zip(ops, attention_flags(ops), strict=True) if attention))


def kernel_timing(record: KernelRecord, sums: tuple[int, int, int, int, int] | None = None) -> KernelTiming:
    """The immutable summary of one simulated kernel (``sums``: :func:`operator_sums` of its
    operators, when the caller has them)."""
    kernel: FusedKernel = record.placed.kernel
    weight, kv, activation, flops, attention = operator_sums(kernel.operators) if sums is None else sums
    return KernelTiming(
        name=record.name, kind=record.kind, layer=record.layer,
        start_cycle=record.start, end_cycle=record.end,
        overhead_cycles=record.launch_cycles + record.barrier_cycles + record.config_cycles,
        fill_cycles=record.fill_cycles, compute_busy_cycles=record.compute_busy_cycles,
        memory_bound_cycles=record.memory_bound_cycles,
        compute_bound_cycles=record.compute_bound_cycles,
        collective_exposed_cycles=max(0, record.end - record.stream_end),
        collective_cycles=sum(run.end - run.start for run in record.collectives),
        tier_bytes=dict(record.tier_bytes),
        weight_bytes=weight, kv_bytes=kv, activation_bytes=activation, flops=flops, attention_flops=attention,
        launch_cycles=record.launch_cycles, barrier_cycles=record.barrier_cycles,
        config_cycles=record.config_cycles, stream_end_cycle=record.stream_end, gate_cycles=record.gate_cycles,
        iteration=record.iteration, kv_offload_bytes=kernel.kv_offload_bytes,
    )


def representative_layer(kernels: tuple[KernelTiming, ...]) -> int | None:
    """The first layer of the most common kind of layer (for DeepSeek-R1, 58 MoE layers against 3
    dense ones and the MTP block); among equally common kinds, one with a kernel whose kind
    names a MoE (``moe_ffn``) first. A layer's kind is the sequence of its kernels' kinds, FLOPs
    and bytes, so identical layers match and a dense FFN differs from a MoE one.
    """
    patterns: dict[int, list] = {}
    for k in kernels:
        if k.layer is not None:
            patterns.setdefault(k.layer, []).append((k.kind, k.flops, k.weight_bytes, k.kv_bytes))
    if not patterns:
        return None
    groups: dict[tuple, list[int]] = {}
    for layer in sorted(patterns):
        groups.setdefault(tuple(patterns[layer]), []).append(layer)

    def rank(item):
        pattern, layers = item
        return (-len(layers), not any("moe" in kind for kind, *_ in pattern), layers[0])

    return min(groups.items(), key=rank)[1][0]


def socket_cycles(kernels: Sequence[KernelTiming]) -> list[int]:
    """Cycles each kernel holds the socket, each cycle counted once: a kernel's interval less what an
    earlier one already covers. A loop iteration hands the socket to the next when its tiles are
    done (its collectives overlap the next iteration, which counts its wait for them), so a loop's
    iterations add up to the loop's span, as calls one after the other add up to theirs; the
    cycles of a phase are these plus the gaps between kernels.

    >>> from types import SimpleNamespace as NS
    >>> it = lambda i, start, stream, end: NS(start_cycle=start, stream_end_cycle=stream, end_cycle=end, iteration=i)
    >>> socket_cycles((it(0, 0, 80, 100), it(1, 80, 160, 180), it(2, 160, 240, 260)))
    [80, 80, 100]
    """
    out = []
    cursor = 0
    for i, k in enumerate(kernels):
        looped_on = i + 1 < len(kernels) and kernels[i + 1].iteration > 0
        end = k.stream_end_cycle if looped_on else k.end_cycle
        out.append(max(0, end - max(k.start_cycle, cursor)))
        cursor = max(cursor, end)
    return out


def phase_timing(run: GraphRun, *, phase: str, batch: int, prompt_len: int, kv_len: int,
                 clock_hz: float, byte_seconds: tuple[tuple[str, float], ...] = ()) -> PhaseTiming:
    """Summarise a graph run as a :class:`PhaseTiming` (``byte_seconds`` as there)."""
    # the layers of a model share their kernels' operator tuples: sum each tuple once (keyed by
    # its identity, alive in the records for the whole call)
    sums: dict[int, tuple[int, int, int, int, int]] = {}
    kernels = []
    for r in run.records:
        ops = r.placed.kernel.operators
        got = sums.get(id(ops))
        if got is None:
            got = sums[id(ops)] = operator_sums(ops)
        kernels.append(kernel_timing(r, got))
    kernels = tuple(kernels)
    by_kind: dict[str, int] = defaultdict(int)
    by_name: dict[str, int] = {}
    for k, held in zip(kernels, socket_cycles(kernels), strict=True):
        by_kind[k.kind] += held
        by_name[k.name] = by_name.get(k.name, 0) + held
    layer = representative_layer(kernels)
    in_layer: dict[str, int] = defaultdict(int)
    for k in kernels:
        if layer is not None and k.layer == layer:
            in_layer[k.kind] += k.cycles
    return PhaseTiming(
        phase=phase, batch=batch, prompt_len=prompt_len, kv_len=kv_len,
        cycles=run.cycles, seconds=run.cycles / clock_hz,
        kernel_cycles=dict(by_kind), kernel_cycles_by_name=by_name,
        layer=layer, layer_cycles=dict(in_layer),
        resource_busy_cycles=dict(run.busy_cycles), tier_bytes=dict(run.tier_bytes),
        link_bytes=dict(run.link_bytes), events=run.events, kernels=kernels,
        switch_load_cycles=run.switch_load_cycles, byte_seconds=byte_seconds,
    )
