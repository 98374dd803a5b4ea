"""A sweep run's record stamped with the run's name, its sweep point's name and its axis values.

Apart from :mod:`.run` (its workers, executors and progress bar), so that ``validate`` and
``calibrate``, which simulate a small sweep's runs in their own process
(:mod:`~sn40l_sim.study.evaluation`), name their records without importing them.
"""
from __future__ import annotations

from typing import Any

from sn40l_sim.hardware.legacy import upgrade_dotted
from sn40l_sim.hardware.spec import NodeSpec
from sn40l_sim.study.sweep.plan import SweepRun


def stamp(run: SweepRun, record: dict) -> dict:
    """``record`` (changed in place) with the run's name, its sweep point's name and its axis values
    (hardware axes as the node holds them: numbers in bytes/s, Hz, counts; a value written with a
    unit, ``10 ms``, as the number in the field's unit, so that a plot orders it; others as written)."""
    record["name"] = run.name
    record["sweep_point"] = run.sweep_point.name
    record["sweep"] = axis_values(run)
    return record


def axis_values(run: SweepRun) -> dict[str, Any]:
    """The run's axis values as its record's ``sweep`` holds them (see :func:`stamp`)."""
    sp = run.sweep_point
    values = {}
    for k, v in sp.values.items():
        if k in sp.hardware_axes:
            v = _node_field(run.assembly.node, sp.hardware_axes[k])
        elif isinstance(v, str) and k in sp.experiment_axes:
            number = _experiment_number(run.assembly.experiment.spec, sp.experiment_axes[k])
            v = v if number is None else number
        values[k] = v
    return values


def _node_field(node: NodeSpec, dotted: str) -> Any:
    out: Any = node
    for part in upgrade_dotted(dotted).split("."):
        out = out[part] if isinstance(out, dict) else getattr(out, part)   # memory tiers are a mapping
    return out


def _experiment_number(spec: Any, path: tuple[str, ...]) -> float | None:
    """The number the validated experiment holds at ``path`` (list entries by index or ``name``),
    or None when the field holds no number."""
    out: Any = spec
    for part in path:
        if isinstance(out, (list, tuple)):
            out = out[int(part)] if part.isdigit() and int(part) < len(out) else \
                next((e for e in out if getattr(e, "name", None) == part), None)
        else:
            out = out.get(part) if isinstance(out, dict) else getattr(out, part, None)
        if out is None:
            return None
    return out if isinstance(out, (int, float)) and not isinstance(out, bool) else None
