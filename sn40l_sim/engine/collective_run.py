"""A collective as it runs beside a kernel: its record (:class:`CollectiveRun`) and the SimPy
process that holds the socket's links for it and stages its bytes through memory
(:mod:`.kernel_process` starts it, at once or in its window of the stream, :mod:`.windows`).
"""
from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import simpy

from sn40l_sim.engine.collectives import CollectiveResult
from sn40l_sim.engine.resources import SocketResources
from sn40l_sim.engine.staging import staged_bytes
from sn40l_sim.ir import Collective


@dataclass
class CollectiveRun:
    """One collective as it ran: when (``ready``, ``start``, ``end``: absolute cycles), and what
    :class:`~sn40l_sim.engine.collectives.CollectiveModel` said it costs."""

    collective: Collective
    result: CollectiveResult
    ready: int = 0
    start: int = 0
    end: int = 0
    #: bytes the collective read from and wrote to the socket's memory
    staged_bytes: int = 0


def start_collective(res: SocketResources, run: CollectiveRun, delay: int, staged: bool) -> simpy.Process:
    """:func:`collective_process` as a process, counted alive (``res.live_collectives``) from now until
    it ends."""
    res.live_collectives += 1
    return res.env.process(collective_process(res, run, delay, staged))


def collective_process(res: SocketResources, run: CollectiveRun, delay: int,
                staged: bool) -> Generator[simpy.Event, Any, None]:
    """The collective on the socket's links. With ``staged``, the bytes the socket receives are
    written to memory and, unless the collective is overlapped (then it sends tiles straight from
    the PMUs as the kernel produces them), the bytes it sends are read from memory; at the links'
    pace, sharing the memory channel with the kernel's streams (a starved stream slows the
    collective down). Every member sends as much as it receives in these collectives."""
    env = res.env
    if delay:
        yield env.timeout(delay)
    run.ready = env.now
    with res.p2p.request() as links:
        yield links
        run.start = env.now
        cycles = run.result.cycles
        waits = [env.timeout(cycles)] if cycles else []
        staging = staged_bytes(run.collective, run.result) if staged else 0
        if staging and cycles:
            waits.append(res.net.transfer(res.memory_path(res.staging_tier), staging, cap=staging / cycles))
            run.staged_bytes = staging
        if waits:
            yield env.all_of(waits) if len(waits) > 1 else waits[0]
        run.end = env.now
    res.live_collectives -= 1
