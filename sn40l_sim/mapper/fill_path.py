"""The path a section's first data tile takes through its compute stages: the pipeline fill.

A fused kernel's operators form a dataflow graph (:attr:`~sn40l_sim.ir.Operator.producers`; the
section's compute-to-compute streams are its edges, :func:`~sn40l_sim.mapper.stages.section_stages`).
A stage starts on its first data tile once every producer has handed that tile over, so the first
tile leaves the last stage after the **longest path** through the graph, each stage weighing its
cycles per data tile and its own fill and drain, each edge its hand-over. Parallel branches fill
side by side: DeepSeek's MLA kernel projects the query (``q_a``) and the latent KV (``kv_a``) from
the same normalised rows, and neither waits for the other. A plain chain's longest path is every
stage and every hand-over, the sum the fill was before operators named their producers.

Streams run from an earlier stage to a later one (producers precede their readers in a kernel's
order), so one pass in stage order finds the path.

Examples
--------
Two branches off one stage, joined again: the fill takes the longer branch only.

>>> weights = [10, 50, 20, 5]                  # norm, q (long), kv (short), join
>>> edges = [(0, 1, 3), (0, 2, 3), (1, 3, 3), (2, 3, 3)]
>>> longest_path(weights, edges)
(71, (0, 1, 3))
>>> longest_path(weights, [(0, 1, 3), (1, 2, 3), (2, 3, 3)])[0] == sum(weights) + 3 * 3   # a chain
True
"""
from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from collections.abc import Sequence

_N = TypeVar("_N", int, float)


def longest_path(weights: Sequence[_N], edges: Sequence[tuple[int, int, _N]]) -> tuple[_N, tuple[int, ...]]:
    """The longest path through a DAG of ``len(weights)`` nodes (node ``i`` weighing
    ``weights[i]``; ``edges`` ``(src, dst, weight)`` with ``src < dst``): its length and its nodes
    in order (the first such path on ties, ``()`` and 0 without nodes). Weights are not negative.

    >>> longest_path([4, 4], [])      # two unconnected stages: the path is either one
    (4, (0,))
    """
    into: list[list[tuple[int, _N]]] = [[] for _ in weights]
    for src, dst, w in edges:
        if not 0 <= src < dst < len(weights):
            raise ValueError(f"edge {src}->{dst} does not run forward among {len(weights)} stages")
        into[dst].append((src, w))
    best: list = []
    before: list[int] = []
    for i, w in enumerate(weights):
        # weights are not negative: a stage with producers starts after one of them (the latest;
        # the first on ties), so a chain's path holds every stage, whatever weighs nothing
        came = max(into[i], key=lambda p: best[p[0]] + p[1], default=None)
        best.append(w if came is None else best[came[0]] + came[1] + w)
        before.append(-1 if came is None else came[0])
    if not best:
        return 0, ()
    end = max(range(len(best)), key=lambda i: (best[i], -i))
    path = [end]
    while before[path[-1]] >= 0:
        path.append(before[path[-1]])
    return best[end], tuple(reversed(path))


def compute_graph(stages: Sequence, streams: Sequence) -> tuple[list[int], list[tuple[int, int]]]:
    """A section's compute stages (their indices among ``stages``) and the streams between two
    of them as ``(src, dst)`` positions among those: the graph :func:`longest_path` walks.

    >>> from sn40l_sim.mapper.stages import StageWork, Stream
    >>> hbm, op = StageWork("hbm", "memory", "hbm"), StageWork("op", "gemm", "pcu")
    >>> compute_graph([hbm, op, op], [Stream(0, 1, 8), Stream(1, 2, 8), Stream(2, 0, 8)])
    ([1, 2], [(0, 1)])
    """
    compute = [i for i, s in enumerate(stages) if not s.is_memory]
    at = {i: k for k, i in enumerate(compute)}
    return compute, [(at[s.src], at[s.dst]) for s in streams if s.src in at and s.dst in at]
