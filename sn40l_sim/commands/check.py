"""Validate files without running anything: everything run, sweep, map and validate would refuse
before simulating, check refuses, with the same message.

Each file is loaded exactly as the simulator would load it (kind: socket / node / model / kernels /
experiment / reference; the files an experiment or a reference file names are checked with it). An
experiment is assembled and every point checked as run checks it before simulating: its KV policy
and parameters, its parallel plans against the node, the compiled prefill lengths, the KV link, the
workload's lengths against the static graphs, the graph options; an experiment with a sweep: section
has every axis value and every run checked; for a reference file, the points (or runs) its
measurements read, the ones validate simulates. A .csv or .jsonl file, or a file of another suffix
whose first line is a trace's header, is read as a request trace, as a trace workload reads it (the
simulator's columns or the Azure LLM trace's). A kernel template is
checked with the model files beside it that name it. A results.json or results.csv that run or sweep
wrote is said to be one. One line per file: "ok" on stdout, or the error (file,
field, line, what was expected) on stderr. Exit status 0 if every file is valid, 2 if any is not.

examples:
  python -m sn40l_sim check hw_configs/*.yaml graphs/*.yaml experiments/*.yaml experiments/reference/*.yaml
  python -m sn40l_sim check experiments/traces/*.csv
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Collection
from pathlib import Path

from sn40l_sim.commands.argtypes import input_path_text
from sn40l_sim.errors import InputError

#: the kinds of file the simulator reads
KINDS = ("socket", "node", "model", "kernels", "experiment", "reference")
#: files read as request traces (a trace workload's ``path``), not as YAML
TRACE_SUFFIXES = (".csv", ".jsonl")
#: files read as YAML whatever their first line
YAML_SUFFIXES = (".yaml", ".yml")


def is_trace_file(path: str | Path) -> bool:
    """Whether ``path`` is read as a request trace: a .csv or .jsonl file, or a file of another
    suffix (``trace.txt``, ``trace.tsv``, none) whose first line is a trace's CSV header, as a trace
    workload reads any such file (:func:`~sn40l_sim.serving.traces.read_trace`). ``run`` served a
    ``trace.txt`` while ``check`` and ``describe`` said "expected a YAML mapping at the top level,
    got str" of it.

    >>> is_trace_file("experiments/traces/azure_llm_2023_conv_10min.csv"), is_trace_file("experiments/deepseek_tp16.yaml")
    (True, False)
    """
    suffix = Path(path).suffix.lower()
    if suffix in TRACE_SUFFIXES:   # trace.CSV too
        return True
    if suffix in YAML_SUFFIXES or not Path(path).is_file():
        return False
    from sn40l_sim.serving.traces import AZURE_COLUMNS, SIMULATOR_COLUMNS
    try:
        with open(path, encoding="utf-8-sig") as handle:
            first = handle.readline(4096)
    except (OSError, UnicodeDecodeError):
        return False
    header = tuple(column.strip().strip('"') for column in first.strip().split(","))
    return header in (SIMULATOR_COLUMNS, AZURE_COLUMNS)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``check``'s arguments."""
    parser.add_argument("files", nargs="+", type=input_path_text, metavar="FILE", help="YAML files (or .csv/.jsonl request traces) to validate")


def check_file(path: str | Path) -> str:
    """Load and validate one file as the command that reads it would; return what it is.

    Raises
    ------
    InputError
        The first problem found, in this file or in a file it references.

    Examples
    --------
    >>> check_file("hw_configs/sn40l_node16.yaml")
    'node'
    >>> check_file("graphs/kernels_deepseek.yaml")
    'kernels (checked with deepseek_r1.yaml)'
    >>> check_file("experiments/kernel_looping.yaml")
    'experiment (a sweep of 8 runs)'
    >>> check_file("experiments/traces/azure_llm_2023_conv_10min.csv")
    'trace (2867 requests over 600 s)'
    """
    output = simulator_output(path)
    if output is not None:
        return output
    if is_trace_file(path):
        from sn40l_sim.serving.traces import read_trace
        rows = read_trace(Path(path))
        arrivals = [row.arrival_s for row in rows]
        return f"trace ({len(rows)} request{'' if len(rows) == 1 else 's'} over {max(arrivals) - min(arrivals):.4g} s)"
    refuse_python_file(path, "check")
    from sn40l_sim.commands.describe import file_kind

    kind = file_kind(path)
    if kind in ("socket", "node"):
        from sn40l_sim.hardware.loader import load_hardware
        load_hardware(path)
    elif kind == "model":
        from sn40l_sim.models.loader import load_model
        load_model(path)
    elif kind == "kernels":
        from sn40l_sim.models.template import load_templates
        load_templates(path)
        users = check_template_users(path)
        if users:
            return f"kernels (checked with {', '.join(users)})"
    elif kind == "reference":
        from sn40l_sim.study.validation import DEFAULT_REFERENCE_DIR, load_references, record_readers
        references = load_references([Path(path)])
        count = len(references)
        # as validate will simulate them: the points the measurements read, not the others (a batch
        # the full cache's point does not fit refused a reference to SnapStream's, which validate ran)
        for experiment, reads in sorted(record_readers(references).items()):
            check_experiment(experiment, reads)
        if Path(path).resolve().parent == DEFAULT_REFERENCE_DIR:
            # validate reads the folder's files together: an id another of them has is refused there
            load_references(sorted(DEFAULT_REFERENCE_DIR.glob("*.yaml")))
        return f"reference ({count} measurements)"
    elif kind == "experiment":
        return check_experiment(path)
    else:
        from sn40l_sim.yamlio import load_document
        raise load_document(path).error(("kind",), f"expected one of {list(KINDS)}, got {kind!r}")
    return kind


