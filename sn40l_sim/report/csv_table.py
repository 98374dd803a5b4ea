"""The header and rows of a results CSV, read for ``plot``: every row with one value per column,
every column named once, each row knowing its line, and the rows without a number where the plot
needs one left out with a warning that names their lines.

``results.csv`` writes a value a point does not have (``ttft_s`` of a run without a served log, a
non-finite number) as an empty cell, so leaving a row out of a plot is expected; saying which rows
is what keeps a point from vanishing unnoticed.

Examples
--------
>>> import pathlib, tempfile, warnings
>>> path = pathlib.Path(tempfile.mkdtemp()) / "results.csv"
>>> _ = path.write_text("batch,ttft_s\\n1,0.5\\n2,nan\\n4,\\n8,0.75\\n")
>>> columns, rows = read_csv(path)
>>> columns, [(row.line, row["ttft_s"]) for row in rows]
(['batch', 'ttft_s'], [(2, '0.5'), (3, 'nan'), (4, ''), (5, '0.75')])
>>> with warnings.catch_warnings(record=True) as caught:
...     warnings.simplefilter("always")
...     [row["batch"] for row in numeric_rows(path, rows, ["ttft_s"])]
['1', '8']
>>> str(caught[0].message).removeprefix(str(path))
': 2 of 4 rows not plotted: ttft_s is nan (line 3); ttft_s is empty (line 4)'
"""
from __future__ import annotations

import csv
import math
import warnings
from collections.abc import Sequence
from pathlib import Path

from sn40l_sim.errors import InputError
from sn40l_sim.quantities import KINDS, parse_quantity
from sn40l_sim.report.results import SIGNIFICANT_DIGITS
from sn40l_sim.report.run_outcome import no_records_reason, run_outcome
from sn40l_sim.yamlio import refuse_special_file

#: most line numbers a warning lists for one reason (the count says how many there are)
LINES_SHOWN = 8


class CsvRow(dict):
    """One row of a CSV file (column -> text) and the line it starts on."""

    __slots__ = ("line",)

    def __init__(self, columns: Sequence[str], values: Sequence[str], line: int) -> None:
        super().__init__(zip(columns, values, strict=True))
        self.line = line


def read_csv(path: Path) -> tuple[list[str], list[CsvRow]]:
    """Header and rows of a CSV file (blank lines skipped).

    Raises
    ------
    InputError
        For a missing or unreadable file, a folder, a JSON file (a results.json given for its CSV),
        a column named twice, a row without one value per column (at its line), or no row at all.
    """
    if path.suffix.lower() == ".json":
        _not_json(path)
    refuse_special_file(path, "a CSV file (a results.csv)")
    rows: list[CsvRow] = []
    try:
        # a byte-order mark (spreadsheets save one) would become part of the first column's name
        with open(path, newline="", encoding="utf-8-sig") as handle:
            reader = csv.reader(handle)
            columns = next(reader, [])
            _check_header(path, columns)
            end = reader.line_num
            for values in reader:
                start, end = end + 1, reader.line_num
                if not values:
                    continue
                if len(values) != len(columns):
                    raise InputError(f"expected {len(columns)} values (one per column of the header), got "
                                     f"{len(values)}", file=path, line=start)
                rows.append(CsvRow(columns, values, start))
    except FileNotFoundError:
        outcome = run_outcome(path.parent)   # the folder of a run that failed or was interrupted
        raise InputError("file not found" + (f": {outcome}" if outcome else ""), file=path) from None
    except IsADirectoryError:
        inside = path / "results.csv"
        hint = f"; {inside} is in it" if inside.is_file() else \
            f"; {outcome}" if (outcome := run_outcome(path)) else ""
        raise InputError(f"is a folder; expected a CSV file (a results.csv){hint}", file=path) from None
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise InputError(f"cannot read the CSV file: {exc}", file=path) from None
    if not columns or not rows:
        # a sweep none of whose runs gave a record writes an empty results.csv beside failures.json
        empty = f"; {no_records_reason(path.parent)}" if path.name == "results.csv" else ""
        raise InputError(f"expected a header and at least one row (a results.csv){empty}", file=path)
    return columns, rows


