"""Wall and CPU seconds of serving a real trace and of a rate search, end to end.

``experiments/azure_conv.yaml`` serves the first ten minutes of the Azure LLM conversation trace
(2,867 requests; experiments/traces/README.md keeps its CC-BY 4.0 attribution) on DeepSeek-R1 and
Llama-3.1-70B, with and without SnapStream: a sweep of four runs, on as many worker processes as
the machine has CPUs. ``experiments/max_rate.yaml`` bisects for the highest Poisson rate under its
SLOs for each KV policy. Each runs once in a fresh interpreter with an empty disk cache of mapped
kernels (what a first run pays), then once with the cache that run filled.

Run from the repository root::

    python benchmarks/bench_traces.py

No goal is set for these (the figures are shown for information); ``benchmarks/bench_serving.py``
times the serving loop alone against its goal.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure import print_figures, simulator  # noqa: E402

EXPERIMENTS = ("experiments/azure_conv.yaml", "experiments/max_rate.yaml")


def goal_figures() -> list[tuple[str, object, str]]:
    """Cold and cached wall seconds of ``run`` on each trace experiment (for ``run_all.py``)."""
    rows: list[tuple[str, object, str]] = []
    for experiment in EXPERIMENTS:
        name = Path(experiment).stem
        with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as out:
            cold = simulator(["run", experiment, "--out", out, "--quiet", "--no-plot"], cache=cache)
            warm = simulator(["run", experiment, "--out", out, "--quiet", "--no-plot"], cache=cache)
        rows += [(f"run {name}, wall s (cache cold)", cold.wall_s, "-"),
                 (f"run {name}, wall s (mapped kernels cached)", warm.wall_s, "-"),
                 (f"run {name}, CPU s (cache cold, all workers)", cold.cpu_s, "-")]
    return rows


if __name__ == "__main__":
    # no options: argparse still answers --help and refuses a stray argument
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    print_figures(goal_figures())
