"""What the engine needs of a placed kernel, precomputed once per kernel: :class:`KernelCosts`
(the call's boundary and configuration loads) and one :class:`SectionCosts` per section (its
chunks of data tiles, compute per tile, and the bytes and rate caps of its memory streams).

:mod:`.kernel_process` runs them; the layers of a model share one placed kernel, so
:func:`~sn40l_sim.engine.run_graph.run_graph` computes them once per placed kernel.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from sn40l_sim.engine.boundary import BoundaryModel
from sn40l_sim.hardware import figures
from sn40l_sim.hardware.spec import SocketSpec
from sn40l_sim.mapper.placement import PlacedKernel
from sn40l_sim.mapper.read_ahead import chunk_tiles
from sn40l_sim.mapper.tier_split import TierSplit
from sn40l_sim.mapper.windows import window_fractions

#: stage bounds, besides the memory tiers, whose time the engine models as transfers on shared
#: channels, not fixed cycles
LINK_BOUNDS = frozenset({"p2p"})


@dataclass(frozen=True)
class SectionCosts:
    """One section of a kernel: its chunks of tiles, compute per tile, and memory streams.

    Examples
    --------
    >>> sec = SectionCosts(chunks=(4, 4), compute_cycles_per_tile=10, tier_bytes={"hbm": 8000},
    ...                    tier_caps={"hbm": math.inf}, fill_cycles=50)
    >>> sec.tiles, sec.bytes_between("hbm", 0, 4)
    (8, 4000)
    """

    chunks: tuple[int, ...]
    compute_cycles_per_tile: int
    #: tier -> bytes the section moves to and from it (the socket's tier order)
    tier_bytes: dict[str, int]
    #: tier -> most bytes per cycle the section's memory stage of that tier can issue
    tier_caps: dict[str, float]
    fill_cycles: int

    @property
    def tiles(self) -> int:
        """Data tiles the section streams."""
        return sum(self.chunks)

    def bytes_between(self, tier: str, first_tile: int, end_tile: int) -> int:
        """Bytes of ``tier`` carried by tiles ``first_tile .. end_tile-1``; integer shares whose
        sum over the section is exactly its bytes."""
        total = self.tier_bytes.get(tier, 0)
        n = self.tiles
        return total * end_tile // n - total * first_tile // n

    def loads(self, first_tile: int, n_tiles: int) -> tuple[tuple[str, int, float], ...]:
        """``(tier, bytes, cap)`` of every tier tiles ``first_tile .. first_tile+n_tiles-1``
        move bytes to or from, in the socket's tier order.

        Kept on the section (the engine asks for every chunk of every call of the kernel, and the
        layers of a model share one kernel's costs).

        >>> sec = SectionCosts(chunks=(4, 4), compute_cycles_per_tile=10, tier_bytes={"hbm": 8000, "ddr": 0},
        ...                    tier_caps={"hbm": 2.0, "ddr": math.inf}, fill_cycles=50)
        >>> sec.loads(4, 4)
        (('hbm', 4000, 2.0),)
        """
        memo = self.__dict__.setdefault("_loads", {})
        got = memo.get((first_tile, n_tiles))
        if got is None:
            got = memo[(first_tile, n_tiles)] = tuple(
                (tier, n_bytes, cap) for tier, cap in self.tier_caps.items()
                if (n_bytes := self.bytes_between(tier, first_tile, first_tile + n_tiles)))
        return got


@dataclass(frozen=True)
class KernelCosts:
    """What the engine needs from a :class:`PlacedKernel`, precomputed once per kernel.

    ``config_cycles[i]`` loads section ``i``'s configuration: section 0's at the call unless it is
    still loaded (:attr:`~sn40l_sim.engine.kernel_process.KernelRecord.config_resident`), the others
    before they stream.
    """

    launch_cycles: int
    barrier_cycles: int
    config_cycles: tuple[int, ...]
    sections: tuple[SectionCosts, ...]
    #: collectives read what they send from memory and write what they receive to it
    stage_collectives: bool = True
    #: each overlapped collective's window, fractions of the stream, in the kernel's order
    #: (:func:`~sn40l_sim.mapper.windows.window_fractions`)
    windows: tuple[tuple[float, float], ...] = ()

    @classmethod
    def from_placed(cls, pk: PlacedKernel, socket: SocketSpec, boundary: BoundaryModel | None,
                    chunks_per_section: int, stage_collectives: bool = True,
                    placement: TierSplit | None = None) -> KernelCosts:
        """Costs of ``pk``, section by section (stages carry their section).

        Compute per tile is the slowest non-memory stage of the section (PCU, SIMD, PMU or mesh
        bound). Without a ``boundary`` the call costs nothing and no configuration is loaded. A
        section's bytes of a tier are what its streams to and from that tier's memory
        stage carry; each tier's stream is capped at (bytes per tile) / (its memory stage's
        cycles per tile), the rate the mapper's unit models allow (AGCUs, memory units in reach).
        The windows of its overlapped collectives are placed by the tiers ``placement`` puts its
        operators' bytes in, as the mapper placed them (default: the socket's first tier).
        """
        n = pk.sections
        sections = []
        tiers = {tier: _section_bytes(pk, tier) for tier in pk.tier_bytes}
        on_channels = LINK_BOUNDS | set(tiers)
        for index in range(n):
            stages = [st for st in pk.stages if st.section == index] or list(pk.stages)
            compute = [st.cycles_per_tile for st in stages if st.bound not in on_channels]
            tiles = max(1, pk.n_tiles)
            caps = {}
            for tier in tiers:
                worst = max((st.cycles_per_tile for st in stages
                             if st.kind == "memory" and st.operator == tier or st.bound == tier), default=0)
                caps[tier] = tiers[tier][index] / tiles / worst if worst and tiers[tier][index] else math.inf
            sections.append(SectionCosts(
                chunks=chunk_tiles(pk.n_tiles, chunks_per_section),
                compute_cycles_per_tile=max(compute, default=0),
                tier_bytes={tier: per_section[index] for tier, per_section in tiers.items()},
                tier_caps=caps, fill_cycles=pk.fill_cycles))
        windows = tuple(window_fractions(socket, pk.kernel, c, placement) for c in pk.kernel.collectives if c.overlapped)
        if boundary is None:
            return cls(0, 0, (), tuple(sections), stage_collectives, windows)
        configs = tuple(figures.config_cycles(socket, b) for b in pk.section_config_bytes)
        return cls(boundary.launch_cycles, boundary.barrier_cycles(max(1, pk.kernel.shards)), configs,
                   tuple(sections), stage_collectives, windows)


def _section_bytes(pk: PlacedKernel, tier: str) -> list[int]:
    """Bytes of ``tier`` per section: from the streams touching the tier's memory stage when the
    mapper lists them (they add up to the kernel's bytes), else an equal split."""
    total = pk.tier_bytes.get(tier, 0)
    n = max(1, pk.sections)
    per = [0] * n
    for st in pk.stages:
        if st.kind == "stream" and tier in st.operator.split("->") and st.section < n:
            per[st.section] += st.stream_bytes
    if sum(per) == total:
        return per
    return [total * (i + 1) // n - total * i // n for i in range(n)]
