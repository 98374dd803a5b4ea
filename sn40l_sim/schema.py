"""Shared pieces of the pydantic schemas: a strict frozen base model, quantity field types, and
:func:`validate` which turns a pydantic error into one :class:`~sn40l_sim.errors.InputError`
that names the file, the field path and the line.
"""
from __future__ import annotations

from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, ValidationError

from sn40l_sim.quantities import parse_quantity
from sn40l_sim.yamlio import Document, FieldPath

M = TypeVar("M", bound=BaseModel)


class StrictModel(BaseModel):
    """Immutable spec object: unknown keys are errors, no silent coercion of strings to numbers."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=False, validate_default=True)


def _positive(value: float) -> float:
    if not value > 0:
        raise ValueError(f"expected a positive value, got {value:g}")
    return value


def _non_negative(value: float) -> float:
    if value < 0:
        raise ValueError(f"expected a value >= 0, got {value:g}")
    return value


def _quantity(kind: str):
    return BeforeValidator(lambda v: parse_quantity(v, kind))


#: sizes in bytes, from ``"64 GiB"`` or a number
Bytes = Annotated[float, _quantity("bytes"), AfterValidator(_positive)]
BytesOrZero = Annotated[float, _quantity("bytes"), AfterValidator(_non_negative)]
#: bandwidth in bytes/s, from ``"1.6 TB/s"``
BytesPerSecond = Annotated[float, _quantity("bandwidth"), AfterValidator(_positive)]
#: frequency in Hz, from ``"1.6 GHz"``
Hertz = Annotated[float, _quantity("frequency"), AfterValidator(_positive)]
#: time in seconds, from ``"150 ns"``
Seconds = Annotated[float, _quantity("time"), AfterValidator(_non_negative)]
#: FLOP/s, from ``"638 TFLOPS"``
FlopsPerSecond = Annotated[float, _quantity("flops"), AfterValidator(_positive)]


def _strict_int(value: Any) -> Any:
    # YAML gives bools and floats for typos like "yes" or "4.5"; a count must be an integer
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise ValueError(f"expected an integer, got {value!r}")
    return value


PositiveInt = Annotated[int, BeforeValidator(_strict_int), AfterValidator(_positive)]
NonNegativeInt = Annotated[int, BeforeValidator(_strict_int), AfterValidator(_non_negative)]


def _fraction(value: float) -> float:
    if not 0 < value <= 1:
        raise ValueError(f"expected a fraction in (0, 1], got {value:g}")
    return value


Fraction = Annotated[float, AfterValidator(_fraction)]


def validate(model: type[M], doc: Document, at: FieldPath = (),
             tag_hints: dict[str, str] | None = None) -> M:
    """Validate ``doc.data`` (or the subtree at ``at``) against ``model``.

    Parameters
    ----------
    model : type
        The pydantic model.
    doc : Document
        The loaded YAML, for error locations.
    at : tuple, optional
        Field path of the subtree to validate.
    tag_hints : dict, optional
        Discriminator key -> what a tagged union expects (e.g. ``{"kind": "a mapping with kind:
        fixed | poisson"}``), for the message when the tag is missing or unknown.

    Raises
    ------
    InputError
        For the first location pydantic complains about, with every distinct message at that
        location, located at its field path (union tags dropped) and YAML line.
    """
    data: Any = doc.data
    for part in at:
        data = data[part]
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = [(_data_path(data, err["loc"]), err) for err in exc.errors()]
        loc = errors[0][0]
        same = [err for where, err in errors if where == loc]
        message = " or ".join(dict.fromkeys(_explain(err, tag_hints or {}) for err in same))
        if len(errors) > len(same):
            message += f" (and {len(errors) - len(same)} more problem(s) in this file)"
        raise doc.error(tuple(at) + loc, message) from None


def _data_path(data: Any, loc: tuple) -> tuple:
    """pydantic's error location as keys of the file: the union tags and validator labels it
    inserts are dropped (``attention.mla.heads`` -> ``attention.heads``); a missing key at the end
    is kept."""
    path: list = []
    for i, part in enumerate(loc):
        if isinstance(data, dict) and part in data:
            data = data[part]
        elif isinstance(data, list) and isinstance(part, int) and 0 <= part < len(data):
            data = data[part]
        elif (i == len(loc) - 1 and isinstance(data, dict) and isinstance(part, str)
              and not part.startswith(("function-", "literal["))):
            pass  # a missing key: name it
        else:
            continue  # a union tag or validator label: not a field of the file
        path.append(part)
    return tuple(path)


def _explain(error: dict, tag_hints: dict[str, str] | None = None) -> str:
    kind = error["type"]
    if kind in ("union_tag_not_found", "union_tag_invalid"):
        key = error.get("ctx", {}).get("discriminator", "").strip("'")
        if key in (tag_hints or {}):  # else pydantic's message, which lists the expected tags
            return f"expected {tag_hints[key]} (got {error.get('input')!r})"
    if kind == "extra_forbidden":
        return "unknown key (check the spelling; see the schema in docs/architecture.md)"
    if kind == "missing":
        return "required field is missing"
    message = error["msg"]
    for prefix in ("Value error, ", "Assertion failed, "):
        if message.startswith(prefix):
            message = message[len(prefix):]
    return f"{message} (got {error['input']!r})" if "input" in error and kind != "value_error" else message
