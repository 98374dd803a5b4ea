"""Print the derived figures of a hardware, model, kernel-template, experiment or reference file.

Hardware files (kind: socket or node) give a table of sockets, PCUs, PMUs, peak FLOP/s per datatype,
SRAM, each memory tier's capacity and bandwidth, P2P links, bisection bandwidth and hop diameters, per
socket and for the whole node. Model files (kind: model) are described by sn40l_sim.report.describe;
kernel templates (kind: kernels) list each phase's blocks and kernels; experiment files (kind:
experiment) list the files they reference, the policies with their parameters, each phase's parallel
plan, the shape, the memory placement, the nodes that serve (with a multi_model section, each model
by name with its share and batch, and the schedulers), the simulation options results' options record
(with a sweep section, its axes, values and files); reference files (kind: reference) their
measurements; request traces (.csv, .jsonl) their requests, rate and token lengths.

example:
  python -m sn40l_sim describe hw_configs/sn40l_node16.yaml
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sn40l_sim.commands.argtypes import input_path_text
from sn40l_sim.quantities import format_bytes
from sn40l_sim.yamlio import load_document

if TYPE_CHECKING:
    from sn40l_sim.study.experiment import ExperimentSpec, PhasePlan, PolicyEntry
    from sn40l_sim.study.sweep.axes import Axis

_SI = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``describe``'s arguments."""
    parser.add_argument("file", type=input_path_text, help="a hardware (hw_configs/), model or kernel-template (graphs/), experiment, "
                        "reference (experiments/) or request-trace (experiments/traces/) file")


def si(value: float, unit: str, digits: int = 5) -> str:
    """A decimal-prefixed quantity for tables.

    >>> si(1638.4e9, "B/s"), si(638.976e12, "FLOPS"), si(93.75e-9 * 1e9, "ns")
    ('1.6384 TB/s', '638.98 TFLOPS', '93.75 ns')
    """
    for scale, prefix in _SI:
        if abs(value) >= scale:
            return f"{value / scale:.{digits}g} {prefix}{unit}"
    return f"{value:.{digits}g} {unit}"


def seconds_text(value: float) -> str:
    """A time in the most readable of s, ms, us, ns.

    >>> seconds_text(93.75e-9), seconds_text(2e-6)
    ('93.75 ns', '2 us')
    """
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us")):
        if value >= scale:
            return f"{value / scale:.4g} {unit}"
    return f"{value / 1e-9:.4g} ns"


def file_kind(path: str | Path) -> str:
    """The ``kind:`` a YAML file declares (after ``base:`` overlays)."""
    doc = load_document(path)
    kind = doc.data.get("kind")
    if not isinstance(kind, str):
        raise doc.error(("kind",), "expected 'kind: socket | node | model | kernels | experiment | reference' at the "
                        "top of the file")
    return kind


