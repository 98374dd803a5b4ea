"""Sweep throughput: sweep points (and runs) per second against the number of workers, on one machine.

A small sweep (Llama-3.1 8B on an 8-socket node, ``--points`` sweep points over the decode batch
and the prompt length, two KV policies each, so two runs per point) is run from the library
(``run_points``: planning, the executor's start-up, the runs and the collection, not the loading
of the files) with 1, 2, ... workers of the process pool, and with ``--scheduler local`` on a Dask
LocalCluster of as many workers (when Dask distributed is installed). Each figure is the best of
``--repeat`` sweeps; start-up is included, since every sweep pays it.

What is measured: every sweep is cold. Each one runs in a fresh interpreter of its own (this script
with ``--child``) with the disk cache of mapped kernels off (``SN40L_SIM_CACHE=off``), so no timing
reuses the kernels an earlier one mapped, on disk or in memory (the one-worker sweep runs in the
parent process, and a process pool forks from it): with a shared cache the sweeps after the first
would mostly measure the warm-up they skip, not the workers. The wall time is taken around
``run_points`` inside that interpreter, so the interpreter's start and imports are not in it.

Goal: the runs are independent, so with N workers on N idle cores a sweep should go at least
0.8 x N times as fast as with one worker (only the start-up and the collection of the records are
serial). On a shared machine two more columns say how idle the cores were: the CPU seconds the
sweep used (this process and its worker processes) and the cores it kept busy on average (CPU
seconds over wall seconds), beside the load average. A miss with fewer busy cores than workers is
the machine's, not the sweep's.

Run from the repository root::

    python benchmarks/bench_sweep.py [--workers 1 2] [--points 12] [--repeat 1] [--no-dask]

Numbers are printed, not asserted: the test suite has no timed assertions.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure import positive_int  # noqa: E402

from sn40l_sim.study.sweep.load import load_sweep  # noqa: E402
from sn40l_sim.study.sweep.run import run_points  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
#: the fraction of linear speed-up the goal asks for
GOAL = 0.8


def write_sweep(folder: Path, points: int) -> Path:
    """A sweep of ``points`` sweep points: decode batches 1, 2, 4, ... zipped with two prompt lengths."""
    batches = [2 ** (i // 2) for i in range(points)]
    prompts = [2048 if i % 2 == 0 else 4096 for i in range(points)]
    path = folder / "bench_sweep.yaml"
    path.write_text(textwrap.dedent(f"""\
        kind: experiment
        name: bench_sweep
        hardware: {REPO / 'hw_configs/sn40l_node8.yaml'}
        model: {REPO / 'graphs/llama3_1_8b.yaml'}
        parallel: {{prefill: {{tp: 8}}, decode: {{tp: 8, attention_dp: 8}}}}
        policies:
          - {{name: full, policy: full}}
          - {{name: snap, policy: snapstream, prompt_fraction: {{budget: 0.25}}}}
        shape: {{prompt_len: 4096}}
        workload: {{kind: fixed, count: batch, output_len: 2}}
        serving: {{batch: 1, max_new_tokens: 2}}
        sweep:
          mode: zip
          axes:
            serving.batch: {batches}
            shape.prompt_len: {prompts}
        """))
    return path


def cpu_seconds() -> float:
    """CPU seconds of this process and of its finished child processes (the pool's, the cluster's)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def one_sweep(path: Path, workers: int, scheduler: str | None) -> tuple[float, float, list[str]]:
    """Wall and CPU seconds of one sweep in this process (the ``--child`` side), and the one-line
    errors of its runs that failed (a batch that does not fit: from ``--points 22`` the zipped
    batches reach 1,024 sequences of 4K tokens)."""
    sweep = load_sweep(path)
    start, cpu = time.perf_counter(), cpu_seconds()
    records = run_points(sweep, jobs=workers, progress=False, scheduler=scheduler)
    return time.perf_counter() - start, cpu_seconds() - cpu, [f"{name}: {error}" for name, error in records.failures]


class SweepFailed(RuntimeError):
    """Some runs of the benchmark's sweep failed."""


def best_seconds(path: Path, workers: int, scheduler: str | None, repeat: int) -> tuple[float, float]:
    """The shortest wall time of ``repeat`` cold sweeps, each in a fresh interpreter with the disk
    cache off, and the CPU seconds that sweep used."""
    env = dict(os.environ, SN40L_SIM_CACHE="off", PYTHONPATH=str(REPO))
    best = (float("inf"), 0.0)
    for _ in range(repeat):
        argv = [sys.executable, __file__, "--child", str(path), "--workers", str(workers)]
        if scheduler:
            argv += ["--scheduler", scheduler]
        out = subprocess.run(argv, check=True, capture_output=True, text=True, cwd=REPO, env=env)
        wall, cpu, failures = json.loads(out.stdout.strip().splitlines()[-1])
        if failures:
            # a failed run is refused in a fraction of a second: counted, it inflates points/s
            raise SweepFailed(f"{len(failures)} of the sweep's runs failed, so its time is no figure; "
                              f"the first: {failures[0]}")
        best = min(best, (wall, cpu))
    return best


def have_dask() -> bool:
    """Whether Dask distributed (the cluster extra) is installed."""
    try:
        import distributed  # noqa: F401
    except ImportError:
        return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=positive_int, nargs="+", default=[1, 2])
    parser.add_argument("--points", type=positive_int, default=12)
    parser.add_argument("--repeat", type=positive_int, default=1)
    parser.add_argument("--no-dask", action="store_true", help="only the process pool")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--scheduler", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(one_sweep(args.child, args.workers[0], args.scheduler)))
        return
    executors: list[tuple[str, str | None]] = [("process pool", None)]
    if not args.no_dask and have_dask():
        executors.append(("Dask LocalCluster", "local"))
    elif not args.no_dask:
        print("Dask distributed is not installed (pip install -e '.[cluster]'): process pool only")
    with tempfile.TemporaryDirectory() as folder:
        path = write_sweep(Path(folder), args.points)
        print(f"{args.points} sweep points, {2 * args.points} runs; {os.cpu_count()} CPUs; best of {args.repeat}")
        print(f"{'executor':18s} {'workers':>7s} {'wall s':>7s} {'points/s':>9s} {'runs/s':>7s} {'speed-up':>8s}"
              f" {'CPU s':>6s} {'busy cores':>10s}   load average")
        for label, scheduler in executors:
            one = None
            for workers in args.workers:
                try:
                    seconds, cpu = best_seconds(path, workers, scheduler, args.repeat)
                except SweepFailed as exc:
                    print(f"error: --points {args.points}: {exc}", file=sys.stderr)
                    sys.exit(2)
                one = seconds if one is None and workers == 1 else one
                speedup = one / seconds if one else float("nan")
                goal = ""
                if workers > 1 and one:
                    goal = "meets the goal" if speedup >= GOAL * workers else f"below the goal of {GOAL * workers:.1f}"
                load = " ".join(f"{v:.2f}" for v in os.getloadavg())
                print(f"{label:18s} {workers:7d} {seconds:7.2f} {args.points / seconds:9.2f} "
                      f"{2 * args.points / seconds:7.2f} {speedup:8.2f} {cpu:6.1f} {cpu / seconds:10.2f}   {load}  {goal}")
    print(f"goal: with N workers on N idle cores, at least {GOAL} x N times the one-worker points/s")


if __name__ == "__main__":
    main()
