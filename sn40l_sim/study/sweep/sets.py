"""Each field set once: the ``--set PATH=VALUE`` options of ``sweep`` (read as YAML scalars,
:func:`parse_sets`, and refused where no sweep point would see them, :func:`check_set_has_effect`),
and the axes themselves (:func:`overlapping_axes`: no axis inside another's field). :mod:`.load`
writes the sets into the experiment before expanding the points."""
from __future__ import annotations

from typing import Any

from sn40l_sim.errors import InputError, shown
from sn40l_sim.hardware.legacy import upgrade_dotted
from sn40l_sim.study.sweep.axes import Axis
from sn40l_sim.yamlio import parse_yaml, path_parts


def parse_sets(items: list[str] | None) -> dict[str, Any]:
    """``["serving.batch=8", "hardware.sockets=8"]`` -> ``{"serving.batch": 8, "hardware.sockets": 8}``
    (values read as YAML scalars).

    >>> parse_sets(["serving.batch=8", "hardware.socket.memory.hbm.bytes_per_s_per_unit=1 TB/s"])
    {'serving.batch': 8, 'hardware.socket.memory.hbm.bytes_per_s_per_unit': '1 TB/s'}
    >>> parse_sets(["serving.batch="])
    Traceback (most recent call last):
    ...
    sn40l_sim.errors.InputError: --set serving.batch: expected a value after '=' in 'serving.batch=' (write null to clear an optional field)
    >>> parse_sets(["serving..batch=8"])
    Traceback (most recent call last):
    ...
    sn40l_sim.errors.InputError: --set: expected a dotted field path such as 'serving.batch', got 'serving..batch'
    """
    out: dict[str, Any] = {}
    for item in items or []:
        path, sep, text = item.partition("=")
        if not sep or not path.strip():
            raise InputError(f"expected path=value, got {shown(item)}", field="--set")
        parts = path_parts(path.strip())
        if "" in parts:   # 'serving..batch' was refused as 'set keys must be ...', naming the experiment, not --set
            raise InputError(f"expected a dotted field path such as 'serving.batch', got {shown(path.strip())}",
                             field="--set")
        path = ".".join(parts)   # policies[1].budget, as messages write it, is policies.1.budget
        if not text.strip():   # YAML reads nothing as null: the error then spoke of "None"
            raise InputError(f"expected a value after '=' in {shown(item)} (write null to clear an optional field)",
                             field=f"--set {path}")
        try:
            value = parse_yaml(text, "--set")[0]
        except InputError as exc:
            raise InputError(f"cannot read the value of {shown(item)}: {exc.message}", field="--set") from None
        # one would replace the other, in the order written, without a word (a field of a file that
        # --set hardware=FILE names is another matter: it changes that file's value)
        clash = next((p for p in out if p == path or (p.startswith(path + ".") and isinstance(value, dict))
                      or (path.startswith(p + ".") and isinstance(out[p], dict))), None)
        if clash is not None:
            what = f"{path} is set twice" if clash == path else f"{clash} and {path} are both set"
            raise InputError(f"{what}: one would replace the other; expected each field set once", field="--set")
        out[path] = value
    return out


def check_set_has_effect(dotted: str, parts: tuple[str, ...], axes: list[Axis]) -> None:
    """Refuse a ``--set`` of the sweep section or of a field an axis sets (a hardware axis that
    swaps the whole file, ``hardware``, takes the ``hardware.<field>`` sets on top, and a
    ``hardware.<field>`` axis is applied on top of a ``--set hardware=FILE``)."""
    if parts[0] == "sweep":
        raise InputError("the sweep: section is not set with --set; edit the experiment file",
                         field=f"--set {dotted}")
    for axis in axes:
        if axis.path == ("hardware",) and len(parts) > 1 or parts == ("hardware",) and axis.hardware_field:
            continue
        shorter = min(len(parts), len(axis.path))
        if parts[:shorter] == axis.path[:shorter]:
            axis_path = ".".join(axis.path)
            what = "it" if len(parts) == len(axis.path) else axis_path
            raise InputError(f"the axis {axis_path} sets {what} at every sweep point, so this value would "
                             "have no effect; drop the --set or the axis", field=f"--set {dotted}")


