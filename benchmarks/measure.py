"""What the benchmarks share: running a command of the simulator in a fresh interpreter and
measuring its wall and CPU seconds, with the disk cache of mapped kernels warm or cold.

A benchmark module (``bench_*.py``) plugs into ``run_all.py`` by defining ``goal_figures()``,
returning ``(what, figure, goal)`` tuples: ``figure`` a number in the goal's unit (or a text),
``goal`` a text that starts with ``<=`` or ``>=`` (or ``≤``, ``≥``) and the number, e.g.
``("main command, CPU s", 0.84, "<= 1.0 s")``; a goal of ``"-"`` marks a figure shown for
information.

**Bytecode.** Python writes the compiled bytecode of every module it imports (``__pycache__``) and
reuses it on the next run, unless ``PYTHONDONTWRITEBYTECODE`` is set, as it is in some sandboxes
(the project's own machine among them). Without it, every run recompiles the simulator and its
libraries from source, about 0.2 CPU s that no user pays after the first run. The children these
benchmarks start therefore use Python's default: bytecode written to and read from one folder of
their own (``PYTHONPYCACHEPREFIX``, in the system's temporary folder), filled once per benchmark
session by :func:`warm_bytecode`. ``child_env(bytecode=False)`` measures the other case.
"""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:   # a checkout run without installing the package
    sys.path.insert(0, str(ROOT))
# the argument types the benchmarks take, shared with the scripts (re-exported for them)
from sn40l_sim.commands.argtypes import positive_float, positive_int  # noqa: E402

__all__ = ["positive_float", "positive_int"]
#: the variable naming the cache of mapped kernels (sn40l_sim/mapper/disk_cache.py)
CACHE_ENV = "SN40L_SIM_CACHE"
#: where the children's bytecode lives (outside the repository; any edit invalidates a module's own)
PYCACHE = Path(tempfile.gettempdir()) / "sn40l_sim-bench-pycache"
#: a child that imports every module of the package and the plotting backend: it compiles them once
_IMPORT_ALL = ("import importlib, pkgutil, sn40l_sim, matplotlib; matplotlib.use('Agg'); import matplotlib.pyplot\n"
               "for m in pkgutil.walk_packages(sn40l_sim.__path__, 'sn40l_sim.'):\n"
               "    if not m.name.endswith('__main__'): importlib.import_module(m.name)")
_warmed = False


def child_env(cache: Path | str | None = None, *, bytecode: bool = True, **extra: str) -> dict[str, str]:
    """The environment of a benchmark's child interpreter: the repository on ``PYTHONPATH``, one
    thread per numeric library (the simulator is single-threaded), the disk cache of mapped
    kernels ``cache`` (a folder; ``"off"``; None for the user's default) and Python's bytecode as
    a user has it (``bytecode=False``: recompiled at every start, as under
    ``PYTHONDONTWRITEBYTECODE``).
    """
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               MKL_NUM_THREADS="1", **extra)
    if cache is not None:
        env[CACHE_ENV] = str(cache)
    if bytecode:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(PYCACHE)
    else:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env.pop("PYTHONPYCACHEPREFIX", None)
    return env


def warm_bytecode() -> None:
    """Compile the package and its libraries into :data:`PYCACHE` once per benchmark process, so
    that no measured run pays a first run's compilation."""
    global _warmed
    if not _warmed:
        subprocess.run([sys.executable, "-c", _IMPORT_ALL], cwd=ROOT, env=child_env(), check=True,
                       capture_output=True)
        _warmed = True


@dataclass(frozen=True)
class Timed:
    """Wall and CPU seconds of one command (CPU: the process and every child it waited for)."""

    wall_s: float
    cpu_s: float
    stdout: str
    returncode: int


def simulator(args: list[str], *, cache: Path | str | None = None, check_status: tuple[int, ...] = (0,),
              timeout_s: float | None = None, bytecode: bool = True) -> Timed:
    """Run ``python -m sn40l_sim ARGS`` from the repository root in a fresh interpreter.

    ``cache``: the folder of the disk cache of mapped kernels (an empty one: a cold run), ``"off"``
    for none, None for the default. ``bytecode``: see :func:`child_env`.
    """
    env = child_env(cache, bytecode=bytecode)
    if bytecode:
        warm_bytecode()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "sn40l_sim", *args], cwd=ROOT, env=env, text=True,
                          capture_output=True, timeout=timeout_s)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in check_status:
        raise RuntimeError(f"sn40l_sim {' '.join(args)} exited {proc.returncode}: {proc.stderr.strip()[-400:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Timed(wall, cpu, proc.stdout, proc.returncode)


def best(runs: list[Timed]) -> Timed:
    """The run of least CPU (the machine is shared: the least disturbed run)."""
    return min(runs, key=lambda t: t.cpu_s)


def existing_file(text: str) -> str:
    """An argparse type: a file that exists, as given from this folder or from the repository root
    (the children run from the root), returned as an absolute path; a missing one is refused in
    one line here rather than by a child's traceback."""
    found = "no such file"
    for base in (Path.cwd(), ROOT):
        path = (base / text).resolve()
        if path.is_file():
            return str(path)
        if path.is_dir():   # an experiment folder given for its file: say so, not "no such file"
            found = "a folder"
    raise argparse.ArgumentTypeError(f"expected an existing file, got {text!r} ({found})")


def loaded(parser: argparse.ArgumentParser, option: str, load, path: str):
    """``load(path)`` in this process, or one line and exit 2 when the file is of another kind or
    refused (a socket file where a node or an experiment is expected, a kernel template for a model):
    the children would end in a traceback here, as :func:`existing_file` says of a missing file."""
    from sn40l_sim.errors import InputError
    try:
        return load(path)
    except InputError as exc:
        parser.error(f"argument {option}: {exc}")


def print_figures(figures: list[tuple[str, object, str]]) -> None:
    """Print a benchmark's figures as ``what: figure (goal ...)`` lines."""
    for what, figure, goal in figures:
        shown = f"{figure:.3g}" if isinstance(figure, float) else str(figure)
        print(f"{what}: {shown}" + ("" if goal == "-" else f"  (goal {goal})"))
