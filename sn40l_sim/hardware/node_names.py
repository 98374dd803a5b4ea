"""The name of a node changed by overrides: the file's node's name and the changes
(``SN40L-16 (sockets 8)``), so that records and plots tell the two apart
(:func:`~sn40l_sim.hardware.loader.with_overrides`)."""
from __future__ import annotations

from pydantic import BaseModel

from sn40l_sim.hardware.spec import NodeSpec


def renamed_node(old: NodeSpec, new: NodeSpec, overrides: dict[str, object]) -> NodeSpec:
    """``new`` named after ``old`` and the overrides that changed a value (as the caller wrote
    them), so that two nodes with different fields never share a name."""
    if "name" in overrides:
        return new
    before, after = old.model_dump(), new.model_dump()
    changed = [f"{path} {override_text(overrides[path])}" for path in sorted(overrides)
               if value_at(before, path) != value_at(after, path)]
    return new.model_copy(update={"name": f"{old.name} ({', '.join(changed)})"}) if changed else new


def value_at(data: object, dotted_path: str) -> object:
    """The value at a dotted path of a dumped node (list entries by index or ``name``, as
    :func:`~sn40l_sim.yamlio.set_value` finds them)."""
    for part in dotted_path.split("."):
        if isinstance(data, dict):
            data = data.get(part)
        elif isinstance(data, list):
            named = [e for e in data if isinstance(e, dict) and e.get("name") == part]
            data = named[0] if named else data[int(part)] if part.isdigit() and int(part) < len(data) else None
        else:
            return None
    return data


def override_text(value: object) -> str:
    """An override's value as the caller wrote it (a spec object as its fields)."""
    return str(value.model_dump() if isinstance(value, BaseModel) else value)
