"""The experiment a sweep (or one run) starts from: its data as plain values with the file's lines
for errors, the checks a point's experiment must pass before it runs, the node it names, and the
``--set PATH=VALUE`` values written into it (``sweep --set``, ``run --set``, ``map --set``).

A set under ``hardware.`` changes a field of the node (applied with
:func:`~sn40l_sim.hardware.loader.with_overrides`); any other changes the experiment. Each set is
checked on its own so that an error names the ``--set`` that caused it, and the hardware sets also
together: a hypothetical tile with more PCUs needs a wider grid, which neither set alone makes
consistent.
"""
from __future__ import annotations

import contextlib
import copy
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sn40l_sim.errors import InputError, shown
from sn40l_sim.hardware.loader import load_hardware, with_overrides
from sn40l_sim.hardware.spec import NodeSpec
from sn40l_sim.study.experiment import Experiment, experiment_from_document
from sn40l_sim.study.experiment_files import workload_source
from sn40l_sim.study.plugins import is_file_entry
from sn40l_sim.study.points import make_point_policy
from sn40l_sim.study.points import points as experiment_points
from sn40l_sim.study.sweep.axes import Axis, AxisError, set_path
from sn40l_sim.study.sweep.sets import check_set_has_effect, check_set_is_read
from sn40l_sim.yamlio import Document, load_document, not_a_file


def experiment_from_data(data: dict, doc: Document) -> Experiment:
    """An :class:`~sn40l_sim.study.experiment.Experiment` from plain data, with ``doc``'s file and lines
    for errors and relative paths."""
    return experiment_from_document(Document(data, doc.path, doc.origins))


def point_sources(points: list[Any], doc: Document) -> list[str]:
    """The trace (with its attribution: :func:`~sn40l_sim.study.experiment_files.workload_source`)
    each sweep point serves, in point order, each once: the points' own, after ``--set`` and the
    axes, not the base file's (a ``--set workload.path=`` was named as the file's trace)."""
    sources: dict[str, None] = {}
    for point in points:
        workload = point.data.get("workload")
        if isinstance(workload, dict) and workload.get("kind") == "trace":
            source = workload_source(experiment_from_data(point.data, doc))
            if source is not None:
                sources[source] = None
    return list(sources)


def point_traces(points: list[Any], doc: Document) -> dict[Path, str]:
    """The trace files the sweep points read (resolved) -> ``workload.path``: the files of a sweep's
    inputs that an output folder could hold under an output's name (a previous run's
    ``requests.csv`` rewritten as a trace), which :class:`~sn40l_sim.report.outputs.OutputFolder`
    must not remove."""
    traces: dict[Path, str] = {}
    for point in points:
        workload = point.data.get("workload")
        if isinstance(workload, dict) and workload.get("kind") == "trace" and isinstance(workload.get("path"), str):
            with contextlib.suppress(InputError):   # a point that does not load is reported by the sweep
                exp = experiment_from_data(point.data, doc)
                traces[exp.resolve(workload["path"], ("workload", "path")).resolve()] = "workload.path"
    return traces


#: the experiment fields that name a file, and what each names (for the message)
_FILE_FIELDS = ((("model",), "model"), (("hardware",), "hardware"), (("prefill_hardware",), "prefill hardware"),
                (("workload", "path"), "trace"), (("graph_options", "template"), "kernel template"))


#: the fields that name a file, ``*`` for any list entry (by index or name): a served model of the
#: multi_model section too, whose path a --set gave relative to the experiment's folder
_PATH_FIELDS = tuple(at for at, _ in _FILE_FIELDS) + (("multi_model", "models", "*", "model"), ("plugins", "*"))


