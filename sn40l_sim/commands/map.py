"""Map one phase of an experiment onto a socket and print, per kernel, the PCUs and PMUs used per
tile, the utilisation of compute, SRAM and HBM bandwidth, the bounding resource and the predicted
cycles (identical layers collapsed into one row "xN"), then a totals line.

The graph is built for the experiment's shape (its prompt ``shape.prompt_len``, or when
``prompt_lens`` leaves that out the policy's first point there, as a line says): decode at
``shape.batch`` sequences (a line says so when ``run`` decodes at another ``serving.batch``) reading the
policy's static cache and verifying the experiment's speculative drafts (``serving.speculative``:
the draft runs of the MTP module are rows of their own); prefill one prompt at a time (batch 1, as
the engine runs it) unless ``--batch`` says otherwise, on the graph compiled for the smallest of
``serving.prefill_lens`` that holds the prompt, on the prefill nodes' hardware when the
experiment names one (``prefill_hardware``), as ``run`` times it; a line under the shape says
when ``run`` serves otherwise (a prompt in chunks, ``serving.prefill_chunk``; the models of a
``multi_model:`` section, where this maps the experiment's ``model:``; a ``sweep:`` section, which
``map`` does not apply: ``--set`` maps a point). Activations, weights and KV are
placed in the socket's memory tiers in the experiment's order (memory.order; default: the socket's,
HBM then DDR), as ``run`` places them: only the uses memory.may_spill names (by default the
activations) spill to the next tier, and a graph whose weights or KV do not fit the first tier is
refused as ``run`` refuses it (those uses are placed first when the activations would push them
out of the first tier); the activations are the resident ones and the KV per socket is what ``run`` reserves
(:func:`sn40l_sim.kvcache.sizing.kv_bytes_per_socket`).
Each kernel's cycles are one call as the graph calls it, the time its plan was chosen by: its
configuration charged once over a run of consecutive calls, a looped call's iterations pipelined
(each waiting for the previous one's collectives), another call's collectives where they outlast it
(:mod:`sn40l_sim.mapper.calls`). The kernel-call boundaries (launch, barrier) are left out, so the
total is a floor of ``run``'s step (docs/validation.md).

examples:
  python -m sn40l_sim map experiments/map_deepseek_tp16.yaml --phase decode
  python -m sn40l_sim map experiments/map_deepseek_tp16.yaml --phase prefill --policy snapstream --plot out/map.png
  python -m sn40l_sim map experiments/map_deepseek_tp16.yaml --phase decode --set hardware.socket.tile.pcus=280 --set hardware.socket.tile.grid_cols=28
"""
from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING

from sn40l_sim.commands.argtypes import input_path_text
from sn40l_sim.errors import InputError

if TYPE_CHECKING:
    from sn40l_sim.hardware.spec import SocketSpec
    from sn40l_sim.mapper.placement import PlacedKernel


