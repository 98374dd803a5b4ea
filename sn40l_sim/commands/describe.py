"""Print the derived figures of a hardware, model, kernel-template, experiment or reference file.

Hardware files (kind: socket or node) give a table of sockets, PCUs, PMUs, peak FLOP/s per datatype,
SRAM, each memory tier's capacity and bandwidth, P2P links, bisection bandwidth and hop diameters, per
socket and for the whole node, and the calibrated values run applies to those peaks. Model files (kind: model) are described by sn40l_sim.report.describe;
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
from typing import TYPE_CHECKING

from sn40l_sim.commands.argtypes import input_path_text
from sn40l_sim.commands.describe_experiment import describe_experiment
from sn40l_sim.quantities import format_bytes
from sn40l_sim.yamlio import load_document

if TYPE_CHECKING:
    from sn40l_sim.hardware.spec import SocketSpec

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
    rows += _calibrated_rows(s)
    title = f"{node.name}: {n} x {s.name} ({path})"
    return title + "\n" + _table(("", "per socket", f"node ({n} socket{'s' if n > 1 else ''})"), rows)


#: describe's names of the calibrated values (sn40l_sim/hardware/spec.py, CalibratedSpec)
_CALIBRATED_LABELS = {"config_load_bytes_per_s": "config load", "sync_latency_s": "sync latency",
                      "p2p_efficiency": "P2P efficiency", "transfer_setup_s": "transfer set-up",
                      "systolic_efficiency": "systolic efficiency"}


def _calibrated_rows(socket: SocketSpec) -> list[tuple[str, str, str]]:
    """The fitted values the mapper and engine apply to the raw peaks above (docs/validation.md):
    a rate in B/s, a time, or an efficiency; a tier's efficiency under its name."""
    from sn40l_sim.hardware.spec import calibrated_parameters

    rows = []
    for path, param in calibrated_parameters(socket).items():
        section, _, name = path.partition(".")
        label = f"{name.split('.')[0].upper()} efficiency" if section == "memory" else \
            _CALIBRATED_LABELS.get(name, name.replace("_", " "))
        value = si(param.value, "B/s") if name.endswith("bytes_per_s") else \
            seconds_text(param.value) if name.endswith("_s") else f"{param.value:g}"
        rows.append((f"calibrated {label}", value, ""))
    return rows


def _opt_bytes(value: float) -> str:
    return format_bytes(value) if value else "none"


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [header, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


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
    from sn40l_sim.commands.check import is_trace_file, refuse_python_file, simulator_output
    from sn40l_sim.errors import InputError

    output = simulator_output(args.file)
    if output is not None:   # a results.csv was called a request trace, a results.json "not a YAML mapping"
        raise InputError(f"{output}, not a file describe reads (hardware, model, kernel-template, experiment, "
                         "reference or trace)", file=args.file)
    if is_trace_file(args.file):   # not YAML: its first line would be read as a text
        print(describe_trace(args.file))
        return 0
    refuse_python_file(args.file, "describe")   # as check does
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