def _typed_paths(parts: tuple[str, ...], value: Any) -> Any:
    """``value``, set at ``parts``, with every file path in it made absolute from the current folder
    (a whole section set at once, ``workload={kind: trace, path: t.csv}``, holds its paths too).

    >>> import os
    >>> _typed_paths(("multi_model", "models", "small", "model"), "m.yaml") == os.path.abspath("m.yaml")
    True
    >>> _typed_paths(("serving", "batch"), 8), _typed_paths(("model",), "")
    (8, '')
    >>> _typed_paths(("plugins",), ["p.py", "my_pkg.policies"]) == [os.path.abspath("p.py"), "my_pkg.policies"]
    True
    """
    def convert(at: tuple[str, ...], item: Any) -> Any:
        if isinstance(item, dict):
            return {key: convert(at + (str(key),), inner) for key, inner in item.items()}
        if isinstance(item, list):
            return [convert(at + ("*",), inner) for inner in item]
        named = any(len(at) == len(field) and all(f in ("*", a) for f, a in zip(field, at, strict=True))
                    for field in _PATH_FIELDS)
        # a plug-in given as a dotted module name is not a path
        named = named and (at[0] != "plugins" or isinstance(item, str) and is_file_entry(item))
        return str(Path(item).absolute()) if named and isinstance(item, str) and item else item

    return convert(parts, value)


def check_points(exp: Experiment) -> None:
    """What a sweep point's experiment must pass before any run: its points' KV policies, and the
    files it names exist (a missing one, given as an axis value, failed only when its runs ran)."""
    for point in experiment_points(exp):
        make_point_policy(exp, point)
    for at, what in _FILE_FIELDS:
        value: Any = exp.doc.data
        for key in at:
            value = value.get(key) if isinstance(value, dict) else None
        if isinstance(value, str) and value and not exp.resolve(value, at).is_file():
            path = exp.resolve(value, at)
            raise exp.error(at, f"{what} file {shown(value)} {not_a_file(path, value)} (looked for {path})")


def load_node(doc: Document, data: dict, overrides: dict[str, Any]) -> NodeSpec:
    """The hardware named by ``data["hardware"]`` (relative to the file that wrote it) with ``overrides``."""
    hardware = data.get("hardware")
    if not isinstance(hardware, str):
        raise doc.error(("hardware",), "required: the relative path of a hardware file")
    path = doc.resolve(hardware, ("hardware",))
    if not path.is_file():
        raise doc.error(("hardware",), f"hardware file {shown(hardware)} {not_a_file(path, hardware)} (looked for {path})")
    node = load_hardware(path)
    return with_overrides(node, overrides) if overrides else node


def apply_sets(doc: Document, base: dict, sets: dict[str, Any], axes: list[Axis],
               served: bool = True) -> tuple[dict, dict[str, Any]]:
    """The experiment data with ``--set`` values written in, and the hardware overrides; each is
    checked on its own so that an error names the ``--set`` that caused it. A set that an axis
    would overwrite at every point, or one inside the ``sweep:`` section (read before the sets), is
    refused rather than left without effect, as is one of a field another replaces (``shape.batch``,
    which only ``map`` reads: ``served`` False). A hardware set that fails alone but holds with the
    other hardware sets is kept (``tile.pcus`` with a wider ``tile.grid_cols``), and one that fails
    with them too is refused with the error of the whole (:func:`_hardware_whole_error`); hardware
    sets that each hold but not together are refused, naming them all. Experiment sets that fail one by one
    are tried all together (``parallel.decode.tp`` with its ``attention_dp``)."""
    base, hardware = copy.deepcopy(base), {}
    original = copy.deepcopy(base)
    #: the hardware sets that failed alone, by their path under the node
    alone_failed: list[str] = []
    #: experiment sets that failed alone, tried again all together after the loop: a parallel plan
    #: changed to tp 16 and attention_dp 16 is consistent, but neither set is beside the file's tp 8
    experiment_failed: InputError | None = None
    experiment_sets: list[tuple[tuple[str, ...], Any]] = []
    for dotted, value in sorted(sets.items()):
        parts = tuple(dotted.split("."))
        check_set_has_effect(dotted, parts, axes)
        check_set_is_read(dotted, parts, value, base, served, sets)
        # a path typed on the command line is relative to the folder it was typed in, not to the
        # file the field came from
        value = _typed_paths(parts, value)
        try:
            if parts[0] == "hardware" and len(parts) > 1:
                hardware[".".join(parts[1:])] = value
                with_overrides(load_node(doc, base, {}), {".".join(parts[1:]): value})
                continue
            experiment_sets.append((parts, value))
            trial = copy.deepcopy(base)
            set_path(trial, parts, value)
            with _unwarned():
                check_points(experiment_from_data(trial, doc))
            base = trial
        except (AxisError, InputError) as exc:
            error = InputError(_set_message(value, exc, dotted), field=f"--set {dotted}")
            if not isinstance(exc, InputError):
                raise error from None
            if parts[0] != "hardware" or len(parts) == 1:
                experiment_failed = experiment_failed or error
            else:
                alone_failed.append(".".join(parts[1:]))
    if experiment_failed is not None:
        base = _all_together(doc, original, experiment_sets, experiment_failed)
    if len(hardware) > 1 or alone_failed:
        try:
            with_overrides(load_node(doc, base, {}), hardware)
        except InputError as exc:
            if alone_failed:
                raise _hardware_whole_error(exc, hardware, alone_failed[0]) from None
            names = ", ".join(f"hardware.{k}" for k in hardware)
            raise InputError(f"the hardware sets hold one by one but not together: {_inner(exc)}",
                             field=f"--set {names}") from None
    _located_at_sets(doc, [parts for parts, _ in experiment_sets])
    return base, hardware


