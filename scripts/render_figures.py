"""Execute the notebooks and save one figure of each to docs/figures/ (the tour in docs/notebooks.md).

    python scripts/render_figures.py            # the four notebooks and the demo sweep, ~2 minutes on 2 cores
    python scripts/render_figures.py validation # one of them
    python scripts/render_figures.py sweep      # experiments/deepseek_sweep.yaml's plot only

The figures are the notebooks' own outputs (nbclient, working directory notebooks/), so they show
what the simulator computes at the commit they are rendered from; re-render after a change that
moves the numbers (calibration, unit models).
"""
from __future__ import annotations

import base64
import os
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "notebooks"
FIGURES = REPO / "docs" / "figures"

#: notebook -> index of the figure (in output order) that the tour shows
CHOSEN = {"throughput": 0, "prefill_breakdown": 1, "design_space": 0, "validation": 0}


def figures(nb: nbformat.NotebookNode) -> list[bytes]:
    """The PNG images a notebook displayed, in order."""
    out = []
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if output.get("output_type") in ("display_data", "execute_result") and "image/png" in data:
                out.append(base64.b64decode(data["image/png"]))
    return out


def render(name: str) -> Path:
    """Execute ``notebooks/<name>.ipynb`` and write its chosen figure to ``docs/figures/<name>.png``."""
    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    # the kernel imports this checkout, whatever is installed (as tests/test_notebooks.py does)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    images = figures(nb)
    if len(images) <= CHOSEN[name]:
        raise SystemExit(f"{name}: drew {len(images)} figure(s), expected at least {CHOSEN[name] + 1}")
    FIGURES.mkdir(parents=True, exist_ok=True)
    path = FIGURES / f"{name}.png"
    path.write_bytes(images[CHOSEN[name]])
    return path


def render_sweep() -> Path:
    """Run the 50-point demo sweep (2 processes) and copy its plot to ``docs/figures/deepseek_sweep.png``."""
    import shutil
    import tempfile

    from sn40l_sim.study.sweep.run import run_sweep

    with tempfile.TemporaryDirectory() as out:
        run_sweep(REPO / "experiments" / "deepseek_sweep.yaml", out, jobs=2, progress=True)
        FIGURES.mkdir(parents=True, exist_ok=True)
        return Path(shutil.copy(Path(out) / "sweep.png", FIGURES / "deepseek_sweep.png"))


def main(argv: list[str]) -> int:
    names = argv or [*CHOSEN, "sweep"]
    unknown = [n for n in names if n not in CHOSEN and n != "sweep"]
    if unknown:
        print(f"unknown figure(s) {unknown}; choose from {[*CHOSEN, 'sweep']}", file=sys.stderr)
        return 2
    for name in names:
        path = render_sweep() if name == "sweep" else render(name)
        print(f"wrote {path.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
