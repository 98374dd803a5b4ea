"""The keys a schema declares where a file wrote one it does not know: what an unknown key's
message offers instead (the closest field, else every field there), found by following the
file's data through the pydantic models, their lists, tagged unions and subclasses
(:func:`sn40l_sim.schema.validate` says it).
"""
from __future__ import annotations

import difflib
import types
import typing
from typing import Any

from pydantic import BaseModel


def unknown_key_text(key: str, known: typing.Collection[str]) -> str:
    """What an unknown key gets: the closest field when there is one, else the fields there are.

    >>> unknown_key_text("cap_lengthz", ["kind", "path", "cap_lengths", "start_s"])
    "unknown key; did you mean 'cap_lengths'?"
    >>> unknown_key_text("frobnicate", ["kind", "path"])
    'unknown key (expected one of kind, path)'
    """
    if not known:
        return "unknown key (check the spelling; see the schema in docs/architecture.md)"
    close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
    return f"unknown key; did you mean {close[0]!r}?" if close else \
        f"unknown key (expected one of {', '.join(sorted(known))})"


def known_keys(model: type[BaseModel], data: Any, loc: tuple) -> list[str]:
    """The fields ``model`` declares for the mapping of ``data`` at pydantic's location ``loc``
    (union tags and validator labels in it skipped, as :func:`sn40l_sim.schema.validate` skips them
    in an error's location); empty when
    the type there is not one model (a field whose value picks its class some other way)."""
    annotation: Any = model
    for part in loc:
        if isinstance(data, dict) and part in data:
            cls = _model_of(annotation, data)
            if cls is not None:
                annotation = cls.model_fields[part].annotation if part in cls.model_fields else None
            else:
                dicts = [t for t in _members(annotation) if typing.get_origin(t) is dict]
                annotation = typing.get_args(dicts[0])[1] if len(dicts) == 1 else None
            data = data[part]
        elif isinstance(data, list) and isinstance(part, int) and 0 <= part < len(data):
            sequences = [t for t in _members(annotation) if typing.get_origin(t) in (list, tuple)]
            args = typing.get_args(sequences[0]) if len(sequences) == 1 else ()
            annotation = args[0] if len(args) == 1 or (len(args) == 2 and args[1] is Ellipsis) else \
                args[part] if part < len(args) else None
            data = data[part]
        if annotation is None:
            return []
    cls = _model_of(annotation, data)
    return list(cls.model_fields) if cls is not None else []


def _members(annotation: Any) -> list[Any]:
    """``annotation`` without ``Annotated`` and ``Optional``: the types a value may have."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _members(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return [t for arg in typing.get_args(annotation) if arg is not type(None) for t in _members(arg)]
    return [annotation]


def _model_of(annotation: Any, data: Any) -> type[BaseModel] | None:
    """The model class that validates ``data`` where ``annotation`` is declared: the only one, or
    the one (a subclass too, as an attention family) whose ``kind`` is the data's."""
    models = [t for t in _members(annotation) if isinstance(t, type) and issubclass(t, BaseModel)]
    kind = data.get("kind") if isinstance(data, dict) else None
    if kind is not None:
        tagged = [c for m in models for c in (m, *_descendants(m)) if kind in _kinds(c)]
        if tagged:
            return tagged[0]
    return models[0] if len(models) == 1 else None


def _descendants(cls: type) -> list[type]:
    return [d for sub in cls.__subclasses__() for d in (sub, *_descendants(sub))]


def _kinds(cls: type[BaseModel]) -> tuple:
    """The values a model's ``kind`` field takes (its ``Literal``), if it has one."""
    field = cls.model_fields.get("kind")
    return typing.get_args(_members(field.annotation)[0]) if field is not None else ()