def _check_header(path: Path, columns: list[str]) -> None:
    """Refuse JSON read as a header, and a column named twice (its values would be lost to the other's)."""
    if columns and columns[0].lstrip().startswith(("[", "{")):
        _not_json(path)
    first: dict[str, int] = {}
    for number, name in enumerate(columns, start=1):
        if name in first:
            raise InputError(f"column {name!r} is named twice in the header (columns {first[name]} and {number}); "
                             "expected each column once", file=path, line=1)
        first[name] = number


def _not_json(path: Path) -> None:
    """Refuse a JSON file in one line: its text would otherwise be read as a CSV header of junk."""
    beside = path.with_name("results.csv")
    hint = f": {beside} is beside it" if beside != path and beside.is_file() else ""
    raise InputError(f"this is a JSON file; plot reads a results.csv (written by run or sweep beside "
                     f"results.json){hint}", file=path)


def finite(text: str) -> float | None:
    """``text`` as a finite number, else None."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def number_column(rows: Sequence[dict[str, str]], column: str) -> bool:
    """Whether ``column`` holds numbers: a finite one in some row, and in every other a number or nothing."""
    return any(finite(r[column]) is not None for r in rows) and all(_number_or_empty(r[column]) for r in rows)


def _number_or_empty(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return not text.strip()
    return True


def one_spelling(rows: Sequence[CsvRow], columns: Sequence[str]) -> list[CsvRow]:
    """``rows`` with every number of ``columns`` written as the first row that holds it writes it:
    ``1`` and ``1.0`` (a zipped sweep writes its axis values as given) are one value to group rows
    by, not two. Text and non-finite cells are left as they are.

    >>> rows = [CsvRow(["rate"], [v], i) for i, v in enumerate(["1", "1.0", "2.0", "2", "full"], start=2)]
    >>> [r["rate"] for r in one_spelling(rows, ["rate"])]
    ['1', '1', '2.0', '2.0', 'full']
    """
    first: dict[str, dict[float, str]] = {c: {} for c in columns}
    out = []
    for row in rows:
        copy = CsvRow(list(row), list(row.values()), row.line)
        for column in columns:
            number = finite(row[column])
            if number is not None:
                copy[column] = first[column].setdefault(number, row[column])
        out.append(copy)
    return out


def matches(cell: str, wanted: str) -> bool:
    """Whether a cell holds the value a ``where`` asks for: numbers compare as numbers (a quantity
    with its unit as its base-unit number), text as text.

    >>> matches("409600000000.0", "409.6 GB/s"), matches("4096", "4096.0"), matches("full", "full")
    (True, True, True)
    """
    a, b = finite(cell), _wanted_number(str(wanted))
    return a == b if a is not None and b is not None else cell == str(wanted)


def _wanted_number(text: str) -> float | None:
    """A ``where`` value as a number: plain, or a quantity with its unit (``409.6 GB/s``, as a sweep
    axis writes it; results hold the base unit) at the digits the results keep."""
    number = finite(text)
    if number is not None:
        return number
    for kind in KINDS:
        try:
            return float(f"{parse_quantity(text, kind):.{SIGNIFICANT_DIGITS}g}")
        except ValueError:
            continue
    return None


def numeric_rows(path: Path, rows: Sequence[CsvRow], columns: Sequence[str]) -> list[CsvRow]:
    """The rows whose ``columns`` all hold finite numbers; a warning names the lines of the others
    and why, unless no row is left (the caller's error then says so)."""
    kept: list[CsvRow] = []
    dropped: dict[str, list[int]] = {}
    for row in rows:
        why = next((f"{c} is {_not_finite(row[c])}" for c in columns if finite(row[c]) is None), None)
        if why is None:
            kept.append(row)
        else:
            dropped.setdefault(why, []).append(row.line)
    if kept and dropped:
        count = sum(len(lines) for lines in dropped.values())
        reasons = "; ".join(f"{why} ({_lines(lines)})" for why, lines in dropped.items())
        warnings.warn(f"{path}: {count} of {len(rows)} rows not plotted: {reasons}", stacklevel=2)
    return kept


def _not_finite(text: str) -> str:
    if not text.strip():
        return "empty"
    try:
        return str(float(text))   # nan, inf or -inf however it is written
    except ValueError:
        return f"not a number ({text!r})"


def _lines(lines: list[int]) -> str:
    shown = ", ".join(map(str, lines[:LINES_SHOWN])) + (f" and {len(lines) - LINES_SHOWN} more"
                                                        if len(lines) > LINES_SHOWN else "")
    return f"line{'s' if len(lines) > 1 else ''} {shown}"
