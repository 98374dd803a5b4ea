"""Where the main command's static work goes: building the kernel graphs and mapping them, as
``run`` does them (the memory-fit search over decode batches and the step timer share each graph).

One fresh process with the disk cache of mapped kernels off simulates the main experiment's points
(``simulate_assembly``, as ``run`` calls it) with ``build_graph`` and ``map_graph`` wrapped to count
their calls and CPU seconds; the engine, the serving loop and the outputs are the rest.

    python benchmarks/bench_build.py [EXPERIMENT.yaml]

Figures for information: their goal is the main command's (``bench_run.py``).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from measure import (  # benchmarks/ is on sys.path (run as a script or by run_all.py)
    child_env,
    existing_file,
    loaded,
    warm_bytecode,
)

ROOT = Path(__file__).resolve().parents[1]
MAIN = "experiments/deepseek_tp16.yaml"


def profile(experiment: str) -> dict:
    """CPU seconds and calls of graph building and mapping in this process (call it in a fresh one)."""
    import sn40l_sim.study.assemble as assemble_module
    import sn40l_sim.study.step_timing as step_timing_module  # where the builder and mapper are bound
    from sn40l_sim.study.experiment import load_experiment
    from sn40l_sim.study.runner import simulate_assembly

    cpu: Counter = Counter()
    calls: Counter = Counter()

    def timed(name, function):
        def wrapper(*args, **kwargs):
            start = time.process_time()
            try:
                return function(*args, **kwargs)
            finally:
                cpu[name] += time.process_time() - start
                calls[name] += 1
        return wrapper

    step_timing_module.build_graph = timed("build", step_timing_module.build_graph)
    step_timing_module.map_graph = timed("map", step_timing_module.map_graph)
    start = time.process_time()
    simulate_assembly(assemble_module.assemble(load_experiment(experiment)))
    return {"total": time.process_time() - start, "cpu": dict(cpu), "calls": dict(calls)}


def measure(experiment: str = MAIN) -> dict:
    """:func:`profile` of ``experiment`` in a fresh process, disk cache off."""
    env = child_env("off")
    warm_bytecode()
    out = subprocess.run([sys.executable, __file__, "--profile", experiment], capture_output=True, text=True,
                         check=True, env=env, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])


def goal_figures() -> list[tuple[str, object, str]]:
    """Graph building and mapping CPU seconds of the main experiment's simulation."""
    r = measure()
    return [(f"main experiment, {r['calls'].get('build', 0)} graphs built, CPU s", r["cpu"].get("build", 0.0), "-"),
            (f"main experiment, {r['calls'].get('map', 0)} graphs mapped (cold), CPU s", r["cpu"].get("map", 0.0), "-")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("experiment", nargs="?", type=existing_file, default=MAIN)
    parser.add_argument("--profile", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not args.profile:
        from sn40l_sim.study.experiment import load_experiment
        loaded(parser, "experiment", load_experiment, args.experiment)
    if args.profile:
        print(json.dumps(profile(args.experiment)))
    else:
        r = measure(args.experiment)
        print(f"simulation (no outputs): {r['total']:.2f} s CPU")
        for name in ("build", "map"):
            print(f"  {name:6s} {r['calls'].get(name, 0):3d} calls  {r['cpu'].get(name, 0.0):6.2f} s CPU")


if __name__ == "__main__":
    main()
