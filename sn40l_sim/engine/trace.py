"""Trace events of a simulated phase (the report turns them into Chrome traces:
:mod:`sn40l_sim.report.chrome_trace`).

Examples
--------
>>> ev = TraceEvent("L3.mha", "mha", socket=0, start_cycle=1600, end_cycle=4800, layer=3)
>>> ev.cycles
3200
"""
from __future__ import annotations

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
        ``kernel`` (the whole kernel), ``setup`` (launch, barrier, configuration and pipeline fill),
        ``stream`` (tiles streaming), ``collective``, or ``loop`` (the calls a kernel loop runs as one).
    detail : tuple of (str, int)
        What else the interval carries, shown with it: a collective's bytes as the graph gives them
        (``bytes`` of the whole tensor, ``group``) and as they moved (``sent_bytes`` by this socket,
        ``link_bytes`` over every link, ``staged_bytes`` through its memory); a loop's ``iterations``.
    """

    name: str
    kind: str
    socket: int
    start_cycle: int
    end_cycle: int
    layer: int | None = None
    category: str = "kernel"
    detail: tuple[tuple[str, int], ...] = ()

    @property
    def cycles(self) -> int:
        """Length of the interval."""
        return self.end_cycle - self.start_cycle
