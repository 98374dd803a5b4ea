"""Where a socket's tensors live: :func:`place_memory` (HBM first, DDR for what does not fit).

Priority, per socket, after the runtime's reserved memory (``socket.reserved``):

1. **activations** (the working set handed between kernels) in HBM: every kernel reads and
   writes them, and they are small next to weights and KV;
2. **weights** in HBM, the rest in DDR;
3. **KV cache** in the HBM left, the rest in DDR.

A tensor class that spills puts the same fraction of every layer in DDR (identical layers stay
identical, so they still map once); :meth:`MemoryPlacement.tiers` gives that split to the
mapper, which then streams those bytes at DDR bandwidth. When HBM and DDR together cannot hold
everything, :class:`~sn40l_sim.errors.InfeasibleError` says what does not fit and by how much.

Examples
--------
>>> from sn40l_sim.mapper._examples import example_node
>>> node = example_node()
>>> GiB = 2**30
>>> mp = _place(node.socket, weights=40 * GiB, kv=30 * GiB, activations=1 * GiB)
>>> usable = 64 * GiB - node.socket.reserved.hbm_bytes    # HBM after the runtime's reservation
>>> mp.hbm["weights"] == 40 * GiB, mp.hbm["kv"] == usable - 40 * GiB - 1 * GiB   # KV takes the rest
(True, True)
>>> mp.ddr["kv"] == 30 * GiB - mp.hbm["kv"]                # and spills what does not fit
True
>>> mp.tiers().weights_ddr_fraction, mp.tiers().kv_ddr_fraction == mp.ddr["kv"] / (30 * GiB)
(0.0, True)
"""
from __future__ import annotations

from typing import Any

from sn40l_sim.errors import InfeasibleError
from sn40l_sim.hardware import figures
from sn40l_sim.hardware.spec import NodeSpec, SocketSpec
from sn40l_sim.mapper.placement import MemoryPlacement
from sn40l_sim.mapper.stages import TierSplit

GIB = 2**30


def _split(need: int, free: int) -> tuple[int, int]:
    here = min(need, max(free, 0))
    return here, need - here


def _place(socket: SocketSpec, weights: int, kv: int, activations: int) -> MemoryPlacement:
    hbm_cap = int(figures.usable_hbm_bytes(socket)) if socket.hbm is not None else 0
    ddr_cap = int(figures.usable_ddr_bytes(socket))
    hbm: dict[str, int] = {}
    ddr: dict[str, int] = {}
    free = hbm_cap
    for name, need in (("activations", activations), ("weights", weights), ("kv", kv)):
        hbm[name], ddr[name] = _split(int(need), free)
        free -= hbm[name]
    spilled = sum(ddr.values())
    if spilled > ddr_cap:
        short = spilled - ddr_cap
        parts = ", ".join(f"{k} {v / GIB:.2f} GiB" for k, v in ddr.items() if v)
        raise InfeasibleError(
            f"memory does not fit on a socket of {socket.name}: weights {weights / GIB:.2f} GiB + KV cache "
            f"{kv / GIB:.2f} GiB + activations {activations / GIB:.2f} GiB; HBM holds {hbm_cap / GIB:.2f} GiB "
            f"after the reserved {socket.reserved.hbm_bytes / GIB:.2f} GiB, and the rest ({parts}) exceeds the "
            f"usable DDR of {ddr_cap / GIB:.2f} GiB by {short} bytes ({short / GIB:.2f} GiB)")
    return MemoryPlacement(hbm=hbm, ddr=ddr, hbm_capacity=hbm_cap, ddr_capacity=ddr_cap)


def place_memory(node: NodeSpec, model: Any, plan: Any, kv_bytes_per_socket: int,
                 activation_bytes: int) -> MemoryPlacement:
    """Place one socket's weights, KV cache and activations in HBM and DDR.

    Parameters
    ----------
    node : NodeSpec
    model : ModelSpec
        Its weights per socket come from
        :func:`sn40l_sim.models.params.weight_bytes_per_socket` under ``plan``.
    plan : ParallelPlan
    kv_bytes_per_socket : int
        KV-cache bytes this socket holds (its sequences' caches, or its share of them).
    activation_bytes : int
        Working set of activations between kernels on this socket.

    Returns
    -------
    MemoryPlacement
        Bytes by use in each tier, the usable capacities (after reserved memory), and the spilled
        fractions (:meth:`MemoryPlacement.tiers`).

    Raises
    ------
    InfeasibleError
        When HBM plus DDR cannot hold it all, naming the sizes and the shortfall in bytes and GiB.
    """
    from sn40l_sim.models.params import weight_bytes_per_socket

    for name, value in (("kv_bytes_per_socket", kv_bytes_per_socket), ("activation_bytes", activation_bytes)):
        if value < 0:
            raise InfeasibleError(f"{name} must be >= 0, got {value}")
    weights = weight_bytes_per_socket(model, plan)
    return _place(node.socket, weights, kv_bytes_per_socket, activation_bytes)


def all_in_hbm(node: NodeSpec) -> MemoryPlacement:
    """A placement that puts every tensor in HBM without checking sizes (the default of
    :func:`~sn40l_sim.mapper.map_graph` when no placement is given; use :func:`place_memory` to
    check that it fits)."""
    socket = node.socket
    hbm_cap = int(figures.usable_hbm_bytes(socket)) if socket.hbm is not None else 0
    return MemoryPlacement(hbm={}, ddr={}, hbm_capacity=hbm_cap, ddr_capacity=int(figures.usable_ddr_bytes(socket)))


def tiers_of(memory: MemoryPlacement) -> TierSplit:
    """The fraction of weights and of KV in DDR (what the mapper streams at DDR bandwidth).

    >>> tiers_of(MemoryPlacement(hbm={"weights": 3, "kv": 0}, ddr={"weights": 1, "kv": 5}, hbm_capacity=3, ddr_capacity=9))
    TierSplit(weights_ddr_fraction=0.25, kv_ddr_fraction=1.0, activations='hbm')
    """
    def frac(name: str) -> float:
        total = memory.hbm.get(name, 0) + memory.ddr.get(name, 0)
        return memory.ddr.get(name, 0) / total if total else 0.0

    act = "ddr" if memory.ddr.get("activations", 0) > memory.hbm.get("activations", 0) else "hbm"
    return TierSplit(frac("weights"), frac("kv"), act)
