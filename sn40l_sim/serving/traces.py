"""Request traces read from files: the simulator's own format and the Azure LLM inference trace's.

Two formats, told apart by the CSV header:

* the simulator's: ``arrival_s, prompt_len, output_len`` (CSV, or JSONL with those keys), arrival
  times in seconds on the file's own clock, in any order (a window, like the Azure format's, counts
  from the first request);
* the Azure LLM inference trace as published (Patel et al., "Splitwise", ISCA 2024; the Azure
  Public Dataset, CC-BY 4.0): ``TIMESTAMP, ContextTokens, GeneratedTokens``, the timestamp a date
  and time (``2023-11-16 18:15:46.6805900``), never decreasing down the file (requests stamped
  alike arrive together; an earlier stamp below a later one is a damaged or reordered file). A
  request's arrival is its timestamp's seconds after the file's first.

Every row keeps its file and line (:class:`TraceRow`), so a value found wrong later (a prompt
longer than the compiled graphs) is reported at its line. :func:`select_window` takes a time window
and scales the arrival rate (capping lengths to the compiled graphs is the workload's:
:func:`sn40l_sim.serving.workload.build_requests`).

Examples
--------
>>> import tempfile, pathlib
>>> path = pathlib.Path(tempfile.mkdtemp()) / "azure.csv"
>>> _ = path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\\n"
...                     "2023-11-16 18:15:46.5000000,374,44\\n2023-11-16 18:15:48.2500000,396,109\\n")
>>> [(row.arrival_s, row.prompt_len, row.output_len, row.line) for row in read_trace(path)]
[(0.0, 374, 44, 2), (1.75, 396, 109, 3)]
"""
from __future__ import annotations

import csv
import datetime
import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from sn40l_sim.errors import InputError, shown
from sn40l_sim.schema import POSITIVE_COUNT, TIME, Range
from sn40l_sim.yamlio import parse_json, refuse_special_file


class TraceRow(NamedTuple):
    """One request of a trace file: arrival (seconds), lengths (tokens), and where it stands."""

    arrival_s: float
    prompt_len: int
    output_len: int
    file: str
    line: int


#: the simulator's columns
SIMULATOR_COLUMNS = ("arrival_s", "prompt_len", "output_len")
#: the Azure LLM inference trace's columns (2023 and 2024 releases)
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
#: what the Azure LLM inference trace's licence (CC-BY 4.0) asks its users to keep beside it and
#: beside what they make from it (experiments/traces/README.md)
AZURE_ATTRIBUTION = ("the Azure LLM inference trace (Azure Public Dataset, CC-BY 4.0; Patel, Choukse, Zhang, "
                     "Shah, Goiri, Maleki, Bianchini, \"Splitwise: Efficient generative LLM inference using phase "
                     "splitting\", ISCA 2024)")


def trace_source(path: Path) -> str:
    """The trace file's name and, for a file in the Azure format (told apart by its header, as
    :func:`read_trace` tells it), the attribution its licence asks for: what ``run`` and ``sweep``
    print and keep in their output folder's ``status.json`` with the results made from it.

    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "conv.csv"
    >>> _ = path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\\n2023-11-16 18:15:46.5,374,44\\n")
    >>> trace_source(path).startswith("conv.csv: the Azure LLM inference trace (Azure Public Dataset, CC-BY 4.0")
    True
    >>> _ = path.write_text("arrival_s,prompt_len,output_len\\n0,374,44\\n")
    >>> trace_source(path)
    'conv.csv'
    """
    with path.open(encoding="utf-8-sig") as f:   # read_trace has read the whole file already
        # read as read_trace reads it, through csv: a header written quoted ("TIMESTAMP",...), as
        # spreadsheets and pandas' QUOTE_ALL write it, is the Azure format there and was served
        # without its attribution
        header = tuple(column.strip() for column in next(csv.reader([f.readline()]), []))
    return f"{path.name}: {AZURE_ATTRIBUTION}" if header == AZURE_COLUMNS else path.name


