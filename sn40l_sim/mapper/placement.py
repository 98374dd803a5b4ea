"""What the mapper produces and the engine consumes: fused kernels placed on one socket.

Field names are a contract: add, never rename. Cycles are RDU clock cycles.
"""
from __future__ import annotations

from dataclasses import dataclass

from sn40l_sim.ir import FusedKernel, KernelGraph
from sn40l_sim.mapper.tier_split import USES, TierSplit

#: what bounds a stage or a kernel: ``compute``, ``simd``, ``sram``, ``mesh``, ``p2p``,
#: ``overhead``, or the name of a memory tier (``hbm``, ``ddr``, ...); a call as it is called
#: may also be bound by its ``collective`` s (:mod:`.calls`)
Resource = str


@dataclass(frozen=True)
class StagePlacement:
    """One pipeline stage of a kernel: an operator (or part of one) on some PCUs and PMUs."""

    operator: str
    kind: str
    pcus: int
    pmus: int
    #: tiles of the socket the stage occupies
    tiles: tuple[int, ...]
    #: mesh coordinates (tile, row, col) of the stage's PCUs, for plots
    coords: tuple[tuple[int, int, int], ...]
    #: whole cycles per data tile, but a memory stage's: its stream's share, unrounded (an
    #: off-chip stream does not pause at data-tile boundaries)
    cycles_per_tile: float
    bound: Resource
    #: mesh coordinates (tile, row, col) of the stage's PMUs, for plots
    pmu_coords: tuple[tuple[int, int, int], ...] = ()
    #: section of the kernel the stage belongs to (0 unless the kernel is split)
    section: int = 0
    #: on-chip bytes of the stage's buffers per tile in use, double-buffered
    buffer_bytes_per_tile: int = 0
    #: for streams (``kind == "stream"``, operator ``"producer->consumer"``): bytes and mesh hops
    stream_bytes: int = 0
    hops: int = 0
    #: a GEMM's dataflow (``weight_stationary`` or ``output_stationary``), empty otherwise
    dataflow: str = ""
    #: the stage's fill and drain, paid once per section (hops, pipeline, reduction rounds)
    latency_cycles: int = 0
    #: how a GEMM item is split over PCUs: ``(rows, K)`` ways (``(1, 1)``: whole items)
    split: tuple[int, int] = (1, 1)


@dataclass(frozen=True)
class PlacedKernel:
    """A fused kernel mapped onto one socket.

    The kernel runs ``sections`` configurations in sequence; each is loaded (its
    ``section_config_bytes`` at the calibrated configuration-load bandwidth), then streams
    ``n_tiles`` data tiles through its stages at ``cycles_per_tile`` (the slowest stage, memory
    included) after a ``fill_cycles`` pipeline fill.

    "Tile" names two things here: ``n_tiles`` and ``cycles_per_tile`` count *data tiles* (the pieces
    the kernel's work is cut into and streamed); ``chip_tiles`` and the ``*_per_tile`` tuples count
    the socket's compute *tiles* (hardware: grids of PCUs and PMUs, README.md "Terms").
    """

    kernel: FusedKernel
    stages: tuple[StagePlacement, ...]
    sections: int
    reconfig_cycles: int
    #: data tiles each section streams (not the socket's compute tiles: those are ``chip_tiles``)
    n_tiles: int
    #: the slowest stage per data tile (a memory stream's unrounded share when it is the slowest)
    cycles_per_tile: float
    fill_cycles: int
    #: bytes this socket moves to and from each memory tier of the socket (every tier, in the
    #: socket's order, zeros included) and over the tile meshes, over the whole kernel
    tier_bytes: dict[str, int]
    mesh_bytes: int
    #: lower bounds, each alone: compute at peak, memory at achievable bandwidth
    compute_cycles: int
    memory_cycles: int
    bounding_resource: Resource
    #: predicted cycles of the kernel on its own, its configuration loaded (tile-level formula);
    #: collectives and the kernel-call boundary (launch, barrier) excluded
    cycles: int
    #: PCUs, PMUs and SRAM bytes the kernel uses on each compute tile of the socket (one entry per
    #: hardware tile, the most any section uses; zeros on the tiles it does not run on)
    pcus_per_tile: tuple[int, ...]
    pmus_per_tile: tuple[int, ...]
    sram_bytes_per_tile: tuple[int, ...]
    #: cycles to load the first section's configuration, included in ``cycles`` (the engine pays
    #: it only when the configuration is not still loaded, :mod:`.residency`; it reads the parts,
    #: not ``cycles``)
    overhead_cycles: int = 0
    #: compute tiles of the socket (hardware tiles) the kernel runs on, not its data tiles (``n_tiles``)
    chip_tiles: int = 0
    #: configuration bytes of each section (PCUs, PMUs and switches it uses)
    section_config_bytes: tuple[int, ...] = ()
    #: cycles of one iteration of a looped call, its memory streams run ahead of its compute as far
    #: as the read-ahead buffer allows (:func:`~sn40l_sim.mapper.read_ahead.looped_iteration_cycles`);
    #: its configuration and the wait for the previous iteration's collectives excluded
    iteration_cycles: int = 0
    #: what bounds the kernel's data tiles (its slowest section's bound), its configuration aside:
    #: ``bounding_resource`` unless that is ``overhead``
    tiles_bound: Resource = ""
    #: cycles of one call as the graph calls it (:mod:`.calls`): the configuration once over a run
    #: of consecutive calls, a looped call's iteration with its streams run ahead and its wait for
    #: the previous iteration's collectives, another call's collectives where they outlast it (the
    #: time the mapper chose the plan by, plus the collectives no plan can hide); the kernel-call
    #: boundary excluded. A lone call without collectives takes ``cycles``.
    #: :func:`~sn40l_sim.mapper.kernel.map_kernel` alone leaves out the collectives that do not
    #: overlap; :func:`~sn40l_sim.mapper.graph.map_graph` adds them. The ``map`` table shows this;
    #: the engine reads neither.
    call_cycles: int = 0
    #: the part of ``call_cycles`` spent waiting for collectives (set by ``map_graph``)
    call_collective_cycles: int = 0
    #: what takes the largest part of the call as it is called: its share of the configuration
    #: loads (``overhead``), its data tiles (``tiles_bound``) or its ``collective`` s, the wait for
    #: them and the tiles that run beside those it waits for (set by ``map_graph``;
    #: ``map_kernel`` alone gives a lone call's)
    call_bound: Resource = ""
    #: a call (not looped, without windows) whose overlapped collectives name no operator: the
    #: cycles its stream takes once they start (after its fill and first data tile; the later
    #: sections' configuration loads and what their staging holds the stream back included), which
    #: says which of them end before the stream does and leave all of their last data tile's share
    #: to after it (:func:`~sn40l_sim.mapper.calls.as_called`); None otherwise
    overlap_stream_cycles: int | None = None
    #: of ``call_cycles``, the cycles those collectives' last data tile's shares add past the
    #: stream as the mapper's objective counted them (:mod:`sn40l_sim.mapper.shares`), which
    #: :func:`~sn40l_sim.mapper.calls.as_called` replaces by the call's own
    overlap_share_cycles: int = 0


