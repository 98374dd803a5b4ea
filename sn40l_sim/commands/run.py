"""Run an experiment: every point (KV policy x prompt length) at its batch, served end to end.

For each point: the largest decode batch that fits in HBM, one prefill and one decode step timed
by the engine, then the workload served through prefill, KV transfer and continuous batching.
Prints a side-by-side table and writes OUT/results.json, OUT/results.csv and OUT/throughput.png,
and OUT/slo_attainment.png for a rate search (OUT defaults to out/<experiment name>; the plots are
drawn after the table is printed, and --no-plot skips them). The same inputs and seed give the same results.json.
--requests FILE.csv also writes one row per served request (sn40l_sim/report/request_table.py), the
records that results.json's latencies, served throughput and SLO figures summarise.

Every file is written whole or not at all; OUT/status.json says whether the run is running, complete,
failed or interrupted; a second run into the same OUT while one runs is refused; --out and --trace
are checked before anything is simulated. Physical invariants are checked on every point (bytes
conserved, every request served once, memory within capacity, no unit above its peak): a violated
one exits with status 3, naming it. Ctrl-C or SIGTERM stop the run with exit status 130 or 143.

`--set PATH=VALUE` changes one field of the experiment or, under `hardware.`, of its node for this
run (as `sweep --set`; the changed node is named after the change in the table and the results);
with `prefill_hardware` it changes the prefill nodes too, so give a prefill node of its own a file.

examples:
  python -m sn40l_sim run experiments/deepseek_tp16.yaml --out out/deepseek
  python -m sn40l_sim run experiments/deepseek_tp16.yaml --set hardware.socket.memory.hbm.bytes_per_s_per_unit="819.2 GB/s"
"""
from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

from sn40l_sim.commands.argtypes import input_path_text
from sn40l_sim.errors import InputError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``run``'s arguments."""
    parser.add_argument("experiment", type=input_path_text, metavar="EXPERIMENT.yaml", help="experiment file (kind: experiment)")
    parser.add_argument("--out", default=None, metavar="DIR",
                        help="output folder (default: out/<experiment name>)")
    parser.add_argument("--quiet", action="store_true", help="do not print per-point progress on stderr")
    parser.add_argument("--jobs", type=int, default=None, metavar="N",
                        help="worker processes when the experiment has a sweep: section (default: the number of CPUs)")
    parser.add_argument("--trace", default=None, metavar="FILE.json",
                        help="also write a Chrome trace (open in Perfetto): nodes, requests and per-socket kernels")
    parser.add_argument("--requests", default=None, metavar="FILE.csv",
                        help="also write one row per served request and point (arrival, lengths, stage times, "
                             "queueing, TTFT, TPOT, end-to-end latency), from which results.json's latency and "
                             "served throughput figures can be recomputed (sn40l_sim/report/request_table.py)")
    parser.add_argument("--no-plot", action="store_true",
                        help="write no plots (they are drawn after the table is printed, and take matplotlib's time)")
    parser.add_argument("--set", action="append", default=[], metavar="PATH=VALUE", dest="sets",
                        help="set a field of the experiment (serving.batch=8) or of its hardware "
                             "(hardware.socket.memory.hbm.bytes_per_s_per_unit='819.2 GB/s'; the node is then named "
                             "after the change in the results) for this run, as sweep's --set; repeatable")


#: the files run writes into its output folder (those of a previous run are removed when it starts)
OUTPUTS = ("results.json", "results.csv", "throughput.png", "slo_attainment.png")


