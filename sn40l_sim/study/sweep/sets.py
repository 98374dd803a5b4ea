"""The ``--set PATH=VALUE`` options of ``sweep``: read as YAML scalars (:func:`parse_sets`), each
field set once, and refused where no sweep point would see them (:func:`check_set_has_effect`).
:mod:`.load` writes them into the experiment before expanding the points."""
from __future__ import annotations

from typing import Any

from sn40l_sim.errors import InputError
from sn40l_sim.study.sweep.axes import Axis
from sn40l_sim.yamlio import parse_yaml


def parse_sets(items: list[str] | None) -> dict[str, Any]:
    """``["serving.batch=8", "hardware.sockets=8"]`` -> ``{"serving.batch": 8, "hardware.sockets": 8}``
    (values read as YAML scalars).

    >>> parse_sets(["serving.batch=8", "hardware.socket.memory.hbm.bytes_per_s_per_unit=1 TB/s"])
    {'serving.batch': 8, 'hardware.socket.memory.hbm.bytes_per_s_per_unit': '1 TB/s'}
    """
    out: dict[str, Any] = {}
    for item in items or []:
        path, sep, text = item.partition("=")
        if not sep or not path.strip():
            raise InputError(f"expected path=value, got {item!r}", field="--set")
        path = path.strip()
        try:
            value = parse_yaml(text, "--set")[0]
        except InputError as exc:
            raise InputError(f"cannot read the value of {item!r}: {exc.message}", field="--set") from None
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
