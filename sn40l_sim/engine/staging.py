"""What a collective moves through its socket's memory, and what that costs a collective alone.

A collective writes what it receives to the tier that holds the activations and, unless it is
overlapped with its kernel (then it sends tiles straight from the PMUs as the kernel produces
them), reads what it sends from there (:func:`staged_bytes`); every member sends as much as it
receives in these collectives. The engine streams those bytes through the tier at the links' pace,
sharing the tier with the kernels' streams (:func:`~sn40l_sim.engine.kernel_process.run_kernel`),
so a collective lasts its links' cycles or its staging's, whichever is longer.

:func:`lone_collective_cycles` gives the mapper that time for a collective alone on the socket,
the way it already has the links' cycles: with the activations in HBM the links are the slower
(a collective's staging at HBM's rate takes at most about half its links' time on the 16-socket
node), but a prompt whose activations spill to DDR (about 80 GB/s a socket) stages them up to ten
times slower than the links move them, and a mapper scoring the links alone chose plans for, and
``map`` printed, collectives that ``run`` then timed several times longer (docs/validation.md,
"Reading map's totals").

Examples
--------
>>> from sn40l_sim.hardware.loader import load_hardware
>>> node = load_hardware("hw_configs/sn40l_node16.yaml")
>>> round(path_bytes_per_cycle(node.socket, "hbm")), round(path_bytes_per_cycle(node.socket, "ddr"))
(959, 50)
"""
from __future__ import annotations

from collections.abc import Callable

from sn40l_sim.engine.collective_sizes import most_sent
from sn40l_sim.engine.collectives import CollectiveModel, CollectiveResult
from sn40l_sim.hardware import figures
from sn40l_sim.hardware.spec import NodeSpec, SocketSpec
from sn40l_sim.hardware.units._cycles import ceil_cycles
from sn40l_sim.ir import Collective
from sn40l_sim.mapper.memory import all_in_first_tier
from sn40l_sim.mapper.placement import MemoryPlacement


def tier_bytes_per_cycle(socket: SocketSpec, tier: str) -> float:
    """Bytes per cycle of memory tier ``tier``: all its units at their achievable fraction."""
    return figures.memory_bytes_per_s(socket, tier) * socket.memory[tier].efficiency / socket.clock_hz


def tln_bytes_per_cycle(socket: SocketSpec) -> float:
    """Bytes per cycle of the top-level network: every AGCU's port onto it."""
    return figures.agcus(socket) * socket.tln.bytes_per_s / socket.clock_hz


def path_bytes_per_cycle(socket: SocketSpec, tier: str) -> float:
    """A lone stream's rate to or from ``tier``: the narrower of the tier and the TLN it crosses."""
    return min(tier_bytes_per_cycle(socket, tier), tln_bytes_per_cycle(socket))


def staged_bytes(coll: Collective, result: CollectiveResult) -> int:
    """Bytes ``coll`` writes to and reads from its socket's memory (see the module docstring)."""
    reads = 0 if coll.overlapped else result.sent_bytes
    return result.sent_bytes + reads


def lone_collective_cycles(model: CollectiveModel, node: NodeSpec, memory: MemoryPlacement | None = None,
                           staged: bool = True) -> LoneCollectiveCycles:
    """A collective's cycles alone on a socket of ``node`` whose activations are placed as in
    ``memory`` (default: all in the first tier): its links' cycles (``model``), or, with ``staged``
    (the engine's ``stage_collectives``), its staging through the activations' tier at that tier's
    whole rate when that takes longer. Streams that share the tier with it are left out, as the
    mapper leaves out contention on the links."""
    tier = (memory if memory is not None else all_in_first_tier(node)).tiers().activations
    return LoneCollectiveCycles(model, path_bytes_per_cycle(node.socket, tier), staged)


class LoneCollectiveCycles:
    """:func:`lone_collective_cycles`' callable: ``self(coll)`` the cycles, and :meth:`at_most`
    whether they are within a budget, simulating only as far as that needs.

    >>> from sn40l_sim.hardware.loader import load_hardware
    >>> node = load_hardware("hw_configs/sn40l_node16.yaml")
    >>> cycles = lone_collective_cycles(CollectiveModel.from_node(node), node)
    >>> coll = Collective("all_reduce", 2**20, 16)
    >>> cycles.at_most(coll, cycles(coll)), cycles.at_most(coll, cycles(coll) - 1)
    (True, False)
    """

    def __init__(self, model: CollectiveModel, rate: float, staged: bool) -> None:
        self.model, self.rate, self.staged = model, rate, staged

    def __call__(self, coll: Collective) -> int:
        result = self.model.run(coll)
        if not self.staged or not result.cycles:
            return result.cycles
        return max(result.cycles, ceil_cycles(staged_bytes(coll, result) / self.rate))

    def at_most(self, coll: Collective, budget: int) -> bool:
        """Whether ``self(coll) <= budget``. The model's search stops at the first algorithm
        within the budget (:meth:`~sn40l_sim.engine.collectives.CollectiveModel.excess_cycles`):
        a mapper's window share usually ends long before its window's collective does, and the
        share's odd byte count makes the direct algorithm asymmetric, dear to simulate on the
        shared links of a ring or torus. The fastest algorithm is then unknown, so its staging is
        bounded by the most any member sends under any algorithm that applies."""
        if self.model.excess_cycles(coll, budget):
            return False
        if not self.staged:
            return True
        most = most_sent(coll.kind, int(coll.bytes), coll.group)
        reads = 0 if coll.overlapped else most
        return ceil_cycles((most + reads) / self.rate) <= budget or self(coll) <= budget


def lone_staging_bytes(model: CollectiveModel, staged: bool = True) -> Callable[[Collective], int]:
    """The bytes a collective stages in its socket's memory (:func:`staged_bytes`; none without
    ``staged``, the engine's ``stage_collectives``): an overlapped collective stages them while its
    kernel streams, and the engine shares the activations' tier between the two, which the mapper
    charges the kernel's call (:func:`~sn40l_sim.mapper.kernel_cost.held_back_cycles`)."""

    def staged_by(coll: Collective) -> int:
        return staged_bytes(coll, model.run(coll)) if staged else 0

    return staged_by
