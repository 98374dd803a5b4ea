"""How much faster than real time the serving loop serves 4,096 requests (simulated seconds ÷ wall
seconds of :func:`sn40l_sim.serving.loop.simulate` alone; the step costs are given, not timed).

Run from the repository root::

    python benchmarks/bench_serving.py [--repeat 3] [--reference]

The serve: DeepSeek-R1 with SnapStream on 16-socket nodes, eight prefill nodes and four decode
nodes of 1,024 slots (4,096 sequences decoding at once when the slots are full), 4,096 requests
of 32K-token prompts and 1,024 output tokens arriving as a Poisson stream at 24 per second (about
what the prefill nodes take: the slots fill and stay full). The step costs are fixed, so that the
figure measures the loop and not the step model: those of the ``azure_conv`` experiment's
DeepSeek-R1 SnapStream point when this benchmark was written (decode step 95.3 ms at batch 1,024,
prefill 0.25 s; 100.2 ms and 0.28 s at the commit that last checked them,
``python -m sn40l_sim run experiments/azure_conv.yaml``), the KV transfer 20 ms.
The figure is given without speculative decoding and with two drafts at 80% acceptance (the
``deepseek_tp16`` experiment's setting). ``--reference`` also times the step-by-step loop
(``simulate(..., stepwise=True)``: each decode step walks every sequence), as the loop
was before serving by requests: about 35x real time (CPU) on the project's 2-core machine, against
about 2,000x by requests (about 1,200x with drafts, where every request's accepted drafts are
drawn up front, about 8 us a request: :mod:`sn40l_sim.serving.drafts`). Under load the wall
figures fall well below the CPU ones.

``goal_figures()`` returns the rows ``benchmarks/run_all.py`` prints: ``(what, figure, goal)``.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

# the repository, so that a checkout without an install runs it (as the other benchmarks' children do)
REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure import positive_int  # noqa: E402

from sn40l_sim.kvcache import make_policy  # noqa: E402
from sn40l_sim.kvcache.base import slot_new_tokens  # noqa: E402
from sn40l_sim.serving.loop import ServingLog, ServingSetup, simulate  # noqa: E402
from sn40l_sim.serving.speculation import Speculation  # noqa: E402
from sn40l_sim.serving.workload import Request  # noqa: E402

CLOCK_HZ = 1.6e9
REQUESTS = 4096
GOAL = ">= 1000"


def serve_setup(drafts: int = 0) -> tuple[list[Request], ServingSetup]:
    """The 4,096 requests and the serving setup described above."""
    rng = np.random.default_rng(0)
    arrivals = np.cumsum(rng.exponential(1 / 24.0, REQUESTS))
    requests = [Request(i, int(t * CLOCK_HZ), 32768, 1024) for i, t in enumerate(arrivals)]
    policy = make_policy("snapstream", {"budget": 8192})
    setup = ServingSetup(mode="disaggregated", prefill_nodes=8, decode_nodes=4, slots=1024,
                         decode_step_cycles=int(0.0953 * CLOCK_HZ), prefill_cycles=lambda p: int(0.2527 * CLOCK_HZ),
                         transfer_cycles=lambda p: int(0.020 * CLOCK_HZ), cache_tokens=policy.cache_len,
                         kv_bytes_per_token=71424, slot_cache_tokens=policy.static_cache_len(32768, slot_new_tokens(1024, drafts)),
                         speculation=Speculation(drafts, 0.8 if drafts else 0.0), seed=0)
    return requests, setup


def times_real_time(drafts: int = 0, *, stepwise: bool = False, repeat: int = 1) -> tuple[float, float, ServingLog]:
    """Simulated seconds over wall seconds and over CPU seconds (the median of ``repeat`` serves)."""
    requests, setup = serve_setup(drafts)
    walls, cpus = [], []
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        log = simulate(requests, setup, stepwise=stepwise)
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    simulated_s = log.end_cycle / CLOCK_HZ
    return simulated_s / statistics.median(walls), simulated_s / statistics.median(cpus), log


def goal_figures(repeat: int = 1, reference: bool = False) -> list[tuple[str, float, str]]:
    """``(what, figure, goal)`` rows: the serve's times real time (wall and CPU), plain and with
    speculative decoding (and the step-by-step loop's, with ``reference``)."""
    rows = []
    for drafts, label in ((0, ""), (2, ", 2 drafts at 80%")):
        wall, cpu, _ = times_real_time(drafts, repeat=repeat)
        rows.append((f"serve {REQUESTS} requests{label}: x real time (wall)", round(wall), GOAL))
        rows.append((f"serve {REQUESTS} requests{label}: x real time (CPU)", round(cpu), "-"))
        if reference:
            wall, cpu, _ = times_real_time(drafts, stepwise=True)
            rows.append((f"  the same step by step{label}: x real time (wall)", round(wall), "-"))
            rows.append((f"  the same step by step{label}: x real time (CPU)", round(cpu), "-"))
    return rows


def main(argv: list[str] | None = None) -> int:
    """Print the figures beside their goal."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=positive_int, default=3)
    parser.add_argument("--reference", action="store_true", help="also time the step-by-step loop")
    args = parser.parse_args(argv)
    for what, figure, goal in goal_figures(args.repeat, args.reference):
        print(f"{what:<62} {figure:>8}x   goal {goal}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
