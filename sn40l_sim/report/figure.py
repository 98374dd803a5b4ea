"""Figures drawn straight onto matplotlib's Agg canvas, without ``matplotlib.pyplot``.

The plots the commands write are files, never windows, so they need neither pyplot's figure
manager nor a backend chosen for the process: a :class:`matplotlib.figure.Figure` with a
:class:`~matplotlib.backends.backend_agg.FigureCanvasAgg` attached draws the same pixels. Not
importing pyplot spares its start-up work on every plotting run, and leaves the process's backend
to whoever else uses matplotlib in it (a notebook keeps its own). matplotlib itself is imported
only when a figure is made: a run with ``--no-plot`` never pays for it.

Examples
--------
>>> import tempfile, pathlib
>>> fig = new_figure((3, 2))
>>> _ = fig.subplots().plot([0, 1], [1, 0])
>>> path = save_figure(fig, pathlib.Path(tempfile.mkdtemp()) / "line.png")
>>> path.read_bytes()[:4] == b"\\x89PNG"
True
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from sn40l_sim.report.outputs import atomic_path

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: resolution of every written raster plot
DPI = 120


def new_figure(figsize: tuple[float, float]) -> Figure:
    """An empty figure of ``figsize`` inches with constrained layout (labels never clipped),
    drawn by the Agg canvas."""
    # lazily: matplotlib is the heaviest import of a run and only plotting needs it
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def save_figure(fig: Figure, path: Path, metadata: dict[str, str | None] | None = None) -> Path:
    """Write ``fig`` to ``path`` (the format from its suffix, at :data:`DPI`), whole or not at all
    (never a truncated image), creating the folder; returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as temporary:
        fig.savefig(temporary, dpi=DPI, metadata=metadata)
    return path
