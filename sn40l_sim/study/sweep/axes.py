"""The ``sweep:`` section of an experiment file: axes, their values, and the points they expand to.

Part of :mod:`sn40l_sim.study.sweep.load` (which runs the points). The section reads::

    sweep:
      mode: grid                  # grid (every combination, first axis slowest) | zip (i-th with i-th)
      axes:
        serving.batch: [1, 2, 4, 8]                                 # a dotted path -> a list of values
        shape.prompt_len: {start: 4096, stop: 65536, num: 5, scale: log}
        hbm: {path: hardware.socket.memory.hbm.bytes_per_s_per_unit, values: [409.6 GB/s, 819.2 GB/s]}
      plot: {x: batch, y: decode_tokens_per_s, hue: [kv_policy, prefill_len]}   # optional
      infeasible: skip            # optional: fail (default) | skip runs that do not fit
      objectives: {decode_tokens_per_s: max, latency.tpot_s.p99: min}         # optional: Pareto front

An axis path names a field of the experiment document (``serving.batch``, ``shape.prompt_len``,
``policies.snapstream.params.budget``: list entries are picked by their ``name`` or by index) or,
under ``hardware.``, a field of the loaded hardware (``hardware.socket.p2p.bytes_per_s_per_port``,
``hardware.sockets``), applied with :func:`sn40l_sim.hardware.loader.with_overrides`.
A range ``{start, stop, num, scale: linear | log}`` gives ``num`` values including both ends; when
``start`` and ``stop`` are integers the values are rounded to integers. ``infeasible: skip`` treats
a run that does not fit (an :class:`~sn40l_sim.errors.InfeasibleError`: a batch too large for the
memory, a tensor-parallel group larger than the node) as an expected outcome of the sweep, listed
but not counted as a failure; a bad value or an internal error always fails. ``objectives`` names
results columns (declared fields holding numbers, :mod:`sn40l_sim.report.fields`) to maximise or
minimise: the sweep then writes the records on their Pareto front (:mod:`sn40l_sim.report.pareto`).

Examples
--------
>>> axis_values({"start": 1024, "stop": 16384, "num": 5, "scale": "log"})
[1024, 2048, 4096, 8192, 16384]
>>> axis_values({"start": 0.5, "stop": 1.0, "num": 3})
[0.5, 0.75, 1.0]
>>> value_text("409.6 GB/s"), value_text(0.25), value_text([4096, 8192])
('409.6GB/s', '0.25', '4096+8192')
>>> value_text(1.6e9), value_text(1.6000001e9)
('1.6e+09', '1600000100.0')
>>> data = {"policies": [{"name": "full"}, {"name": "snap", "params": {}}]}
>>> set_path(data, ("policies", "snap", "params", "budget"), 8192)
>>> data["policies"][1]
{'name': 'snap', 'params': {'budget': 8192}}
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from sn40l_sim.errors import shown
from sn40l_sim.quantities import KINDS, parse_quantity
from sn40l_sim.report.results import SIGNIFICANT_DIGITS
from sn40l_sim.yamlio import PathError, path_parts, set_value

#: keys of a range axis, and of an axis with an explicit path
RANGE_KEYS = frozenset({"start", "stop", "num", "scale"})
PATH_KEYS = frozenset({"path", "values", "labels"})
SECTION_KEYS = frozenset({"mode", "axes", "plot", "infeasible", "objectives"})


class AxisError(ValueError):
    """A bad axis; ``where`` is the field path under the axis (e.g. ``("values", 2)``)."""

    def __init__(self, message: str, where: tuple = ()) -> None:
        super().__init__(message)
        self.where = where


@dataclass(frozen=True)
class Axis:
    """One sweep axis.

    Attributes
    ----------
    name : str
        Its key under ``sweep.axes``.
    path : tuple of str
        The dotted path split at the dots; ``("hardware", ...)`` targets the loaded hardware
        (``("hardware",)`` alone swaps the hardware file).
    values : tuple
        The values, in order.
    label : str
        Short name used in point names (the last path part, or the full name when two axes share it).
    value_labels : tuple of str
        Names of the values in point names (``labels:`` of an axis with an explicit path; default:
        the values themselves, written compactly).
    """

    name: str
    path: tuple[str, ...]
    values: tuple[Any, ...]
    label: str
    value_labels: tuple[str, ...] = ()

    def value_label(self, value: Any) -> str:
        """How ``value`` appears in a point name."""
        if self.value_labels:
            return self.value_labels[self.values.index(value)]
        return value_text(value)

    @property
    def hardware_field(self) -> str | None:
        """The dotted path under the node for hardware axes, else None."""
        if self.path[0] == "hardware" and len(self.path) > 1:
            return ".".join(self.path[1:])
        return None


#: the most values a range axis gives (a sweep of more points is a mistake, not a study)
MAX_AXIS_VALUES = 10_000
#: the largest magnitude of a range's ends (beyond it, floats no longer hold every integer)
MAX_RANGE_END = 2**53


def _number(value: Any, key: str) -> float:
    if isinstance(value, str) and compared(value) != value:   # a quantity such as "400 GB/s"
        raise AxisError(f"expected a number in the field's base unit (bytes, bytes/s, Hz, s), got {shown(value)}: a "
                        f"range's ends take no unit; write {compared(value):g}, or list the values with their units",
                        (key,))
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise AxisError(f"expected a number, got {shown(value)}", (key,))
    # an int is finite whatever its size (math.isfinite of one of 400 digits raised OverflowError)
    if not ((isinstance(value, int) or math.isfinite(value)) and abs(value) <= MAX_RANGE_END):
        raise AxisError(f"expected a finite number of magnitude at most 2**53, got {shown(value)}", (key,))
    return value


def axis_values(spec: Any) -> list[Any]:
    """The values of an axis written as a list or as ``{start, stop, num, scale}``.

    Raises
    ------
    AxisError
        For an empty list, unknown keys, a non-positive ``num`` (or 1 between two different
        ends), a log scale through zero, or integer values that repeat after rounding.
    """
    if isinstance(spec, list):
        if not spec:
            raise AxisError("expected at least one value")
        return list(spec)
    if not isinstance(spec, dict):
        raise AxisError(f"expected a list of values or a mapping {{start, stop, num, scale}}, got {shown(spec)}")
    unknown = sorted(set(spec) - RANGE_KEYS)
    if unknown:
        raise AxisError(f"unknown key {shown(unknown[0])} (expected start, stop, num, scale)", (unknown[0],))
    missing = [k for k in ("start", "stop", "num") if k not in spec]
    if missing:
        raise AxisError("required field is missing", (missing[0],))
    start, stop = _number(spec["start"], "start"), _number(spec["stop"], "stop")
    num = spec["num"]
    if isinstance(num, bool) or not isinstance(num, int) or not 1 <= num <= MAX_AXIS_VALUES:
        raise AxisError(f"expected a positive integer of at most {MAX_AXIS_VALUES}, got {shown(num)}", ("num",))
    if num == 1 and start != stop:
        raise AxisError(f"num 1 gives one value, which cannot include both ends {start} and {stop}: expected num "
                        "of at least 2, or start equal to stop", ("num",))
    scale = spec.get("scale", "linear")
    if scale not in ("linear", "log"):
        raise AxisError(f"expected linear or log, got {shown(scale)}", ("scale",))
    if scale == "log" and (start <= 0 or stop <= 0):
        raise AxisError(f"a log scale needs start and stop > 0, got {start} and {stop}", ("start",))
    raw = np.geomspace(start, stop, num) if scale == "log" else np.linspace(start, stop, num)
    if isinstance(start, int) and isinstance(stop, int):
        values: list[Any] = [int(round(float(v))) for v in raw]
        if len(set(values)) < len(values):
            # the first repeat, not the list: 10,000 values made a 50 kB line
            i = next(i for i in range(1, len(values)) if values[i] in values[:i])
            raise AxisError(f"{num} integer values from {start} to {stop} repeat after rounding ({values[i]} is "
                            f"value {values.index(values[i])} and value {i}): lower num, or write the ends as "
                            f"{float(start)} and {float(stop)} for values that are not whole", ("num",))
        return values
    return [float(f"{float(v):.12g}") for v in raw]


def parse_axis(name: Any, spec: Any) -> tuple[tuple[str, ...], list[Any]]:
    """``(path, values)`` of one entry of ``sweep.axes`` (the path checks come later).

    >>> parse_axis("model", {"path": "model", "values": ["a.yaml", "b.yaml"], "labels": ["A", "B"]})
    (('model',), ['a.yaml', 'b.yaml'])
    """
    if not isinstance(name, str) or not name:
        raise AxisError(f"expected an axis name, got {shown(name)}")
    path_text = name
    if isinstance(spec, dict) and "path" in spec:
        unknown = sorted(set(spec) - PATH_KEYS)
        if unknown:
            raise AxisError(f"unknown key {shown(unknown[0])} (expected path, values and labels)", (unknown[0],))
        if "values" not in spec:
            raise AxisError("required field is missing", ("values",))
        path_text = spec["path"]
        if not isinstance(path_text, str) or not path_text:
            raise AxisError(f"expected a dotted path such as serving.batch, got {shown(path_text)}", ("path",))
        try:
            values = axis_values(spec["values"])
        except AxisError as exc:
            raise AxisError(str(exc), ("values",) + exc.where) from None
        value_labels(spec, values)
    else:
        values = axis_values(spec)
    parts = path_parts(path_text)   # policies[1].params.budget as messages write it
    if any(not p for p in parts):
        raise AxisError(f"expected a dotted path such as serving.batch, got {shown(path_text)}",
                        ("path",) if path_text != name else ())
    return parts, values


#: longest label of an axis value, as a plain name's (sn40l_sim.schema.PlainName)
MAX_LABEL = 100


def value_labels(spec: Any, values: list[Any]) -> tuple[str, ...]:
    """The ``labels:`` of an axis with an explicit path: one plain name per value (default: none).

    >>> value_labels({"labels": ["8B", "70B"]}, ["a", "b"])
    ('8B', '70B')
    >>> value_labels({"labels": ["8B"]}, ["a", "b"])
    Traceback (most recent call last):
    ...
    sn40l_sim.study.sweep.axes.AxisError: expected one label per value (2), got 1
    """
    labels_ = spec.get("labels") if isinstance(spec, dict) else None
    if labels_ is None:
        return ()
    if not isinstance(labels_, list):
        raise AxisError("expected a list of plain names (letters, digits, '.', '-', '_')", ("labels",))
    for i, label in enumerate(labels_):
        # a label names the value in every point name, results row and legend: a 5,000-character one
        # was accepted and filled them all
        if not (isinstance(label, str) and 0 < len(label) <= MAX_LABEL
                and label.replace("_", "").replace("-", "").replace(".", "").isalnum()):
            raise AxisError(f"expected a plain name (letters, digits, '.', '-', '_'; at most {MAX_LABEL} "
                            f"characters), got {shown(label)}", ("labels", i))
    if len(labels_) != len(values):
        raise AxisError(f"expected one label per value ({len(values)}), got {len(labels_)}", ("labels",))
    for i, (value, label) in enumerate(zip(values, labels_, strict=True)):
        other = next((j for j, v in enumerate(values[:i]) if (v == value) != (labels_[j] == label)), None)
        if other is not None:
            raise AxisError(f"label {shown(label)} must name one value: equal values take equal labels", ("labels", i))
    return tuple(labels_)


def labels(axes: list[tuple[str, tuple[str, ...]]], explicit: set[str]) -> list[str]:
    """Short labels: an axis given with ``path:`` keeps its name; the others use the last path
    part unless another axis ends the same way.

    >>> labels([("serving.batch", ("serving", "batch")), ("shape.prompt_len", ("shape", "prompt_len"))], set())
    ['batch', 'prompt_len']
    >>> labels([("a.batch", ("a", "batch")), ("b.batch", ("b", "batch"))], set())
    ['a.batch', 'b.batch']
    """
    last = [name if name in explicit else path[-1] for name, path in axes]
    return [short if last.count(short) == 1 else name for short, (name, _) in zip(last, axes, strict=True)]


def combinations(axes: list[Axis], mode: str) -> list[tuple[Any, ...]]:
    """Value tuples of the points: every combination (first axis slowest), or zipped.

    >>> a, b = Axis("a", ("a",), (1, 2), "a"), Axis("b", ("b",), (10, 20), "b")
    >>> combinations([a, b], "grid"), combinations([a, b], "zip")
    ([(1, 10), (1, 20), (2, 10), (2, 20)], [(1, 10), (2, 20)])
    """
    if mode == "zip":
        return list(zip(*(axis.values for axis in axes), strict=True))
    return list(itertools.product(*(axis.values for axis in axes)))


def value_text(value: Any) -> str:
    """A value as it appears in a point name (no spaces or commas)."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        short = f"{value:g}"
        # six digits name most values; two that agree in those must still name two points
        return short if float(short) == value else repr(value)
    if isinstance(value, (list, tuple)):
        return "+".join(value_text(v) for v in value)
    if isinstance(value, dict):
        return "+".join(f"{k}:{value_text(v)}" for k, v in value.items())
    return str(value).replace(" ", "").replace(",", ";")


