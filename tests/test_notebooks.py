"""The notebooks in notebooks/ run top to bottom (nbclient, a python3 kernel, working directory
notebooks/), draw their figures, and are committed without outputs and as make_notebooks.py writes
them. The tests run them with ``SN40L_SIM_NOTEBOOK_QUICK=1``: every cell, on fewer points per sweep
(the full grids are what ``scripts/render_figures.py`` draws); each takes a few seconds on 2 cores.
They run one after the other in one kernel (:func:`kernel`), each from an emptied namespace, and the
kernel reads an IPython folder of the tests' own (:func:`ipython_dir`)."""
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

from sn40l_sim.hardware.loader import load_hardware

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
    """An IPython folder for the kernel: no profile or startup file of the user's reaches it, and
    its one startup file gives the kernel the garbage collector's thresholds of the test processes
    (tests/conftest.py: the kernel keeps the mapper's memos too; ~2.5 s of the five notebooks' CPU)."""
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


#: the cell run before each notebook: IPython's full reset (every name, the output history); the
#: reset ends in a full garbage collection, which would go through the memos the notebooks before
#: left (~0.5 s each), so the objects alive before it are set aside from the collector meanwhile
EMPTY_NAMESPACE = '__import__("gc").freeze()\n%reset -f\n__import__("gc").unfreeze()'


@pytest.fixture(scope="module")
def kernel(ipython_dir):
    """One python3 kernel, started in notebooks/, that runs the five notebooks one after the other.

    A kernel of its own per notebook cost each ~1.5 s of CPU more (starting the kernel, importing
    the package, matplotlib and numpy again, exiting through the mapper's memos) and went over the
    memos from scratch, ~6 s of the module's ~23 s. Each notebook still starts from nothing of the
    one before: :data:`EMPTY_NAMESPACE` is its first cell, so a name it uses but never defines or
    imports fails it; what stays are the imported modules and the package's memos, which change no
    number (the tests share one disk cache of mapped kernels too, tests/conftest.py)."""
    from jupyter_client.manager import KernelManager

    env = dict(os.environ)
    # the kernel imports this checkout, whatever is installed
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env.pop("MPLBACKEND", None)
    env["IPYTHONDIR"] = str(ipython_dir)
    # every cell runs, on fewer points per sweep (the notebooks' QUICK); the full grids are what
    # scripts/render_figures.py executes, on the same code
    env["SN40L_SIM_NOTEBOOK_QUICK"] = "1"
    km = KernelManager(kernel_name=kernel_name())
    km.start_kernel(cwd=str(NOTEBOOKS), env=env)
    yield km
    km.shutdown_kernel(now=True)


@pytest.mark.parametrize("name", NAMES)
def test_notebook_runs_top_to_bottom(name, kernel):
    from nbclient import NotebookClient
    from nbformat.v4 import new_code_cell

    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    if not kernel.is_alive():   # a notebook before this one killed it
        kernel.restart_kernel(now=True)
    nb.cells.insert(0, new_code_cell(EMPTY_NAMESPACE))
    client = NotebookClient(nb, timeout=600, km=kernel)
    try:
        client.execute()  # raises on any cell error
    finally:
        if client.kc is not None:   # the kernel is the fixture's, the client this test's
            client.kc.stop_channels()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    figures = [o for o in outputs if o.output_type == "display_data" and "image/png" in o.get("data", {})]
    assert figures, f"{name} drew no figure"
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "deepseek-r1 on SN40L-16" in text
    assert "quick run (SN40L_SIM_NOTEBOOK_QUICK=1)" in text   # the kernel saw the setting
    for line in SAID.get(name, ()):
        assert line in text, (name, line)


def _hbm_modules() -> int:
    socket = load_hardware(REPO / "hw_configs" / "sn40l_node16.yaml").socket
    return socket.memory["hbm"].units_per_die * socket.dies


#: lines a notebook prints: design_space's HBM axis scales a module by the hardware file's count of
#: modules (it multiplied by a literal 4), and kv_policies' table says its memory is per socket
SAID = {"design_space.ipynb": [f"HBM per socket = {_hbm_modules()} modules x the swept module capacity"],
        "kv_policies.ipynb": ["DDR store/socket", "DDR/step/socket"]}