def _residency_line(socket: SocketSpec, kernels: tuple[PlacedKernel, ...]) -> str:
    """Which kernels keep their configuration loaded from call to call, and what loading them again
    costs after another graph took the units (mapper/residency.py)."""
    from sn40l_sim.hardware import figures
    from sn40l_sim.mapper.residency import call_residency, load_bytes, resident_calls

    loads, switched = call_residency(socket, kernels)
    kept, loaded = [], []
    for pk, resident in zip(kernels, resident_calls(socket, kernels), strict=True):
        if resident and pk.kernel.signature() not in kept:
            kept.append(pk.kernel.signature())
            loaded.append(pk.kernel.name)
        elif not resident:
            loaded.append(None)
    # a call on several tiles loads only those another kernel took units of (mapper/residency.py)
    partly = sum(1 for pk, tiles in zip(kernels, loads, strict=True)
                 if tiles and load_bytes(socket, pk, tiles) < pk.section_config_bytes[0])
    if not kept:
        return ("configurations kept loaded between calls: none (another kernel takes some of its units before "
                f"each is called again){f'; {partly} calls load theirs on only the tiles another kernel took' if partly else ''}")
    reloads = loaded.count(None)
    again = [(pk, load, s) for pk, load, s in zip(kernels, loads, switched, strict=True) if s]
    switch_us = sum(figures.config_cycles(socket, load_bytes(socket, pk, load + s))
                    - figures.config_cycles(socket, load_bytes(socket, pk, load))
                    for pk, load, s in again) / socket.clock_hz * 1e6
    return (f"configurations kept loaded between calls (their units left alone by the other kernels): "
            f"{', '.join(name for name in loaded if name)}; {reloads} of {len(kernels)} calls load theirs"
            f"{f' ({partly} on only the tiles another kernel took)' if partly else ''} "
            f"(after another graph took the units, {len(again)} more load theirs: {switch_us:.1f} us)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``map``'s arguments."""
    parser.add_argument("experiment", type=input_path_text, metavar="EXPERIMENT.yaml", help="experiment file (kind: experiment)")
    parser.add_argument("--phase", choices=("prefill", "decode"), required=True, help="which graph to map")
    parser.add_argument("--policy", metavar="NAME", default=None,
                        help="name of a policies entry of the experiment (default: the first)")
    parser.add_argument("--batch", type=int, default=None, metavar="N",
                        help="sequences in the graph (default: shape.batch for decode, 1 for prefill)")
    parser.add_argument("--plot", default=None, metavar="FILE.png",
                        help="draw the placement of --plot-kernels on the tile meshes")
    parser.add_argument("--plot-kernels", default=None, metavar="NAME[,NAME...]",
                        help="kernels to draw with --plot (default: the two that take the most time)")
    parser.add_argument("--set", action="append", default=[], metavar="PATH=VALUE", dest="sets",
                        help="set a field of the experiment or of its hardware (hardware.<field>) for this "
                             "mapping, as run's --set; repeatable")


def run(args: argparse.Namespace) -> int:
    """Build, place and print; returns 0."""
    from sn40l_sim.mapper.loops import find_loops
    from sn40l_sim.mapper.summary import collapse, format_table, padded_footnotes, shown_tiers
    from sn40l_sim.quantities import format_bytes
    from sn40l_sim.report.figure import check_figure_file
    from sn40l_sim.report.outputs import output_path
    from sn40l_sim.study.experiment import load_experiment
    from sn40l_sim.study.mapping import build_phase, map_phase
    from sn40l_sim.study.sweep.base import experiment_with_sets
    from sn40l_sim.study.sweep.sets import parse_sets

    started = time.perf_counter()
    args.plot = output_path(args.plot, "--plot")
    if args.plot_kernels is not None and args.plot is None:
        raise InputError("draws nothing without --plot FILE.png: add --plot or drop --plot-kernels",
                         field="--plot-kernels")
    if args.plot_kernels is not None and not _kernel_names(args.plot_kernels):
        raise InputError(f"expected kernel names separated by commas, got {args.plot_kernels!r}",
                         field="--plot-kernels")
    if args.plot is not None:
        check_figure_file(args.plot, "--plot")   # before the graph is built and mapped
    sets = parse_sets(args.sets)
    exp, hardware_overrides = experiment_with_sets(args.experiment, sets, for_map=True) if sets else \
        (load_experiment(args.experiment), {})
    built = build_phase(exp, args.phase, args.policy, args.batch, hardware_overrides)
    if args.plot_kernels is not None:
        # named kernels the graph lacks are refused before the mapping, not after its table
        names = [k.name for k in built.graph.kernels()]
        missing = [n for n in _kernel_names(args.plot_kernels) if n not in names]
        if missing:
            raise InputError(f"--plot-kernels: no kernel named {missing} in the graph; its kernels are "
                             f"{_name_ranges(names)}")
    built_at = time.perf_counter()
    placed = map_phase(built)
    mapped_at = time.perf_counter()

    spec, node, plan, entry, memory, drafts = exp.spec, built.node, built.plan, built.entry, built.memory, built.drafts
    socket = node.socket
    print(f"{spec.name}: {built.model.name} on {node.name} ({node.sockets} x {socket.name}), {args.phase}, "
          f"policy {entry.name} ({entry.policy}), tp {plan.tp}, attention_dp {plan.attention_dp}")
    print(f"shape: batch {built.batch}, prompt {built.prompt_len}"
          + (f", cache {built.cache_len} tokens per sequence" if args.phase == "decode" else
             f" (run on the prefill graph compiled for {built.cache_len})" if built.cache_len != built.prompt_len
             else "")
          + (f", {drafts} speculative draft{'s' * (drafts > 1)} per sequence verified, the MTP module run "
             f"{'once' if drafts == 1 else f'{drafts} times'}"
             if args.phase == "decode" and drafts else ""))
    if args.phase == "decode" and args.batch is None and spec.serving.batch != built.batch and spec.multi_model is None:
        # a user reading map beside run compares batch 1 with the batch run decodes at
        print(f"  (shape.batch; run decodes at serving.batch: {spec.serving.batch}"
              + (", the largest compiled batch whose KV fits, which run prints" if spec.serving.batch == "max" else "")
              + "; --batch N maps another)")
    if built.prompt_len != spec.shape.prompt_len:   # the point's prompt, not the shape's: say which
        print(f"  (shape.prompt_len {spec.shape.prompt_len} is not one of prompt_lens: this is the policy's "
              f"point at {built.prompt_len}, as run simulates it)")
    for note in _run_differs_notes(spec, args.phase, built.prompt_len):
        print(note)
    tiers = ", ".join(use + " " + " + ".join(f"{format_bytes(memory.by_tier[tier].get(use, 0))} {tier.upper()}"
                                             for tier in memory.by_tier)
                      for use in ("weights", "kv", "activations") + (("kv_offload",) if built.store else ()))
    first = memory.first_tier
    print(f"memory per socket: {tiers} (usable {first.upper()} {format_bytes(memory.capacity[first])})")
    print(f"datatypes: {datatypes_text(built.model)}")
    print("per socket, each kernel per call as the graph calls it: its configuration when it is not still "
          "loaded, a loop's iterations pipelined, the collectives it waits for (each alone, staged "
          "through the activations' tier); kernel-call boundaries (launch, barrier) excluded")
    print(f"clock {socket.clock_hz / 1e9:g} GHz; each row's PCU/PMU are per tile in use")
    # SRAM% is capacity while the sram bound is the PMUs' ports: a decode MLA row read "bound sram"
    # beside "SRAM% 5.6", as if the bound were a resource the kernel hardly used
    print("SRAM% is the buffers held over the SRAM of the tiles in use (capacity); a row bound by sram waits "
          "on its PMUs' read and write ports")
    # comp% and the tiers' % are over the whole socket's peaks (mapper/summary.py): Llama-3.1-8B's 32K
    # prefill output projection, on one tile of four, read "comp% 8.4" beside "bound compute"
    columns = ["comp%"] + [f"{tier.upper()}%" for tier in shown_tiers(socket, placed.kernels)]
    print(f"{', '.join(columns[:-1])} and {columns[-1]} are the call's "
          "FLOPs and bytes over the whole socket's peaks (BF16 on every tile, each tier's bandwidth), so a row on "
          "fewer tiles reads low though bound; tiles are the chip's tiles a call runs on, n_tiles the data tiles "
          "it streams")
    print()
    print(format_table(socket, placed.kernels))
    for line in padded_footnotes(placed.kernels):
        print(line)
    print(_loops_line([pk.kernel.name for pk in placed.kernels],
                      find_loops([pk.kernel for pk in placed.kernels], built.graph), spec.execution.kernel_looping))
    print(_residency_line(socket, placed.kernels))
    print(f"built and placed in {built_at - started:.2f} s, mapped in {mapped_at - built_at:.2f} s "
          f"({len(collapse(placed.kernels))} distinct kernels)")
    if args.plot is not None:
        from sn40l_sim.mapper.plot import plot_placement
        from sn40l_sim.report.outputs import atomic_path

        chosen = _plot_choice(placed.kernels, args.plot_kernels)
        with atomic_path(args.plot) as temporary:
            plot_placement(socket, chosen, temporary)
        print(f"placement of {', '.join(pk.kernel.name for pk in chosen)} drawn in {args.plot}")
    return 0


def _run_differs_notes(spec, phase: str, prompt_len: int) -> list[str]:
    """Lines naming what ``run`` serves otherwise than the graph ``map`` shows: a prompt run serves
    in chunks (``serving.prefill_chunk``, :mod:`sn40l_sim.serving.chunked_prefill`) and the models of
    a ``multi_model:`` section (map maps the experiment's ``model:``). Without them a user read the
    whole prompt's graph, or one model at ``shape.batch``, as what run had timed. And a ``sweep:``
    section, which ``run`` runs and ``map`` does not apply: per_user_speed.yaml's first run is
    DeepSeek-R1 with MTP drafts, its map Llama-3.1-8B, the base's model, without a word.

    >>> from types import SimpleNamespace as NS
    >>> plain = NS(serving=NS(prefill_chunk=None), multi_model=None, sweep=None)
    >>> _run_differs_notes(plain, "prefill", 8192)
    []
    >>> chunked = NS(serving=NS(prefill_chunk=1024), multi_model=None, sweep=None)
    >>> _run_differs_notes(chunked, "decode", 8192), len(_run_differs_notes(chunked, "prefill", 8192))
    ([], 1)
    >>> _run_differs_notes(chunked, "prefill", 1024)   # one chunk holds the prompt: run prefills it whole
    []
    """
    notes = []
    chunk = spec.serving.prefill_chunk
    if phase == "prefill" and chunk is not None and chunk < prompt_len:
        notes.append(f"  (the whole prompt's graph, run's 'prefill, one prompt'; with serving.prefill_chunk "
                     f"{chunk} run serves the prompt in {-(-prompt_len // chunk)} chunks between decode steps, "
                     f"each on the graph compiled for its length attending the earlier chunks' keys and holding "
                     f"one chunk's activations, and reports what they add as 'chunking prefill overhead')")
    axes = spec.sweep.get("axes") if isinstance(spec.sweep, dict) else None
    if isinstance(axes, dict) and axes:
        paths = ", ".join(str(axis.get("path", name)) if isinstance(axis, dict) else str(name)
                          for name, axis in axes.items())
        notes.append(f"  (the experiment's base: run runs its sweep: section, over {paths}, which map does not "
                     f"apply; --set PATH=VALUE maps one of its points)")
    if spec.multi_model is not None:
        names = ", ".join(m.name for m in spec.multi_model.models)
        notes.append(f"  (the experiment's model: line; run serves the models of multi_model ({names}), each at "
                     f"its own batch; --set model=FILE and --batch N map another)")
    return notes


def datatypes_text(model) -> str:
    """The datatypes the graph was built in (the model's, its overrides applied), which every byte
    map prints follows from; activations are BF16 whatever the weights (sn40l_sim/ir.py, ACT_BYTES).
    ``describe`` gives them for an experiment's model too."""
    from sn40l_sim.models.kv_format import kv_element_bits

    weights = model.weight_dtype
    if weights == "fp8":
        kept = f"; {', '.join(model.bf16_tensors)} bf16" if model.bf16_tensors else ""
        weights += f" (FP32 scales a {model.fp8_block} x {model.fp8_block} block{kept})"
    kv = model.kv_dtype + (f" ({float(kv_element_bits(model)):g} bits an element with its scales)"
                           if model.kv_quant is not None else "")
    return f"weights {weights}, KV cache {kv}, activations bf16"


def _loops_line(names: list[str], loops, looping: bool) -> str:
    """The runs of consecutive calls of one kernel, and whether the engine runs each as one call
    with a pipelined loop (kernel looping on) or as a call per iteration (off: no loop is run, so
    none is called one).

    >>> from sn40l_sim.mapper.loops import Loop
    >>> names = ["embedding", "L00.decoder", "L01.decoder", "lm_head"]
    >>> _loops_line(names, [Loop(first=1, iterations=2)], looping=True)
    'kernel loops (execution.kernel_looping on): L00.decoder .. L01.decoder x2, each run as one call with a pipelined loop'
    >>> _loops_line(names, [Loop(first=1, iterations=2)], looping=False)
    'kernel loops: none run (execution.kernel_looping off): L00.decoder .. L01.decoder are 2 separate calls'
    """
    if not loops:
        return (f"kernel loops: none (no run of consecutive calls of one kernel; kernel_looping "
                f"{'on' if looping else 'off'})")
    runs = [(names[lp.first], names[lp.stop - 1], lp.iterations) for lp in loops]
    if looping:
        return ("kernel loops (execution.kernel_looping on): "
                + "; ".join(f"{first} .. {last} x{n}" for first, last, n in runs)
                + ", each run as one call with a pipelined loop")
    return ("kernel loops: none run (execution.kernel_looping off): "
            + "; ".join(f"{first} .. {last} are {n} separate calls" for first, last, n in runs))


def _name_ranges(names: list[str]) -> str:
    """Every kernel name of a graph, each layer-numbered family as one range (``L00-L60.mla``): the
    first four names alone never reached a MoE layer's or the MTP module's kernels."""
    families: dict[tuple[str, str], list[str]] = {}
    for name in names:
        prefix, dot, stem = name.partition(".")
        key = (prefix.rstrip("0123456789"), stem) if dot else ("", name)
        families.setdefault(key, []).append(prefix if dot else name)
    return ", ".join(f"{prefixes[0]}-{prefixes[-1]}.{stem}" if len(prefixes) > 1 else
                     (f"{prefixes[0]}.{stem}" if family else prefixes[0])
                     for (family, stem), prefixes in families.items())


def _kernel_names(text: str) -> list[str]:
    """The names in ``--plot-kernels`` (commas between them, blanks ignored), each once: a name
    given twice would draw its kernel twice."""
    return list(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))


def _plot_choice(kernels, names: str | None) -> list:
    from sn40l_sim.mapper.summary import collapse

    if names is not None:
        by_name = {pk.kernel.name: pk for pk in kernels}   # every name checked before mapping
        return [by_name[n] for n in _kernel_names(names)]
    rows = sorted(collapse(kernels), key=lambda r: -r.total_cycles)[:2]
    return [r.placed for r in rows]
