"""The fused-kernel graph: what the graph builder produces and the mapper consumes.

All quantities are for **one socket's shard** of the kernel (the busiest socket when the split is
uneven), so the mapper never has to know the parallel plan. Field names are a contract: add, never
rename.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from sn40l_sim.frozen import copied, hashed_once

if TYPE_CHECKING:
    import networkx as nx

OpKind = Literal[
    "gemm",          # C[M,N] = A[M,K] @ B[K,N] (``count`` independent GEMMs of that shape)
    "softmax",       # exp in the tail stage + row reductions
    "elementwise",   # SIMD lanes (norms, activations, RoPE, masking, casts)
    "reduction",     # cross-lane tree (sums, max, pooling)
    "topk",          # selection (router top-k, SnapKV top-K)
    "gather",        # indexed reads (embedding lookup, KV gathers)
    "scatter",       # indexed writes (ring-buffer slot write)
]
CollectiveKind = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all"]
Phase = Literal["prefill", "decode"]

#: bits of one element of each datatype an operator, a weight tensor or a KV cache may name
#: (the one table: models, kvcache and the mapper all read it or :data:`DTYPE_BYTES`)
DTYPE_BITS = {"bf16": 16, "fp16": 16, "fp32": 32, "int32": 32, "int8": 8, "fp8": 8, "int4": 4}
#: bytes of one element of the datatypes a whole number of bytes wide (a packed ``int4`` cache is
#: sized from :data:`DTYPE_BITS`)
DTYPE_BYTES = {name: bits // 8 for name, bits in DTYPE_BITS.items() if bits % 8 == 0}
#: activations, between kernels and on chip, are BF16: the SN40L PCU computes in BF16 and widens
#: FP8 weights before the systolic array (docs/reference.md §1)
ACT_BYTES = DTYPE_BYTES["bf16"]


@dataclass(frozen=True)
class AttentionShape:
    """What a decode attention's scores GEMM attends over, on one socket: ``sequences`` independent
    caches (sequences, or sequence x KV head for GQA) of ``kv_tokens`` cached tokens each, read by
    ``rows`` query rows each (heads x query tokens) whose outputs are ``value_width`` wide. The
    mapper spreads them over the tiles (:mod:`sn40l_sim.mapper.attention`)."""

    sequences: int
    rows: int
    kv_tokens: int
    value_width: int


@hashed_once
@dataclass(frozen=True)
class Operator:
    """One operator inside a fused kernel, per socket shard.

    ``flops`` is exact: for a GEMM it is ``2 * m * n * k * count``. Byte fields count traffic to
    and from off-chip memory (weights, KV) or between kernels (activations).
    """

    name: str
    kind: OpKind
    flops: int = 0
    m: int = 0
    n: int = 0
    k: int = 0
    count: int = 1
    #: element operations for SIMD kinds (softmax, elementwise, reduction, topk, gather, scatter)
    elements: int = 0
    transcendentals: int = 0
    weight_bytes: int = 0
    act_in_bytes: int = 0
    act_out_bytes: int = 0
    kv_read_bytes: int = 0
    kv_write_bytes: int = 0
    #: datatype of the elements a SIMD operator touches (a key of :data:`DTYPE_BYTES`)
    dtype: str = "bf16"
    #: set on a decode attention's scores GEMM: what it attends over
    attention: AttentionShape | None = None
    #: traffic to and from a KV policy's *store*: the whole cache a policy keeps in another memory
    #: tier than the cache decode attention reads (DDR offload with recall); the memory placement
    #: says which tier (``MemoryPlacement`` use ``kv_offload``)
    kv_offload_read_bytes: int = 0
    kv_offload_write_bytes: int = 0
    #: of ``act_in_bytes``, the bytes that read again an activation the kernel has already read
    #: once in full (causal FlashAttention streams each K/V tile once per query tile): traffic that
    #: costs time, not memory that is resident (:attr:`FusedKernel.resident_activation_bytes`)
    act_reread_bytes: int = 0
    #: names of the kernel's earlier operators whose outputs this one reads on chip (the graph
    #: builder derives them from the activations its formulas name, :mod:`sn40l_sim.models.activations`):
    #: the edges of the kernel's dataflow graph, along which its pipeline fills (a stage waits for
    #: its producers only, so parallel branches fill side by side). None: the operator just before
    #: it, a plain chain (a kernel written by hand); ``()``: none, it reads only the kernel's inputs.
    producers: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Collective:
    """A collective a kernel needs among ``group`` sockets.

    ``bytes`` is the size of the full tensor being reduced or gathered (what each socket holds
    at the end of an all-reduce / all-gather; what it holds at the start of a reduce-scatter;
    what it sends in total in an all-to-all).
    """

    kind: CollectiveKind
    bytes: int
    group: int
    #: may start after the kernel's first tile and overlap its compute (P2P in the fused MoE)
    overlapped: bool = False
    name: str = ""
    #: for an overlapped collective, the operator of the kernel whose output it carries: it then
    #: runs beside that operator's part of the kernel's stream only, and the stream's later data
    #: tiles wait for it (the operators after it read the reduced rows;
    #: :mod:`sn40l_sim.mapper.windows`). Empty: it carries every data tile's output as the tile
    #: comes out (a token-sliced kernel, prefill's, whatever its template's ``after:``) and runs
    #: beside the whole stream.
    after: str = ""


@hashed_once
@dataclass(frozen=True)
class FusedKernel:
    """One fused kernel on one socket: a static pipeline of operators, plus its collectives."""

    name: str
    kind: str
    phase: Phase
    operators: tuple[Operator, ...]
    collectives: tuple[Collective, ...] = ()
    layer: int | None = None
    #: sockets running this kernel at once (16 for TP16)
    shards: int = 1
    #: figures worth printing that are not costs, e.g. ``("experts_touched", 12.4)``; identical
    #: for identical layers, so they do not break :meth:`signature` equality
    notes: tuple[tuple[str, float], ...] = ()
    #: the same kernel with its FlashAttention edge tiles padded to whole tiles, the padding masked
    #: (a prefill attention kernel whose tiles are of several shapes, :mod:`sn40l_sim.models.flash`):
    #: fewer GEMM stages, more FLOPs and the padding's traffic; the mapper keeps the faster version.
    #: None for every other kernel.
    padded: FusedKernel | None = None

    @property
    def flops(self) -> int:
        return sum(op.flops for op in self.operators)

    @property
    def weight_bytes(self) -> int:
        return sum(op.weight_bytes for op in self.operators)

    @property
    def kv_bytes(self) -> int:
        return sum(op.kv_read_bytes + op.kv_write_bytes for op in self.operators)

    @property
    def kv_offload_bytes(self) -> int:
        """Bytes moved to and from a KV policy's store (see :class:`Operator`)."""
        return sum(op.kv_offload_read_bytes + op.kv_offload_write_bytes for op in self.operators)

    @property
    def resident_activation_bytes(self) -> int:
        """Activation bytes resident in off-chip memory while the kernel runs, on one socket.

        What is counted: every activation the kernel reads from another kernel and every one it
        hands on, each **once, at its full size** (``act_in_bytes + act_out_bytes`` less
        ``act_reread_bytes``): its inputs must all exist before it starts and its outputs all exist
        when it ends. What is not: re-reads of a tensor already counted, such as causal
        FlashAttention streaming each K/V tile once per query tile (the traffic grows as the square
        of the prompt and is charged as time by the mapper and the engine; the tensor is in memory
        once), and the tiles in flight, which are on-chip copies of slices of these tensors (PMU
        buffers, sized and checked by the mapper's tiling). So the figure grows linearly with the
        prompt, and for a prefill attention kernel it is at least its Q, K, V and output.

        >>> op = Operator("qk", "gemm", act_in_bytes=100 + 700, act_out_bytes=50, act_reread_bytes=600)
        >>> FusedKernel("mha", "mha", "prefill", (op,)).resident_activation_bytes
        250
        """
        return sum(op.act_in_bytes + op.act_out_bytes - op.act_reread_bytes for op in self.operators)

    def signature(self) -> FusedKernel:
        """The kernel without its name and layer: equal signatures map and cost the same.

        >>> from dataclasses import replace
        >>> k = FusedKernel("L3.ffn", "ffn", "decode", (), layer=3)
        >>> k.signature() == replace(k, name="", layer=None), k.signature().signature() == k.signature()
        (True, True)
        """
        if self.name == "" and self.layer is None:
            return self
        # made once per kernel and kept (its hash with it: the mapper and the engine ask for every
        # kernel's signature, and hash it, at every call of every graph); a copy of the fields
        # with two replaced, since ``dataclasses.replace`` re-runs ``__init__`` field by field
        state = self.__dict__
        got = state.get("_signature")
        if got is None:
            got = state["_signature"] = copied(self, name="", layer=None)
        return got


