"""Trace events of a simulated phase, and their Chrome-trace (``chrome://tracing``) form.

Examples
--------
>>> ev = TraceEvent("L3.mha", "mha", socket=0, start_cycle=1600, end_cycle=4800, layer=3)
>>> ev.cycles
3200
>>> chrome_trace([ev], clock_hz=1.6e9)[0]["dur"]
2.0
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class TraceEvent:
    """One interval on one socket.

    Attributes
    ----------
    name : str
        Kernel or collective name.
    kind : str
        Kernel kind (``qkv``, ``mha``, ``moe_ffn``, ...) or collective kind (``all_reduce``, ...).
    socket : int
        Socket the interval ran on.
    start_cycle, end_cycle : int
        Interval in RDU cycles from the start of the phase.
    layer : int or None
        Model layer of the kernel.
    category : str
        ``kernel`` (the whole kernel), ``setup`` (call overhead, reconfiguration and pipeline fill),
        ``stream`` (tiles streaming) or ``collective``.
    """

    name: str
    kind: str
    socket: int
    start_cycle: int
    end_cycle: int
    layer: int | None = None
    category: str = "kernel"

    @property
    def cycles(self) -> int:
        """Length of the interval."""
        return self.end_cycle - self.start_cycle

    def shifted(self, cycles: int) -> TraceEvent:
        """The same event ``cycles`` later (to lay phases end to end)."""
        return TraceEvent(self.name, self.kind, self.socket, self.start_cycle + cycles,
                          self.end_cycle + cycles, self.layer, self.category)


def chrome_trace(events: Iterable[TraceEvent], clock_hz: float, offset_cycles: int = 0) -> list[dict]:
    """Complete (``"ph": "X"``) Chrome-trace events in microseconds: one process per socket, one
    thread per category, so kernels, their set-up and their collectives stack in separate rows."""
    rows = {"kernel": 0, "setup": 1, "stream": 2, "collective": 3}
    out = []
    for ev in events:
        out.append({
            "name": ev.name, "cat": ev.category, "ph": "X", "pid": ev.socket,
            "tid": rows.get(ev.category, 4),
            "ts": (ev.start_cycle + offset_cycles) / clock_hz * 1e6,
            "dur": ev.cycles / clock_hz * 1e6,
            "args": {"kind": ev.kind, "layer": ev.layer, "cycles": ev.cycles},
        })
    return out