def refuse_python_file(path: str | Path, command: str) -> None:
    """Refuse a ``.py`` file as a plug-in's module (docs/architecture.md, "Extending the simulator"),
    not as a YAML file with a syntax error on its first line; check and describe say the same.

    Raises
    ------
    InputError
        Naming the experiment's ``plugins:`` as the way ``command`` reads a plug-in.
    """
    if Path(path).suffix.lower() == ".py":
        done = "checked" if command == "check" else "described"
        raise InputError(f"a Python file: {command} reads YAML files and request traces; a KV-policy plug-in is "
                         f"{done} through an experiment listing it under plugins: ({command} that experiment)",
                         file=str(path))


def simulator_output(path: str | Path) -> str | None:
    """What a results file written by ``run`` or ``sweep`` is, or None for any other file: a user
    checking one was told "expected a YAML mapping at the top level, got list" (results.json) or
    given a trace's 200-column header error (results.csv). Read as ``compare`` and ``plot`` read
    them; a file that is not quite one is left to the checks of the kinds it may be.

    >>> simulator_output("experiments/deepseek_tp16.yaml") is None
    True
    """
    import csv

    if not Path(path).is_file():
        # a named pipe opened here blocked for a writer; a device, a folder or a missing file is
        # left to the checks of the kinds it may be, which refuse it in one line
        return None

    from sn40l_sim.commands.compare import load_records

    suffix = Path(path).suffix.lower()
    if suffix == ".json":
        try:
            records = load_records(Path(path))
        except InputError:
            return None
        return f"results of run or sweep ({len(records)} point{'s' if len(records) != 1 else ''}; read by compare and plot)"
    if suffix == ".csv":
        try:
            with open(path, newline="", encoding="utf-8") as handle:
                header = next(csv.reader(handle), [])
                rows = sum(1 for _ in handle)
        except (OSError, UnicodeDecodeError, csv.Error):
            return None
        if {"name", "experiment", "kv_policy"} <= set(header):
            return f"results table of run or sweep ({rows} row{'s' if rows != 1 else ''}; read by plot)"
    return None


def check_template_users(path: str | Path) -> list[str]:
    """Check a kernel template against the model files beside it that name it (``kernels:``);
    returns their names.

    What a template owes a model (a sharding rule for each of its tensors, every operator of a
    layer once in dataflow order, its row-parallel GEMMs' partial sums reduced) can only be checked
    with one, so a template checked alone passed with its FFN all-reduce deleted, and ran with
    silently wrong numbers (docs/robustness.md). A model beside it is loaded with it, which checks
    the template (errors located in the template); a model that is itself invalid is left to its own
    check, so that the template's result speaks of the template.

    >>> check_template_users("graphs/kernels_llama.yaml")
    ['llama3_1_405b.yaml', 'llama3_1_70b.yaml', 'llama3_1_8b.yaml']
    """
    from sn40l_sim.models.loader import load_model
    from sn40l_sim.yamlio import load_document

    template = Path(path).resolve()
    users = []
    for sibling in sorted(Path(path).parent.glob("*.yaml")):
        if sibling.resolve() == template:
            continue
        try:
            doc = load_document(sibling)
        except InputError:
            continue   # not a file this check can read: its own check says why
        named = doc.data.get("kernels") if doc.data.get("kind") == "model" else None
        if not isinstance(named, str) or doc.resolve(named, ("kernels",)).resolve() != template:
            continue   # relative to the file that wrote it, a base: file's too
        try:
            load_model(sibling)
        except InputError as exc:
            if exc.file is None or Path(exc.file).resolve() != template:
                continue   # the model's own error, not the template's
            raise
        users.append(sibling.name)
    return users


def check_experiment(path: str | Path, only: Collection[str] | None = None) -> str:
    """Check an experiment as run (or sweep) would before simulating, or only the points (or sweep
    runs) named in ``only``, as validate simulates them; returns what it is."""
    from sn40l_sim.study.assemble import assemble
    from sn40l_sim.study.experiment import load_experiment
    from sn40l_sim.study.mapping import check_phases
    from sn40l_sim.study.preflight import check_assembly, check_mapping

    exp = load_experiment(path)
    if exp.spec.sweep is not None:
        from sn40l_sim.study.sweep.check import check_sweep
        from sn40l_sim.study.sweep.load import load_sweep
        runs = check_sweep(load_sweep(path), only)
        return f"experiment (a sweep of {runs} run{'s' if runs != 1 else ''})"
    asm = assemble(exp)
    if exp.spec.workload is None:  # an experiment for map: everything but the serving, which only run needs
        check_mapping(asm)
        check_phases(exp)   # and its graphs as map builds and places them
        return "experiment (no workload: for map; run needs one)"
    check_assembly(asm, None if only is None else [p for p in asm.points if p.name in only])
    return "experiment"


def run(args: argparse.Namespace) -> int:
    """Check every file; 0 if all are valid, 2 if any is not."""
    bad = 0
    references = []
    for path in args.files:
        try:
            kind = check_file(path)
        except InputError as exc:
            bad += 1
            print(f"error: {exc}", file=sys.stderr)
        else:
            print(f"ok: {path} (kind: {kind})")
            if kind.startswith("reference"):
                references.append(Path(path))
    if len(references) > 1:
        # validate reads the reference files it is given together: an id two of them share is refused there
        from sn40l_sim.study.validation import load_references
        try:
            load_references(references)
        except InputError as exc:
            bad += 1
            print(f"error: {exc}", file=sys.stderr)
    return 2 if bad else 0