@dataclass(frozen=True)
class MemoryPlacement:
    """Bytes per socket in each memory tier, by use (``weights``, ``kv``, ``activations``, and
    ``kv_offload`` when a KV policy keeps a store in a tier of its own).

    Attributes
    ----------
    by_tier : dict
        Tier -> use -> bytes, for every tier of the socket in the socket's order (fastest first).
    capacity : dict
        Tier -> usable bytes (after the runtime's reserved memory), same tiers and order.
    order : tuple of str
        The placement order: tiers filled first to last (the socket's order unless the experiment
        says otherwise); tiers left out hold nothing.

    Examples
    --------
    >>> mp = MemoryPlacement({"hbm": {"weights": 3, "kv": 0}, "ddr": {"weights": 1, "kv": 5}},
    ...                      {"hbm": 3, "ddr": 9}, ("hbm", "ddr"))
    >>> mp.total("weights"), mp.first_tier, mp.tiers()
    (4, 'hbm', TierSplit(weights=(('hbm', 0.75), ('ddr', 0.25)), kv=(('ddr', 1.0),), activations='hbm', kv_offload=(), activation_shares=()))
    """

    by_tier: dict[str, dict[str, int]]
    capacity: dict[str, int]
    order: tuple[str, ...]

    @property
    def first_tier(self) -> str:
        """The tier filled first."""
        return self.order[0]

    def total(self, use: str) -> int:
        """Bytes of ``use`` over all tiers."""
        return sum(uses.get(use, 0) for uses in self.by_tier.values())

    def outside(self, tier: str) -> dict[str, int]:
        """Use -> bytes held in tiers other than ``tier`` (uses with none left out)."""
        out = {use: sum(uses.get(use, 0) for t, uses in self.by_tier.items() if t != tier) for use in USES}
        return {use: n for use, n in out.items() if n > 0}

    def tiers(self) -> TierSplit:
        """The fraction of weights and of KV in each tier, and the activations' tier, as a
        :class:`~sn40l_sim.mapper.tier_split.TierSplit` for the mapper.

        Tiers are taken in placement order; a use with no bytes lives in the first tier, and the
        activations in the tier holding most of them (the earlier one on a tie), with their
        fraction in each tier when they span several.
        """
        def shares(use: str) -> tuple[tuple[str, float], ...]:
            total = self.total(use)
            held = [(tier, self.by_tier.get(tier, {}).get(use, 0)) for tier in self.order]
            held = [(tier, n) for tier, n in held if n > 0]
            if not total or not held:
                return ((self.first_tier, 1.0),)
            return tuple((tier, n / total) for tier, n in held)

        act = max(self.order, key=lambda tier: (self.by_tier.get(tier, {}).get("activations", 0),
                                                -self.order.index(tier)))
        # activations spilled over several tiers stream from each at its share (all from the tier
        # holding most of them timed 51% in DDR as 100%, and 49% as none)
        act_shares = shares("activations")
        act_shares = act_shares if len(act_shares) > 1 else ()
        # a store lives where the policy put it, which may be a tier outside the order
        store = tuple((tier, uses["kv_offload"] / self.total("kv_offload")) for tier, uses in self.by_tier.items()
                      if uses.get("kv_offload", 0) > 0)
        return TierSplit(shares("weights"), shares("kv"), act, store, act_shares)


@dataclass(frozen=True)
class PlacedGraph:
    """A kernel graph with every kernel placed, plus where its tensors live."""

    graph: KernelGraph
    kernels: tuple[PlacedKernel, ...]
    memory: MemoryPlacement