def describe_hardware(path: str | Path) -> str:
    """The figures table of a socket or node file.

    Examples
    --------
    >>> text = describe_hardware("hw_configs/sn40l.yaml")
    >>> "1040" in text and "638.98 TFLOPS" in text and "64.0 GiB" in text
    True
    """
    from sn40l_sim.hardware import figures as f
    from sn40l_sim.hardware.loader import load_hardware
    from sn40l_sim.hardware.topology import p2p_links

    node = load_hardware(path)
    s, n = node.socket, node.sockets
    rows: list[tuple[str, str, str]] = [
        ("sockets", "1", str(n)),
        ("dies / tiles", f"{s.dies} / {f.tiles(s)}", f"{n * s.dies} / {n * f.tiles(s)}"),
        ("PCUs", str(f.pcus(s)), str(n * f.pcus(s))),
        ("PMUs", str(f.pmus(s)), str(n * f.pmus(s))),
        ("AGCUs", str(f.agcus(s)), str(n * f.agcus(s))),
        ("clock", si(s.clock_hz, "Hz"), ""),
    ]
    for dtype in sorted(s.pcu.macs_per_lane_stage_per_cycle, key=lambda d: (d != "bf16", d)):
        rows.append((f"peak {dtype.upper()}", si(f.peak_flops(s, dtype), "FLOPS"), si(f.node_peak_flops(node, dtype), "FLOPS")))
    rows += [
        ("on-chip SRAM", format_bytes(f.sram_bytes(s)), format_bytes(f.node_sram_bytes(node))),
    ]
    for tier in s.memory:
        rows += [
            (f"{tier.upper()} capacity", format_bytes(f.memory_bytes(s, tier)), format_bytes(f.node_memory_bytes(node, tier))),
            (f"{tier.upper()} bandwidth", si(f.memory_bytes_per_s(s, tier), "B/s"),
             si(f.node_memory_bytes_per_s(node, tier), "B/s")),
        ]
    rows += [
        (f"reserved {' / '.join(t.upper() for t in s.memory)}",
         " / ".join(_opt_bytes(spec.reserved_bytes) for spec in s.memory.values()), ""),
        ("P2P ports", f"{s.p2p.ports} x {si(s.p2p.bytes_per_s_per_port, 'B/s')}, {seconds_text(s.p2p.latency_s)}", ""),
    ]
    links = p2p_links(node)
    if n > 1:
        rows += [
            ("P2P topology", "", f"{node.topology.kind}, {node.topology.links_per_pair} link(s)/pair, {len(links)} pairs"),
            ("P2P per socket", si(f.p2p_bytes_per_s_per_socket(node), "B/s"), ""),
            ("P2P bisection", "", si(f.p2p_bisection_bytes_per_s(node), "B/s")
             + ("" if f.p2p_bisection_is_exact(node) else " at most (heuristic cut)")),
            ("P2P diameter", "", f"{f.p2p_diameter_hops(node)} hop(s)"),
        ]
    vec = s.tile.vector_network
    rows += [
        ("tile grid", f"{s.tile.grid_rows} x {s.tile.grid_cols} units, "
                      f"{s.tile.grid_rows + 1} x {s.tile.grid_cols + 1} switches", ""),
        ("tile mesh diameter", f"{f.tile_mesh_diameter_hops(s)} hops x {vec.hop_latency_cycles} cycles", ""),
        ("mesh link (vector)", si(f.network_bytes_per_s(s, 'vector'), "B/s"), ""),
        ("TLN port / die-to-die", f"{si(s.tln.bytes_per_s, 'B/s')} / "
                                  f"{si(s.die_to_die.bytes_per_s, 'B/s') if s.die_to_die else 'none'}", ""),
    ]
    if node.host_link is not None:
        rows.append(("host link", "", f"{si(node.host_link.bytes_per_s, 'B/s')}, {seconds_text(node.host_link.latency_s)}"))
    title = f"{node.name}: {n} x {s.name} ({path})"
    return title + "\n" + _table(("", "per socket", f"node ({n} socket{'s' if n > 1 else ''})"), rows)


def _opt_bytes(value: float) -> str:
    return format_bytes(value) if value else "none"


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [header, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def describe_experiment(path: str | Path) -> str:
    """The files an experiment references, and whether they exist, its plans, serving nodes,
    workload and SLOs; with a ``sweep:`` section, each axis with its values and the files the sweep
    points name beyond the base's."""
    from sn40l_sim.study.experiment import load_experiment
    from sn40l_sim.study.experiment_files import referenced_files
    from sn40l_sim.study.experiment_rules import options_summary
    from sn40l_sim.study.plugins import is_file_entry

    experiment = load_experiment(path)
    spec = experiment.spec
    lines = [f"experiment {spec.name} ({path})"]
    # each path with its field: a base file's paths are relative to the base (Document.resolve)
    files = [(label, rel, experiment.resolve(rel, field)) for label, rel, field in referenced_files(experiment)]
    for label, rel, target in files:
        lines.append(f"  {label:10s} {rel}  ->  {target}{'' if target.is_file() else '  (MISSING)'}")
    if spec.model_overrides:
        lines.append(f"  overrides  {spec.model_overrides} (of the model)")
    for i, entry in enumerate(spec.plugins):
        # a file as the other paths are shown; a dotted module name as written
        shown = experiment.resolve(entry, ("plugins", i)) if is_file_entry(entry) else entry
        lines.append(f"  {'plugins' if i == 0 else '':10s} {entry}  ->  {shown}")
    policies = [_policy_text(p) for p in spec.policies]
    if len(", ".join(policies)) <= 90:
        lines.append(f"  policies   {', '.join(policies)}")
    else:   # one a line: a dozen entries with their overrides made one line of 600 characters
        lines += [f"  {'policies' if i == 0 else '':10s} {text}" for i, text in enumerate(policies)]
    lines += _plan_lines(spec, path)
    lines += _serving_lines(spec)
    lines += _workload_lines(spec)
    options = options_summary(spec)   # all experts streamed, kernel looping off (docs/results.md, options)
    lines += [f"  options    {options} (as results' options give them)"] if options else []
    if spec.sweep is not None:
        swept, sweep_lines = _describe_sweep(path, spec.sweep, {target for _, _, target in files})
        lines += sweep_lines
        files += swept
    # each file the experiment reads, its trace too (describe takes one file: one command each)
    described = [target for _, _, target in files]
    commands = [f"python -m sn40l_sim describe {target}" for target in dict.fromkeys(described) if target.is_file()]
    for i, command in enumerate(commands):
        lines.append(f"  {'describe them with:' if i == 0 else '':19s} {command}")
    # describe lists the files; what run would refuse (a model override of 0 layers, say) is check's
    lines.append(f"  check it with: python -m sn40l_sim check {path}")
    return "\n".join(lines)


def _policy_text(entry: PolicyEntry) -> str:
    """``name (policy, key value, ...)``: the parameters, fractions of the prompt, per-prompt values
    and model overrides are what tell two entries of one policy apart."""
    def value_text(value: object) -> str:
        return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)

    parts = [entry.policy] + [f"{key} {value_text(value)}" for key, value in entry.params.items()]
    parts += [f"{key} {float(fraction):g} of the prompt" for key, fraction in entry.prompt_fraction.items()]
    parts += [f"at prompt {p.prompt_len:,}: " + " ".join(f"{k} {value_text(v)}" for k, v in p.params.items())
              for p in entry.per_prompt]
    parts += [f"{key}={value}" for key, value in entry.model_overrides.items()]
    return f"{entry.name} ({', '.join(parts)})"


