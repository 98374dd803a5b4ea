"""Shared pieces of the pydantic schemas: a strict frozen base model, quantity field types with
their physical ranges (:class:`Range`), and :func:`validate` which turns a pydantic error into one
:class:`~sn40l_sim.errors.InputError` that names the file, the field path and the line.

Every number a file gives is finite and inside the range its type (or its field) declares, with
the unit; nothing is coerced silently: a count takes an integer (not ``4.5``, ``yes`` or ``"8"``),
a plain number takes a number (not text), a quantity takes a number in its base unit or text with
a unit of its kind (``"64 GiB"``).
"""
from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, ValidationError

from sn40l_sim.errors import shown
from sn40l_sim.quantities import parse_quantity
from sn40l_sim.schema_keys import known_keys, unknown_key_text
from sn40l_sim.yamlio import Document, FieldPath

M = TypeVar("M", bound=BaseModel)


class StrictModel(BaseModel):
    """Immutable spec object: unknown keys are errors, no silent coercion of strings to numbers."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=False, validate_default=True)


@dataclass(frozen=True)
class Range:
    """The physical range of a number field, declared once with its unit: every value is finite and
    inside it, or the file is refused with one line saying the range (pydantic runs it after
    parsing, as an ``AfterValidator``).

    The quantity types below carry their range, so a field declared with a type has it; a field
    with a range of its own says so at the field (``Annotated[float, Number, Range(...)]``).

    Examples
    --------
    >>> BANDWIDTH(2.5e12)
    2500000000000.0
    >>> BANDWIDTH(2.5)
    Traceback (most recent call last):
    ...
    ValueError: expected a bandwidth from 1 MB/s to 1 PB/s, got 2.5 B/s
    >>> BANDWIDTH(float("nan"))
    Traceback (most recent call last):
    ...
    ValueError: expected a finite bandwidth from 1 MB/s to 1 PB/s, got nan
    """

    what: str
    low: float
    high: float
    #: the bounds as the message shows them, with their unit
    low_text: str
    high_text: str
    #: the unit of a value in a message
    unit: str = ""
    #: ``(low, high]``: the low bound itself is refused
    low_open: bool = False
    #: ``[low, high)``: the high bound itself is refused
    high_open: bool = False

    def text(self) -> str:
        """``from 1 MB/s to 1 PB/s``, ``greater than 0 s and at most 86400 s`` or ``greater than 0 and
        less than 1``."""
        high = f"less than {self.high_text}" if self.high_open else f"at most {self.high_text}"
        if self.low_open:
            return f"greater than {self.low_text} and {high}"
        if self.high_open:
            return f"from {self.low_text} and {high}"
        return f"from {self.low_text} to {self.high_text}"

    def __call__(self, value: Any) -> Any:
        # an int is finite whatever its size, and math.isfinite of one past a float's range (an
        # integer of 400 digits in a YAML file or a trace) raised OverflowError, a traceback
        if not isinstance(value, int) and not math.isfinite(value):
            raise ValueError(f"expected a finite {self.what} {self.text()}, got {value}")
        low_ok = value > self.low if self.low_open else value >= self.low
        high_ok = value < self.high if self.high_open else value <= self.high
        if not (low_ok and high_ok):
            written = _written(value)
            article = "an" if self.what[:1] in "aeiou" else "a"
            raise ValueError(f"expected {article} {self.what} {self.text()}, got {written}"
                             f"{' ' + self.unit if self.unit else ''}")
        return value


def _written(value: Any) -> str:
    """A refused number as the file most likely wrote it. A count written as a float (``1e300``) is made an
    integer before its range is checked (:func:`_strict_int`), and past 2**53 that integer carries the float's
    binary digits (1e300 is 1000000000000000052504760255...), which no file held: such a value is shown as the
    float it came from. An integer too large for a float (a YAML value of 400 digits) is shown shortened."""
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, int) and abs(value) > 2**53:
        try:
            if int(float(value)) == value:
                return f"{float(value):g}"
        except OverflowError:
            pass
    return shown(value)


#: largest count a field takes (token counts, batches, layers, units): 2**31 - 1
MAX_COUNT = 2**31 - 1

#: at least a byte: every such field is a memory's or a configuration's size, and a value below one byte
#: (``pcu_bytes: 1e-300``) mapped and ran, costing no configuration at all
SIZE = Range("positive size", 1, 2.0**50, "1 B", "1 PiB", "B")
SIZE_OR_ZERO = Range("size", 0, 2.0**50, "0 B", "1 PiB", "B")
BANDWIDTH = Range("bandwidth", 1e6, 1e15, "1 MB/s", "1 PB/s", "B/s")
FREQUENCY = Range("frequency", 1e6, 1e11, "1 MHz", "100 GHz", "Hz")
TIME = Range("time", 0, 1e6, "0 s", "1e6 s (11.6 days)", "s")
FLOP_RATE = Range("FLOP rate", 1e6, 1e21, "1 MFLOPS", "1 ZFLOPS", "FLOP/s")
FRACTION = Range("fraction", 0, 1, "0", "1", low_open=True)
POSITIVE_COUNT = Range("positive integer", 1, MAX_COUNT, "1", f"{MAX_COUNT} (2**31 - 1)")
COUNT = Range("integer", 0, MAX_COUNT, "0", f"{MAX_COUNT} (2**31 - 1)")


def _quantity(kind: str):
    return BeforeValidator(lambda v: _parsed_quantity(v, kind))


def _parsed_quantity(value: Any, kind: str) -> float:
    """``parse_quantity``, its message quoting a long value shortened (quantities.py, below
    errors.py's :func:`shown`, quotes it whole).

    >>> _parsed_quantity("1 GiB", "bytes")
    1073741824.0
    >>> _parsed_quantity("9" * 200 + " parsecs", "bytes")
    Traceback (most recent call last):
    ...
    ValueError: expected a bytes unit such as '64 GiB', got unit 'parsecs' in '9999999999999999999999999999999999999999...' (208 characters)
    """
    try:
        return parse_quantity(value, kind)
    except ValueError as exc:
        raise ValueError(str(exc).replace(repr(value), shown(value))) from None


def _plain_number(value: Any) -> Any:
    # YAML gives text for "12 tokens" or a quoted "0.5", and a bool for true: a number field
    # takes a number, never a string or a bool converted behind the user's back; a Python caller's
    # override may be a numpy number (np.float32 is not a float), taken as the number it is
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"expected a number, got {shown(value)}")
    return value if isinstance(value, (int, float)) else float(value)


#: a plain number (no unit, no text); give it a :class:`Range` at the field
Number = BeforeValidator(_plain_number)

#: sizes in bytes, from ``"64 GiB"`` or a number
Bytes = Annotated[float, _quantity("bytes"), AfterValidator(SIZE)]
BytesOrZero = Annotated[float, _quantity("bytes"), AfterValidator(SIZE_OR_ZERO)]
#: bandwidth in bytes/s, from ``"1.6 TB/s"``
BytesPerSecond = Annotated[float, _quantity("bandwidth"), AfterValidator(BANDWIDTH)]
#: frequency in Hz, from ``"1.6 GHz"``
Hertz = Annotated[float, _quantity("frequency"), AfterValidator(FREQUENCY)]
#: time in seconds, from ``"150 ns"``
Seconds = Annotated[float, _quantity("time"), AfterValidator(TIME)]
#: FLOP/s, from ``"638 TFLOPS"``
FlopsPerSecond = Annotated[float, _quantity("flops"), AfterValidator(FLOP_RATE)]


def _strict_int(value: Any) -> Any:
    # YAML gives bools, floats and text for typos like "yes", "4.5" or "8 sockets"; a count must be
    # an integer (an integral float such as 4.0 is one)
    if isinstance(value, bool) or isinstance(value, str) \
            or (isinstance(value, float) and not value.is_integer()):
        raise ValueError(f"expected an integer, got {shown(value)}")
    # an integral float becomes the integer it is (pydantic refuses one as large as 1e30 with a
    # message of its own; the range then says what is expected)
    return int(value) if isinstance(value, float) else value


#: an integer written as one (no bool, text or fractional float), for counts with ranges of their own
StrictInt = Annotated[int, BeforeValidator(_strict_int)]
PositiveInt = Annotated[int, BeforeValidator(_strict_int), AfterValidator(POSITIVE_COUNT)]
NonNegativeInt = Annotated[int, BeforeValidator(_strict_int), AfterValidator(COUNT)]
Fraction = Annotated[float, Number, AfterValidator(FRACTION)]
#: operations per unit (a lane, a stage) per clock cycle. At least one per 1024 cycles, as at most 1024
#: per cycle: a datapath slower than that is no machine to study, and a rate of 1e-12 MACs per cycle
#: made a step longer than the serving loop's clock holds (an OverflowError traceback from run; at
#: 1e-9 the 4K prefill of Llama-3.1-8B took 45,000 s)
RATE_PER_CYCLE = Range("positive rate per cycle", 1 / 1024, 1024, "1/1024", "1024 per cycle")
RatePerCycle = Annotated[float, Number, AfterValidator(RATE_PER_CYCLE)]


def strict_flag(value: Any) -> Any:
    """A flag's check: YAML 1.2 gives ``true``/``false`` as booleans and ``yes``, ``off``, ``"no"``
    as text, which pydantic would take for a boolean as quietly as it takes ``0`` or ``1.0`` (so
    ``kernel_looping: off`` switched looping off, ``calibration: "no"`` dropped a calibration point)."""
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {shown(value)}")
    return value


#: an on/off field: ``true`` or ``false``, nothing else
Flag = Annotated[bool, BeforeValidator(strict_flag)]


#: longest name (a policy entry, a model, a hardware file, a measurement id, a kernel), as a plain name's
NAME_LIMIT = 100


def _one_line_name(value: Any, limit: int | None = NAME_LIMIT) -> Any:
    # a name is printed in tables, results rows, point names and one-line errors: a line break in
    # it split each of them
    if not isinstance(value, str):
        raise ValueError(f"expected a name (text), got {shown(value)}")
    if not value.strip():   # a hardware or model named '' gave results rows and messages with a blank where it goes
        raise ValueError(f"expected a name (results rows and messages show it), got "
                         f"{'an empty one' if not value else repr(value)}")
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise ValueError(f"expected a name on one line, without control characters (a line break, a tab), "
                         f"got {shown(value)}")
    if limit is not None and len(value) > limit:   # a 5,000-character model name filled every table and results row
        raise ValueError(name_too_long(value, limit))
    if value != value.strip():   # 'full ' printed as 'full' in every table, and --policy full did not find it
        raise ValueError(f"expected a name without spaces at its start or end (tables show it without them), "
                         f"got {shown(value)}")
    return value


def name_too_long(value: str, limit: int = NAME_LIMIT) -> str:
    """What a name longer than ``limit`` characters is told."""
    return f"expected a name of at most {limit} characters (tables and results rows show it), got {shown(value)}"


#: a name shown in results and messages (a policy entry, a model, a hardware file, a measurement id)
Name = Annotated[str, BeforeValidator(_one_line_name)]
#: a node's name, which ``--set`` and sweep overrides lengthen with what they changed
#: (``SN40L-16 (socket.calibrated.config_load_bytes_per_s 1e+10, ...)``); a file's is held to
#: :data:`NAME_LIMIT` where the hardware loader reads it
DerivedName = Annotated[str, BeforeValidator(lambda value: _one_line_name(value, limit=None))]


def _plain_name(value: Any) -> Any:
    if not isinstance(value, str) or not _PLAIN_NAME.match(value):
        raise ValueError(f"expected a plain name (letters, digits and . _ + -, starting with a letter or digit, "
                         f"at most 100 characters: it names the output folder), got {shown(value)}")
    return value


_PLAIN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,99}$")
#: a name that is also a folder name: no path separator, not ``..``, no leading dot or dash
PlainName = Annotated[str, BeforeValidator(_plain_name)]


def ranged(number_range: Range) -> Any:
    """A plain-number type with its own range, e.g. ``ranged(Range("multiplier", 1, 16, "1", "16"))``."""
    return Annotated[float, Number, AfterValidator(number_range)]


def timed(number_range: Range) -> Any:
    """A time (``"100 ms"`` or seconds) with a range of its own inside :data:`TIME`'s, checked alone
    so that a value outside it is answered with the field's range, not with every time's."""
    return Annotated[float, _quantity("time"), AfterValidator(number_range)]


#: a latency of the hardware (a memory tier, a link): nanoseconds to microseconds; at most a
#: millisecond, so that a value written without its unit (``latency_s: 120`` for 120 ns, read as
#: 120 s) is refused rather than simulated
LATENCY = Range("hardware latency", 0, 1e-3, "0 s", "1 ms", "s")
Latency = timed(LATENCY)

#: the capacity of one memory module or channel (an HBM stack, a DDR channel): a mebibyte to a
#: pebibyte. DRAM devices hold gigabits, so a capacity written without its unit
#: (``capacity_bytes_per_unit: 16`` for 16 GiB, read as 16 B) is refused at its field rather than
#: accepted by ``check`` and reported by ``run`` as a model that does not fit
MEMORY_UNIT_SIZE = Range("memory unit's capacity", 2.0**20, 2.0**50, "1 MiB", "1 PiB", "B")
MemoryUnitBytes = Annotated[float, _quantity("bytes"), AfterValidator(MEMORY_UNIT_SIZE)]

#: every range declared here, by the name of the type that carries it (docs/robustness.md lists them)
RANGES = {"Latency": LATENCY, "MemoryUnitBytes": MEMORY_UNIT_SIZE, "Bytes": SIZE, "BytesOrZero": SIZE_OR_ZERO, "BytesPerSecond": BANDWIDTH, "Hertz": FREQUENCY,
          "Seconds": TIME, "FlopsPerSecond": FLOP_RATE, "Fraction": FRACTION, "PositiveInt": POSITIVE_COUNT,
          "NonNegativeInt": COUNT, "RatePerCycle": RATE_PER_CYCLE}


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
        for _, err in errors:
            if err["type"] == "extra_forbidden":   # a typo: say which field was meant
                err["known_keys"] = known_keys(model, data, err["loc"][:-1])
        # a misspelt required key is missing too: name the typo, which says what to fix
        first = errors[0][0]
        typo = [e for e in errors if e[1]["type"] == "extra_forbidden" and e[0][:-1] == first[:-1]]
        if errors[0][1]["type"] == "missing" and typo:
            errors.remove(typo[0])
            errors.insert(0, typo[0])
        loc = errors[0][0]
        same = [err for where, err in errors if where == loc]
        message = _alternatives(same, tag_hints or {})
        others = len({where for where, _ in errors} - {loc})   # by field: a union's alternatives each complain
        if others:
            message += f" (and {others} more field{'s' if others > 1 else ''} with a problem)"
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


def _alternatives(errors: list[dict], tag_hints: dict[str, str]) -> str:
    """The message of every error at one location. A field that is a number or a word (``count:
    N | batch``) folds the word into the number's message: ``expected a request count from 1 to
    10000000 or 'batch', got 0`` rather than ``..., got 0 or Input should be 'batch' (got 0)``.

    >>> _alternatives([{"type": "value_error", "msg": "Value error, expected an integer, got 'x'", "input": "x"},
    ...                {"type": "literal_error", "msg": "Input should be 'max'", "input": "x",
    ...                 "ctx": {"expected": "'max'"}}], {})
    "expected an integer or 'max', got 'x'"
    """
    words = [err["ctx"]["expected"] for err in errors if err["type"] == "literal_error" and "ctx" in err]
    others = list(dict.fromkeys(_explain(err, tag_hints) for err in errors if err["type"] != "literal_error"))
    if words and len(others) == 1 and others[0].startswith("expected ") and ", got " in others[0]:
        head, _, got = others[0].rpartition(", got ")
        return f"{head} or {' or '.join(words)}, got {got}"
    return " or ".join(dict.fromkeys(_explain(err, tag_hints) for err in errors))


#: pydantic's error types of a value of the wrong type -> what the field expects, in the words of
#: the project's other messages (``serving.batch: null`` said "Input should be a valid integer (got
#: None) or Input should be 'max' (got None)")
_PLAIN_TYPES = {"string_type": "a text", "int_type": "an integer", "int_parsing": "an integer",
                "int_from_float": "an integer", "float_type": "a number", "float_parsing": "a number",
                "bool_type": "true or false", "bool_parsing": "true or false", "list_type": "a list",
                "tuple_type": "a list"}   # a YAML list read into a tuple field ("a valid tuple")


def _explain(error: dict, tag_hints: dict[str, str] | None = None) -> str:
    kind = error["type"]
    if kind in ("union_tag_not_found", "union_tag_invalid"):
        key = error.get("ctx", {}).get("discriminator", "").strip("'")
        if key in (tag_hints or {}):  # else pydantic's message, which lists the expected tags
            return f"expected {tag_hints[key]} (got {shown(error.get('input'))})"
    if kind == "extra_forbidden":
        return unknown_key_text(str(error["loc"][-1]), error.get("known_keys", ()))
    if kind == "missing":
        return "required field is missing"
    if kind in ("model_type", "dict_type"):   # pydantic names its class ("instance of ServingSection")
        return f"expected a mapping of keys (got {shown(error.get('input'))})"
    if kind in _PLAIN_TYPES:   # pydantic's own wording ("Input should be a valid string") is not the project's
        return f"expected {_PLAIN_TYPES[kind]}, got {shown(error.get('input'))}"
    message = error["msg"]
    for prefix in ("Value error, ", "Assertion failed, "):
        if message.startswith(prefix):
            message = message[len(prefix):]
    return f"{message} (got {shown(error['input'])})" if "input" in error and kind != "value_error" else message