def read_trace(path: Path) -> list[TraceRow]:
    """The rows of a trace file, in file order.

    A ``.jsonl`` file has one JSON object per line with the simulator's keys; anything else is
    read as CSV with a header naming either format's columns. Extra columns are errors (a typo
    would otherwise be ignored silently).

    Raises
    ------
    InputError
        Naming the file and the line: an unreadable file, a header of neither format (or missing a
        column), a CSV row without one value per column, a value that is not a number (in JSONL, a
        JSON number: not ``"0"`` nor ``true``), a time or length outside the schema's ranges
        (:data:`~sn40l_sim.schema.TIME`, :data:`~sn40l_sim.schema.POSITIVE_COUNT`), a timestamp
        not after the previous one (Azure format), or no rows at all.

    Examples
    --------
    The simulator's own format as JSONL, rows in file order (the requests are sorted by arrival
    later, :func:`~sn40l_sim.serving.workload.build_requests`), each with its line; the module's
    example reads the Azure format, as ``experiments/traces/azure_llm_2023_conv_10min.csv`` is:

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     path = Path(folder) / "mine.jsonl"
    ...     _ = path.write_text('{"arrival_s": 0.25, "prompt_len": 512, "output_len": 64}\\n'
    ...                         '{"arrival_s": 0.0, "prompt_len": 128, "output_len": 8}\\n')
    ...     rows = read_trace(path)
    >>> [(r.arrival_s, r.prompt_len, r.output_len, r.line) for r in rows]
    [(0.25, 512, 64, 1), (0.0, 128, 8, 2)]
    """
    refuse_special_file(path, "a CSV or JSONL trace")
    try:
        text = path.read_text(encoding="utf-8-sig")   # a leading byte-order mark (spreadsheets write one) is not text
    except IsADirectoryError:
        raise InputError("is a folder; expected a CSV or JSONL trace", file=path) from None
    except OSError as exc:
        raise InputError(f"cannot read trace file: {exc.strerror or exc}", file=path) from None
    except UnicodeDecodeError as exc:
        raise InputError(f"not a text file (byte {exc.start} is not UTF-8); expected a CSV or JSONL trace",
                         file=path) from None
    if path.suffix.lower() == ".jsonl":   # a .JSONL read as CSV was missing the columns it has
        rows = [_simulator_row(path, number, _json_numbers(path, number, item))
                for number, item in _json_records(path, text)]
    else:
        reader = csv.DictReader(_lines(text))
        header = tuple(f.strip() for f in reader.fieldnames or ())
        columns = _columns(path, header)
        records = ((reader.line_num, _csv_record(path, reader.line_num, header, item)) for item in reader)
        if columns == AZURE_COLUMNS:
            rows = _azure_rows(path, records)
        else:
            rows = [_simulator_row(path, number, item) for number, item in records]
    if not rows:
        raise InputError("the trace has no requests", file=path)
    return rows


def _lines(text: str) -> list[str]:
    """The file's lines as an editor numbers them: ended by LF, CRLF or CR alone. ``str.splitlines``
    also ends a line at a form feed, a vertical tab, the separators ``\\x1c``-``\\x1e``, NEL, U+2028
    and U+2029, so a row holding one was split in two and every error below it named the line after
    its own.

    >>> _lines("a\\x0cb\\r\\nc\\rd\\n")
    ['a\\x0cb', 'c', 'd']
    """
    return [line.rstrip("\r\n") for line in io.StringIO(text, newline="")]


def _columns(path: Path, header: tuple[str, ...]) -> tuple[str, ...]:
    """The format a CSV header names (its columns), or an error at line 1 saying what is missing."""
    for columns in (SIMULATOR_COLUMNS, AZURE_COLUMNS):
        if header == columns:
            return columns
    # the format whose columns the header shares most, to say what is missing or extra
    columns = max((SIMULATOR_COLUMNS, AZURE_COLUMNS), key=lambda cols: len(set(cols) & set(header)))
    missing = [c for c in columns if c not in header]
    extra = [c for c in header if c not in columns]
    what = f"missing column {missing[0]!r}" if missing else f"unknown column {extra[0]!r}" if extra else \
        "columns out of order"
    # a wide header (a results.csv given for a trace) is shown by its first columns, not all 200
    columns = ",".join(header[:_SHOWN_COLUMNS]) + (f",... ({len(header)} columns)" if len(header) > _SHOWN_COLUMNS else "")
    raise InputError(f"{what}: expected the CSV header {','.join(SIMULATOR_COLUMNS)} (the simulator's) or "
                     f"{','.join(AZURE_COLUMNS)} (the Azure LLM inference trace's), got {columns or 'none'}",
                     file=path, line=1)


#: columns of a header that does not match that its error shows
_SHOWN_COLUMNS = 8


