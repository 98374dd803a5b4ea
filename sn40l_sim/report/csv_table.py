"""The header and rows of a results CSV, read for ``plot``: every row with one value per column,
every column named once, each row knowing its line.

Examples
--------
>>> import pathlib, tempfile
>>> path = pathlib.Path(tempfile.mkdtemp()) / "results.csv"
>>> _ = path.write_text("batch,ttft_s\\n1,0.5\\n\\n8,0.75\\n")
>>> columns, rows = read_csv(path)
>>> columns, [(row.line, row["ttft_s"]) for row in rows]
(['batch', 'ttft_s'], [(2, '0.5'), (4, '0.75')])
"""
from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from pathlib import Path

from sn40l_sim.errors import InputError


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
        raise InputError("file not found", file=path) from None
    except IsADirectoryError:
        raise InputError("is a folder; expected a CSV file (a results.csv)", file=path) from None
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise InputError(f"cannot read the CSV file: {exc}", file=path) from None
    if not columns or not rows:
        raise InputError("expected a header and at least one row (a results.csv)", file=path)
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
