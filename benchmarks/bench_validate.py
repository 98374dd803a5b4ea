"""CPU seconds of ``python -m sn40l_sim validate`` (every reference measurement simulated and
compared), in a fresh interpreter, with an empty disk cache of mapped kernels (``cold``) and with
the cache that run filled (``cached``).

Run from the repository root::

    python benchmarks/bench_validate.py

Goal: at most 3 s. ``validate`` exits 1 while a calibration
point is outside its tolerance; that is its answer, not a failure of the benchmark.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure import print_figures, simulator  # noqa: E402


def goal_figures() -> list[tuple[str, object, str]]:
    """Cold and cached CPU seconds of ``validate``."""
    with tempfile.TemporaryDirectory() as cache:
        cold = simulator(["validate", "--quiet"], cache=Path(cache), check_status=(0, 1))
        cached = simulator(["validate", "--quiet"], cache=Path(cache), check_status=(0, 1))
    return [("validate, CPU s (cache cold)", cold.cpu_s, "<= 3 s"),
            ("validate, CPU s (mapped kernels cached)", cached.cpu_s, "<= 3 s")]


if __name__ == "__main__":
    # no options: argparse still answers --help and refuses a stray argument
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    print_figures(goal_figures())