def run(args: argparse.Namespace) -> int:
    """Simulate, print the table, write the results; 0 on success."""
    from sn40l_sim.commands.sweep import check_jobs, sweep_main
    from sn40l_sim.report.outputs import LOCK_FILE, STATUS_FILE, OutputFolder, check_file, output_path
    from sn40l_sim.report.results import write_results
    from sn40l_sim.report.table import side_by_side
    from sn40l_sim.study.assemble import assemble
    from sn40l_sim.study.experiment import load_experiment
    from sn40l_sim.study.experiment_files import referenced_files, workload_source
    from sn40l_sim.study.preflight import check_assembly, require_workload
    from sn40l_sim.study.runner import simulate_assembly
    from sn40l_sim.study.sweep.base import experiment_with_sets
    from sn40l_sim.study.sweep.sets import parse_sets

    check_jobs(args.jobs)   # as sweep checks it, whether or not the experiment has a sweep: section
    args.out, args.trace = output_path(args.out, "--out"), output_path(args.trace, "--trace")
    args.requests = output_path(args.requests, "--requests")
    if args.trace is not None and args.trace.suffix.lower() != ".json":   # trace viewers go by the suffix
        raise InputError(f"expected a .json file (Chrome trace format), got {str(args.trace)!r}", field="--trace")
    if args.requests is not None and args.requests.suffix.lower() != ".csv":
        raise InputError(f"expected a .csv file, got {str(args.requests)!r}", field="--requests")
    sets = parse_sets(args.sets)
    with warnings.catch_warnings():
        if sets:   # warned of by the experiment the sets make (a file's value they replace is not run)
            warnings.simplefilter("ignore")
        exp = load_experiment(args.experiment)  # parsed once: the sweep or the runner takes it from here
    if exp.spec.sweep is not None:
        for option, given in (("--trace", args.trace), ("--requests", args.requests)):
            if given:
                print(f"note: {option} is ignored for a sweep (run one point with its own experiment)", file=sys.stderr)
        return sweep_main(args.experiment, args.out, jobs=args.jobs, progress=not args.quiet,
                          plots=not args.no_plot, sets=sets, set_items=args.sets)
    if args.jobs is not None:
        print("note: --jobs is ignored: the experiment has no sweep: section, and its points run one after "
              "another in this process", file=sys.stderr)
    hardware_overrides: dict = {}
    if sets:
        exp, hardware_overrides = experiment_with_sets(args.experiment, sets)
    require_workload(exp)
    asm = assemble(exp, hardware_overrides=hardware_overrides)
    check_assembly(asm)   # what the experiment gets wrong is said before any output is touched
    out = args.out if args.out is not None else Path("out") / exp.spec.name
    extra = [(option, path, example) for option, path, example in
             (("--trace", args.trace, "trace.json"), ("--requests", args.requests, "requests.csv")) if path is not None]
    if args.trace and args.requests and args.trace.resolve() == args.requests.resolve():
        raise InputError(f"{args.requests} is where --trace writes; expected another file", field="--requests")
    # an output written over a file the run reads (--requests onto the workload's trace) replaced the
    # user's input with the run's output and exited 0
    inputs = {exp.resolve(rel, field).resolve(): f"{'.'.join(map(str, field))}"
              for _, rel, field in referenced_files(exp)}
    inside: tuple[str, ...] = ()
    for option, path, example in extra:
        if path.resolve() in inputs:
            raise InputError(f"{path} is the experiment's {inputs[path.resolve()]}, which run reads; expected "
                             f"another file name (e.g. {example})", field=option)
        check_file(path, option)   # before the simulation, not after it
        # a file written into the output folder is one of the run's outputs: listed in status.json and
        # removed when a later run into the folder starts, so it never sits beside another run's results
        if path.resolve().parent == out.resolve():
            if path.name in (*OUTPUTS, STATUS_FILE, LOCK_FILE):   # it would overwrite the results
                raise InputError(f"{path} is where run writes its own {path.name}; expected another file name "
                                 f"(e.g. {example})", field=option)
            inside += (path.name,)
    results: list = []
    command = " ".join([f"run {args.experiment}", *(f"--set {item}" for item in args.sets)])
    with OutputFolder(out, command=command, outputs=OUTPUTS + inside, reads=inputs) as folder:
        records = simulate_assembly(asm, progress=not args.quiet,
                                    on_result=results.append if extra else None)
        json_path, csv_path = write_results(records, out)
        folder.note(speed=[{"name": r["name"], **r["speed"]} for r in records if "speed" in r])
        source = workload_source(exp)
        if source is not None:   # a trace's licence may ask for its attribution beside the results
            folder.note(trace=source)
        first = records[0]
        # several models are named as the section names them: two entries of one model file (two
        # copies, each with its own weights) would otherwise print as one model
        models = first['model'] if exp.spec.multi_model is None else " + ".join(dict.fromkeys(
            f"{r['multi_model']['served_model']} ({r['model']})" for r in records)) + " sharing one node"
        hardware = first['hardware'] + (f" (prefill on {first['prefill_hardware']})"
                                        if first.get("prefill_hardware") else "")
        print(f"{exp.spec.name}: {models} on {hardware}, {first['mode']} serving")
        print(side_by_side(records))
        for line in capping_notes(records) + batch_cap_notes(records):
            print(line)
        if source is not None:
            print(f"note: requests from {source}")
        if exp.spec.multi_model is not None:
            print("note: the HBM/DDR per-socket rows are each model's alone on the node; what the node held "
                  "with all its models is in the 'all models' rows")
        for line in probe_lines(records):
            print(line)
        # the numbers are out; the plots (matplotlib alone takes a large share of a run's CPU) follow
        sys.stdout.flush()
        plot_path = slo_plot = None
        if not args.no_plot:
            from sn40l_sim.report.plot import slo_attainment_plot, throughput_plot
            plot_path = throughput_plot(records, out / "throughput.png", title=exp.spec.name)
            slo_plot = slo_attainment_plot(records, out / "slo_attainment.png",
                                           title=f"{exp.spec.name}: SLO attainment")
        trace_path = requests_path = None
        if args.trace:
            from sn40l_sim.report.chrome_trace import write_trace
            trace_path = write_trace(args.trace, results, workload_source=source)
        if args.requests:
            from sn40l_sim.report.request_table import write_requests
            requests_path = write_requests(args.requests, results)
    plots = "".join(f", {p}" for p in (plot_path, slo_plot) if p)
    print(f"\nwrote {json_path}, {csv_path}{plots}")
    for path in (trace_path, requests_path):
        if path is not None:
            print(f"wrote {path}")
    return 0


