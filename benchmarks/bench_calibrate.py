"""CPU seconds of the default ``python -m sn40l_sim calibrate`` (the fit, its derivatives and the
leave-one-out refits), in a fresh interpreter with an empty disk cache of mapped kernels (and
again with the cache that run filled).

Run from the repository root::

    python benchmarks/bench_calibrate.py [--timeout 900]

Goal: at most 30 s. A run still going after ``--timeout``
seconds is stopped and reported as more than that.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure import positive_float, print_figures, simulator  # noqa: E402

#: stop a calibrate still running after this many seconds of wall time (run_all's default)
TIMEOUT_S = 900.0


def goal_figures(timeout_s: float = TIMEOUT_S) -> list[tuple[str, object, str]]:
    """CPU seconds of the default ``calibrate`` (a text when it ran out of time), its wall seconds,
    and the CPU seconds of a second run with the disk cache the first one filled."""
    with tempfile.TemporaryDirectory() as cache:
        try:
            run = simulator(["calibrate", "--quiet"], cache=Path(cache), timeout_s=timeout_s)
        except subprocess.TimeoutExpired:
            return [("calibrate (default), CPU s (cache cold)", f"> {timeout_s:.0f} (wall; stopped)", "<= 30 s")]
        cached = simulator(["calibrate", "--quiet"], cache=Path(cache), timeout_s=timeout_s)
    return [("calibrate (default), CPU s (cache cold)", run.cpu_s, "<= 30 s"),
            ("calibrate (default), wall s (cache cold)", run.wall_s, "-"),
            ("calibrate (default), CPU s (steps cached)", cached.cpu_s, "-")]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=positive_float, default=TIMEOUT_S)
    print_figures(goal_figures(parser.parse_args().timeout))
