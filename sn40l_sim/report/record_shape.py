"""The shape a results.json record must have to be read back (``compare``): every declared field
(:data:`sn40l_sim.report.fields.RESULTS`) that a record holds has the type ``run`` writes, a figure
a number or null, a field with key levels or parts a mapping, a list field a list. A record edited
by hand or by another tool (``"decode_step_s": "fast"``, ``"memory": "x"``) stopped ``compare``
with a TypeError or AttributeError traceback; it is refused naming the record and the field.

>>> record_problem({"name": "full", "decode_step_s": 0.08, "memory": {"hbm": {"weights": 1.0}}})
>>> record_problem({"name": "full", "decode_step_s": "fast"})
"decode_step_s: expected a number (s) or null, got 'fast'"
>>> record_problem({"name": "full", "memory": {"hbm": [1]}})
'memory.hbm: expected a mapping, got [1]'
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sn40l_sim.errors import shown
from sn40l_sim.report.fields import RESULTS
from sn40l_sim.report.registry import Field, Fields

#: fields whose entries are not all numbers though they declare a unit: a policy's parameters (a
#: store's memory tier is text) and a sweep point's axis values (labels, model files)
_FREE_ENTRIES = frozenset({"kv_policy_params", "sweep"})


def record_problem(record: Mapping[str, Any], fields: Fields = RESULTS) -> str | None:
    """``field.path: what was expected`` for the first declared field of ``record`` that does not
    have the shape ``run`` writes, or None."""
    for field in fields:
        if field.name in record:
            problem = _value_problem(field, record[field.name], field.name, len(field.keys))
            if problem:
                return problem
    return None


def _value_problem(field: Field, value: Any, where: str, levels: int) -> str | None:
    if value is None:
        return None
    if levels:   # a mapping level per key (memory.<tier>.<use>)
        if not isinstance(value, Mapping):
            return f"{where}: expected a mapping, got {shown(value)}"
        if field.name in _FREE_ENTRIES:
            return None
        for key, item in value.items():
            problem = _value_problem(field, item, f"{where}.{key}", levels - 1)
            if problem:
                return problem
        return None
    if field.is_list:
        if not isinstance(value, list):
            return f"{where}: expected a list, got {shown(value)}"
        items = [(f"{where}[{i}]", item) for i, item in enumerate(value)] if field.parts else []
        for at, item in items:
            problem = _parts_problem(field, item, at)
            if problem:
                return problem
        return None
    if field.parts:
        return _parts_problem(field, value, where)
    if field.unit and (isinstance(value, bool) or not isinstance(value, (int, float))):
        return f"{where}: expected a number ({field.unit}) or null, got {shown(value)}"
    return None


def _parts_problem(field: Field, value: Any, where: str) -> str | None:
    if not isinstance(value, Mapping):
        return f"{where}: expected a mapping, got {shown(value)}"
    for part in field.parts:
        if part.name in value:
            problem = _value_problem(part, value[part.name], f"{where}.{part.name}", len(part.keys))
            if problem:
                return problem
    return None
