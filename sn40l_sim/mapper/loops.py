"""Kernel loops: runs of consecutive calls of the same kernel, which kernel looping turns into one
call with a pipelined outer loop (SambaNova, arXiv 2410.23668).

A loop is a maximal run of at least two kernels, consecutive in the graph's order, that map to the
same dataflow graph (equal :meth:`~sn40l_sim.ir.FusedKernel.signature`: identical layers) and form
a chain, each depending on the previous one alone. A dense decoder fused into one kernel per layer
loops over its layers; DeepSeek's decode, two alternating kernels per layer (MLA, FFN), has no run
of one kernel and so no loop. Whether loops are run as loops is the engine's option
(:class:`~sn40l_sim.engine.run_graph.EngineOptions`, set by the experiment's
``execution.kernel_looping``); ``map`` shows them either way.

Examples
--------
>>> from dataclasses import replace
>>> from sn40l_sim.ir import KernelGraph, Shape
>>> from sn40l_sim.mapper._examples import example_decode_kernel
>>> graph, prev = KernelGraph("toy", Shape("decode", 1, 1, 4096)), None
>>> for name, layer in (("head", None), ("L0.dec", 0), ("L1.dec", 1), ("L2.dec", 2), ("tail", None)):
...     kernel = replace(example_decode_kernel(), name=name, layer=layer)
...     if name in ("head", "tail"):
...         kernel = replace(kernel, kind=name, operators=kernel.operators[:1])
...     graph.add(kernel, after=prev)
...     prev = kernel
>>> find_loops(graph.kernels(), graph)
(Loop(first=1, iterations=3),)
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sn40l_sim.ir import FusedKernel, KernelGraph


@dataclass(frozen=True)
class Loop:
    """``iterations`` consecutive kernels from index ``first`` of the graph's kernel order."""

    first: int
    iterations: int

    @property
    def stop(self) -> int:
        """Index after the loop's last kernel."""
        return self.first + self.iterations


def find_loops(kernels: Sequence[FusedKernel], graph: KernelGraph) -> tuple[Loop, ...]:
    """The loops of ``kernels`` (the graph's kernel order), in order."""
    out: list[Loop] = []
    signatures = [k.signature() for k in kernels]
    start = 0
    for i in range(1, len(kernels) + 1):
        chained = (i < len(kernels) and signatures[i] == signatures[i - 1]
                   and set(graph.predecessors(kernels[i].name)) == {kernels[i - 1].name})
        if not chained:
            if i - start >= 2:
                out.append(Loop(start, i - start))
            start = i
    return tuple(out)