def _plan_lines(spec: ExperimentSpec, path: str | Path) -> list[str]:
    """The parallel plan of each phase, the shape and the memory placement, as the spec gives them
    (docs/architecture.md); the bytes each socket holds need the graph, which ``map`` builds."""
    def phase(plan: PhasePlan) -> str:
        return f"TP{plan.tp}" + (f", attention DP{plan.attention_dp}" if plan.attention_dp > 1 else "")

    prompts = spec.prompt_lens or (spec.shape.prompt_len,)
    shape = spec.shape
    new_tokens = spec.serving.max_new_tokens or shape.max_new_tokens   # as run and map read it: serving's first
    memory = spec.memory
    order = ", ".join(memory.order) if memory.order else "the hardware file's tiers, fastest first"
    return [f"  plan       prefill {phase(spec.parallel.prefill)}; decode {phase(spec.parallel.decode)}",
            f"  shape      prompt {', '.join(f'{n:,}' for n in prompts)} tokens, batch {shape.batch}"
            + (f", up to {new_tokens:,} new tokens" if new_tokens else "")
            + ("; serving batch per model (below)" if spec.multi_model else f"; serving batch {spec.serving.batch}"),
            *_drafts_line(spec.serving.speculative),
            f"  memory     placed in {order}; may spill: {', '.join(memory.may_spill) or 'nothing'}",
            f"             bytes per socket: python -m sn40l_sim map {path} --phase decode"]


def _serving_lines(spec: ExperimentSpec) -> list[str]:
    """Which nodes serve and, with several models on a node, each model by its name (the name the
    results give it) with its share of the requests and its batch, and the schedulers."""
    serving, section = spec.serving, spec.multi_model
    if section is not None:
        # each by the name its records carry, tied to its file's line above ("model i")
        models = [f"{m.name} (model {i}, share {m.share:g} of the requests, batch {m.batch})"
                  for i, m in enumerate(section.models)]
        tier = section.weights_tier or "the placement order's second tier"
        return [f"  {'serves' if i == 0 else '':10s} {text}" for i, text in enumerate(models)] + \
            [f"             on one co-located node; every model's weights in {tier}",
             f"  schedulers {', '.join(section.schedulers)} (quantum {section.quantum_s:g} s)"]
    settings = serving.node_settings()   # a prefill chunk, prefix caching
    if serving.mode == "colocated":
        return [f"  serving    co-located: {serving.decode_nodes} node(s) that prefill and decode{settings}"]
    prefill_hw = "the prefill hw above" if spec.prefill_hardware else "the hardware above"
    return [f"  serving    disaggregated: {serving.prefill_nodes or 1} prefill node(s) on {prefill_hw}, "
            f"{serving.decode_nodes} decode node(s) on the hardware; the KV crosses "
            + ("the host links" if serving.kv_transfer == "host_link" else "the P2P links") + settings]


