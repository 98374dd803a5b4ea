"""Run an experiment: every point (KV policy x prompt length) at its batch, served end to end.

For each point: the largest decode batch that fits in HBM, one prefill and one decode step timed
by the engine, then the workload served through prefill, KV transfer and continuous batching.
Prints a side-by-side table and writes OUT/results.json, OUT/results.csv and OUT/throughput.png
(OUT defaults to out/<experiment name>). The same inputs and seed give the same results.json.

example:
  python -m sn40l_sim run experiments/deepseek_tp16.yaml --out out/deepseek
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``run``'s arguments."""
    parser.add_argument("experiment", metavar="EXPERIMENT.yaml", help="experiment file (kind: experiment)")
    parser.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help="output folder (default: out/<experiment name>)")
    parser.add_argument("--quiet", action="store_true", help="do not print per-point progress on stderr")
    parser.add_argument("--jobs", type=int, default=None, metavar="N",
                        help="worker processes when the experiment has a sweep: section (default: the number of CPUs)")
    parser.add_argument("--trace", type=Path, default=None, metavar="FILE.json",
                        help="also write a Chrome trace (open in Perfetto): nodes, requests and per-socket kernels")


def run(args: argparse.Namespace) -> int:
    """Simulate, print the table, write the results; 0 on success."""
    from sn40l_sim.report.plot import throughput_plot
    from sn40l_sim.report.results import write_results
    from sn40l_sim.report.table import side_by_side
    from sn40l_sim.study.experiment import load_experiment
    from sn40l_sim.study.runner import simulate_experiment

    exp = load_experiment(args.experiment)  # parsed once: the sweep or the runner takes it from here
    if exp.spec.sweep is not None:
        if args.trace:
            print("note: --trace is ignored for a sweep (trace one point with its own experiment)", file=sys.stderr)
        from sn40l_sim.commands.sweep import sweep_main
        return sweep_main(args.experiment, args.out, jobs=args.jobs, progress=not args.quiet)
    results: list = []
    exp, records = simulate_experiment(exp, progress=not args.quiet,
                                       on_result=results.append if args.trace else None)
    out = args.out if args.out is not None else Path("out") / exp.spec.name
    json_path, csv_path = write_results(records, out)
    plot_path = throughput_plot(records, out / "throughput.png", title=exp.spec.name)
    first = records[0]
    print(f"{exp.spec.name}: {first['model']} on {first['hardware']}, {first['mode']} serving")
    print(side_by_side(records))
    print(f"\nwrote {json_path}, {csv_path}, {plot_path}")
    if args.trace:
        from sn40l_sim.report.chrome_trace import write_trace
        print(f"wrote {write_trace(args.trace, results)}")
    return 0
