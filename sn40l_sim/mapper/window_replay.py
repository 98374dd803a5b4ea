"""A call or loop iteration of one section whose stream waits mid-way for a window's collective,
replayed chunk by chunk as the engine runs it: :func:`windowed_section_cycles`.

The engine (:func:`sn40l_sim.engine.kernel_process._stream_ahead`) cuts the section's chunks where
a window opens or closes (:mod:`.windows`), streams them ahead of the compute as far as the
read-ahead buffer allows (:mod:`.read_ahead`), and at each chunk's end, once the compute is done
with it and its buffer freed, opens and closes the windows there: a window's collective starts
``delay`` cycles after it opens, after the collective before it on the links, and ends no sooner
than its last data tile's share after it closes; the compute waits there for a window that closes
before the stream's end (its later tiles read the reduced rows) while the memory streams run on.
The links take the transfers in the order they are asked for: a collective's when its window opens,
its share's when its window has closed and its collective has ended.
This replays that arithmetic for a stream that shares nothing (the engine's collectives staging
their bytes through the stream's channel only slow it down), so where the stream would hide a
collective's wait the score hides it too; :func:`~.windows.exposed_cycles`, which counts the wait
where the compute starts, cannot see that.

Examples
--------
Four chunks of 1,000 cycles of stream and 100 of compute, a window over the second whose
collective takes 1,500 cycles: it opens when the first chunk is done (1,100) and closes when the
second is (2,100); the compute waits there until the collective ends (2,600) while the memory runs
on, so the stream (4,000 and its last tile's compute) still ends the section. Over the last chunk
the window opens at 3,100 and its collective outlasts the stream by 500 cycles.

>>> replay_windows((1, 1, 1, 1), (10,) * 4, (1000,) * 4, 100, 0, 0, 100, [(1, 2, 1500, 50)], 0)
(4100.0, 0.0)
>>> replay_windows((1, 1, 1, 1), (10,) * 4, (1000,) * 4, 100, 0, 0, 100, [(3, 4, 1500, 50)], 0)
(4100.0, 500.0)
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from sn40l_sim.hardware.spec import SocketSpec
from sn40l_sim.mapper.read_ahead import (
    CHUNKS_PER_SECTION,
    read_ahead_bytes,
    section_chunks,
    stream_ahead_cycles,
)
from sn40l_sim.mapper.windows import OverlapWindow, window_points, window_tiles

if TYPE_CHECKING:
    from sn40l_sim.mapper.plans import SectionPlan


def replay_windows(tiles: Sequence[int], sizes: Sequence[float], loads: Sequence[int], per_tile: int,
                   fill: int, gate: float, buffer: float, windows: Sequence[tuple[int, int, float, float]],
                   delay: float) -> tuple[float, float]:
    """``(end, after)``: when the compute of a stream of chunks (``tiles``, ``sizes``, ``loads`` as
    :func:`~.read_ahead.stream_ahead_cycles` takes them) is done, its waits mid-way included, and
    the cycles its last windows' collectives outlast it. ``windows``: ``(first, stop, body, tail)``
    per window, its data tiles ``[first, stop)`` (chunk boundaries), its collective's cycles and
    its last share's; each collective starts ``delay`` cycles after its window opens."""
    n_tiles = sum(tiles)
    links, after = 0.0, 0.0
    bodies: dict[int, float] = {}
    asked: list[tuple[float, int]] = []   # collectives asked for and not yet on the links

    def grant(until: float) -> None:
        # the links take what was asked for by ``until``, in the order it was asked for
        nonlocal links
        while asked and asked[0][0] <= until:
            at, j = asked.pop(0)
            bodies[j] = links = max(at, links) + windows[j][2]

    def reach(tile: int, now: float) -> float:
        nonlocal links, after
        for j, (first, _, _, _) in enumerate(windows):
            if first == tile:
                asked.append((now + delay, j))
        ends = []
        for j, (_, stop, _, tail) in enumerate(windows):
            if stop == tile:
                grant(now + delay if any(k == j for _, k in asked) else now)
                # the share the collective's own time past the window's end has not covered takes
                # the links once that has ended, after the transfers asked for before it
                needed = tail - max(0.0, bodies[j] - now)
                end = bodies[j]
                if needed > 0:
                    grant(max(now, bodies[j]) - 1e-9)
                    end = links = max(now, bodies[j], links) + needed
                ends.append(end)
        if tile < n_tiles:
            return max([now, *ends])
        after = max([after, *(end - now for end in ends)])
        return now

    return float(stream_ahead_cycles(tiles, sizes, loads, per_tile, fill, gate, buffer, reach)), float(after)


def windowed_section_cycles(socket: SocketSpec, plan: SectionPlan, fill: int, gate: float,
                            windows: Sequence[OverlapWindow], delay: float) -> tuple[float, float]:
    """``(cycles, after)`` of a one-section call or loop iteration ``plan`` with ``windows`` (see the
    module docstring): its stream from the ``gate`` and the ``fill`` before its compute, its waits
    mid-way included, and the cycles its last collectives outlast it."""
    n = plan.n_tiles
    tiles, sizes, loads = section_chunks(socket, plan, CHUNKS_PER_SECTION, window_points(windows, n))
    spans = []
    for w in windows:
        first, stop = window_tiles((w.start, w.end), n)
        spans.append((first, stop, float(w.body_cycles), float(w.tail_cycles(stop - first))))
    return replay_windows(tiles, sizes, loads, plan.compute_cycles_per_tile, fill, gate,
                          read_ahead_bytes(socket), spans, delay)