def _workload_lines(spec: ExperimentSpec) -> list[str]:
    """The requests served, as results' ``workload`` gives them, the SLOs they are held to and the
    rate search: what a serving study sets, which describe did not show."""
    from sn40l_sim.study.serving_section import workload_summary

    slo, search = spec.slo, spec.rate_search
    bounds = [f"{what} p{bound.percentile:g} <= {float(bound.max_s):g} s" for what, bound in
              (("TTFT", slo.ttft), ("TPOT", slo.tpot)) if bound is not None] if slo is not None else []
    return [f"  workload   {workload_summary(spec.workload) if spec.workload else 'none: the steps alone'}"] + \
        ([f"  slo        {', '.join(bounds)}"] if bounds else []) + \
        ([f"  rate search {search.low_per_s:g} to {search.high_per_s:g} requests/s, {search.probes} probes, "
          f"tolerance {search.tolerance:g}"] if search is not None else [])


def _drafts_line(section: Any) -> list[str]:
    """The speculation ``serving.speculative`` sets (none without drafts): what a decode step computes
    and the tokens it yields on average (docs/architecture.md, speculative decoding)."""
    if section is None or not section.drafts:
        return []
    spec = section.speculation()
    return [f"  drafts     {spec.drafts} per decode step by the model's MTP module, each accepted with probability "
            f"{spec.acceptance:g}: {spec.tokens_per_step:.4g} tokens per step on average (serving.speculative)"]


def _describe_sweep(path: str | Path, section: object, base_files: set[Path]) -> tuple[list, list[str]]:
    """``(files the sweep names beyond base_files, lines)``: the axes with their values, the section's
    settings and those files; a section that does not load is named, not raised (check says why)."""
    from sn40l_sim.errors import InputError
    from sn40l_sim.study.sweep.load import load_sweep
    from sn40l_sim.study.sweep.outline import section_options, shown_values, sweep_outline

    try:
        sweep = load_sweep(path)
    except InputError:
        axes = section.get("axes") if isinstance(section, dict) else None
        names = ", ".join(map(str, axes)) if isinstance(axes, dict) else "its axes"
        return [], [f"  sweep      over {names} (the lines above are its base; the section does not load: "
                    "check says why)"]
    outline = sweep_outline(sweep)
    invalid = f"; {outline.invalid} point(s) whose experiment does not validate" if outline.invalid else ""
    lines = [f"  sweep      {sweep.mode} over {len(sweep.axes)} axis(es): {len(sweep.points)} sweep point(s), "
             f"{outline.runs} run(s){invalid} (the lines above are its base)"]
    width = max(len(_axis_name(axis)) for axis in sweep.axes)
    lines += [f"    {_axis_name(axis):{width}s}  {shown_values(axis)}" for axis in sweep.axes]
    lines += [f"    {said}" for said in section_options(sweep)]
    swept = [(label, rel, target) for label, rel, target in outline.files if target not in base_files]
    for label, rel, target in swept:
        lines.append(f"  {label:10s} {rel}  ->  {target}{'' if target.is_file() else '  (MISSING)'}  (a sweep point's)")
    return swept, lines


def _axis_name(axis: Axis) -> str:
    """An axis's name, with the field it sets when it is named apart from it."""
    dotted = ".".join(axis.path)
    return axis.name if axis.name == dotted else f"{axis.name} ({dotted})"


def describe_kernels(path: str | Path) -> str:
    """Each phase's blocks and kernels of a kernel template: operators and collectives.

    >>> text = describe_kernels("graphs/kernels_llama.yaml")
    >>> "decode: head [embedding], dense_layer [decoder], tail [lm_head, sampling]" in text
    True
    """
    from sn40l_sim.models.template import load_templates

    template = load_templates(path)
    lines = [f"kernel template {template.name} ({path}): {template.attention} attention, FlashAttention tiles "
             f"{template.flash.block_q} x {template.flash.block_kv}, {len(template.sharding)} sharded tensors"]
    for phase in ("prefill", "decode"):
        spec = getattr(template, phase)
        blocks = ", ".join(f"{part} [{', '.join(ids)}]" for part, ids in spec.blocks.model_dump().items() if ids)
        lines.append(f"{phase}: {blocks}")
        for kernel_id, entry in spec.kernels.items():
            collectives = ", ".join(f"{c.kind}({c.size}{', overlapped' if c.overlapped else ''})"
                                    for c in entry.collectives)
            lines.append(f"  {kernel_id:14s} {' '.join(entry.operators)}" + (f"  | {collectives}" if collectives else ""))
    return "\n".join(lines)


