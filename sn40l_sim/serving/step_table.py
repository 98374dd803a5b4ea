"""The decode steps of a serve, kept as one array of 64-bit integers rather than one tuple each.

A serve logs one :class:`~sn40l_sim.serving.serving_log.StepLog` per node and decode step, and a
busy serve takes a dozen steps per request (every arrival and every finish ends a run of identical
steps): a million Llama-3.1-8B requests took 12.3 million steps. As named tuples of Python
integers they held some 230 bytes each, most of the serve's memory (5.7 GB at its peak); as rows
of eight int64 they hold 64. The table reads like the list it replaces (length, iteration and
indexing give ``StepLog`` tuples, equality compares the steps), and :meth:`StepTable.column`
gives one field of every step as a numpy array for the metrics.

Examples
--------
>>> from sn40l_sim.serving.serving_log import StepLog
>>> table = StepTable()
>>> table.append(StepLog(0, 0, 10, 2, 2, 700, 2))
>>> table.extend([StepLog(0, 10, 20, 1, 2, 350, 1)])
>>> len(table), table[-1].kv_bytes, table.column("tokens").tolist()
(2, 350, [2, 1])
>>> table == [StepLog(0, 0, 10, 2, 2, 700, 2, 0), StepLog(0, 10, 20, 1, 2, 350, 1, 0)]
True
"""
from __future__ import annotations

import struct
from array import array
from collections.abc import Iterable, Iterator
from typing import overload

import numpy as np

from sn40l_sim.serving.serving_log import StepLog

_WIDTH = len(StepLog._fields)
#: fields held back before they are packed into the array (512 steps)
_PENDING_FIELDS = 512 * _WIDTH


class StepTable:
    """The decode steps of a serve in the order they were logged (a list of :class:`StepLog` in
    every way the serving loop and the report use one), stored as rows of ``int64``."""

    __slots__ = ("_rows", "_pending")

    def __init__(self, steps: Iterable[StepLog] = ()) -> None:
        self._rows = array("q")
        #: fields of the steps appended last, not yet in ``_rows``: an ``array`` converts each
        #: integer it is extended with twice (it checks, then stores), about half a microsecond a
        #: step; packed a few hundred steps at a time they cost a fifth of that
        self._pending: list[int] = []
        self.extend(steps)

    def append(self, step: StepLog | tuple[int, ...]) -> None:
        """Log one step (a ``StepLog`` or the tuple of its eight fields, in order)."""
        if len(step) != _WIDTH:
            raise ValueError(f"a step has {_WIDTH} fields ({', '.join(StepLog._fields)}), not {len(step)}")
        pending = self._pending
        pending.extend(step)
        if len(pending) >= _PENDING_FIELDS:
            self._settle()

    @property
    def _flat(self) -> array[int]:
        """Every step's fields, in order (what is pending packed in first)."""
        if self._pending:
            self._settle()
        return self._rows

    def _settle(self) -> None:
        pending = self._pending
        try:
            self._rows.frombytes(struct.pack(f"{len(pending)}q", *pending))
        except struct.error:     # a field that is no 64-bit integer: the array's own error (an
            # OverflowError or TypeError), raised when the step is packed, at the latest when read
            for value in pending:
                self._rows.append(value)
            raise
        finally:
            pending.clear()

    def extend(self, steps: Iterable[StepLog]) -> None:
        """Log several steps."""
        for step in steps:
            self.append(step)

    def column(self, field: str) -> np.ndarray:
        """One field of every step, in order (a new int64 array)."""
        return np.frombuffer(self._flat, dtype=np.int64).reshape(-1, _WIDTH)[:, StepLog._fields.index(field)].copy()

    def reorder(self, order: np.ndarray) -> None:
        """Put the steps in ``order`` (indices of the steps, each once)."""
        rows = np.frombuffer(self._flat, dtype=np.int64).reshape(-1, _WIDTH)[order]
        self._rows = array("q")
        self._rows.frombytes(rows.tobytes())

    def __len__(self) -> int:
        return len(self._flat) // _WIDTH

    def _row(self, i: int) -> StepLog:
        return StepLog._make(self._flat[i * _WIDTH:(i + 1) * _WIDTH])

    @overload
    def __getitem__(self, index: int) -> StepLog: ...

    @overload
    def __getitem__(self, index: slice) -> list[StepLog]: ...

    def __getitem__(self, index: int | slice) -> StepLog | list[StepLog]:
        if isinstance(index, slice):
            return [self._row(i) for i in range(*index.indices(len(self)))]
        n = len(self)
        if not -n <= index < n:
            raise IndexError(f"step {index} of {n}")
        return self._row(index % n)

    def __iter__(self) -> Iterator[StepLog]:
        flat, make = self._flat, StepLog._make
        for start in range(0, len(flat), _WIDTH):
            yield make(flat[start:start + _WIDTH])

    def __eq__(self, other: object) -> bool:
        if isinstance(other, StepTable):
            return self._flat == other._flat
        if isinstance(other, list):
            return len(other) == len(self) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable, as the list it replaces

    def __repr__(self) -> str:
        return f"StepTable({len(self)} steps)"