def compared(value: Any) -> Any:
    """``value`` as two axis values are compared for repeats: a quantity written with a unit as its
    number in the unit's base (``1 TB/s`` and ``1000 GB/s`` set one field to one value), a float at
    the significant digits the results keep, anything else as written.

    >>> compared("1 TB/s") == compared("1000 GB/s") == compared(1e12), compared("10 ms") == compared("0.01 s")
    (True, True)
    >>> compared("../graphs/llama3_1_8b.yaml"), compared([1, "2 GB"])
    ('../graphs/llama3_1_8b.yaml', (1, 2000000000.0))
    """
    if isinstance(value, (list, tuple)):
        return tuple(compared(v) for v in value)
    if isinstance(value, dict):
        return tuple((k, compared(v)) for k, v in value.items())
    if isinstance(value, float) and math.isfinite(value):
        # at the digits results.json keeps: "1.6 TB/s" and "1600 GB/s" may differ in the last bit, and
        # two values the results cannot tell apart would be two points with one value in every row
        return float(f"{value:.{SIGNIFICANT_DIGITS}g}")
    if not isinstance(value, str):
        return value
    for kind in KINDS:
        try:
            return compared(parse_quantity(value, kind))
        except ValueError:
            continue
    return value


def point_name(axes: list[Axis], values: tuple[Any, ...]) -> str:
    """``"batch=8,prompt_len=4096"``: the label and value of every axis, in axis order.

    >>> point_name([Axis("serving.batch", ("serving", "batch"), (8,), "batch")], (8,))
    'batch=8'
    """
    return ",".join(f"{axis.label}={axis.value_label(v)}" for axis, v in zip(axes, values, strict=True))


def set_path(data: Any, path: tuple[str, ...], value: Any) -> None:
    """Set ``path`` in plain YAML data in place (:func:`sn40l_sim.yamlio.set_value`: missing
    mappings are created; list entries are picked by integer index or by their ``name``).

    Raises
    ------
    AxisError
        When a part of the path goes through a scalar, or names no list entry.
    """
    try:
        set_value(data, path, value)
    except PathError as exc:
        raise AxisError(f"unknown axis path {shown('.'.join(path))}: {exc}") from None
