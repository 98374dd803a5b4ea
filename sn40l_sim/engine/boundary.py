"""What a kernel call costs at its boundary: the launch, the barrier, the configuration load.

A fused kernel is a static dataflow graph. Calling one costs, before its first tile streams:

* **launch** -- the host starts the kernel on every socket of its group: one write over the host
  link (``host_link.latency_s``; none for a socket without a node around it);
* **barrier** -- the sockets (and on each socket the tiles) taking part synchronise, so that the
  kernel starts once every input is in place: the tiles of a socket meet over the control network
  (its hops across a tile) and the TLN, then the sockets run a dissemination barrier of
  ``ceil(log2(sockets))`` rounds, in round ``r`` each member signalling the member ``2^r`` after
  it: the P2P route's latency plus the calibrated ``sync_latency_s`` (a flag written and seen);
* **configuration** -- unless the kernel's configuration is still loaded in its units, its bits
  (:func:`sn40l_sim.hardware.figures.config_bytes` of the units it uses and the switches of its
  tiles) are loaded at the calibrated ``config_load_bytes_per_s``. A unit holds one configuration,
  so a kernel keeps its own as long as no other kernel is given one of its units: consecutive
  calls of one kernel, and kernels small enough to sit side by side on the tiles, called step
  after step (:mod:`sn40l_sim.mapper.residency`).

**Kernel looping** (SambaNova, arXiv 2410.23668) turns consecutive calls of the same kernel into
one call of a kernel with a pipelined outer loop: launch, barrier and configuration are paid once
per loop, and each iteration streams its weights while the previous one finishes its collectives
(:mod:`.run_graph`).

Examples
--------
The 16-socket SN40L node (a full mesh): the barrier of a TP16 kernel is 4 rounds of the 93.75 ns
link latency plus the synchronisation latency, after the tiles of each socket have met:

>>> from sn40l_sim.hardware.loader import load_hardware
>>> node = load_hardware("hw_configs/sn40l_node16.yaml")
>>> model = BoundaryModel.from_node(node)
>>> per_round = figures.cycles(93.75e-9 + node.socket.calibrated.sync_latency_s, node.socket)
>>> model.barrier_cycles(16) == model.on_chip_cycles + 4 * per_round
True
>>> model.barrier_cycles(1) == model.on_chip_cycles, model.launch_cycles == figures.cycles(1e-6, node.socket)
(True, True)
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from sn40l_sim.engine.links import LinkTable
from sn40l_sim.hardware import figures
from sn40l_sim.hardware.spec import NodeSpec
from sn40l_sim.hardware.units._cycles import ceil_cycles


@dataclass
class BoundaryModel:
    """Kernel-boundary costs of one node, in cycles (barriers memoised per group size).

    Attributes
    ----------
    launch_cycles : int
        The host's launch of a kernel call.
    on_chip_cycles : int
        The tiles of a socket meeting: control-network hops across a tile, then the TLN.
    sync_latency_s : float
        The calibrated synchronisation latency added to every barrier message.
    links : LinkTable
        The node's P2P links (the route latency between two members).
    clock_hz : float
        The RDU clock.
    """

    launch_cycles: int
    on_chip_cycles: int
    sync_latency_s: float
    links: LinkTable
    clock_hz: float
    _barriers: dict[int, int] = field(default_factory=dict, repr=False)

    @classmethod
    def from_node(cls, node: NodeSpec, links: LinkTable | None = None) -> BoundaryModel:
        """The boundary costs of ``node``'s kernels."""
        socket = node.socket
        launch = figures.cycles(node.host_link.latency_s, socket) if node.host_link is not None else 0
        control = socket.tile.control_network.hop_latency_cycles * figures.tile_mesh_diameter_hops(socket)
        on_chip = control + figures.cycles(socket.tln.latency_s, socket)
        return cls(launch, on_chip, socket.calibrated.sync_latency_s, links or LinkTable.from_node(node),
                   socket.clock_hz)

    def barrier_cycles(self, sockets: int) -> int:
        """Cycles of the barrier among sockets ``0 .. sockets-1`` (a kernel's group)."""
        if sockets not in self._barriers:
            total = self.on_chip_cycles
            for r in range(math.ceil(math.log2(sockets)) if sockets > 1 else 0):
                step = 2**r
                worst = max(self.links.latency_s(i, (i + step) % sockets) for i in range(sockets))
                total += ceil_cycles((worst + self.sync_latency_s) * self.clock_hz)
            self._barriers[sockets] = total
        return self._barriers[sockets]