def _csv_record(path: Path, number: int, header: tuple[str, ...], item: dict) -> dict:
    """A CSV row as column -> text, refused unless it has one value per column of the header
    (``csv.DictReader`` files extra values under ``None``, where they were lost without a word)."""
    values = len(item) - 1 + len(item[None]) if None in item else sum(v is not None for v in item.values())
    if values != len(header):
        raise InputError(f"expected {len(header)} values ({','.join(header)}), got {values}", file=path,
                         line=number)
    return {k.strip(): v for k, v in item.items()}


def _json_numbers(path: Path, number: int, item: dict) -> dict:
    """``item`` if its values are JSON numbers: ``"0"`` or ``true`` was read as the number it looks
    like, where a CSV's values are text by nature and parsed as numbers."""
    for column in SIMULATOR_COLUMNS:
        value = item.get(column)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            quoted = json.dumps(value)
            quoted = quoted if len(quoted) <= 40 else quoted[:37] + "..."
            what = f"the string {quoted} (write it without quotes)" if isinstance(value, str) else quoted
            raise InputError(f"expected a JSON number, got {what}", file=path, field=column, line=number)
    return item


class _Repeated(ValueError):
    """A JSON object names one key twice."""


def _once_each(pairs: list[tuple[str, object]]) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise _Repeated(key)
        out[key] = value
    return out


def _json_records(path: Path, text: str) -> list[tuple[int, dict]]:
    records = []
    for number, line in enumerate(_lines(text), start=1):
        if not line.strip():
            continue
        try:
            item = parse_json(line, object_pairs_hook=_once_each)
        except json.JSONDecodeError as exc:
            raise InputError(f"invalid JSON: {exc.msg}", file=path, line=number) from None
        except _Repeated as exc:   # json keeps the last of a repeated key: a typo would pass unseen
            raise InputError(f"key {exc.args[0]!r} appears twice in one record; expected each once", file=path,
                             line=number) from None
        if not isinstance(item, dict):
            raise InputError("expected a JSON object per line", file=path, line=number)
        records.append((number, item))
    return records


def _simulator_row(path: Path, number: int, item: dict) -> TraceRow:
    extra = sorted(set(item) - set(SIMULATOR_COLUMNS), key=str)
    if extra:
        raise InputError(f"unknown column {extra[0]!r}; expected {', '.join(SIMULATOR_COLUMNS)}", file=path,
                         line=number)
    arrival = _ranged(path, number, "arrival_s", _value(path, number, item, "arrival_s", float), TIME)
    return TraceRow(arrival, _length(path, number, item, "prompt_len"), _length(path, number, item, "output_len"),
                    str(path), number)


def _azure_rows(path: Path, records: Any) -> list[TraceRow]:
    rows: list[TraceRow] = []
    first: tuple[datetime.datetime, float] | None = None
    previous = -1.0
    for number, item in records:
        stamp = _value(path, number, item, "TIMESTAMP", _timestamp)
        if first is None:
            first = stamp
        # whole seconds as datetimes, the fraction apart: a float of seconds since 2023 loses the
        # last of the trace's seven fractional digits
        arrival = (stamp[0] - first[0]).total_seconds() + (stamp[1] - first[1])
        if rows and not arrival >= previous:
            raise InputError(f"expected a timestamp no earlier than the previous line's, got {item['TIMESTAMP']!r} "
                             "(timestamps must not decrease down the file)", file=path, field="TIMESTAMP", line=number)
        previous = _ranged(path, number, "TIMESTAMP", arrival, TIME)
        rows.append(TraceRow(arrival, _length(path, number, item, "ContextTokens"),
                             _length(path, number, item, "GeneratedTokens"), str(path), number))
    return rows


def _timestamp(text: str) -> tuple[datetime.datetime, float]:
    """``'2023-11-16 18:15:46.6805900'`` -> (the date and time to the second, the fraction).

    A time-zone offset (``+05:00``, ``Z``) is refused: the published trace has none, one written
    after a fraction was already refused, and a file mixing stamps with and without one has no
    order to compare them in (it stopped with a ``TypeError`` traceback). A date without a time of
    day is refused too: it was read as midnight, so a row stamped ``2023-11-16`` arrived hours before
    the rows around it (a damaged row, then refused as decreasing only if it came after them)."""
    whole, _, fraction = text.strip().partition(".")
    if (fraction and not fraction.isdigit()) or not any(sep in whole for sep in (" ", "T")):
        raise ValueError(text)
    stamp = datetime.datetime.fromisoformat(whole)
    if stamp.tzinfo is not None:
        raise ValueError(text)
    return stamp, float(f"0.{fraction or 0}")


