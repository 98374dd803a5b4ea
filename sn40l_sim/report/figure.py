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

from sn40l_sim.errors import InputError
from sn40l_sim.report.outputs import atomic_path, check_file

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: resolution of every written raster plot
DPI = 120
#: the formats a plot the user names may have (matplotlib picks the format by the suffix)
FIGURE_SUFFIXES = (".png", ".svg", ".pdf")


def check_figure_file(path: str | Path, option: str) -> Path:
    """``path`` as a plot the user names: :func:`~sn40l_sim.report.outputs.check_file`, and a
    suffix of :data:`FIGURE_SUFFIXES` (checked before anything is simulated, since matplotlib
    would only refuse another suffix when the figure is saved).

    >>> check_figure_file("notes.txt", "--plot")
    Traceback (most recent call last):
    ...
    sn40l_sim.errors.InputError: --plot: expected a .png, .svg or .pdf file, got 'notes.txt'
    """
    return check_file(check_figure_suffix(path, option), option)


def check_figure_suffix(path: str | Path, option: str) -> Path:
    """``path``, refused in one line unless its suffix is one of :data:`FIGURE_SUFFIXES`.

    >>> check_figure_suffix("plot.SVG", "--out").name
    'plot.SVG'
    """
    path = Path(path)
    if path.suffix.lower() not in FIGURE_SUFFIXES:
        raise InputError(f"expected a .png, .svg or .pdf file, got {path.name!r}", field=option)
    return path


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
