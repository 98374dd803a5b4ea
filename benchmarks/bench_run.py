"""Wall time of the main command, ``python -m sn40l_sim run EXPERIMENT``, end to end.

Each run is a fresh interpreter (imports, graph building, mapping, the engine's steps, the serving
simulation, writing results and the plot), pinned to at most ``--cores`` CPUs (default 2, the
budget the project promises: the main experiment under 30 s on a 2-core machine). The simulator
is single-threaded; the pinning keeps BLAS or plotting threads from borrowing idle cores.

Run from the repository root::

    python benchmarks/bench_run.py [EXPERIMENT.yaml ...] [--repeat 3] [--cores 2]

Numbers are printed, not asserted: the test suite has no timed assertions.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

DEFAULT = ["experiments/deepseek_tp16.yaml", "experiments/snapstream_table5.yaml"]


def time_run(experiment: str, cores: int) -> float:
    """Seconds of one ``run`` of ``experiment`` in a subprocess limited to ``cores`` CPUs."""
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    allowed = sorted(os.sched_getaffinity(0))[:cores] if hasattr(os, "sched_getaffinity") else None

    def pin() -> None:
        if allowed:
            os.sched_setaffinity(0, allowed)

    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "sn40l_sim", "run", experiment, "--out", out, "--quiet"],
                       check=True, stdout=subprocess.DEVNULL, env=env, preexec_fn=pin)
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("experiments", nargs="*", default=DEFAULT)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cores", type=int, default=2)
    args = parser.parse_args()
    print(f"{'experiment':45s} {'min s':>8s} {'median s':>9s}   ({args.repeat} runs, {args.cores} cores)")
    for experiment in args.experiments:
        times = [time_run(experiment, args.cores) for _ in range(args.repeat)]
        print(f"{experiment:45s} {min(times):8.2f} {statistics.median(times):9.2f}")


if __name__ == "__main__":
    main()
