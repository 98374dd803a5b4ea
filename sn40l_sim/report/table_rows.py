"""Rows of the side-by-side table ``run`` prints, as a results field declares them
(:class:`~sn40l_sim.report.registry.Field` ``table=``): a :class:`Row` shows one value, a
:class:`TierRows` a per-tier memory mapping as rows generated from the tiers the records hold.

Examples
--------
>>> Row(10, "decode step (ms)", ".2f", 1e3).lines("decode_step_s", [{"decode_step_s": 0.0875}, {}])
[('decode step (ms)', ['87.50', None])]
>>> mem = {"memory": {"hbm": {"weights": 2**31, "kv": 0, "free": 2**30}, "ddr": {"kv": 0, "free": 2**40}}}
>>> [(label, cells[0]) for label, cells in TierRows(220).lines("memory", [mem])]
[('HBM/socket weights (GiB)', '2.00'), ('HBM/socket KV (GiB)', '0.00'), ('HBM/socket reserved (GiB)', None), ('HBM/socket free (GiB)', '1.00'), ('DDR/socket used (GiB)', '0.00'), ('DDR/socket reserved (GiB)', None), ('DDR/socket free (GiB)', '1024.0')]
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

GIB = 2**30


@dataclass(frozen=True)
class Row:
    """One row of the side-by-side table ``run`` prints (:mod:`sn40l_sim.report.table`).

    Parameters
    ----------
    at : int
        Position: rows are printed in increasing ``at`` whatever field declares them.
    label : str
        The row's label, with the unit the cells are shown in.
    fmt : str
        Format spec of ``value * scale``; empty prints ``str(value)``.
    scale : float
        Factor from the field's unit to the shown one (``1e3`` for s -> ms).
    shown_with : str
        A field the record must hold for the row to show (empty: always).
    """

    at: int
    label: str
    fmt: str = ""
    scale: float = 1.0
    #: a field the record must hold for the row to show its value (empty: always): rows for the
    #: experiments that state SLOs, so that the tables of the others stay as they were
    shown_with: str = ""

    def lines(self, path: str, records: Sequence[Mapping[str, Any]]) -> list[tuple[str, list[str | None]]]:
        """``[(label, cell per record)]``; a cell is None where the record has no value (or not
        the field ``shown_with`` names)."""
        return [(label, [self.cell(v) for v in values]) for label, values in self.values(path, records)]

    def values(self, path: str, records: Sequence[Mapping[str, Any]]) -> list[tuple[str, list[Any]]]:
        """``[(label, unrounded value per record)]``, the values :meth:`lines` shows."""
        return [(self.label, [value_at(r, path) if not self.shown_with or value_at(r, self.shown_with)
                              is not None else None for r in records])]

    def describe(self) -> str:
        """How ``docs/results.md`` names the row."""
        return self.label + (f" (with `{self.shown_with}`)" if self.shown_with else "")

    def cell(self, value: Any) -> str | None:
        """The formatted value (None for a missing one)."""
        if value is None:
            return None
        return shown(value * self.scale, self.fmt) if self.fmt else str(value)


@dataclass(frozen=True)
class TierRows:
    """Rows of a ``<tier>.<use>`` memory mapping in bytes, shown in GiB, generated from the tiers
    the records hold, in the order the first record holding each lists them.

    A tier that holds bytes in some record shows one row per use (``uses`` first, then any other in
    name order); a tier that holds none, a single ``used`` row. Then one row per entry of ``totals``.
    A value of 1000 GiB or more is shown with ``wide_fmt`` to keep the column narrow.
    """

    at: int
    label: str = "{TIER}/socket {use} (GiB)"
    uses: tuple[str, ...] = ("weights", "kv", "activations")
    totals: tuple[str, ...] = ("reserved", "free")
    #: entries of a tier that are not a use of its bytes
    not_uses: tuple[str, ...] = ("reserved", "free", "capacity")
    #: (use, label) where the label differs from the use's name
    use_labels: tuple[tuple[str, str], ...] = (("kv", "KV"),)
    #: (use, format spec) where the format differs from ``fmt``
    use_fmts: tuple[tuple[str, str], ...] = (("activations", ".3f"),)
    fmt: str = ".2f"
    wide_fmt: str = ".1f"

    def lines(self, path: str, records: Sequence[Mapping[str, Any]]) -> list[tuple[str, list[str | None]]]:
        """``[(label, cell per record)]`` for every tier present under ``path``."""
        return [(self._label(tier, use), [self._cell(use, v) for v in values])
                for tier, use, values in self._rows(path, records)]

    def values(self, path: str, records: Sequence[Mapping[str, Any]]) -> list[tuple[str, list[Any]]]:
        """``[(label, unrounded bytes per record)]``, the values :meth:`lines` shows in GiB (a ratio
        of the shown cells would say 1 for 0.002 GiB against 0.0024)."""
        return [(self._label(tier, use), values) for tier, use, values in self._rows(path, records)]

    def _rows(self, path: str, records: Sequence[Mapping[str, Any]]) -> list[tuple[str, str, list[Any]]]:
        """``[(tier, use, bytes per record)]`` in the order the rows are shown."""
        tables = [value_at(r, path) or {} for r in records]
        tiers = list(dict.fromkeys(tier for table in tables for tier in table))
        out = []
        for tier in tiers:
            rows = [t.get(tier) or {} for t in tables]
            present = {use for row in rows for use in row if use not in self.not_uses}
            holds = any(row.get(use) for row in rows for use in present)
            uses = [u for u in self.uses if u in present] + sorted(present - set(self.uses)) if holds else ["used"]
            for use in uses:
                out.append((tier, use, [self._used(row) if use == "used" else row.get(use) for row in rows]))
            for total in self.totals:
                out.append((tier, total, [row.get(total) for row in rows]))
        return out

    def describe(self) -> str:
        """How ``docs/results.md`` names the rows."""
        label = self.label.format(tier="<tier>", TIER="<TIER>", use="<use>")
        return f"{label}, per tier: one row per use (`used` for an empty tier), then {', '.join(self.totals)}"

    def _used(self, row: Mapping[str, Any]) -> int | None:
        # a use results.json gives as null (a figure the point does not have) leaves the sum unknown:
        # summed, it stopped compare with a TypeError traceback
        used = [n for use, n in row.items() if use not in self.not_uses]
        return sum(used) if row and None not in used else None

    def _label(self, tier: str, use: str) -> str:
        return self.label.format(tier=tier, TIER=tier.upper(), use=dict(self.use_labels).get(use, use))

    def _cell(self, use: str, value: Any) -> str | None:
        if value is None:
            return None
        gib = value / GIB
        # as Row's cells: 64 KiB of decode activations showed as "0.000", a silently wrong number
        return shown(gib, dict(self.use_fmts).get(use, self.wide_fmt if gib >= 1000 else self.fmt))


def shown(value: float, fmt: str) -> str:
    """``value`` in the format ``fmt``, or in two significant figures where ``fmt`` would print a
    non-zero value as zero (a silently wrong number); a zero stays in ``fmt``.

    >>> shown(0.25, ".4f"), shown(0.0, ".4f"), shown(1e-6, ".4f"), shown(-3.2e-5, ".1f")
    ('0.2500', '0.0000', '1e-06', '-3.2e-05')
    """
    text = format(value, fmt)
    try:
        zero = float(text) == 0
    except ValueError:   # a format that does not print a plain number (e.g. with thousands separators)
        return text
    return format(value, ".2g") if zero and value and math.isfinite(value) else text




def value_at(record: Mapping[str, Any], path: str) -> Any:
    """The value at a dotted path of a record (None where any step is missing or None).

    >>> value_at({"latency": {"ttft_s": {"p99": 2.0}}}, "latency.ttft_s.p99"), value_at({}, "a.b")
    (2.0, None)
    """
    value: Any = record
    for part in path.split("."):
        if not isinstance(value, Mapping) or value.get(part) is None:
            return None
        value = value[part]
    return value