def describe_reference(path: str | Path) -> str:
    """The measurements of a reference file: quantity, value and tolerance, experiment and point.

    >>> "t5_128k_snap_tps" in describe_reference("experiments/reference/snapstream_paper.yaml")
    True
    """
    from sn40l_sim.study.validation import load_references

    references = load_references([Path(path)])
    rows = []
    for ref in references:
        m = ref.measurement
        t = m.tolerance
        band = "" if t is None else (f"+-{t.abs:g}" if t.abs is not None else f"+-{t.rel * 100:.6g}%"   # 0.005: not 0%
                                     if t.rel is not None else f"[{t.range[0]:g}, {t.range[1]:g}]")
        rows.append((m.id, m.label, "(held back)" if m.value is None else f"{m.value:g}", band,   # a ratio: both records
                     f"{ref.experiment_path.name}: {m.point}" + (f" over {m.relative_to}" if m.relative_to else ""),
                     "calibration" if m.calibration else "prediction"))
    header = ("id", "quantity", "measured", "tolerance", "experiment: point", "role")
    return f"reference file {path}: {len(references)} measurements\n" + _table(header, rows)


def describe_trace(path: str | Path) -> str:
    """A request trace (.csv or .jsonl, as a trace workload reads it): its requests, span and mean
    rate, and the spread of its prompt and output lengths, which decide the KV cache it needs."""
    import numpy as np

    from sn40l_sim.serving.traces import read_trace, trace_source

    rows = read_trace(Path(path))
    arrivals = [row.arrival_s for row in rows]
    span_s = max(arrivals) - min(arrivals)
    rate = f" ({len(rows) / span_s:.3g} requests/s)" if span_s > 0 else ""
    lines = [f"trace {path}: {len(rows)} request{'' if len(rows) == 1 else 's'} over {span_s:.4g} s{rate}",
             f"  source  {trace_source(Path(path))}"]
    table = [("tokens per request", "mean", "median", "p99", "max")]
    for label, values in (("prompt", [row.prompt_len for row in rows]), ("output", [row.output_len for row in rows])):
        mean, median, p99 = np.mean(values), np.median(values), np.percentile(values, 99)
        table.append((label, f"{mean:,.0f}", f"{median:,.0f}", f"{p99:,.0f}", f"{max(values):,}"))
    return "\n".join(lines + ["  " + line for line in _table(table[0], table[1:]).splitlines()])


def run(args: argparse.Namespace) -> int:
    """Print the description of ``args.file``; exit status 0, or 1 if the model describer is missing."""
    from sn40l_sim.commands.check import is_trace_file, simulator_output
    from sn40l_sim.errors import InputError

    output = simulator_output(args.file)
    if output is not None:   # a results.csv was called a request trace, a results.json "not a YAML mapping"
        raise InputError(f"{output}, not a file describe reads (hardware, model, kernel-template, experiment, "
                         "reference or trace)", file=args.file)
    if is_trace_file(args.file):   # not YAML: its first line would be read as a text
        print(describe_trace(args.file))
        return 0
    kind = file_kind(args.file)
    if kind in ("socket", "node"):
        print(describe_hardware(args.file))
    elif kind == "model":
        try:
            from sn40l_sim.report.describe import describe_model
        except ImportError as exc:
            print(f"cannot describe model files yet: sn40l_sim.report.describe is not available ({exc})")
            return 1
        print(describe_model(args.file))
    elif kind == "kernels":
        print(describe_kernels(args.file))
    elif kind == "experiment":
        print(describe_experiment(args.file))
    elif kind == "reference":
        print(describe_reference(args.file))
    else:
        doc = load_document(args.file)
        raise doc.error(("kind",), f"expected one of ['socket', 'node', 'model', 'kernels', 'experiment', "
                        f"'reference'], got {kind!r}")
    return 0

