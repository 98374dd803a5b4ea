"""How a results field is declared, and what the writers of results ask the declaration.

The declaration itself is :data:`sn40l_sim.report.fields.RESULTS`; this module holds its types (the
table rows a field may declare are in :mod:`sn40l_sim.report.table_rows`).
A :class:`Field` is one of

- a scalar (``batch``),
- a mapping whose keys come from the run, with named key levels (``memory.<tier>.<use>``,
  ``prefill_kernel_cycles.<kernel>``),
- a record with fixed parts, each a field of its own (``throughput.requests``,
  ``latency.ttft_s.p99``),
- a list (``kv_occupancy.series``), which stays in ``results.json`` and is left out of the CSV.

``results.csv`` flattens a record to dotted column names along exactly that nesting, so every
column resolves to one declared field and the values of its key levels (:meth:`Fields.resolve`).
Plot axis labels, CSV column order, the rows of the printed table, the golden fields and
``docs/results.md`` are all read from the declaration.

Examples
--------
>>> toy = Fields([Field("name", "", "Point name.", csv=1),
...               Field("step_s", "s", "One step.", axis="step", table=Row(10, "step (ms)", ".2f", 1e3)),
...               Field("memory", "B", "Bytes by tier and use.", keys=("tier", "use"), axis="{TIER}: {use}")])
>>> field, keys = toy.resolve("memory.hbm.kv")
>>> field.name, keys
('memory', {'tier': 'hbm', 'use': 'kv'})
>>> toy.axis_label("memory.hbm.kv"), toy.axis_label("step_s")
(('HBM: kv (GiB)', 9.313225746154785e-10), ('step (s)', 1.0))
>>> toy.csv_order(["step_s", "memory.hbm.kv", "name"])
['name', 'memory.hbm.kv', 'step_s']
>>> toy.mismatches({"name": "a", "step_s": 1.0, "extra": 2})
['memory: declared but not produced', 'extra: produced but not declared']
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from sn40l_sim.report.table_rows import GIB, Row, TierRows

#: declared unit -> (unit shown on plot axes, factor applied to the values)
AXIS_UNITS: dict[str, tuple[str, float]] = {"B": ("GiB", 1 / GIB), "B/s": ("GB/s", 1e-9), "Hz": ("GHz", 1e-9)}


@dataclass(frozen=True)
class Field:
    """One results field, declared once.

    Parameters
    ----------
    name : str
        The key in the record (or in its parent's record).
    unit : str
        ``s``, ``B``, ``B/s``, ``tokens``, ``tokens/s``, ``cycles``, ``sequences``, ... ; ``1`` for
        fractions and plain numbers, empty for text.
    description : str
        One line for ``docs/results.md``.
    axis : str
        Plot axis text; ``{key}`` and ``{KEY}`` (upper case) stand for the values of the key levels.
        The unit is appended in parentheses unless the text already names it or ends with one.
    table : Row or TierRows, optional
        The field's row(s) in the printed table.
    csv : int, optional
        Position among the leading CSV columns (top-level fields only); the other columns follow in
        name order.
    golden : bool
        Kept in ``tests/golden/`` (a mapping is kept whole).
    design : bool
        Promised by docs/design.md §5: never renamed or dropped.
    keys : tuple of str
        Names of the key levels of a mapping (``("tier", "use")``).
    path_key : bool
        The last key is a dotted path (a sweep axis) and takes the rest of a column name.
    parts : tuple of Field
        The fixed parts of a record (of each item, for a list).
    is_list : bool
        The value (below the keys) is a list: JSON only.
    sweep_only : bool
        Only sweep records carry the field.
    group : str
        An opt-in group: the field is produced only when the experiment asks for the group
        (``report: {extra_fields: [<group>]}``), so the records of experiments that do not ask
        stay as they were. Empty: always produced.
    key_units : tuple of (str, str)
        For a mapping whose entries do not all share ``unit``: ``(last key, its unit)`` for each
        exception (a KV policy's parameters are token counts, but for a fraction).
    """

    name: str
    unit: str
    description: str
    axis: str = ""
    table: Row | TierRows | None = None
    csv: int | None = None
    golden: bool = False
    design: bool = False
    keys: tuple[str, ...] = ()
    path_key: bool = False
    parts: tuple[Field, ...] = ()
    is_list: bool = False
    sweep_only: bool = False
    group: str = ""
    key_units: tuple[tuple[str, str], ...] = ()

    def pattern(self, prefix: str = "") -> str:
        """The dotted name with its key levels, e.g. ``memory.<tier>.<use>``."""
        return prefix + self.name + "".join(f".<{k}>" for k in self.keys) + ("[]" if self.is_list else "")

    def axis_label(self, keys: Mapping[str, str] | None = None) -> tuple[str, float]:
        """``(axis label with unit, factor for the values)``."""
        values = _Placeholders(keys or {})
        values.update({k.upper(): v.upper() for k, v in values.items()})
        text = (self.axis or self.name).format_map(values)
        unit = dict(self.key_units).get((keys or {}).get(self.keys[-1], "") if self.keys else "", self.unit)
        shown, scale = AXIS_UNITS.get(unit, (unit, 1.0))
        if unit in ("", "1") or text.endswith(")") or _names(text, unit) or _names(text, shown):
            return text, 1.0
        return f"{text} ({shown})", scale


class _Placeholders(dict):
    """Key values for an axis text; a key not given shows as ``<key>``."""

    def __missing__(self, key: str) -> str:
        return f"<{key}>"


def _names(text: str, unit: str) -> bool:
    return re.search(rf"(?<![\w/]){re.escape(unit)}(?![\w/])", text) is not None


class Fields:
    """An ordered set of declared fields and the queries on it.

    Raises
    ------
    ValueError
        When two fields share a name, a CSV position or a table position.
    """

    def __init__(self, fields: Iterable[Field]) -> None:
        self.fields = tuple(fields)
        self._by_name = {f.name: f for f in self.fields}
        rows = [row.at for _, f in self.walk() if (row := f.table) is not None]
        positions = [f.csv for f in self.fields if f.csv is not None]
        for what, values in (("name", [f.name for f in self.fields]), ("CSV position", positions),
                             ("table position", rows)):
            repeated = sorted({v for v in values if values.count(v) > 1})
            if repeated:
                raise ValueError(f"results fields: {what} declared twice: {repeated}")

    def __iter__(self) -> Iterator[Field]:
        return iter(self.fields)

    def __getitem__(self, name: str) -> Field:
        return self._by_name[name]

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def extended(self, *fields: Field) -> Fields:
        """These fields and ``fields`` after them (a toy field in a test, say)."""
        return Fields(self.fields + fields)

    @property
    def design(self) -> tuple[str, ...]:
        """The docs/design.md §5 fields, in CSV order."""
        return tuple(f.name for f in sorted(self.fields, key=lambda f: (f.csv is None, f.csv or 0)) if f.design)

    @property
    def groups(self) -> tuple[str, ...]:
        """The opt-in groups fields declare, sorted."""
        return tuple(sorted({f.group for f in self.fields if f.group}))

    def in_group(self, group: str) -> tuple[str, ...]:
        """Names of the fields of an opt-in group."""
        return tuple(f.name for f in self.fields if f.group == group)

    @property
    def golden(self) -> tuple[str, ...]:
        """The fields kept in the goldens."""
        return tuple(f.name for f in self.fields if f.golden)

    def walk(self) -> Iterator[tuple[str, Field]]:
        """``(dotted path, field)`` of every field and part, parents before their parts; a path
        holds ``<key>`` for each key level and ``[]`` after a list."""
        def visit(field: Field, prefix: str) -> Iterator[tuple[str, Field]]:
            path = field.pattern(prefix)
            yield path, field
            for part in field.parts:
                yield from visit(part, path + ".")

        for field in self.fields:
            yield from visit(field, "")

    def resolve(self, column: str) -> tuple[Field, dict[str, str]] | None:
        """The field a CSV column holds and the values of its key levels (None if undeclared)."""
        names = column.split(".")
        field, i, keys = self._by_name.get(names[0]), 1, {}
        while field is not None and not field.is_list:
            if i == len(names):
                return field, keys
            if field.keys:
                if field.path_key:
                    values = names[i:i + len(field.keys) - 1] + [".".join(names[i + len(field.keys) - 1:])]
                else:
                    values = names[i:i + len(field.keys)]
                if len(values) < len(field.keys) or not all(values):
                    return None
                keys.update(zip(field.keys, values, strict=True))
                i = len(names) if field.path_key else i + len(field.keys)
                if i == len(names):
                    return field, keys
            field = next((p for p in field.parts if p.name == names[i]), None)
            i += 1
        return None

    def csv_order(self, columns: Iterable[str]) -> list[str]:
        """Columns of fields with a CSV position first, by position (a mapping's columns by name),
        then every other column by name."""
        def key(column: str) -> tuple[int, int, str]:
            field = self._by_name.get(column.split(".")[0])
            return (0, field.csv, column) if field is not None and field.csv is not None else (1, 0, column)

        return sorted(columns, key=key)

    def axis_label(self, column: str) -> tuple[str, float] | None:
        """``(label with unit, factor)`` for a declared column, None for another."""
        found = self.resolve(column)
        return found[0].axis_label(found[1]) if found is not None else None

    def table_rows(self) -> list[tuple[str, Row | TierRows]]:
        """``(dotted path, row)`` of every declared table row, in table order (a row of a mapping
        receives the whole mapping)."""
        rows = [(re.sub(r"\.<\w+>|\[\]", "", path), f.table) for path, f in self.walk() if f.table is not None]
        return sorted(rows, key=lambda item: item[1].at)

    def mismatches(self, record: Mapping[str, Any]) -> list[str]:
        """What a record holds that is not declared, and what is declared but missing; fixed parts
        are checked wherever the record holds them (empty when the record matches). A group's
        fields are all produced or all absent."""
        out = [f"{f.name}: declared but not produced" for f in self.fields
               if f.name not in record and not f.sweep_only
               and not (f.group and not any(name in record for name in self.in_group(f.group)))]
        out += [f"{name}: produced but not declared" for name in record if name not in self._by_name]
        for name, value in record.items():
            if name in self._by_name:
                out += _check(self._by_name[name], value, name)
        return out


def _check(field: Field, value: Any, path: str, depth: int = 0) -> list[str]:
    """Mismatches below ``field``'s value (``depth`` key levels already descended)."""
    if value is None:
        return []
    if depth < len(field.keys):
        if not isinstance(value, Mapping):
            return [f"{path}: expected a mapping by {field.keys[depth]}"]
        return [m for k, v in value.items() for m in _check(field, v, f"{path}.{k}", depth + 1)]
    if field.is_list:
        if not isinstance(value, (list, tuple)):
            return [f"{path}: expected a list"]
        return [m for item in value for m in _check_parts(field, item, path + "[]")]
    return _check_parts(field, value, path)


def _check_parts(field: Field, value: Any, path: str) -> list[str]:
    if not field.parts:
        return [f"{path}: expected a value, got a mapping"] if isinstance(value, Mapping) else []
    if not isinstance(value, Mapping):
        return [f"{path}: expected a mapping of {', '.join(p.name for p in field.parts)}"]
    names = {p.name for p in field.parts}
    out = [f"{path}.{p.name}: declared but not produced" for p in field.parts if p.name not in value]
    out += [f"{path}.{name}: produced but not declared" for name in value if name not in names]
    for part in field.parts:
        if part.name in value:
            out += _check(part, value[part.name], f"{path}.{part.name}")
    return out
