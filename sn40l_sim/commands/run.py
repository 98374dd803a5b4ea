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

from sn40l_sim.errors import InputError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``run``'s arguments."""
    parser.add_argument("experiment", metavar="EXPERIMENT.yaml", help="experiment file (kind: experiment)")
    parser.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help="output folder (default: out/<experiment name>)")
    parser.add_argument("--quiet", action="store_true", help="do not print per-point progress on stderr")


def _relocate(exp, exc: InputError) -> InputError:
    """An error from the simulation that names no file belongs to the experiment file."""
    if exc.file is not None:
        return exc
    path = tuple(exc.field.split(".")) if exc.field else ()
    file, line = exp.doc.where(path)
    return exc.__class__(exc.message, file=file, field=exc.field, line=line)


def simulate_experiment(path: str | Path, progress: bool = False) -> tuple[object, list[dict]]:
    """Load the experiment at ``path`` and simulate its points; returns (experiment, records).

    Raises
    ------
    InputError
        For a bad experiment, hardware or model file, or an infeasible point.
    """
    from sn40l_sim.engine.serving_point import PointSetup, simulate_point
    from sn40l_sim.engine.workload import build_requests
    from sn40l_sim.experiment import load_experiment, make_point_policy, points
    from sn40l_sim.hardware.loader import load_hardware
    from sn40l_sim.models.kernels import ParallelPlan
    from sn40l_sim.models.loader import load_model
    from sn40l_sim.report.records import build_record

    exp = load_experiment(path)
    spec = exp.spec
    if spec.sweep is not None:
        raise exp.error(("sweep",), "sweeps are not implemented yet (issue 7); remove the section "
                        "to run the experiment's own points")
    if spec.workload is None:
        raise exp.error(("workload",), "run needs a workload section (kind: fixed | poisson | trace)")
    node = load_hardware(exp.resolve(spec.hardware))
    model = load_model(exp.resolve(spec.model), spec.model_overrides or None)
    serving = spec.serving
    max_new_tokens = exp.max_new_tokens
    trace_path = exp.resolve(spec.workload.path) if spec.workload.kind == "trace" else None
    records = []
    for point in points(exp):
        if progress:
            print(f"simulating {point.name} ...", file=sys.stderr, flush=True)
        policy = make_point_policy(exp, point)
        setup = PointSetup(
            name=point.name, node=node, model=model, policy=policy, prompt_len=point.prompt_len,
            prefill_plan=ParallelPlan(spec.parallel.prefill.tp, spec.parallel.prefill.attention_dp),
            decode_plan=ParallelPlan(spec.parallel.decode.tp, spec.parallel.decode.attention_dp),
            mode=serving.mode, prefill_nodes=exp.prefill_node_count, decode_nodes=serving.decode_nodes,
            batch=serving.batch, batch_sizes=serving.batch_sizes, prefill_lens=serving.prefill_lens,
            max_new_tokens=max_new_tokens, tokens_per_forward=serving.tokens_per_forward,
            kv_transfer=serving.kv_transfer, graph_options=dict(spec.graph_options))

        def requests_for(slots: int, prompt_len: int = point.prompt_len):
            return build_requests(spec.workload, prompt_len=prompt_len, max_new_tokens=max_new_tokens,
                                  slots=slots, seed=serving.seed, clock_hz=node.socket.clock_hz,
                                  trace_path=trace_path)

        try:
            result = simulate_point(setup, requests_for)
        except InputError as exc:
            raise _relocate(exp, exc) from None
        records.append(build_record(result, experiment=spec.name, policy_params=point.params))
    return exp, records


def run(args: argparse.Namespace) -> int:
    """Simulate, print the table, write the results; 0 on success."""
    from sn40l_sim.report.plot import throughput_plot
    from sn40l_sim.report.results import write_results
    from sn40l_sim.report.table import side_by_side

    exp, records = simulate_experiment(args.experiment, progress=not args.quiet)
    out = args.out if args.out is not None else Path("out") / exp.spec.name
    json_path, csv_path = write_results(records, out)
    plot_path = throughput_plot(records, out / "throughput.png", title=exp.spec.name)
    first = records[0]
    print(f"{exp.spec.name}: {first['model']} on {first['hardware']}, {first['mode']} serving")
    print(side_by_side(records))
    print(f"\nwrote {json_path}, {csv_path}, {plot_path}")
    return 0