def _value(path: Path, number: int, item: dict, column: str, parse: Any) -> Any:
    if item.get(column) in (None, ""):
        raise InputError("missing value", file=path, field=column, line=number)
    text = item[column]
    what = "a date and time (YYYY-MM-DD HH:MM:SS.fraction, no time-zone offset)" if parse is _timestamp else \
        "an integer" if parse is _integer else "a number"
    if isinstance(text, str) and not _plain(text):
        # Python's int() and float() take 1_000 (a literal's digit grouping) and digits of other
        # scripts (٣٩٦); a trace is a data file, written with ASCII digits alone
        raise InputError(f"expected {what} written in plain digits (0-9, no _ or other separators), got "
                         f"{shown(text)}", file=path, field=column, line=number)
    try:
        return parse(text)
    except (TypeError, ValueError, OverflowError):
        raise InputError(f"expected {what}, got {shown(text)}", file=path, field=column, line=number) from None


def _plain(text: str) -> bool:
    """Whether a CSV value holds no character a data file's number or date would not: ASCII only,
    no underscore.

    >>> _plain("1000"), _plain(" 1e3 "), _plain("2023-11-16 18:15:46.68"), _plain("1_000"), _plain("\u0663\u0669")
    (True, True, True, False, False)
    """
    return text.isascii() and "_" not in text


def _length(path: Path, number: int, item: dict, column: str) -> int:
    return _ranged(path, number, column, _value(path, number, item, column, _integer), POSITIVE_COUNT)


def _ranged(path: Path, number: int, column: str, value: Any, declared: Range) -> Any:
    """``value`` if inside the schema's range for it, else an error at its line."""
    try:
        return declared(value)
    except ValueError as exc:
        raise InputError(str(exc), file=path, field=column, line=number) from None


def _integer(value: Any) -> int | float:
    """A token count as written: integer text exactly (through a float, 99999999999999999999999 was
    refused as 99999999999999991611392, a number the file does not hold), and a whole number
    written otherwise (``1e3``, ``7.0``) as its integer; one past 2**53, which no float holds
    exactly, stays the float, shown as written by the range's message (``1e+30``)."""
    if isinstance(value, bool):
        raise ValueError(value)
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            pass
    number = float(value)
    if not number.is_integer():
        raise ValueError(value)
    return int(number) if abs(number) < 2**53 else number


def select_window(rows: Sequence[TraceRow], start_s: float = 0.0, duration_s: float | None = None,
                  rate_scale: float = 1.0) -> list[TraceRow]:
    """The rows arriving in ``[start_s, start_s + duration_s)`` seconds after the trace's first
    request, their arrivals counted from the window's start and divided by ``rate_scale`` (2 serves
    the same requests twice as fast). The Azure format's first request is at 0 s; the simulator's
    may start later on its own clock (and its rows come in any order).

    >>> rows = [TraceRow(t, 10, 5, "t.csv", i + 2) for i, t in enumerate([0.0, 1.0, 2.0, 3.0])]
    >>> [(r.arrival_s, r.line) for r in select_window(rows, 1.0, 2.0, rate_scale=2.0)]
    [(0.0, 3), (0.5, 4)]
    >>> [r.arrival_s for r in select_window([TraceRow(1000.0, 10, 5, "t.csv", 2)])]
    [0.0]

    A window's bounds are compared to the nanosecond (:func:`window_offset`): a request arriving
    exactly at its end is outside it, one arriving exactly at its start inside.

    >>> rows = [TraceRow(t, 10, 5, "t.csv", i + 2) for i, t in enumerate([0.1, 0.2, 0.3])]
    >>> [r.line for r in select_window(rows, 0.0, 0.2)], [r.line for r in select_window(rows, 0.2)]
    ([2, 3], [4])
    """
    first = min((row.arrival_s for row in rows), default=0.0)
    start, end = window_offset(start_s), float("inf") if duration_s is None else window_offset(start_s + duration_s)
    return [row._replace(arrival_s=max(0.0, row.arrival_s - (first + start_s)) / rate_scale)
            for row in rows if start <= window_offset(row.arrival_s - first) < end]


def window_offset(seconds: float) -> float:
    """A time after a trace's first request as a window compares it: to the nanosecond (about a
    cycle of the simulated clock, finer than any trace's timestamps). Subtracting two arrivals leaves binary noise (0.3 s - 0.1 s is
    0.19999999999999998 s), which put a request arriving exactly at a window's end inside it and
    one arriving exactly at its start outside.

    >>> window_offset(0.3 - 0.1), window_offset(0.1 + 0.2)
    (0.2, 0.3)
    """
    return round(seconds, 9)
