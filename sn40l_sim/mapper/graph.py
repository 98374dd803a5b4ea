"""Mapping a whole kernel graph: :func:`map_graph`, memoised on kernel signatures.

Identical layers produce kernels with equal :meth:`~sn40l_sim.ir.FusedKernel.signature`
(name and layer aside), so each distinct kernel is mapped once and the result is re-labelled for
every layer. The memo is kept across calls (bounded), keyed on the socket's description, the
signature and the memory tiers, so an engine timing many decode shapes maps each new shape's
kernels once.

Examples
--------
>>> from sn40l_sim.mapper._examples import example_node, example_decode_kernel
>>> from sn40l_sim.ir import KernelGraph, Shape
>>> from dataclasses import replace
>>> graph = KernelGraph("toy", Shape("decode", 1, 1, 4096))
>>> prev = None
>>> for layer in range(3):
...     k = replace(example_decode_kernel(), name=f"L{layer}.attn", layer=layer)
...     graph.add(k, after=prev)
...     prev = k
>>> placed = map_graph(example_node(), graph)
>>> [pk.kernel.name for pk in placed.kernels], len({pk.cycles for pk in placed.kernels})
(['L0.attn', 'L1.attn', 'L2.attn'], 1)
"""
from __future__ import annotations

from dataclasses import replace

from sn40l_sim.hardware.spec import NodeSpec, SocketSpec
from sn40l_sim.ir import FusedKernel, KernelGraph
from sn40l_sim.mapper.kernel import map_kernel
from sn40l_sim.mapper.memory import all_in_first_tier
from sn40l_sim.mapper.placement import MemoryPlacement, PlacedGraph, PlacedKernel
from sn40l_sim.mapper.stages import TierSplit

#: distinct (socket, kernel, tiers) kept; cleared when full (a decode sweep has a few hundred)
_MEMO_SIZE = 4096
_memo: dict[tuple[str, FusedKernel, TierSplit], PlacedKernel] = {}


def _socket_key(socket: SocketSpec) -> str:
    return socket.model_dump_json()


def map_kernel_cached(socket: SocketSpec, kernel: FusedKernel, tiers: TierSplit | None = None,
                      socket_key: str | None = None) -> PlacedKernel:
    """:func:`~sn40l_sim.mapper.kernel.map_kernel` through the memo; the result carries
    ``kernel`` itself (its name and layer)."""
    tiers = tiers or TierSplit.all_in(next(iter(socket.memory)))
    key = (socket_key or _socket_key(socket), kernel.signature(), tiers)
    placed = _memo.get(key)
    if placed is None:
        if len(_memo) >= _MEMO_SIZE:
            _memo.clear()
        placed = map_kernel(socket, kernel.signature(), tiers)
        _memo[key] = placed
    return replace(placed, kernel=kernel)


def map_graph(node: NodeSpec, graph: KernelGraph, memory: MemoryPlacement | None = None) -> PlacedGraph:
    """Place every kernel of ``graph`` on one socket of ``node``.

    Parameters
    ----------
    node : NodeSpec
    graph : KernelGraph
        Per-socket kernels (the builder's output).
    memory : MemoryPlacement, optional
        Where weights and KV live (from :func:`~sn40l_sim.mapper.memory.place_memory`); kernels
        stream spilled bytes at their tier's bandwidth. Default: everything in the socket's first
        tier, unchecked.

    Returns
    -------
    PlacedGraph
        Kernels in the graph's deterministic topological order.
    """
    memory = memory if memory is not None else all_in_first_tier(node)
    tiers = memory.tiers()
    key = _socket_key(node.socket)
    kernels = tuple(map_kernel_cached(node.socket, k, tiers, key) for k in graph.kernels())
    return PlacedGraph(graph=graph, kernels=kernels, memory=memory)


def clear_memo() -> None:
    """Forget every mapped kernel (tests; hardware edited in place)."""
    _memo.clear()
