"""What the benchmarks share: running a command of the simulator in a fresh interpreter and
measuring its wall and CPU seconds, with the disk cache of mapped kernels warm or cold.

A benchmark module (``bench_*.py``) plugs into ``run_all.py`` by defining ``goal_figures()``,
returning ``(what, figure, goal)`` tuples: ``figure`` a number in the goal's unit (or a text),
``goal`` a text that starts with ``<=`` or ``>=`` (or ``≤``, ``≥``) and the number, e.g.
``("main command, CPU s", 0.84, "<= 1.0 s")``; a goal of ``"-"`` marks a figure shown for
information.
"""
from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: the variable naming the cache of mapped kernels (sn40l_sim/mapper/disk_cache.py)
CACHE_ENV = "SN40L_SIM_CACHE"


@dataclass(frozen=True)
class Timed:
    """Wall and CPU seconds of one command (CPU: the process and every child it waited for)."""

    wall_s: float
    cpu_s: float
    stdout: str
    returncode: int


def simulator(args: list[str], *, cache: Path | str | None = None, check_status: tuple[int, ...] = (0,),
              timeout_s: float | None = None) -> Timed:
    """Run ``python -m sn40l_sim ARGS`` from the repository root in a fresh interpreter.

    ``cache``: the folder of the disk cache of mapped kernels (an empty one: a cold run), ``"off"``
    for none, None for the default.
    """
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               MKL_NUM_THREADS="1")
    if cache is not None:
        env[CACHE_ENV] = str(cache)
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


def print_figures(figures: list[tuple[str, object, str]]) -> None:
    """Print a benchmark's figures as ``what: figure (goal ...)`` lines."""
    for what, figure, goal in figures:
        shown = f"{figure:.3g}" if isinstance(figure, float) else str(figure)
        print(f"{what}: {shown}" + ("" if goal == "-" else f"  (goal {goal})"))
