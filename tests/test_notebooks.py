"""The notebooks in notebooks/ run top to bottom (nbclient, a python3 kernel, working directory
notebooks/), draw their figures, and are committed without outputs and as make_notebooks.py writes
them. The tests run them with ``SN40L_SIM_NOTEBOOK_QUICK=1``: every cell, on fewer points per sweep
(the full grids are what ``scripts/render_figures.py`` draws); each takes a few seconds on 2 cores.
The kernels read an IPython folder of the tests' own (:func:`ipython_dir`)."""
from __future__ import annotations

import fcntl
import gc
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "notebooks"
NAMES = ["throughput.ipynb", "prefill_breakdown.ipynb", "design_space.ipynb", "validation.ipynb",
         "kv_policies.ipynb"]


def kernel_name() -> str:
    """``python3``, installing ipykernel's kernel spec for this interpreter if it is missing (one
    pytest-xdist worker at a time: an install replaces the folder another may be copying)."""
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    def missing() -> bool:
        try:
            KernelSpecManager().get_kernel_spec("python3")
        except NoSuchKernel:
            return True
        return False

    if missing():
        with open(Path(tempfile.gettempdir()) / "sn40l_sim-kernelspec.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if missing():
                subprocess.run([sys.executable, "-m", "ipykernel", "install", "--user", "--name", "python3"],
                               check=True, capture_output=True)
    return "python3"


@pytest.fixture(scope="module")
def ipython_dir(tmp_path_factory) -> Path:
    """An IPython folder for the kernels: no profile or startup file of the user's reaches them, and
    its one startup file gives the kernel the garbage collector's thresholds of the test processes
    (tests/conftest.py: a kernel keeps the mapper's memos too; ~2.5 s of the five notebooks' CPU)."""
    folder = tmp_path_factory.mktemp("ipython")
    startup = folder / "profile_default" / "startup"
    startup.mkdir(parents=True)
    (startup / "00-gc.py").write_text(f"import gc\n\ngc.set_threshold{gc.get_threshold()}\n")
    return folder


def test_notebooks_are_generated_and_stored_without_outputs():
    assert sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")) == sorted(NAMES)
    result = subprocess.run([sys.executable, str(NOTEBOOKS / "make_notebooks.py"), "--check"], capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stdout
    for name in NAMES:
        nb = nbformat.read(NOTEBOOKS / name, as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert code and all(not c.outputs and c.execution_count is None for c in code), name


@pytest.mark.parametrize("name", NAMES)
def test_notebook_runs_top_to_bottom(name, monkeypatch, ipython_dir):
    from nbclient import NotebookClient

    # the kernel imports this checkout, whatever is installed
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    monkeypatch.delenv("MPLBACKEND", raising=False)
    monkeypatch.setenv("IPYTHONDIR", str(ipython_dir))
    # every cell runs, on fewer points per sweep (the notebooks' QUICK); the full grids are what
    # scripts/render_figures.py executes, on the same code
    monkeypatch.setenv("SN40L_SIM_NOTEBOOK_QUICK", "1")
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name=kernel_name(),
                   resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()  # raises on any cell error
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    figures = [o for o in outputs if o.output_type == "display_data" and "image/png" in o.get("data", {})]
    assert figures, f"{name} drew no figure"
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "deepseek-r1 on SN40L-16" in text
    assert "quick run (SN40L_SIM_NOTEBOOK_QUICK=1)" in text   # the kernel saw the setting
