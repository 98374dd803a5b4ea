"""Execute the notebooks and save one figure of each to docs/figures/ (the tour in docs/notebooks.md).

    python scripts/render_figures.py            # the notebooks and the two sweeps, ~4 minutes on 2 cores
    python scripts/render_figures.py validation # one of them
    python scripts/render_figures.py sweep      # experiments/deepseek_sweep.yaml's plot only
    python scripts/render_figures.py kv_policies_pareto   # experiments/kv_policies.yaml (~15 s):
                                                # its Pareto plots and the README's table

The figures are the notebooks' own outputs (nbclient, working directory notebooks/), so they show
what the simulator computes at the commit they are rendered from; re-render after a change that
moves the numbers (calibration, unit models).
"""
from __future__ import annotations

import argparse
import base64
import os
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

REPO = Path(__file__).resolve().parents[1]
# the sweeps below run in this process: this checkout's package, not whatever sn40l_sim is
# installed (Python puts scripts/ on the path, not the checkout); the notebooks' kernel gets it too
sys.path.insert(0, str(REPO))
NOTEBOOKS = REPO / "notebooks"
FIGURES = REPO / "docs" / "figures"

#: notebook -> index of the figure (in output order) that the tour shows
CHOSEN = {"throughput": 0, "prefill_breakdown": 1, "design_space": 0, "validation": 0, "kv_policies": 1}
#: the models of experiments/kv_policies.yaml, one Pareto plot each
KV_POLICY_MODELS = {"deepseek-r1": "kv_policies_deepseek_r1", "llama-3.1-70b": "kv_policies_llama_3_1_70b"}


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
    os.environ.pop("SN40L_SIM_NOTEBOOK_QUICK", None)   # the full grids (the tests run the quick ones)
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


def render_kv_policies() -> Path:
    """Run experiments/kv_policies.yaml (2 processes), draw one Pareto plot per model with the plot
    command's function (``docs/figures/kv_policies_<model>.png``) and rewrite the README's table
    (``scripts/kv_policies_table.py``)."""
    import subprocess
    import tempfile

    from sn40l_sim.report.plot_csv import plot_csv
    from sn40l_sim.study.sweep.run import run_sweep

    with tempfile.TemporaryDirectory() as out:
        run_sweep(REPO / "experiments" / "kv_policies.yaml", out, jobs=2, progress=True)
        csv_path = Path(out) / "results.csv"
        FIGURES.mkdir(parents=True, exist_ok=True)
        for model, stem in KV_POLICY_MODELS.items():
            path = plot_csv(csv_path, x="kv_bytes_per_context_token", y="decode_tokens_per_s", hue=["prefill_len"],
                            where={"model": model}, kind="scatter", label="policy_entry", logx=True,
                            out=FIGURES / f"{stem}.png")
            print(f"wrote {path.relative_to(REPO)}")
        subprocess.run([sys.executable, str(REPO / "scripts" / "kv_policies_table.py"), str(csv_path), "--readme"],
                       check=True)
    return FIGURES / f"{next(iter(KV_POLICY_MODELS.values()))}.png"


def main(argv: list[str] | None = None) -> int:
    extra = {"sweep": render_sweep, "kv_policies_pareto": render_kv_policies}
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     epilog=f"figures: {', '.join([*CHOSEN, *extra])} (default: all)")
    parser.add_argument("names", nargs="*", metavar="FIGURE", help="the figures to render")
    names = parser.parse_args(argv).names or [*CHOSEN, *extra]
    unknown = [n for n in names if n not in CHOSEN and n not in extra]
    if unknown:
        parser.error(f"argument FIGURE: unknown figure(s) {', '.join(unknown)}; "
                     f"expected one of {', '.join([*CHOSEN, *extra])}")
    for name in names:
        path = extra[name]() if name in extra else render(name)
        print(f"wrote {path.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
