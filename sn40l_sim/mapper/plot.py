"""Drawing placed kernels on the tile meshes (matplotlib, Agg backend).

One row of panels per kernel, one panel per compute tile of the socket. Every PCU cell is a
square and every PMU cell a circle, coloured by the stage that holds it (grey when unused); the
AGCUs are triangles on the top and bottom edges. The legend lists the stages in pipeline order
with their PCUs and PMUs per tile.

Examples
--------
>>> import tempfile, pathlib
>>> from sn40l_sim.mapper._examples import example_socket, example_decode_kernel
>>> from sn40l_sim.mapper.kernel import map_kernel
>>> socket = example_socket()
>>> out = pathlib.Path(tempfile.mkdtemp()) / "p.png"
>>> plot_placement(socket, [map_kernel(socket, example_decode_kernel())], out)
>>> out.stat().st_size > 10000
True
"""
from __future__ import annotations

from pathlib import Path

from sn40l_sim.hardware import figures
from sn40l_sim.hardware.spec import SocketSpec
from sn40l_sim.mapper.layout import agcu_spots, pcu_cells, pmu_cells
from sn40l_sim.mapper.placement import PlacedKernel

_UNUSED = "#dddddd"


def _palette(n: int) -> list:
    """``n`` stage colours, none of them grey: tab20's two greys read as unused cells (a decode
    MLA kernel's 15th and 16th stages, its softmax and its 103-PCU P.V product, looked empty)."""
    import matplotlib

    colours = list(matplotlib.colormaps["tab20"].colors) + list(matplotlib.colormaps["tab20b"].colors)
    colours = [c for c in colours if max(c[:3]) - min(c[:3]) > 0.05]
    return [colours[i % len(colours)] for i in range(n)]


def plot_placement(socket: SocketSpec, kernels: list[PlacedKernel], path: str | Path) -> None:
    """Write a PNG of the placement of ``kernels`` to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    tiles = figures.tiles(socket)
    rows, cols = socket.tile.grid_rows, socket.tile.grid_cols
    fig, axes = plt.subplots(len(kernels), tiles, figsize=(3.2 * tiles + 3.5, 3.0 * len(kernels) + 0.6),
                             squeeze=False)
    all_pcus, all_pmus, agcus = pcu_cells(socket), pmu_cells(socket), agcu_spots(socket)
    for row, pk in enumerate(kernels):
        stages = [s for s in pk.stages if s.pcus or s.pmus]
        colours = _palette(len(stages))
        owner_pcu: dict[tuple[int, int, int], int] = {}
        owner_pmu: dict[tuple[int, int, int], int] = {}
        # with several sections the last one drawn wins a cell; sections share the tiles in time
        for i, st in enumerate(stages):
            owner_pcu.update({c: i for c in st.coords})
            owner_pmu.update({c: i for c in st.pmu_coords})
        for tile in range(tiles):
            ax = axes[row][tile]
            for cells, owner, marker in ((all_pcus, owner_pcu, "s"), (all_pmus, owner_pmu, "o")):
                xs = [c for _, c in cells]
                ys = [r for r, _ in cells]
                fill = [colours[owner[(tile, r, c)]] if (tile, r, c) in owner else _UNUSED for r, c in cells]
                ax.scatter(xs, ys, c=fill, marker=marker, s=16, linewidths=0)
            ax.scatter([c - 0.5 for _, c in agcus], [r - 0.5 for r, _ in agcus], marker="^", s=18, c="black")
            ax.set_xlim(-1.5, cols + 0.5)
            ax.set_ylim(rows + 0.5, -1.5)
            ax.set_aspect("equal")
            ax.set_xticks([])
            ax.set_yticks([])
            ax.set_title(f"tile {tile}", fontsize=8)
        axes[row][0].set_ylabel(row_label(pk), fontsize=8)
        handles = [Line2D([], [], marker="s", linestyle="", color=colours[i],
                          label=f"{st.operator} ({st.pcus // max(1, len(st.tiles))}/{st.pmus // max(1, len(st.tiles))})")
                   for i, st in enumerate(stages)]
        axes[row][-1].legend(handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=6,
                             frameon=False, title="stage (PCU/PMU per tile)", title_fontsize=6,
                             ncol=1 + len(stages) // 18)
    fig.suptitle(f"{socket.name}: squares PCUs, circles PMUs, triangles AGCUs; grey unused", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def row_label(pk: PlacedKernel) -> str:
    """A drawn kernel's name and what bounds it as the graph calls it, as ``map``'s table says
    (:attr:`~sn40l_sim.mapper.placement.PlacedKernel.call_bound`; a lone call's bound when it was
    mapped alone)."""
    return f"{pk.kernel.name}\n{pk.call_bound or pk.bounding_resource}-bound"