def capping_notes(records: list[dict]) -> list[str]:
    """One line per point whose trace requests were capped to the compiled graphs (never silent).

    >>> capping_notes([{"name": "full", "trace_capped": {"requests": 2, "prompts": 1, "outputs": 1,
    ...                 "prompt_tokens": 5858, "output_tokens": 12}}, {"name": "x"}])
    ['note: full: 2 trace requests capped to the compiled graphs (1 prompt, 5858 tokens cut; 1 output, 12 tokens cut)']
    """
    notes = []
    for record in records:
        capped = record.get("trace_capped") or {}
        if capped.get("requests"):
            notes.append(f"note: {record['name']}: {capped['requests']} trace requests capped to the compiled graphs "
                         f"({capped['prompts']} prompt{'s' * (capped['prompts'] != 1)}, {capped['prompt_tokens']} "
                         f"tokens cut; {capped['outputs']} output{'s' * (capped['outputs'] != 1)}, "
                         f"{capped['output_tokens']} tokens cut)")
    return notes


def batch_cap_notes(records: list[dict]) -> list[str]:
    """One line per point whose largest compiled batch fit: its max batch is where
    ``serving.batch_sizes`` ends, which the table's "max batch" row alone reads as memory's limit.

    >>> batch_cap_notes([{"name": "snap", "max_batch": 4096, "max_batch_limit": "none: every compiled batch fits"},
    ...                  {"name": "full", "max_batch": 64, "max_batch_limit": "decode batch 128 does not fit"}])
    ['note: snap: max batch 4096 is the largest of serving.batch_sizes, not a memory limit (add larger sizes to find it)']
    """
    return [f"note: {r['name']}: max batch {r['max_batch']} is the largest of serving.batch_sizes, not a memory "
            "limit (add larger sizes to find it)"
            for r in records if str(r.get("max_batch_limit") or "").startswith("none:")]


def probe_lines(records: list[dict]) -> list[str]:
    """The probes of each point's rate search, one line each.

    >>> probe_lines([{"name": "full", "max_rate_per_s": 1.5, "max_rate_bracketed": True, "rate_probes": [
    ...     {"rate_per_s": 1.5, "holds": True, "attainment": 0.96, "goodput_requests_per_s": 1.4}]}])
    ['full: highest rate under the SLOs 1.5 requests/s', '  probe 1.5 requests/s: attainment 96.0%, goodput 1.4 requests/s, SLOs hold']
    """
    lines = []
    for record in records:
        if not record.get("rate_probes"):
            continue
        best = record["max_rate_per_s"]
        answer = "none in the bracket (the low end fails)" if best is None else f"{best:.4g} requests/s" + \
            ("" if record["max_rate_bracketed"] else " (the high end held: search higher)")
        lines.append(f"{record['name']}: highest rate under the SLOs {answer}")
        lines += [f"  probe {p['rate_per_s']:.4g} requests/s: attainment {100 * p['attainment']:.1f}%, goodput "
                  f"{p['goodput_requests_per_s']:.4g} requests/s, SLOs {'hold' if p['holds'] else 'fail'}"
                  + _unsustained(p) for p in record["rate_probes"]]
    return lines


def _unsustained(probe: dict) -> str:
    """Why a probe whose requests all met the SLOs still fails: its rate is above what the decode
    slots or the prefilling nodes sustain (a finite run starts with free slots and idle nodes;
    rate_search.py). Without it the line read "attainment 100.0%, ..., SLOs fail".

    >>> _unsustained({"rate_per_s": 1.0, "holds": False, "steady_state_rate_per_s": 0.9214})
    ' (above the 0.9214 requests/s the decode slots sustain)'
    >>> _unsustained({"rate_per_s": 20.0, "holds": False, "steady_state_rate_per_s": 90.0, "prefill_rate_per_s": 17.43})
    ' (above the 17.43 requests/s the prefilling nodes sustain)'
    >>> _unsustained({"rate_per_s": 0.5, "holds": False, "steady_state_rate_per_s": 0.9214})
    ''
    """
    if probe["holds"]:
        return ""
    above = [f"the {bound:.4g} requests/s the {what} sustain" for key, what in
             (("steady_state_rate_per_s", "decode slots"), ("prefill_rate_per_s", "prefilling nodes"))
             if (bound := probe.get(key)) is not None and probe["rate_per_s"] > bound]
    return f" (above {' and '.join(above)})" if above else ""
