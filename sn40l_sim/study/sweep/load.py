"""Loading a sweep: an experiment's ``sweep:`` section checked and expanded into sweep points (:mod:`.plan`
turns them into runs, :mod:`.run` runs them and collects one ``results.json`` / ``results.csv``).

Each sweep point is the experiment with the axes' values written in (or, for ``hardware.`` axes,
the hardware with :func:`~sn40l_sim.hardware.loader.with_overrides` applied); it runs the
experiment's own points (KV policies x prompt lengths) as ``run`` does, so a sweep point gives one
record per policy. Records carry ``sweep_point`` (the point's name), ``sweep`` (axis -> value;
hardware axes as the parsed number in the hardware's units) and ``name`` = ``<policy point>[<sweep
point>]``, in point order whatever order the processes finish in. A point that fails is reported
with its name and one-line error; the others still run.

The section's format is in :mod:`sn40l_sim.study.sweep.axes`. Every axis is checked before anything
runs, each value on its own against the base experiment and hardware: a bad path or value is an
:class:`~sn40l_sim.errors.InputError` at ``sweep.axes.<name>`` and its line.

Examples
--------
>>> import pathlib, tempfile, textwrap
>>> folder = pathlib.Path(tempfile.mkdtemp())
>>> _ = (folder / "e.yaml").write_text(textwrap.dedent('''
...     kind: experiment
...     name: demo
...     hardware: ''' + str(pathlib.Path("hw_configs/sn40l_node8.yaml").resolve()) + '''
...     model: ''' + str(pathlib.Path("graphs/llama3_1_8b.yaml").resolve()) + '''
...     policies: [{name: full, policy: full}]
...     shape: {prompt_len: 1024}
...     sweep:
...       axes:
...         serving.batch: [1, 2]
...         hardware.socket.p2p.bytes_per_s_per_port: [50 GB/s, 100 GB/s]
...     '''))
>>> sweep = load_sweep(folder / "e.yaml")
>>> [p.name for p in sweep.points]
['batch=1,bytes_per_s_per_port=50GB/s', 'batch=1,bytes_per_s_per_port=100GB/s', 'batch=2,bytes_per_s_per_port=50GB/s', 'batch=2,bytes_per_s_per_port=100GB/s']
>>> sweep.points[3].data["serving"], sweep.points[3].hardware_overrides
({'batch': 2}, {'socket.p2p.bytes_per_s_per_port': '100 GB/s'})
>>> sweep.points[3].hardware_axes
{'hardware.socket.p2p.bytes_per_s_per_port': 'socket.p2p.bytes_per_s_per_port'}
"""
from __future__ import annotations

import copy
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sn40l_sim.errors import InputError, shown
from sn40l_sim.hardware.loader import OVERRIDES_FILE, load_hardware, with_overrides
from sn40l_sim.report.results import SIGNIFICANT_DIGITS
from sn40l_sim.study.experiment import ExperimentSpec
from sn40l_sim.study.experiment_files import check_drafts_have_mtp, experiment_model, named_file
from sn40l_sim.study.multi_model_section import NO_SWEEP
from sn40l_sim.study.sweep.axes import (
    SECTION_KEYS,
    Axis,
    AxisError,
    combinations,
    compared,
    labels,
    parse_axis,
    point_name,
    set_path,
    value_labels,
    value_text,
)
from sn40l_sim.study.sweep.base import apply_sets, check_points, experiment_from_data, load_node
from sn40l_sim.study.sweep.outputs import parse_objectives, parse_plot
from sn40l_sim.study.sweep.sets import overlapping_axes, unsimulated_hardware_field
from sn40l_sim.yamlio import Document, load_document


