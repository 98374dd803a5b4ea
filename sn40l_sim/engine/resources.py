"""The simulated resources of one socket: its tiles, memory tiers, TLN and P2P port block.

- ``compute``: the socket's tiles. A placed kernel occupies all of them (the mapper places one
  kernel per socket at a time), so this is a SimPy resource of capacity one.
- ``memory``: one shared-bandwidth :class:`~sn40l_sim.engine.fluid.Channel` per memory tier of
  the socket (HBM, DDR, ...; labelled ``s<socket>.<tier>``), of ``units x bytes_per_s_per_unit x
  efficiency`` bytes per cycle. Addresses interleave over all modules/channels of the tier, so
  concurrent streams see the aggregate, shared.
- ``tln``: the top-level network between the tiles' AGCUs and the memory controllers; every
  stream to or from a memory tier crosses it. Its capacity is the sum of the AGCU ports onto it
  (``tiles x agcus x tln.bytes_per_s``, the links :func:`sn40l_sim.hardware.topology.build_topology`
  draws), so it binds only if the memory tiers outrun the AGCUs.
- ``p2p``: the socket's P2P port block. The socket's collectives use the same links, so they run
  one at a time (capacity one); each one's duration comes from
  :class:`~sn40l_sim.engine.collectives.CollectiveModel`, which simulates it on the node's links.

Examples
--------
>>> import simpy
>>> from sn40l_sim.hardware.loader import load_hardware
>>> node = load_hardware("hw_configs/sn40l.yaml")
>>> res = SocketResources.build(simpy.Environment(), node, socket=0)
>>> from sn40l_sim.hardware import figures
>>> s = node.socket   # HBM at its calibrated achievable fraction, per cycle
>>> res.memory["hbm"].bytes_per_cycle == figures.memory_bytes_per_s(s, "hbm") * s.memory["hbm"].efficiency / s.clock_hz
True
>>> [channel.name for channel in res.memory_path("ddr")]
['s0.ddr', 's0.tln']
>>> round(res.tln.bytes_per_cycle)
4096
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import simpy

from sn40l_sim.engine.fluid import Channel, FluidNetwork
from sn40l_sim.engine.staging import tier_bytes_per_cycle, tln_bytes_per_cycle
from sn40l_sim.hardware.spec import NodeSpec
from sn40l_sim.mapper.read_ahead import read_ahead_bytes

if TYPE_CHECKING:
    from sn40l_sim.engine.kernel_costs import SectionCosts
    from sn40l_sim.engine.lone_sections import LoneSection


@dataclass(eq=False)
class SocketResources:
    """Resources of one simulated socket inside an environment."""

    socket: int
    env: simpy.Environment
    net: FluidNetwork
    compute: simpy.Resource
    p2p: simpy.Resource
    #: tier -> its channel, in the socket's tier order
    memory: dict[str, Channel]
    tln: Channel
    clock_hz: float
    #: tier collectives read what they send from and write what they receive to (the activations')
    staging_tier: str
    #: bytes a loop iteration may stream into the PMUs ahead of its compute: ``pmu.read_ahead_share``
    #: of the socket's SRAM (half on the SN40L: the PMUs double-buffer, the other half holds what the
    #: running compute reads); the
    #: mapper's loop score reads the same figure (:func:`~sn40l_sim.mapper.read_ahead.read_ahead_bytes`)
    buffer_bytes: float = 0.0
    #: only the engine's kernels and their collectives use the socket's channels, so a kernel's
    #: stream may be accounted without events while no collective is alive
    #: (:func:`~sn40l_sim.engine.kernel_process.run_kernel`); set by the graph runner
    lone_streams: bool = False
    #: collectives started and not yet ended on this socket
    live_collectives: int = 0
    #: id of a kernel section -> (the section, its chunks accounted alone), see :mod:`.lone_sections`
    lone_sections: dict[int, tuple[SectionCosts, LoneSection | None]] = field(default_factory=dict, repr=False)
    _path_rates: dict[str, float] = field(default_factory=dict, repr=False)

    @classmethod
    def build(cls, env: simpy.Environment, node: NodeSpec, socket: int = 0,
              net: FluidNetwork | None = None, staging_tier: str | None = None) -> SocketResources:
        """Resources of socket ``socket`` of ``node`` in ``env`` (sharing ``net`` if given);
        collectives stage through ``staging_tier`` (default: the socket's first tier)."""
        spec = node.socket
        net = net if net is not None else FluidNetwork(env)
        clock = spec.clock_hz
        memory = {tier: net.channel(f"s{socket}.{tier}", tier_bytes_per_cycle(spec, tier)) for tier in spec.memory}
        tln = net.channel(f"s{socket}.tln", tln_bytes_per_cycle(spec))
        staging = staging_tier if staging_tier is not None else next(iter(memory))
        if staging not in memory:
            raise ValueError(f"socket {socket} has no memory tier {staging!r} (it has {list(memory)})")
        return cls(socket, env, net, simpy.Resource(env, 1), simpy.Resource(env, 1), memory, tln, clock, staging,
                   buffer_bytes=read_ahead_bytes(spec))

    def memory_path(self, tier: str) -> tuple[Channel, ...]:
        """Channels a stream to or from memory tier ``tier`` crosses."""
        channel = self.memory.get(tier)
        if channel is None:
            raise ValueError(f"socket {self.socket} has no memory tier {tier!r} (it has {list(self.memory)})")
        return (channel, self.tln)

    def path_bytes_per_cycle(self, tier: str) -> float:
        """The narrowest capacity along :meth:`memory_path` (kept per tier: every chunk asks)."""
        got = self._path_rates.get(tier)
        if got is None:
            got = self._path_rates[tier] = min(ch.bytes_per_cycle for ch in self.memory_path(tier))
        return got