@dataclass(frozen=True)
class Shape:
    """The shape a graph is built for: ``phase``, sequences (``batch``), prompt tokens
    (``prompt_len``, prefill) and cached tokens each sequence reads (``kv_len``, decode).

    Examples
    --------
    One decode step of 8 sequences, each reading 1,024 cached tokens, and one 4,096-token prefill:

    >>> Shape("decode", batch=8, prompt_len=0, kv_len=1024)
    Shape(phase='decode', batch=8, prompt_len=0, kv_len=1024, drafts=0, context_len=0)
    >>> Shape("prefill", 1, 4096).kv_len
    0
    """

    phase: Phase
    batch: int
    prompt_len: int
    #: tokens of cache each sequence's attention reads in decode (after any compression); in
    #: prefill, the prompt's tokens cached before these ``prompt_len`` rows (a later chunk of a
    #: chunked prefill: its attention also covers them), 0 for a whole prompt
    kv_len: int = 0
    #: speculative decoding: draft tokens per sequence a decode step verifies (it runs the main
    #: model over ``1 + drafts`` query rows per sequence and the draft model ``drafts`` times);
    #: 0 is plain decode. In prefill: the drafts its decode will verify, so the MTP module runs
    #: over the prompt to fill its own cache
    drafts: int = 0
    #: tokens of context a sequence has at most in decode (prompt + max_new_tokens - 1 + drafts, the
    #: decode slot rule of :func:`sn40l_sim.kvcache.base.slot_new_tokens`), for a KV policy
    #: whose decode work grows with the whole context rather than with ``kv_len`` (page digests
    #: scored every step) and, in prefill, one that prepares decode's eviction or recall state
    #: when the context outgrows its budget though the prompt fits it; 0 when not given
    context_len: int = 0