@dataclass(frozen=True)
class SweepPoint:
    """One point of a sweep: the experiment data to simulate and the hardware overrides."""

    index: int
    name: str
    #: axis name -> value as written in the sweep section
    values: dict[str, Any]
    #: the experiment document's data with the point's values written in (no ``sweep`` key)
    data: dict[str, Any]
    #: dotted path under the node -> value, for :func:`~sn40l_sim.hardware.loader.with_overrides`
    hardware_overrides: dict[str, Any]
    #: axis name -> dotted path under the node, for the axes that change the hardware
    hardware_axes: dict[str, str]
    #: axis name -> field path in the experiment, for the other axes
    experiment_axes: dict[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass
class Sweep:
    """A loaded sweep: the base document, its axes, the expanded points and the plot request."""

    doc: Document
    name: str
    mode: str
    axes: list[Axis]
    points: list[SweepPoint]
    plot: dict[str, Any] | None = None
    #: ``fail`` or ``skip`` runs that raise InfeasibleError
    infeasible: str = "fail"
    #: results column -> ``max`` | ``min`` for the Pareto front (None: no front)
    objectives: dict[str, str] | None = None


def load_sweep(path: str | Path, sets: dict[str, Any] | None = None) -> Sweep:
    """Load an experiment with a ``sweep:`` section, check every axis, and expand the points.

    Parameters
    ----------
    path : str or Path
        The experiment file.
    sets : dict, optional
        Dotted path -> value written into the experiment before expansion (``--set``; paths under
        ``hardware.`` override the hardware of every point).

    Raises
    ------
    InputError
        For a missing or malformed sweep section, an unknown axis path or a bad value, located at
        ``sweep.<field>`` of the experiment file.
    """
    if sets is not None and not isinstance(sets, dict):   # run_sweep's sets=[...]: an AttributeError inside
        raise InputError("expected the sets as a mapping of dotted field paths to values, such as "
                         f"{{'serving.batch': 8}}, got a {type(sets).__name__}", file=path)
    for dotted in sets or {}:   # as experiment_with_sets says it of run's sets
        if not isinstance(dotted, str) or not dotted or "" in dotted.split("."):
            raise InputError(f"set keys must be dotted field paths such as 'serving.batch', got {shown(dotted)}", file=path)
    doc = load_document(path)
    section = doc.data.get("sweep")
    if not isinstance(section, dict):
        raise doc.error(("sweep",), "expected a sweep section: {mode: grid | zip, axes: {path: values}}")
    unknown = sorted(set(section) - SECTION_KEYS)
    if unknown:
        raise doc.error(("sweep", unknown[0]), "unknown key (expected mode, axes, plot, infeasible, objectives)")
    mode = section.get("mode", "grid")
    if mode not in ("grid", "zip"):
        raise doc.error(("sweep", "mode"), f"expected grid or zip, got {shown(mode)}")
    infeasible = section.get("infeasible", "fail")
    if infeasible not in ("fail", "skip"):
        raise doc.error(("sweep", "infeasible"), f"expected fail or skip, got {shown(infeasible)}")
    base = {k: v for k, v in doc.data.items() if k != "sweep"}
    if "multi_model" in base:   # each point would give a record per scheduler and model, not one
        raise doc.error(("sweep",), NO_SWEEP)
    experiment_from_data(base, doc)  # the experiment itself, before any value is written in
    axes = _parse_axes(doc, section.get("axes"), mode)
    doc = _located_at_axes(doc, axes)
    base, base_hw = apply_sets(doc, base, sets or {}, axes)
    points = []
    for index, values in enumerate(combinations(axes, mode)):
        data, hw = copy.deepcopy(base), dict(base_hw)
        for axis, value in zip(axes, values, strict=True):
            if axis.hardware_field:
                hw[axis.hardware_field] = value
                continue
            try:
                set_path(data, axis.path, value)
            except AxisError as exc:
                raise doc.error(("sweep", "axes", axis.name), str(exc)) from None
        points.append(SweepPoint(index, point_name(axes, values), {a.name: v for a, v in zip(axes, values, strict=True)},
                                 data, hw, {a.name: a.hardware_field for a in axes if a.hardware_field},
                                 {a.name: a.path for a in axes if not a.hardware_field}))
    checker = _Checker(doc, base, base_hw, points)
    for axis in axes:
        checker.check(axis)
    try:
        nested = {a.name: "lists" if any(isinstance(v, list) for v in a.values) else "mappings"
                  for a in axes if any(isinstance(v, (list, dict)) for v in a.values)}
        plot = parse_plot(section.get("plot"), [a.name for a in axes], nested)
    except AxisError as exc:
        raise doc.error(("sweep", "plot") + exc.where, str(exc)) from None
    try:
        objectives = parse_objectives(section.get("objectives"))
    except AxisError as exc:
        raise doc.error(("sweep", "objectives") + exc.where, str(exc)) from None
    name = base.get("name") if isinstance(base.get("name"), str) else doc.path.stem
    return Sweep(doc, name, mode, axes, points, plot, infeasible, objectives)


def _located_at_axes(doc: Document, axes: list[Axis]) -> Document:
    """``doc`` with each experiment field an axis sets located at that axis: a relative path an
    axis gives (a model, a hardware file, a trace) is relative to the file that wrote the axis, as
    every path is relative to the file that wrote it, not to the ``base:`` file the field came from
    (and an error about the field points at the axis)."""
    origins = dict(doc.origins)
    for axis in axes:
        if axis.hardware_field:
            continue
        # a list entry named by its name (policies.snap.params.budget) is located, as validation
        # names it, by its index too (policies[1].params.budget): else an error about the axis's
        # value cited the line of the base's value
        for path in dict.fromkeys((axis.path, _indexed(doc.data, axis.path))):
            for key in [k for k in origins if tuple(k[:len(path)]) == path]:
                del origins[key]
            origins[path] = doc.where(("sweep", "axes", axis.name))
    return Document(doc.data, doc.path, origins)


def _indexed(data: Any, path: tuple[str, ...]) -> tuple:
    """``path`` with each list entry given by its index, as far as ``data`` holds it.

    >>> _indexed({"policies": [{"name": "full"}, {"name": "snap"}]}, ("policies", "snap", "params", "budget"))
    ('policies', 1, 'params', 'budget')
    """
    out: list = []
    node = data
    for part in path:
        if isinstance(node, list):
            names = [e.get("name") if isinstance(e, dict) else None for e in node]
            index = int(part) if part.isdigit() else names.index(part) if part in names else None
            if index is None or index >= len(node):
                return (*out, *path[len(out):])
            out.append(index)
            node = node[index]
        else:
            out.append(part)
            node = node.get(part) if isinstance(node, dict) else None
    return tuple(out)


def _parse_axes(doc: Document, spec: Any, mode: str) -> list[Axis]:
    if not isinstance(spec, dict) or not spec:
        raise doc.error(("sweep", "axes"), "expected a mapping of axis (a dotted path) -> values")
    parsed = []
    for name, axis_spec in spec.items():
        try:
            path, values = parse_axis(name, axis_spec)
        except AxisError as exc:
            raise doc.error(("sweep", "axes", name) + exc.where, str(exc)) from None
        parsed.append((name, path, values))
    explicit = {name for name, axis_spec in spec.items() if isinstance(axis_spec, dict) and "path" in axis_spec}
    short = labels([(n, p) for n, p, _ in parsed], explicit)
    axes = [Axis(n, p, tuple(v), s, value_labels(spec[n], v)) for (n, p, v), s in zip(parsed, short, strict=True)]
    if mode == "zip" and len({len(a.values) for a in axes}) > 1:
        counts = ", ".join(f"{a.name}: {len(a.values)}" for a in axes)
        raise doc.error(("sweep", "axes", axes[-1].name), f"zip needs axes of equal length, got {counts}")
    overlap = overlapping_axes(axes, doc.data)
    if overlap is not None:
        first, later, field_ = overlap
        raise doc.error(("sweep", "axes", later.name), f"the axes {first.name} and {later.name} both set {field_}: "
                        "the later would replace the earlier's value at every point; expected one axis per field")
    _check_no_repeated_point(doc, axes, mode, explicit)
    return axes


def _check_no_repeated_point(doc: Document, axes: list[Axis], mode: str, explicit: set) -> None:
    """Refuse a sweep that would run one point twice: a value repeated along a grid axis (``1 TB/s`` and
    ``1000 GB/s`` alike), or a zipped combination repeated (one axis may repeat a value another tells apart)."""
    def where(axis: Axis, index: int) -> tuple:
        return ("sweep", "axes", axis.name) + (("values",) if axis.name in explicit else ()) + (index,)

    if mode == "grid":
        for axis in axes:
            seen = [compared(v) for v in axis.values]
            for later, value in enumerate(axis.values):
                first = seen.index(seen[later])
                if first < later:
                    close = "" if value == axis.values[first] or isinstance(value, str) else \
                        f" (equal at the {SIGNIFICANT_DIGITS} significant digits the results keep)"
                    raise doc.error(where(axis, later), f"value {value_text(value)} repeats [{first}]{close}: the "
                                    "grid would run each of its points twice")
        return
    combos = list(zip(*(a.values for a in axes), strict=True))
    keys = [compared(c) for c in combos]
    for later, combo in enumerate(combos):
        first = keys.index(keys[later])
        if first < later:
            values = ", ".join(f"{'.'.join(a.path)}={value_text(v)}" for a, v in zip(axes, combo, strict=True))
            raise doc.error(where(axes[-1], later), f"point {later} repeats point {first} ({values}): the "
                            "sweep would run it twice")


#: the axes that name a file: a value is checked by loading the file, not only by finding it
FILE_AXES = (("model",), ("hardware",), ("prefill_hardware",))
#: the fields whose values are checked against the loaded model too: drafts need its MTP module
MODEL_CHECKED = (("serving", "speculative"),)


def _reads_files(path: tuple[str, ...]) -> bool:
    """Whether an axis at ``path`` sets a file or a field checked against one (``serving`` swaps the
    speculative drafts with the rest of the section)."""
    return path in FILE_AXES or any(path[:len(f)] == f or f[:len(path)] == path for f in MODEL_CHECKED)


class _Checker:
    """Checks each value of each axis against the base experiment and hardware. A value that fails
    alone is still accepted when some sweep point that uses it is valid as a whole (coupled axes,
    such as ``hardware.sockets`` zipped with ``hardware.socket.p2p.ports``); the points where it
    is not valid then fail when they run."""

    def __init__(self, doc: Document, base: dict, base_hw: dict, points: list[SweepPoint]) -> None:
        self.doc, self.base, self.base_hw, self.points = doc, base, base_hw, points
        self._node = None
        self._valid: dict[int, bool] = {}

    def _fail(self, axis: Axis, index: int | None, message: str) -> InputError:
        at: tuple = ("sweep", "axes", axis.name)
        spec = self.doc.data["sweep"]["axes"][axis.name]
        if index is not None and isinstance(spec, list):
            at += (index,)
        elif index is not None and isinstance(spec, dict) and isinstance(spec.get("values"), list):
            at += ("values", index)
        return self.doc.error(at, message)

    def check(self, axis: Axis) -> None:
        root = axis.path[0]
        if root not in ExperimentSpec.model_fields or root == "sweep":
            known = ", ".join(sorted(set(ExperimentSpec.model_fields) - {"sweep"}))
            raise self._fail(axis, None, f"unknown axis path {shown('.'.join(axis.path))}: expected a field of the "
                             f"experiment ({known}) or hardware.<field of the hardware>")
        if root == "shape" and axis.path[1:] == ("prompt_len",) and "prompt_lens" in self.base:
            raise self._fail(axis, None, "the experiment lists prompt_lens, which replace shape.prompt_len: "
                             "sweep prompt_lens instead (values such as [[4096], [8192]])")
        if axis.path == ("shape", "batch"):
            raise self._fail(axis, None, "shape.batch is the batch of map's graph; run and sweep simulate "
                             "serving.batch, so this axis would have no effect: sweep serving.batch")
        serving = self.base.get("serving")
        if axis.path == ("shape", "max_new_tokens") and isinstance(serving, dict) and serving.get("max_new_tokens"):
            raise self._fail(axis, None, "the experiment's serving.max_new_tokens replaces shape.max_new_tokens, so "
                             "this axis would have no effect: sweep serving.max_new_tokens")
        if root == "shape" and axis.path[1:] == ("prompt_len",) and \
                any(path == ("prompt_lens",) for path in self.points[0].experiment_axes.values()):
            raise self._fail(axis, None, "the axis prompt_lens replaces shape.prompt_len at every point, so this "
                             "axis would have no effect: sweep one of them")
        for i, value in enumerate(axis.values):
            unread = unsimulated_hardware_field(axis.hardware_field, value) if axis.hardware_field else None
            if unread is not None:
                raise self._fail(axis, i, f"value {shown(value)}: {unread}")
            try:
                if axis.hardware_field:
                    self._hardware({**self.base_hw, axis.hardware_field: value})
                else:
                    data = copy.deepcopy(self.base)
                    set_path(data, axis.path, value)
                    check_points(experiment_from_data(data, self.doc))
                    if _reads_files(axis.path):   # the file's contents too, as check and each run read them
                        self._files(data, self.base_hw)
            except AxisError as exc:
                raise self._fail(axis, None, str(exc)) from None
            except InputError as exc:
                inner = f"{exc.field}: {exc.message}" if exc.field else exc.message
                elsewhere = bool(exc.file) and exc.file not in (str(self.doc.path), OVERRIDES_FILE)
                if elsewhere:
                    inner = str(exc)  # a problem in another file (the hardware's): name it
                # an unknown key in another file (a misspelt hardware field) is that file's, not the axis path's
                if not elsewhere and (exc.message.startswith("unknown key") or "is not a section" in exc.message):
                    raise self._fail(axis, None, f"unknown axis path {shown('.'.join(axis.path))}: {inner}") from None
                users = [p for p in self.points if p.values[axis.name] is value]
                if not any(self._point_valid(p) for p in users):
                    if elsewhere and not self._implicates(axis, value, exc.file):
                        raise exc from None   # the base hardware file's own problem: no value of the axis is at fault
                    raise self._fail(axis, i, f"value {shown(value)}: {inner}") from None

    def _implicates(self, axis: Axis, value: Any, file: str) -> bool:
        """Whether an error in ``file`` (not the experiment) may be the axis value's doing: a hardware
        axis, or the file the value names (a model file). A model axis's check also loads the
        experiment's hardware file, whose problem was reported as the first model's."""
        if axis.hardware_field or axis.path in (("hardware",), ("prefill_hardware",)):
            return True
        return isinstance(value, str) and (self.doc.path.parent / value).resolve() == Path(file).resolve()

    def _point_valid(self, point: SweepPoint) -> bool:
        if point.index not in self._valid:
            try:
                check_points(experiment_from_data(point.data, self.doc))
                self._files(point.data, point.hardware_overrides)
                self._valid[point.index] = True
            except InputError:
                self._valid[point.index] = False
        return self._valid[point.index]

    def _files(self, data: dict, overrides: dict[str, Any]) -> None:
        """Load the model and hardware files ``data`` names, with the hardware ``overrides``, as
        :func:`~.plan.expand_runs` loads them for the runs (a file that is there but does not load)."""
        exp = experiment_from_data(data, self.doc)
        model = experiment_model(exp, ("model",), exp.spec.model)
        with warnings.catch_warnings():   # said where the runs are expanded (plan.expand_runs), once
            warnings.simplefilter("ignore")
            # drafts without the model's MTP module failed each sweep point at its run, not the sweep
            check_drafts_have_mtp(exp, model)
        load_node(exp.doc, data, overrides)
        if exp.spec.prefill_hardware is not None:
            node = load_hardware(named_file(exp, ("prefill_hardware",), exp.spec.prefill_hardware, "prefill hardware"))
            with_overrides(node, overrides)

    def _hardware(self, overrides: dict[str, Any]) -> None:
        if self._node is None:
            self._node = load_node(self.doc, self.base, {})
        with_overrides(self._node, overrides)


__all__ = ["Sweep", "SweepPoint", "load_sweep"]
