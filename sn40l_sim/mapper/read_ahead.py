"""A looped kernel's iteration as the engine times it, read-ahead cap included:
:func:`looped_iteration_cycles`, the loop score of :func:`~sn40l_sim.mapper.kernel.map_kernel`.

A loop iteration (kernel looping, :mod:`.loops`) gets the socket when the previous iteration's
tiles are done and waits ``gate`` cycles for that iteration's collectives (its output). Meanwhile its
first section's memory streams run ahead into the PMUs, chunk by chunk, but at most
:func:`read_ahead_bytes` (``pmu.read_ahead_share`` of the SRAM, half on the SN40L: the PMUs
double-buffer, the other half holds what the running compute reads) ahead of the compute, so a stream larger than that waits for the compute
to free space once the gate has opened. The engine
(:func:`sn40l_sim.engine.kernel_process._stream_ahead`) runs it as events; this replays the same
arithmetic, chunk by chunk, for a stream that shares its channel with nothing:

- the data tiles are grouped into the engine's chunks (:func:`chunk_tiles`, at most
  :data:`CHUNKS_PER_SECTION`, cut where a window opens or closes: :func:`cut_chunks`), chunk ``i`` carrying ``s_i`` bytes whose stream takes ``d_i``
  cycles (each tier's bytes at the rate its memory stage issues them, the slowest tier);
- the stream of chunk ``i`` starts when chunk ``i - 1`` has arrived and, while the chunks loaded
  and not yet consumed would exceed the buffer with it, the oldest of them has been consumed:
  ``ls_i = max(le_{i-1}, ce_j)`` for the last such ``j``; it arrives at ``le_i = ls_i + d_i``;
- the compute starts after the gate and the pipeline fill (``t = gate + fill``) and takes each chunk
  when its stream has started, ``t = max(t, ls_i) + n_i x C``, then, if the chunk has not arrived
  by then, its last tile after it: ``t = le_i + C`` (``C`` the slowest compute stage per data tile);
  chunk ``i`` is consumed at ``ce_i = t``.

Section 0 takes ``ce`` of its last chunk; every later section (its configuration loaded each
iteration, :mod:`.kernel`) takes its fill and, chunk by chunk, the longer of the chunk's stream and
its compute. Without the cap (a stream within the buffer) and with whole chunks, section 0 is
``max(stream + C, gate + fill + n_tiles x C)`` but for a last chunk that arrives less than ``C``
before the compute would be done with it: the engine lets a chunk's tiles compute while it arrives
and charges the last tile after it only when the chunk is late.

A chunk's end is no pause of the memory stage: each tier's stream of a chunk ends at the whole
cycle after its last byte, and the fraction of that cycle after it streams the next chunk's bytes
when the next chunk starts then (:class:`RunOn`, as the engine's fluid network carries them).

What the engine has and this leaves out: the previous iteration's collectives stage their bytes
through the same memory channel while the stream runs ahead (they may slow each other; the replay
of a section with windows, :mod:`.window_replay`, has its windows' collectives' staging through
``arrive``), two tiers streaming one chunk share the TLN, and the fluid network's whole-cycle
wake-ups.

Examples
--------
A stream of 8 chunks of 100 MB at 1,000 cycles each, behind a gate of 5,000 cycles, with 100
compute cycles per chunk: within a 1 GB buffer five chunks have arrived when the gate opens and the
iteration ends with the stream (8,000 cycles) and the last chunk's compute; within 250 MB two
chunks load ahead, the third starts when the compute is done with the first (5,200), and the
stream ends 3,200 cycles later than it could.

>>> tiles, sizes, loads = (1,) * 8, (10**8,) * 8, (1000,) * 8
>>> stream_ahead_cycles(tiles, sizes, loads, 100, fill=100, gate=5000, buffer=10**9)
8100
>>> stream_ahead_cycles(tiles, sizes, loads, 100, fill=100, gate=5000, buffer=2.5 * 10**8)
11300
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from itertools import accumulate
from typing import TYPE_CHECKING

from sn40l_sim.hardware import figures
from sn40l_sim.hardware.spec import SocketSpec

if TYPE_CHECKING:
    from sn40l_sim.mapper.plans import SectionPlan

#: most chunks a section's data tiles are grouped into by the engine (its default
#: ``EngineOptions.chunks_per_section``); a loop's score replays the engine's chunks
CHUNKS_PER_SECTION = 8


def read_ahead_bytes(socket: SocketSpec) -> float:
    """Bytes a loop iteration may stream into the PMUs ahead of its compute: the socket's SRAM times
    the hardware file's ``pmu.read_ahead_share`` (half on the SN40L: the PMUs double-buffer, the
    other half holds what the running compute reads).

    >>> from sn40l_sim.mapper._examples import example_socket
    >>> read_ahead_bytes(example_socket()) / 2**20
    260.0
    """
    return figures.sram_bytes(socket) * socket.pmu.read_ahead_share


def chunk_tiles(n_tiles: int, chunks: int) -> tuple[int, ...]:
    """Split ``n_tiles`` into at most ``chunks`` near-equal chunks (larger ones first).

    >>> chunk_tiles(10, 4), chunk_tiles(3, 8), chunk_tiles(0, 8)
    ((3, 3, 2, 2), (1, 1, 1), (1,))
    """
    n_tiles = max(1, n_tiles)
    count = max(1, min(chunks, n_tiles))
    base, extra = divmod(n_tiles, count)
    return tuple(base + 1 if i < extra else base for i in range(count))


def stream_ahead_cycles(tiles: Sequence[int], sizes: Sequence[float], loads: Sequence[int], per_tile: int,
                        fill: int, gate: float, buffer: float,
                        reach: Callable[[int, float], float] | None = None,
                        arrive: Callable[[int, float], float] | None = None) -> float:
    """Cycles of a loop iteration's first section (see the module docstring): chunks of ``tiles``
    data tiles and ``sizes`` bytes whose streams take ``loads`` cycles alone, ``per_tile`` compute
    cycles per data tile, the ``fill`` after the ``gate``, and at most ``buffer`` bytes loaded
    ahead of the compute. ``reach(tile, cycle)``, when given, is when the compute goes on after it
    has reached data tile ``tile`` at ``cycle`` (at the start and after each chunk; a wait there
    for a window's collective, :mod:`.window_replay`). ``arrive(chunk, cycle)``, when given, is when
    chunk ``chunk`` whose stream starts at ``cycle`` has arrived (default: ``loads`` after; a
    stream sharing its channel with collectives' staging, :mod:`.window_replay`); it is asked
    after every earlier chunk's ``reach``."""
    consumed: list[float] = []
    memory = ahead = oldest = first = 0
    compute = gate + fill if reach is None else reach(0, gate + fill)
    for i, (n, size, load) in enumerate(zip(tiles, sizes, loads, strict=True)):
        while oldest < i and ahead + size > buffer:
            memory = max(memory, consumed[oldest])
            ahead -= sizes[oldest]
            oldest += 1
        started, memory = memory, (memory + load if arrive is None else arrive(i, memory))
        ahead += size
        compute = max(compute, started) + n * per_tile
        if memory > compute:
            compute = memory + per_tile
        consumed.append(compute)
        first += n
        if reach is not None:
            compute = reach(first, compute)
    return compute


class RunOn:
    """``arrive`` for :func:`stream_ahead_cycles`: a section's memory stage across its chunks'
    ends, as the engine runs it ahead (``_stream_ahead``, :mod:`sn40l_sim.engine.kernel_process`).

    Each tier's stream of chunk ``i`` (``streams``: tier -> each chunk's bytes there and the rate
    the section streams them at alone, :func:`tier_chunks`) ends at the whole cycle after its last
    byte, the chunk once every tier's has. The chunk boundaries are the engine's grouping of data
    tiles, not a pause of the memory stage: what a tier's stream moves in that last cycle past its
    last byte is the start of its next chunk's bytes, when that chunk starts as this one arrives. A
    stream that waited for buffer space starts its next chunk afresh. Left out, every chunk's end
    cost a fraction of a cycle, and where a collective's staging shared that cycle its pace decided
    which whole cycle a chunk ended at, so faster links could end an iteration a cycle later
    (docs/validation.md, "A loop's last windows").

    Examples
    --------
    1,001 and 999 bytes at 10 a cycle: the first chunk ends at cycle 101 with 9 bytes of the second
    moved, which then ends at 200, not 201; started later, it takes its 100 whole cycles.

    >>> run = RunOn({"hbm": ([1001, 999], 10.0)})
    >>> run.arrive(0, 0), run.arrive(1, 101)
    (101, 200)
    >>> RunOn({"hbm": ([1001, 999], 10.0)}).arrive(1, 150)
    250
    """

    def __init__(self, streams: dict[str, tuple[Sequence[int], float]]) -> None:
        self.streams = streams
        self._moved = dict.fromkeys(streams, 0.0)
        self._last: float | None = None

    def arrive(self, i: int, start: float, shared: tuple[str, Callable[[float, float], float],
                                                   Callable[[float, float], float]] | None = None) -> float:
        """When chunk ``i``, its streams started at ``start``, has arrived. ``shared``: ``(tier,
        end, moved)`` for a tier whose stream shares its path now: ``end(start, n_bytes)`` the
        cycle (unrounded) its ``n_bytes`` from ``start`` have moved by, ``moved(a, b)`` the bytes
        it moves from ``a`` to ``b`` (:mod:`.window_replay`); the others stream alone."""
        if start != self._last:
            self._moved = dict.fromkeys(self.streams, 0.0)
        done = start
        for tier, (parts, rate) in self.streams.items():
            if not parts[i]:
                continue   # a tier without bytes in this chunk keeps what it moved ahead
            left = parts[i] - self._moved[tier]
            # the engine's completion tolerance (sn40l_sim/engine/fluid_lone.py): bytes moved ahead
            # that cover the chunk complete it at once, any beyond it carried on
            if left <= 1e-9 * parts[i] + 1e-6:
                self._moved[tier] = max(0.0, -left)
                continue
            if shared is not None and shared[0] == tier:
                end = shared[1](start, left)
                ends = max(start + 1, math.ceil(end - 1e-9))
                self._moved[tier] = max(0.0, shared[2](end, ends))
            else:
                end = start + left / rate
                ends = max(start + 1, math.ceil(end - 1e-9))
                self._moved[tier] = max(0.0, (ends - end) * rate)
            done = max(done, ends)
        self._last = done
        return done


def cut_chunks(tiles: Sequence[int], points: Sequence[int]) -> tuple[int, ...]:
    """``tiles`` (chunks of data tiles) cut at the data tiles ``points``, as the engine's stream
    ahead cuts them where a window opens or closes (its data must have arrived there).

    >>> cut_chunks((3, 3, 2, 2), (4, 6, 9))
    (3, 1, 2, 2, 1, 1)
    """
    out: list[int] = []
    first = 0
    for n in tiles:
        edges = [first, *(t for t in sorted(set(points)) if first < t < first + n), first + n]
        out.extend(b - a for a, b in zip(edges, edges[1:], strict=False))
        first += n
    return tuple(out)


def tier_chunks(socket: SocketSpec, plan: SectionPlan, tiles: Sequence[int]) -> dict[str, tuple[list[int], float]]:
    """Tier -> (each chunk's bytes there, the rate in bytes per cycle the section streams them at)
    for the chunks ``tiles`` of ``plan`` (the engine's
    :class:`~sn40l_sim.engine.kernel_costs.SectionCosts`: integer shares of each tier's bytes, each
    tier streamed at the rate its slowest memory stage issues, within the tier's channel); tiers
    the section does not stream left out."""
    n = sum(tiles)
    out = {}
    for tier in socket.memory:
        total = plan.tier_bytes(tier)
        # the memory stage's unrounded stream per data tile, as the engine caps the stream
        worst = max((st.paced_cycles for st in plan.stages if st.is_memory and st.resource == tier), default=0)
        if not total or not worst:
            continue
        spec = socket.memory[tier]
        channel = figures.memory_bytes_per_s(socket, tier) * spec.efficiency / socket.clock_hz
        edges = [total * first // n for first in accumulate(tiles, initial=0)]
        out[tier] = ([b - a for a, b in zip(edges, edges[1:], strict=False)], min(total / n / worst, channel))
    return out


def section_chunks(socket: SocketSpec, plan: SectionPlan, chunks: int,
            points: Sequence[int] = ()) -> tuple[tuple[int, ...], list[int], list[int]]:
    """Tiles, bytes and stream cycles (the slowest tier's, :func:`tier_chunks`) of each chunk of
    ``plan``, cut at the data tiles ``points``."""
    return section_streams(socket, plan, chunks, points)[:3]


def section_streams(socket: SocketSpec, plan: SectionPlan, chunks: int, points: Sequence[int] = ()
                    ) -> tuple[tuple[int, ...], list[int], list[int], dict[str, tuple[list[int], float]]]:
    """:func:`section_chunks` and the chunks' :func:`tier_chunks`."""
    tiles = cut_chunks(chunk_tiles(plan.n_tiles, chunks), points)
    sizes, loads = [0] * len(tiles), [0] * len(tiles)
    streams = tier_chunks(socket, plan, tiles)
    for parts, rate in streams.values():
        for i, part in enumerate(parts):
            sizes[i] += part
            loads[i] = max(loads[i], math.ceil(part / rate - 1e-9))
    return tiles, sizes, loads, streams


def looped_iteration_cycles(socket: SocketSpec, plans: Sequence[SectionPlan], fill: int, gate: int,
                            configs: Sequence[int] = (), chunks: int = CHUNKS_PER_SECTION,
                            points: Sequence[int] = ()) -> int:
    """Cycles of one iteration of a looped kernel of sections ``plans`` (the engine's fill ``fill``
    in every section), waiting ``gate`` cycles for the previous iteration's collectives, the
    configuration loads left out. ``configs``: each section's configuration load when there are
    several (each is loaded every iteration; the gate elapses while section 0's loads).
    ``points``: the data tiles where a window opens or closes, which cut section 0's chunks."""
    buffer = read_ahead_bytes(socket)
    reload_first = configs[0] if len(plans) > 1 and configs else 0
    total = 0
    for index, plan in enumerate(plans):
        tiles, sizes, loads, streams = section_streams(socket, plan, chunks, points if index == 0 else ())
        per_tile = plan.compute_cycles_per_tile
        if index == 0:
            total += stream_ahead_cycles(tiles, sizes, loads, per_tile, fill, max(0, gate - reload_first), buffer,
                                         arrive=RunOn(streams).arrive)
        else:
            total += fill + sum(max(load, n * per_tile) for n, load in zip(tiles, loads, strict=True))
    return total
