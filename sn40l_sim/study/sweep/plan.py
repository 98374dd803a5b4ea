"""Planning a sweep: one run per (sweep point, experiment point), carrying everything it needs.

A sweep point's experiment expands into its own points (KV policies x prompt lengths); each of them
runs on its own, so that a batch too large for ``full`` does not lose the ``snapstream`` record of
the same sweep point, and so that the work spreads over the workers in small pieces.

A run carries its sweep point's :class:`~sn40l_sim.study.assemble.Assembly`: the validated
experiment, its node with the hardware overrides applied, the model (with its kernel template), and
the trace's rows and graph template when the experiment names them. A worker never opens an
experiment, hardware, model, template or trace file, so it needs none of the project's files (a
remote worker has only the installed package). Each sweep point's experiment is validated once,
each distinct node, model and trace read once.

A run's :attr:`~SweepRun.key` names what it simulates by value (the experiment as validated, the
point, the node, the model, the template, the trace) and the simulator's code that simulates it, so
a resumed sweep finds the runs already done whatever their order or index (:mod:`.store`), and
never reuses a record that other code produced.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

from sn40l_sim.errors import InputError
from sn40l_sim.hardware.loader import OVERRIDES_FILE, load_hardware, with_overrides
from sn40l_sim.hardware.spec import NodeSpec
from sn40l_sim.mapper.disk_cache import runtime
from sn40l_sim.models.spec import ModelSpec
from sn40l_sim.models.template import template_for
from sn40l_sim.study.assemble import Assembly, check_drafts_have_mtp, plan_of
from sn40l_sim.study.experiment_files import experiment_model, load_graph_template, named_file, read_trace_rows
from sn40l_sim.study.plugins import plugin_digests
from sn40l_sim.study.points import Point, points, warn_idle_sockets, warn_uneven_heads
from sn40l_sim.study.sweep.axes import value_text
from sn40l_sim.study.sweep.base import experiment_from_data, load_node
from sn40l_sim.study.sweep.load import Sweep, SweepPoint

#: bump when the key's contents change meaning (stored runs of an older key are then run again)
KEY_VERSION = 1
#: the package's folder, whose sources the key includes
PACKAGE = Path(__file__).resolve().parents[2]


@lru_cache(maxsize=1)
def code_digest() -> str:
    """A digest of the simulator's sources (every ``.py`` file of the package, by relative path)."""
    digest = hashlib.sha256()
    for path in sorted(PACKAGE.rglob("*.py")):
        digest.update(path.relative_to(PACKAGE).as_posix().encode("utf-8") + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()


@lru_cache(maxsize=1)
def installed() -> str:
    """The interpreter's and libraries' versions (:func:`~sn40l_sim.mapper.disk_cache.runtime`),
    read once per process: 3.5 ms a read, and every run's key holds them."""
    return runtime()


@dataclass(frozen=True)
class SweepRun:
    """One experiment point of one sweep point: the unit of work of a worker."""

    sweep_point: SweepPoint
    #: the point of the sweep point's experiment this run simulates
    point: Point
    #: the sweep point's experiment with its node, model, trace rows and graph template loaded
    assembly: Assembly

    @property
    def name(self) -> str:
        """``<experiment point>[<sweep point>]``: the record's name."""
        return f"{self.point.name}[{self.sweep_point.name}]"

    @cached_property
    def key(self) -> str:
        """A stable hexadecimal digest of the run's resolved parameters (:func:`run_parameters`)."""
        text = json.dumps(run_parameters(self), sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()


def run_parameters(run: SweepRun) -> dict[str, Any]:
    """Everything a run's result depends on, as plain data: its assembly's inputs
    (:func:`assembly_parameters`), the point, the simulator's code and the interpreter and libraries
    it runs on (:func:`installed`, as the disk cache keys its entries: an upgraded library may
    compute otherwise, and a resumed sweep mixed records of both). Two runs with equal parameters
    give the same record."""
    point = {"name": run.point.name, "policy": run.point.policy, "params": run.point.params,
             "prompt_len": run.point.prompt_len}
    return {"version": KEY_VERSION, "code": code_digest(), "runtime": installed(), "point": point,
            **assembly_parameters(run.assembly)}


def assembly_parameters(asm: Assembly) -> dict[str, Any]:
    """What an assembly's records depend on besides the point and the code, as plain data: the
    experiment as validated (without its sweep section and the paths of the files it names, whose
    contents follow), the node (hardware file and overrides applied), the model with its kernel
    template, the graph options' template, the trace rows and the plug-ins' code
    (:func:`~sn40l_sim.study.plugins.plugin_digests`); no path, so a copy of the project elsewhere
    gives the same data."""
    spec = asm.experiment.spec
    experiment = spec.model_dump(mode="json", exclude={"sweep", "hardware", "model"})
    graph_template = asm.graph_template.model_dump(mode="json") if asm.graph_template is not None else None
    return {"experiment": experiment,
            "node": asm.node.model_dump(mode="json"),
            "model": asm.model.model_dump(mode="json", exclude={"kernels"}),
            "template": template_for(asm.model).model_dump(mode="json"),
            "graph_template": graph_template,
            "trace": [list(row[:3]) for row in asm.trace_rows] if asm.trace_rows is not None else None,
            # only when there is one, so that the keys of other runs stay as they were
            **({"prefill_node": asm.prefill_node.model_dump(mode="json")} if asm.prefill_node is not None else {}),
            **({"plugins": plugin_digests(asm.experiment.doc, spec.plugins)} if spec.plugins else {})}


def expand_runs(sweep: Sweep) -> tuple[list[SweepRun], list[tuple[int, str, str]]]:
    """The runs of every sweep point, and ``(index, name, error)`` of the sweep points whose
    experiment is invalid as a whole (a combination of values that passed one by one) or whose
    hardware, model, trace or template does not load."""
    if not isinstance(sweep, Sweep):   # run_points(path), the sweep's file for its Sweep: an AttributeError otherwise
        raise InputError(f"sweep: expected a Sweep (load_sweep(path)), got {type(sweep).__name__}")
    runs, failures = [], []
    nodes: dict[str, NodeSpec] = {}
    models: dict[str, ModelSpec] = {}
    files: dict[str, tuple] = {}
    for sp in sweep.points:
        try:
            exp = experiment_from_data(sp.data, sweep.doc)
            spec = exp.spec
            hw_key = json.dumps([spec.hardware, sp.hardware_overrides], sort_keys=True, default=str)
            if hw_key not in nodes:
                nodes[hw_key] = load_node(exp.doc, sp.data, sp.hardware_overrides)
            model_key = json.dumps([spec.model, spec.model_overrides], sort_keys=True, default=str)
            if model_key not in models:
                models[model_key] = experiment_model(exp, ("model",), spec.model)
            check_drafts_have_mtp(exp, models[model_key])   # assemble's check: a run never reaches it
            workload = spec.workload
            is_trace = workload is not None and workload.kind == "trace"
            trace = exp.resolve(workload.path, ("workload", "path")) if is_trace else None
            files_key = json.dumps([str(trace) if trace else None, spec.graph_options.get("template"), model_key],
                                   default=str)
            if files_key not in files:
                files[files_key] = (read_trace_rows(exp), load_graph_template(exp, models[model_key]))
            prefill_node = None
            if spec.prefill_hardware is not None:   # prefill nodes of their own, with the same overrides
                prefill_key = json.dumps(["prefill", spec.prefill_hardware, sp.hardware_overrides], sort_keys=True,
                                         default=str)
                if prefill_key not in nodes:
                    path = named_file(exp, ("prefill_hardware",), spec.prefill_hardware, "prefill hardware")
                    node = load_hardware(path)
                    nodes[prefill_key] = with_overrides(node, sp.hardware_overrides) if sp.hardware_overrides else node
                prefill_node = nodes[prefill_key]
            asm = Assembly(exp, nodes[hw_key], models[model_key], *files[files_key], prefill_node=prefill_node)
            for phase, node in (("prefill", prefill_node or nodes[hw_key]), ("decode", nodes[hw_key])):
                warn_idle_sockets(exp, phase, plan_of(getattr(spec.parallel, phase)).sockets, node.sockets,
                                  f"{node.name} (sweep point {sp.name})")
                # as assemble warns of a single experiment's plan: a point's own plan or model may
                # split the heads unevenly where the base's does not
                warn_uneven_heads(exp, phase, plan_of(getattr(spec.parallel, phase)), models[model_key].attention,
                                  models[model_key].name, sp.name)
            runs += [SweepRun(sp, p, asm) for p in points(exp)]
        except InputError as exc:
            failures.append((sp.index, sp.name, str(_at_axis(sweep, exc))))
    return runs, failures


def refuse_repeated_points(sweep: Sweep, runs: list[SweepRun]) -> None:
    """Refuse a sweep two of whose points simulate the same thing (equal :attr:`SweepRun.key`: the
    same experiment, node and model, read from the files they name), which the section's own check
    of repeated values cannot see: two spellings of one file (``graphs/a.yaml`` and
    ``graphs/../graphs/a.yaml``), two files of equal contents. The sweep would run each of its runs twice.

    Raises
    ------
    InputError
        At the later point's value of the last axis on which the two points differ.
    """
    # the first run of each sweep point stands for it: the runs of a point differ only in the
    # experiment point, and two points whose experiments, nodes and models match have the same runs
    seen: dict[str, SweepPoint] = {}
    for run in runs:
        sp = run.sweep_point
        if seen.get(run.key, sp) is sp:
            seen.setdefault(run.key, sp)
            continue
        earlier = seen[run.key]
        differ = [a for a in sweep.axes if sp.values[a.name] != earlier.values[a.name]]
        if not differ:   # one point twice (a grid repeats no point; _check_no_repeated_point refuses a zip's)
            continue
        axis = differ[-1]
        spec = sweep.doc.data["sweep"]["axes"][axis.name]
        at = ("sweep", "axes", axis.name) + (("values",) if isinstance(spec, dict) else ())
        index = next(i for i, v in enumerate(axis.values) if v is sp.values[axis.name])
        first = next(i for i, v in enumerate(axis.values) if v is earlier.values[axis.name])
        raise sweep.doc.error(at + (index,), f"value {value_text(axis.values[index])} simulates what [{first}] "
                              f"{value_text(axis.values[first])} does (the same experiment, hardware and model, "
                              f"read from the files they name): the sweep would run point {earlier.name} twice")


def _at_axis(sweep: Sweep, exc: InputError) -> InputError:
    """``exc`` located at the sweep axis it came from when it was raised against the hardware
    overrides (a combination of hardware values that passed one by one, such as a full mesh with
    more links per pair than the socket has ports): the axis of the field it names, or the first
    hardware axis; any other error as it is."""
    if exc.file != OVERRIDES_FILE:
        return exc
    hardware = [a for a in sweep.axes if a.path[:1] == ("hardware",)]
    if not hardware:
        return exc
    field = exc.field or ""
    axis = next((a for a in hardware if ".".join(a.path[1:]) == field), None)
    if axis is not None:
        return sweep.doc.error(("sweep", "axes", axis.name), exc.message)
    return sweep.doc.error(("sweep", "axes", hardware[0].name),
                           f"hardware.{field}: {exc.message}" if field else exc.message)
