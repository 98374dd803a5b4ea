"""Wall time of serving a real trace and of a rate search, end to end (``run`` in a fresh
interpreter, as :mod:`bench_run` times it, pinned to at most ``--cores`` CPUs).

Run from the repository root::

    python benchmarks/bench_serving.py [--repeat 1] [--cores 2]

``experiments/azure_conv.yaml`` serves the first ten minutes of the Azure LLM conversation trace
(2,867 requests) on DeepSeek-R1 and Llama-3.1-70B, with and without SnapStream (a sweep, on as
many worker processes as CPUs); ``experiments/max_rate.yaml`` bisects for the highest Poisson rate under its
SLOs for each KV policy. Numbers are printed, not asserted. Measured on the project's shared
2-core machine (other agents running): about 85 s for azure_conv with 2 jobs (each of its four
runs 20-40 s, most of it building and mapping the prefill graphs of every compiled prompt length
the trace's prompts fall into; the SimPy serving of 2,867 requests is a few seconds); about 110 s
for max_rate (18 probes of 1,500 requests each, the step costs computed once per KV policy).
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_run import time_run  # noqa: E402

EXPERIMENTS = ["experiments/azure_conv.yaml", "experiments/max_rate.yaml"]


def main(argv: list[str] | None = None) -> int:
    """Time each experiment; print the median of ``--repeat`` runs."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("experiments", nargs="*", default=EXPERIMENTS)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--cores", type=int, default=2)
    args = parser.parse_args(argv)
    for experiment in args.experiments:
        times = [time_run(experiment, args.cores) for _ in range(args.repeat)]
        print(f"{experiment}: {statistics.median(times):.1f} s wall (median of {len(times)}, {args.cores} cores)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
