"""The checkerboard of a tile: which grids hold its PCUs and PMUs, and how many tiles a socket may
have (checked by the loader).

PCUs sit on a grid's even cells (row + column even: the ceiling of half the cells), PMUs on its odd
cells (the floor), filled row by row, as :func:`~sn40l_sim.hardware.topology.build_topology` and the
mapper's layout (:mod:`sn40l_sim.mapper.layout`) place them.
"""
from __future__ import annotations

from sn40l_sim.hardware.spec import TileSpec


def grid_holds(rows: int, cols: int, pcus: int, pmus: int) -> bool:
    """Whether a ``rows x cols`` checkerboard holds ``pcus`` PCUs and ``pmus`` PMUs.

    >>> grid_holds(20, 26, 260, 260), grid_holds(21, 25, 260, 263), grid_holds(21, 25, 263, 262)
    (True, False, True)
    """
    cells = rows * cols
    return pcus <= (cells + 1) // 2 and pmus <= cells // 2


#: the most tiles a socket may have (dies x tiles_per_die): a run's cost grows with them (Llama-3.1-8B's
#: 4K point on 8 sockets took about 20 s at 256 tiles a socket, 33 s at 512, and did not finish in two
#: minutes at 2,048), and a socket of 2**31 dies, which the counts' range allowed, ran out of memory
MAX_TILES_PER_SOCKET = 256


def socket_tiles_error(dies: int, tiles_per_die: int) -> tuple[str, str] | None:
    """``(field, message)`` when a socket has more than :data:`MAX_TILES_PER_SOCKET` tiles, else None;
    the field is the larger count.

    >>> socket_tiles_error(2, 2) is None, socket_tiles_error(2, 129)[0]
    (True, 'tiles_per_die')
    """
    tiles = dies * tiles_per_die
    if tiles <= MAX_TILES_PER_SOCKET:
        return None
    return ("dies" if dies >= tiles_per_die else "tiles_per_die",
            f"a socket of {dies} dies x {tiles_per_die} tiles has {tiles:,} tiles; expected at most "
            f"{MAX_TILES_PER_SOCKET} (the SN40L has 4)")


def tile_grid_error(tile: TileSpec) -> tuple[str, str] | None:
    """``(field, message)`` when the tile's grid does not hold its units, or holds them with a row
    or a column to spare, else ``None``. Units are placed row by row, so a spare row or column is
    a line of empty cells whose switches every kernel's configuration still writes, and a grid
    written far too large (2,000,000 rows) would build a mesh of millions of switches.

    >>> tile_grid_error(TileSpec.model_construct(grid_rows=21, grid_cols=26, pcus=260, pmus=260))[0]
    'grid_rows'
    >>> tile_grid_error(TileSpec.model_construct(grid_rows=20, grid_cols=13, pcus=260, pmus=260))[1].split("(")[-1]
    'expected grid_rows at least 40 with 13 columns, or grid_cols at least 26 with 20 rows)'
    """
    rows, cols, pcus, pmus = tile.grid_rows, tile.grid_cols, tile.pcus, tile.pmus
    cells = rows * cols
    if not grid_holds(rows, cols, pcus, pmus):
        # the grid is two fields: say what either would need, so that a change of grid_cols or of
        # the unit counts (reported here at grid_rows) reads as what to write
        need_rows = _smallest_side(_enough(pcus, pmus), cols, pcus, pmus, True)
        need_cols = _smallest_side(rows, _enough(pcus, pmus), pcus, pmus, False)
        return "grid_rows", (f"a {rows} x {cols} checkerboard has {cells} cells, {(cells + 1) // 2} for PCUs (the "
                             f"even cells) and {cells // 2} for PMUs; it cannot hold {pcus} PCUs and {pmus} PMUs "
                             f"(expected grid_rows at least {need_rows} with {cols} columns, or grid_cols at least "
                             f"{need_cols} with {rows} rows)")
    for field, side, fewer in (("grid_rows", "rows", (rows - 1, cols)), ("grid_cols", "columns", (rows, cols - 1))):
        if min(fewer) >= 1 and grid_holds(*fewer, pcus, pmus):
            smallest = _smallest_side(rows, cols, pcus, pmus, field == "grid_rows")
            # the rows cut, the columns can be to spare in turn (a 30 x 30 grid for 260 + 260 units
            # holds them in 18 x 30, which is refused for its columns): name a grid both checks accept
            fit_cols = _smallest_side(smallest, cols, pcus, pmus, False) if field == "grid_rows" else smallest
            grid = f"{smallest} x {fit_cols}" if field == "grid_rows" else f"{rows} x {smallest}"
            also = f" and grid_cols at most {fit_cols}" if field == "grid_rows" and fit_cols < cols else ""
            return field, (f"a {rows} x {cols} checkerboard has {side} to spare for {pcus} PCUs and {pmus} PMUs: "
                           f"a {grid} one holds them (expected {field} at most {smallest}{also}, so that no row or "
                           "column is to spare)")
    return None


def _enough(pcus: int, pmus: int) -> int:
    """A side long enough for the units whatever the other side (at least 1): its cells alone,
    ``2 * max(pcus, pmus)``, give each kind half of them."""
    return 2 * max(pcus, pmus, 1)


def _smallest_side(rows: int, cols: int, pcus: int, pmus: int, of_rows: bool) -> int:
    """The fewest rows (``of_rows``) or columns that, with the other side kept, hold the units:
    a bisection, since the grid to check may have millions of rows."""
    low, high = 1, rows if of_rows else cols
    while low < high:
        mid = (low + high) // 2
        if grid_holds(mid, cols, pcus, pmus) if of_rows else grid_holds(rows, mid, pcus, pmus):
            high = mid
        else:
            low = mid + 1
    return low