def unsimulated_hardware_field(hardware_field: str, value: Any) -> str | None:
    """Why a hardware override (a path under the node, ``socket.stated.pcus``) would have no
    effect, or ``None``: the published totals under ``socket.stated`` are checked against a file's
    per-unit fields and neither simulated nor checked for a changed node (docs/architecture.md), so
    ``--set hardware.socket.stated.pcus=2080`` ran the shipped socket under a new name. Setting
    them to null, as a hypothetical part does, is kept.

    >>> unsimulated_hardware_field("socket.stated", None) is None, unsimulated_hardware_field("sockets", 8) is None
    (True, True)
    >>> unsimulated_hardware_field("socket.stated.pcus", 2080)[:40]
    'the published totals under socket.stated'
    """
    parts = tuple(upgrade_dotted(hardware_field).split("."))
    if parts[:2] != ("socket", "stated") or value is None:
        return None
    return ("the published totals under socket.stated are neither simulated nor checked for a changed node, so "
            "this value would have no effect: change the per-unit fields they follow from (socket.tile.pcus, "
            "socket.memory.<tier>.capacity_bytes_per_unit, socket.clock_hz, ...)")


def check_set_is_read(dotted: str, parts: tuple[str, ...], value: Any, base: dict[str, Any], served: bool,
                      sets: dict[str, Any]) -> None:
    """Refuse a ``--set`` of a field another replaces with another value (in the file or in
    ``sets``), as the sweep's axes are refused (:mod:`.load`): ``run --set shape.batch=8`` ran at
    serving.batch's 64 without a word. ``served`` is False for ``map``, which builds its graph at
    ``shape.batch``. The same value in both (one list of sets given to ``run`` and ``map``) is kept.

    >>> check_set_is_read("shape.batch", ("shape", "batch"), 16, {"serving": {"batch": 16}}, True, {})
    >>> check_set_is_read("shape.batch", ("shape", "batch"), 8, {"serving": {"batch": "max"}}, False, {})
    """
    serving = base.get("serving") if isinstance(base.get("serving"), dict) else {}

    def final(key: str) -> Any:
        return sets.get(f"serving.{key}", serving.get(key))

    prompt_lens = sets.get("prompt_lens", base.get("prompt_lens"))
    if served and parts == ("shape", "batch") and value != final("batch"):
        why = "shape.batch is the batch of map's graph; run and sweep simulate serving.batch, so this value " \
              "would have no effect: set serving.batch"
    elif parts == ("shape", "max_new_tokens") and final("max_new_tokens") and value != final("max_new_tokens"):
        why = "the experiment's serving.max_new_tokens replaces shape.max_new_tokens, so this value would have no " \
              "effect: set serving.max_new_tokens"
    elif served and parts == ("shape", "prompt_len") and prompt_lens is not None and \
            not (isinstance(prompt_lens, list) and value in prompt_lens):
        why = "the experiment lists prompt_lens, which replace shape.prompt_len, so this value would have no " \
              "effect: set prompt_lens (a list such as [8192])"
    elif parts[0] == "hardware" and len(parts) > 1 and unsimulated_hardware_field(".".join(parts[1:]), value):
        why = unsimulated_hardware_field(".".join(parts[1:]), value)
    else:
        return
    raise InputError(why, field=f"--set {dotted}")


def overlapping_axes(axes: list[Axis], base: dict[str, Any]) -> tuple[Axis, Axis, str] | None:
    """The first pair of axes of which one sets a field inside the other's (or the same field), with
    that field: the later one would replace the earlier's value at every point while the point's
    name and ``sweep.<axis>`` column still gave it. A policy entry named by its ``name`` or by its
    index, and a memory tier by its old-style path, are one field. A ``hardware`` axis (the file)
    and ``hardware.<field>`` axes (applied on top of it) do not overlap.

    >>> a, b = Axis("serving.batch", ("serving", "batch"), (1,), "batch"), Axis("serving", ("serving",), ({},), "s")
    >>> overlapping_axes([a, b], {})[2]
    'serving.batch'
    """
    paths = [_field_path(axis.path, base) for axis in axes]
    for j, later in enumerate(axes):
        for i in range(j):
            one_is_file = (axes[i].path == ("hardware",)) != (later.path == ("hardware",))
            if one_is_file and axes[i].path[0] == later.path[0] == "hardware":
                continue
            shorter = min(len(paths[i]), len(paths[j]))
            if paths[i][:shorter] == paths[j][:shorter]:
                return axes[i], later, ".".join(max(paths[i], paths[j], key=len))
    return None


def _field_path(path: tuple[str, ...], base: Any) -> tuple[str, ...]:
    """``path`` as one spelling of the field it names: list entries by name (where ``base`` has
    them), hardware fields by their current path."""
    if path[0] == "hardware" and len(path) > 1:
        return ("hardware", *upgrade_dotted(".".join(path[1:])).split("."))
    out, node = [], base
    for part in path:
        if isinstance(node, list):
            entry = node[int(part)] if part.isdigit() and int(part) < len(node) else \
                next((e for e in node if isinstance(e, dict) and e.get("name") == part), None)
            named = entry.get("name") if isinstance(entry, dict) else None
            out.append(named if isinstance(named, str) else part)
            node = entry
        else:
            out.append(part)
            node = node.get(part) if isinstance(node, dict) else None
    return tuple(out)
