"""The mapper: fused kernels onto the PCUs, PMUs and tiles of one socket, with memory tiers.

:func:`map_graph` places a kernel graph (memoised per distinct kernel), :func:`map_kernel` one
kernel, :func:`~sn40l_sim.mapper.memory.place_memory` fills the socket's memory tiers
(HBM, then DDR, ...). The output types are
in :mod:`sn40l_sim.mapper.placement`.
"""
from sn40l_sim.mapper.graph import map_graph
from sn40l_sim.mapper.kernel import map_kernel
from sn40l_sim.mapper.memory import place_memory
from sn40l_sim.mapper.tier_split import TierSplit

__all__ = ["map_graph", "map_kernel", "place_memory", "TierSplit"]
