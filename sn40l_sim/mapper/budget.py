"""Limits on the units a kernel may be mapped onto: :class:`UnitBudget`.

By default the mapper may use every PCU and PMU of one tile or of all the socket's tiles, and
chooses the GEMM dataflow per operator. A budget narrows that: the tiles in use, the PCUs and PMUs
per tile for the whole kernel, the PCUs and PMUs of named stages, and the GEMM dataflows allowed.
It is how a kernel is mapped onto the same units as a hand-placed layout (the unit-level kernels
of :mod:`sn40l_sim.hardware.units.tile_kernels`), and how the effect of more or fewer units is
asked for without editing the hardware file.

Examples
--------
>>> budget = UnitBudget(chip_tiles=1, stage_pcus=(("scores", 1), ("softmax", 3)))
>>> budget.pcus_for("softmax", 260), budget.pcus_for("pv", 260), budget.tiles_for(4)
(3, 260, (1,))
>>> UnitBudget().tiles_for(4)
(1, 4)
"""
from __future__ import annotations

from dataclasses import dataclass

#: GEMM dataflows of :mod:`sn40l_sim.hardware.units.pcu` (see :mod:`sn40l_sim.mapper.tiling`)
WEIGHT_STATIONARY = "weight_stationary"
OUTPUT_STATIONARY = "output_stationary"
DATAFLOWS = (WEIGHT_STATIONARY, OUTPUT_STATIONARY)
#: which of a GEMM's equally small pieces (:func:`~sn40l_sim.mapper.halving.tied_pieces`) its tiling
#: takes: the one of least cost on one PCU, or the one of most whole items (see :mod:`.tiling`)
CHEAPEST_PIECE = "cheapest"
FINEST_PIECE = "finest"


@dataclass(frozen=True)
class UnitBudget:
    """Units a kernel may use; ``None`` leaves the choice to the mapper (hashable, for memos).

    Attributes
    ----------
    chip_tiles : int, optional
        Compute tiles in use (else the mapper tries one and all).
    pcus_per_tile, pmus_per_tile : int, optional
        PCUs and PMUs per tile for the whole kernel (else the tile's).
    stage_pcus, stage_pmus : tuple of (operator name, int)
        Most PCUs and PMUs per tile of the named operators' stages.
    dataflows : tuple of str
        GEMM dataflows the mapper may choose from (:data:`DATAFLOWS`).
    n_tiles : int, optional
        Data tiles each section streams (else the mapper tries 1, 2, 4, ...).
    gemm_cuts : tuple of str
        GEMM dimensions (``count``, ``n``, ``m``, ``k``) the data tiles may cut (default all; an
        attention cut by query tiles is ``("count", "m")``).
    gemm_piece : str
        Of a GEMM's equally small pieces, the one its tiling takes: :data:`CHEAPEST_PIECE` (default)
        or :data:`FINEST_PIECE` (:func:`~sn40l_sim.mapper.tiling.gemm_tilings`).
    """

    chip_tiles: int | None = None
    pcus_per_tile: int | None = None
    pmus_per_tile: int | None = None
    stage_pcus: tuple[tuple[str, int], ...] = ()
    stage_pmus: tuple[tuple[str, int], ...] = ()
    dataflows: tuple[str, ...] = DATAFLOWS
    n_tiles: int | None = None
    gemm_cuts: tuple[str, ...] = ("count", "n", "m", "k")
    gemm_piece: str = CHEAPEST_PIECE

    def __post_init__(self) -> None:
        for name, value in (("chip_tiles", self.chip_tiles), ("pcus_per_tile", self.pcus_per_tile),
                            ("pmus_per_tile", self.pmus_per_tile), ("n_tiles", self.n_tiles)):
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        for op, value in self.stage_pcus + self.stage_pmus:
            if value < 0:
                raise ValueError(f"stage {op!r}: unit count must be >= 0, got {value}")
        if set(self.gemm_cuts) - {"count", "n", "m", "k"}:
            raise ValueError(f"gemm_cuts must name count, n, m or k, got {self.gemm_cuts}")
        if self.gemm_piece not in (CHEAPEST_PIECE, FINEST_PIECE):
            raise ValueError(f"gemm_piece must be {CHEAPEST_PIECE!r} or {FINEST_PIECE!r}, got {self.gemm_piece!r}")
        unknown = set(self.dataflows) - set(DATAFLOWS)
        if not self.dataflows or unknown:
            raise ValueError(f"dataflows must be a non-empty subset of {DATAFLOWS}, got {self.dataflows}")

    def tiles_for(self, all_tiles: int) -> tuple[int, ...]:
        """Tile counts to try on a socket of ``all_tiles`` tiles."""
        if self.chip_tiles is not None:
            if self.chip_tiles > all_tiles:
                raise ValueError(f"chip_tiles {self.chip_tiles} exceeds the socket's {all_tiles} tiles")
            return (self.chip_tiles,)
        return tuple(sorted({1, all_tiles}))

    def tile_pcus(self, tile_pcus: int) -> int:
        """PCUs per tile the kernel may use."""
        return min(tile_pcus, self.pcus_per_tile or tile_pcus)

    def tile_pmus(self, tile_pmus: int) -> int:
        """PMUs per tile the kernel may use."""
        return min(tile_pmus, self.pmus_per_tile or tile_pmus)

    def pcus_for(self, operator: str, tile_pcus: int) -> int:
        """Most PCUs per tile of ``operator``'s stage."""
        if not self.stage_pcus:
            return self.tile_pcus(tile_pcus)
        return min([self.tile_pcus(tile_pcus)] + [n for op, n in self.stage_pcus if op == operator])

    def pmus_for(self, operator: str, tile_pmus: int) -> int:
        """Most PMUs per tile of ``operator``'s stage."""
        if not self.stage_pmus:
            return self.tile_pmus(tile_pmus)
        return min([self.tile_pmus(tile_pmus)] + [n for op, n in self.stage_pmus if op == operator])


#: the whole socket, every dataflow
NO_LIMITS = UnitBudget()