@dataclass(eq=False)
class KernelGraph:
    """A DAG of fused kernels in execution order: nodes are kernel names, an edge ``a -> b``
    carries the ``bytes`` kernel ``a`` hands kernel ``b``.

    Kept in plain dictionaries (networkx is a large import that a run does not otherwise need);
    :attr:`graph` gives the same DAG as a ``networkx.DiGraph`` (node attributes ``kernel`` and
    ``seq``, edge attribute ``bytes``) for analysis.

    >>> g = KernelGraph("toy", Shape("decode", 1, 0, 8))
    >>> a, b = FusedKernel("a", "ffn", "decode", ()), FusedKernel("b", "ffn", "decode", ())
    >>> g.add(a); g.add(b, after=a, bytes_=64)
    >>> [k.name for k in g.kernels()], g.predecessors("b"), g.edges()
    (['a', 'b'], ['a'], [('a', 'b', {'bytes': 64})])
    """

    model: str
    shape: Shape
    #: kernel name -> node attributes (``kernel``, ``seq``: the order kernels were added in)
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict, repr=False)
    #: kernel name -> {successor name -> edge attributes}, both in insertion order
    _succ: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict, repr=False)
    _pred: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict, repr=False)

    def _node(self, name: str) -> dict[str, Any]:
        if name not in self.nodes:
            self.nodes[name] = {}
            self._succ[name] = {}
            self._pred[name] = {}
        return self.nodes[name]

    def add(self, kernel: FusedKernel, after: FusedKernel | None = None, bytes_: int = 0) -> None:
        """Add ``kernel`` (replacing a kernel of the same name), after ``after`` when given."""
        # insertion order breaks ties in the topological order, so it follows the model's layers
        seq = len(self.nodes)
        self._node(kernel.name).update(kernel=kernel, seq=seq)
        if after is not None:
            self._node(after.name)
            edge = self._succ[after.name].setdefault(kernel.name, {})
            edge["bytes"] = bytes_
            self._pred[kernel.name][after.name] = edge

    def __contains__(self, name: object) -> bool:
        return name in self.nodes

    def predecessors(self, name: str) -> list[str]:
        """Names of the kernels with an edge into ``name``, in the order the edges were added."""
        return list(self._pred[name])

    def edges(self) -> list[tuple[str, str, dict[str, int]]]:
        """``(producer, consumer, {"bytes": n})`` of every edge, by producer, in insertion order."""
        return [(u, v, data) for u, out in self._succ.items() for v, data in out.items()]

    def kernels(self) -> list[FusedKernel]:
        """Kernels in a deterministic topological order: of the kernels whose producers are all
        done, the one added first (networkx's ``lexicographical_topological_sort`` by ``seq``)."""
        index = {n: i for i, n in enumerate(self.nodes)}
        waiting = {n: len(p) for n, p in self._pred.items() if p}
        ready = [(self.nodes[n]["seq"], index[n], n) for n, p in self._pred.items() if not p]
        heapq.heapify(ready)
        order = []
        while ready:
            name = heapq.heappop(ready)[2]
            for child in self._succ[name]:
                waiting[child] -= 1
                if waiting[child] == 0:
                    heapq.heappush(ready, (self.nodes[child]["seq"], index[child], child))
                    del waiting[child]
            order.append(self.nodes[name]["kernel"])
        if waiting:
            raise ValueError(f"kernel graph {self.model!r} has a cycle")
        return order

    @property
    def graph(self) -> nx.DiGraph:
        """The DAG as a new ``networkx.DiGraph`` (for analysis; editing it leaves this graph as it is)."""
        import networkx as nx  # a large import, needed only here

        out = nx.DiGraph()
        out.add_nodes_from((n, dict(attrs)) for n, attrs in self.nodes.items())
        out.add_edges_from((u, v, dict(data)) for u, v, data in self.edges())
        return out


@dataclass(frozen=True)
class ParallelPlan:
    """How one phase is split over the sockets of a node.

    ``tp`` shards weights (projections, experts) over sockets; ``attention_dp`` splits the batch's
    sequences over sockets for the attention itself (each socket holds its own sequences' KV).

    Examples
    --------
    DeepSeek-R1's decode plan on 16 sockets (``experiments/deepseek_tp16.yaml``): weights and
    sequences both split 16 ways:

    >>> ParallelPlan(tp=16, attention_dp=16).sockets, ParallelPlan(tp=8).sockets
    (16, 8)
    """

    tp: int = 1
    attention_dp: int = 1

    @property
    def sockets(self) -> int:
        return max(self.tp, self.attention_dp)
