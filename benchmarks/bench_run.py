"""CPU and wall seconds of the main command, ``python -m sn40l_sim run EXPERIMENT``, end to end,
and its speed: simulated seconds (the served runs' makespans) over wall seconds.

Each run is a fresh interpreter (imports, graph building, mapping, the engine's steps, the serving
simulation, writing results and the plot). It runs once with an empty disk cache of mapped kernels
(``cold``: what the first run after a change of the simulator pays) and then with the cache that
run filled (``cached``: every later run), each ``--repeat`` times, the least disturbed run kept (the
machine is shared). Python's bytecode is cached as on a user's machine (``measure.py``); one row
shows a cached run that recompiles every module, as under ``PYTHONDONTWRITEBYTECODE``.

Run from the repository root::

    python benchmarks/bench_run.py [EXPERIMENT.yaml ...] [--repeat 1]

Goals: the main command in at most 1 s of CPU, and at least 1000 times faster than the simulated
time.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure import (  # noqa: E402
    Timed,
    best,
    child_env,
    existing_file,
    loaded,
    positive_int,
    print_figures,
    simulator,
    warm_bytecode,
)  # noqa: E402

MAIN = "experiments/deepseek_tp16.yaml"


def timed_run(experiment: str, cache: Path | str | None = None, extra: tuple[str, ...] = (),
              bytecode: bool = True) -> tuple[Timed, float]:
    """One ``run`` of ``experiment``: its timing and the simulated seconds of its served runs."""
    with tempfile.TemporaryDirectory() as out:
        timed = simulator(["run", experiment, "--out", out, "--quiet", *extra], cache=cache, bytecode=bytecode)
        records = json.loads((Path(out) / "results.json").read_text())
    simulated = sum((r.get("throughput") or {}).get("makespan_s") or 0.0 for r in records)
    return timed, simulated


def time_run(experiment: str, cores: int = 2) -> float:
    """Wall seconds of one ``run`` of ``experiment`` in a subprocess limited to ``cores`` CPUs (the
    simulator is single-threaded; the pinning keeps BLAS or plotting threads from borrowing idle
    cores). Used by ``bench_serving.py``."""
    env = child_env()
    warm_bytecode()
    allowed = sorted(os.sched_getaffinity(0))[:cores] if hasattr(os, "sched_getaffinity") else None

    def pin() -> None:
        if allowed:
            os.sched_setaffinity(0, allowed)

    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "sn40l_sim", "run", experiment, "--out", out, "--quiet"],
                       check=True, stdout=subprocess.DEVNULL, env=env, preexec_fn=pin)
        return time.perf_counter() - start


def figures_of(experiment: str, repeat: int = 1) -> list[tuple[str, object, str]]:
    """Cold CPU seconds of ``run experiment`` (with and without its plots), cached CPU seconds,
    and its speed with the cache filled."""
    name = Path(experiment).stem
    with tempfile.TemporaryDirectory() as cache:
        cold = best([timed_run(experiment, Path(cache) / str(i))[0] for i in range(repeat)])
        bare = best([timed_run(experiment, Path(cache) / f"bare{i}", ("--no-plot",))[0] for i in range(repeat)])
        timed_run(experiment, Path(cache) / "warm")
        cached = [timed_run(experiment, Path(cache) / "warm") for _ in range(repeat)]
        cached_bare = best([timed_run(experiment, Path(cache) / "warm", ("--no-plot",))[0] for _ in range(repeat)])
        compiling = best([timed_run(experiment, Path(cache) / "warm", bytecode=False)[0] for _ in range(repeat)])
    warm, simulated = min(cached, key=lambda t: t[0].cpu_s)
    return [(f"run {name}, CPU s (cache cold)", cold.cpu_s, "<= 1.0 s"),
            (f"run {name} --no-plot, CPU s (cache cold)", bare.cpu_s, "<= 1.0 s"),
            (f"run {name}, CPU s (mapped kernels cached)", warm.cpu_s, "<= 1.0 s"),
            (f"run {name} --no-plot, CPU s (mapped kernels cached)", cached_bare.cpu_s, "<= 1.0 s"),
            (f"run {name}, CPU s (cached, no bytecode: PYTHONDONTWRITEBYTECODE=1)", compiling.cpu_s, "-"),
            (f"run {name}, speed (simulated s / wall s, cached)", simulated / warm.wall_s, ">= 1000")]


def goal_figures() -> list[tuple[str, object, str]]:
    """The main command's figures (for ``run_all.py``)."""
    return figures_of(MAIN)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("experiments", nargs="*", type=existing_file, default=[MAIN])
    parser.add_argument("--repeat", type=positive_int, default=1)
    args = parser.parse_args()
    from sn40l_sim.study.experiment import load_experiment
    for experiment in args.experiments:
        loaded(parser, "experiments", load_experiment, experiment)
    for experiment in args.experiments:
        print_figures(figures_of(experiment, args.repeat))


if __name__ == "__main__":
    main()