@contextmanager
def _unwarned() -> Iterator[None]:
    """Parse an experiment without its warnings: one before the ``--set`` values are written in (or
    before each field they write is located at its ``--set``) warned of a value the run does not
    use, or at the file's line of the field's parent, where the value is not
    (``run --set serving.prefill_chunk=3000`` said it twice, once at the ``serving:`` line). The
    experiment with every set written in and located says them, once, where they are."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _located_at_sets(doc: Document, sets: list[tuple[str, ...]]) -> None:
    """Locate each field a ``--set`` wrote at that ``--set`` (in ``doc``, in place): an error found
    later (a trace window holding no request, a batch that does not fit) named the file's line of
    the field's parent, where the value is not."""
    for parts in sets:
        for key in [k for k in doc.origins if tuple(k[:len(parts)]) == parts]:
            del doc.origins[key]
        doc.origins[parts] = (f"--set {'.'.join(parts)}", None)


def _all_together(doc: Document, base: dict, sets: list[tuple[tuple[str, ...], Any]],
                  first_failed: InputError) -> dict:
    """``base`` with every experiment set written in at once, when some failed one by one: kept if
    the whole holds; else the error of the whole, named after the set whose field it is (the
    attention_dp set of ``tp=4, attention_dp=3`` says "must divide tp (4)", not the file's tp), or,
    in a field no set names, ``first_failed``, the error of the first set that failed alone."""
    trial = copy.deepcopy(base)
    try:
        for parts, value in sets:
            set_path(trial, parts, value)
        with _unwarned():
            check_points(experiment_from_data(trial, doc))
    except (AxisError, InputError) as exc:
        field = exc.field if isinstance(exc, InputError) and exc.field else ""
        named = [(p, v) for p, v in sets if field == ".".join(p) or field.startswith(".".join(p) + ".")]
        if named:
            parts, value = named[0]
            raise InputError(_set_message(value, exc, '.'.join(parts)), field=f"--set {'.'.join(parts)}") from None
        raise first_failed from None
    return trial


def _hardware_whole_error(exc: InputError, hardware: dict[str, Any], first_failed: str) -> InputError:
    """The error of the hardware sets applied together, when one of them also failed alone: named
    after the set whose field it is, else after ``first_failed``. The error of a set alone is about
    the file's node, not the one asked for: ``topology.kind=torus2d`` with ``socket.p2p.ports=3``
    was refused as a full mesh needing 15 ports, where the torus needs 4."""
    field = exc.field or ""
    named = [key for key in hardware if field == key or field.startswith(key + ".")]
    key = named[0] if named else first_failed
    return InputError(f"{shown(hardware[key])}: {_inner(exc, key)}", field=f"--set hardware.{key}")


