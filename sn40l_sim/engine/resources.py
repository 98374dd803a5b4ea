"""The simulated resources of one socket: its tiles, HBM, DDR, TLN and P2P port block.

- ``compute``: the socket's tiles. A placed kernel occupies all of them (the mapper places one
  kernel per socket at a time), so this is a SimPy resource of capacity one.
- ``hbm`` / ``ddr``: each tier's channels as one shared-bandwidth
  :class:`~sn40l_sim.engine.fluid.Channel` of ``units x bytes_per_s_per_unit x efficiency``
  bytes per cycle. Addresses interleave over all modules/channels of the socket, so concurrent
  streams see the aggregate, shared.
- ``tln``: the top-level network between the tiles' AGCUs and the memory controllers; every HBM or
  DDR stream crosses it. Its capacity is the sum of the AGCU ports onto it
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
>>> res.hbm.bytes_per_cycle == figures.hbm_bytes_per_s(s) * s.calibrated.hbm_efficiency / s.clock_hz
True
>>> round(res.tln.bytes_per_cycle)
4096
"""
from __future__ import annotations

from dataclasses import dataclass

import simpy

from sn40l_sim.engine.fluid import Channel, FluidNetwork
from sn40l_sim.hardware import figures
from sn40l_sim.hardware.spec import NodeSpec


@dataclass(eq=False)
class SocketResources:
    """Resources of one simulated socket inside an environment."""

    socket: int
    env: simpy.Environment
    net: FluidNetwork
    compute: simpy.Resource
    p2p: simpy.Resource
    hbm: Channel | None
    ddr: Channel
    tln: Channel
    clock_hz: float

    @classmethod
    def build(cls, env: simpy.Environment, node: NodeSpec, socket: int = 0,
              net: FluidNetwork | None = None) -> SocketResources:
        """Resources of socket ``socket`` of ``node`` in ``env`` (sharing ``net`` if given)."""
        spec = node.socket
        net = net if net is not None else FluidNetwork(env)
        clock = spec.clock_hz
        cal = spec.calibrated
        hbm = None
        if spec.hbm is not None:
            hbm = net.channel(f"s{socket}.hbm", figures.hbm_bytes_per_s(spec) * cal.hbm_efficiency / clock)
        ddr = net.channel(f"s{socket}.ddr", figures.ddr_bytes_per_s(spec) * cal.ddr_efficiency / clock)
        tln = net.channel(f"s{socket}.tln", figures.agcus(spec) * spec.tln.bytes_per_s / clock)
        return cls(socket, env, net, simpy.Resource(env, 1), simpy.Resource(env, 1), hbm, ddr, tln, clock)

    def memory_path(self, tier: str) -> tuple[Channel, ...]:
        """Channels a stream to or from ``tier`` (``"hbm"`` or ``"ddr"``) crosses."""
        channel = self.hbm if tier == "hbm" else self.ddr
        if channel is None:
            raise ValueError(f"socket {self.socket} has no {tier.upper()}")
        return (channel, self.tln)