def _with_value(value: Any, message: str, own: bool = True) -> str:
    """A ``--set``'s message led by the value set, unless the message, about the set's ``own`` field,
    already quotes it ("expected an integer, got 'abc'" was said as "'abc': expected an integer, got
    'abc'"); another field's value that reads alike is not it (``shape.prompt_len=1`` refused at a
    SnapStream budget of 1, "got 1", said no prompt length).

    >>> _with_value(3, "must divide tp (4)")
    '3: must divide tp (4)'
    >>> _with_value("abc", "expected an integer, got 'abc'")
    "expected an integer, got 'abc'"
    >>> _with_value(1, "policies[1].prompt_fraction.budget: expected budget >= 5, got 1", own=False)
    '1: policies[1].prompt_fraction.budget: expected budget >= 5, got 1'
    """
    return message if own and f"got {shown(value)}" in message else f"{shown(value)}: {message}"


def _set_message(value: Any, exc: AxisError | InputError, set_field: str) -> str:
    """The message of the ``--set`` of ``set_field`` to ``value`` that ``exc`` refused: :func:`_inner`'s,
    led by the value unless it quotes it about the set's own field."""
    field = exc.field if isinstance(exc, InputError) and exc.field else ""
    # a hardware set's node check names the field under the node (socket.p2p.ports of hardware.socket.p2p.ports)
    own = not field or field == set_field or set_field.endswith("." + field) or field.startswith(set_field + ".")
    return _with_value(value, _inner(exc, set_field), own)


def _inner(exc: AxisError | InputError, set_field: str = "") -> str:
    """An error's message with its field, for the message of the ``--set`` that caused it (a path
    that leads nowhere is a --set's path there, not a sweep axis's); a field that is the set's own
    (``set_field``) is not named twice."""
    if isinstance(exc, InputError):
        return f"{exc.field}: {exc.message}" if exc.field and exc.field != set_field else exc.message
    return getattr(exc, "message", str(exc)).replace("unknown axis path ", "unknown path ", 1)


def experiment_with_sets(path: str | Path, sets: dict[str, Any], *,
                         for_map: bool = False) -> tuple[Experiment, dict[str, Any]]:
    """An experiment with ``run --set`` values written in, and the hardware overrides among them
    (``hardware.<field>``), checked as ``sweep --set`` checks them (:func:`apply_sets`). The file's
    own errors come first. An experiment with a ``sweep:`` section is refused (its sets go to the
    sweep) unless ``for_map``: ``map`` maps the experiment the sweep starts from, at ``shape.batch``.

    >>> exp, hw = experiment_with_sets("experiments/deepseek_tp16.yaml",
    ...                                {"serving.batch": 8, "hardware.socket.memory.hbm.bytes_per_s_per_unit": "1 TB/s"})
    >>> exp.spec.serving.batch, hw
    (8, {'socket.memory.hbm.bytes_per_s_per_unit': '1 TB/s'})
    >>> experiment_with_sets("experiments/deepseek_tp16.yaml", [("serving.batch", 8)])
    Traceback (most recent call last):
    ...
    sn40l_sim.errors.InputError: experiments/deepseek_tp16.yaml: expected the sets as a mapping of dotted field paths to values, such as {'serving.batch': 8}, got a list
    """
    # a Python caller's sets, which argparse never makes: refused as input, not as AttributeError
    if not isinstance(sets, Mapping):
        raise InputError("expected the sets as a mapping of dotted field paths to values, such as "
                         f"{{'serving.batch': 8}}, got a {type(sets).__name__}", file=path)
    for dotted in sets:
        if not isinstance(dotted, str) or not dotted or "" in dotted.split("."):
            raise InputError(f"set keys must be dotted field paths such as 'serving.batch', got {shown(dotted)}", file=path)
    doc = load_document(path)
    with _unwarned():   # the file's warnings come from the experiment the sets make, below
        exp = experiment_from_document(doc)
    if exp.spec.sweep is not None and not for_map:
        raise doc.error(("sweep",), "this experiment has a sweep: section; its --set values go to the sweep")
    data, hardware = apply_sets(doc, dict(doc.data), sets, [], served=not for_map)
    return experiment_from_data(data, doc), hardware
