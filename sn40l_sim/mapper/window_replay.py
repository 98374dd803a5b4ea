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
This replays that arithmetic, so where the stream would hide a collective's wait the score hides it
too; :func:`~.windows.exposed_cycles`, which counts the wait where the compute starts, cannot see
that. A collective writes what it receives to the activations' tier while it holds the links, and
the engine shares the tier between that and the stream, max-min fair: the replay slows each chunk's
stream there by the staging running meanwhile (:func:`shared_arrival`), this iteration's and the
previous one's still running (``carried``). Left out, it made a memory-bound chunk that arrived
just after the compute was done with it cost a whole data tile more in the engine than scored,
and the mapper chose such plans (docs/validation.md, "Faster links or HBM, a slower step").

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

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sn40l_sim.hardware import figures
from sn40l_sim.hardware.spec import SocketSpec
from sn40l_sim.mapper.read_ahead import (
    CHUNKS_PER_SECTION,
    RunOn,
    read_ahead_bytes,
    section_streams,
    stream_ahead_cycles,
    tier_chunks,
)
from sn40l_sim.mapper.windows import OverlapWindow, window_points, window_tiles

if TYPE_CHECKING:
    from sn40l_sim.mapper.plans import SectionPlan


#: a collective's staging as the replay runs it: ``(start, end, bytes per cycle)``
Span = tuple[float, float, float]


@dataclass(frozen=True)
class StagedStream:
    """The part of a section's stream in the tier its collectives stage through: each chunk's
    bytes there (``parts``), the rate the section streams them at alone, the tier's path's
    ``capacity`` (its channel or the TLN, the narrower; bytes per cycle) and each chunk's stream
    cycles in the other tiers (``others``), which the staging does not touch; ``tier`` names it
    for a replay whose streams run on across the chunks' ends (:class:`~.read_ahead.RunOn`)."""

    parts: Sequence[int]
    rate: float
    capacity: float
    others: Sequence[int]
    tier: str | None = None


def stream_share(rate: float, pace: float, capacity: float) -> float:
    """The rate a stream wanting ``rate`` gets from a path of ``capacity`` while a staging flow
    wants ``pace`` (the engine's max-min fair sharing, :mod:`sn40l_sim.engine.fluid`).

    >>> stream_share(900, 50, 1000), stream_share(900, 100, 1000), stream_share(300, 900, 1000)
    (900, 900, 300)
    >>> stream_share(950, 100, 1000), stream_share(900, 700, 1000)
    (900, 500.0)
    """
    if rate + pace <= capacity:
        return rate
    if pace <= capacity / 2:
        return capacity - pace
    return min(rate, capacity / 2)


def shared_bytes(start: float, stop: float, rate: float, capacity: float, spans: Sequence[Span]) -> float:
    """The bytes a stream at ``rate`` moves from ``start`` to ``stop`` sharing the path with the
    staging ``spans`` (:func:`shared_arrival`'s sharing, the other way round).

    >>> shared_bytes(0, 120, 10, 10, [(20, 60, 5)]), shared_bytes(118.5, 120, 10, 10, [(20, 60, 5)])
    (1000.0, 15.0)
    """
    t, moved = float(start), 0.0
    rate = min(rate, capacity)
    for a, e, pace in sorted(spans):
        if e <= t:
            continue
        if a >= stop:
            break
        if a > t:
            moved += (a - t) * rate
            t = a
        until = min(e, stop)
        moved += (until - t) * stream_share(rate, pace, capacity)
        t = until
    return moved + max(0.0, stop - t) * rate


def shared_arrival(start: float, n_bytes: float, rate: float, capacity: float, spans: Sequence[Span]) -> float:
    """When ``n_bytes`` streamed from ``start`` at ``rate`` have arrived, sharing the path with the
    staging ``spans`` (one at a time: they are the collectives' times on the socket's links).

    >>> shared_arrival(0, 1000, 10, 10, [(20, 60, 5)])   # half the rate for 40 cycles
    120.0
    """
    t, left = float(start), float(n_bytes)
    rate = min(rate, capacity)
    for a, e, pace in sorted(spans):
        if e <= t:
            continue
        if a > t:
            if left <= (a - t) * rate:
                break
            left -= (a - t) * rate
            t = a
        share = stream_share(rate, pace, capacity)
        if left <= (e - t) * share:
            return t + left / share
        left -= (e - t) * share
        t = e
    return t + left / rate


@dataclass(frozen=True)
class Replay:
    """A replayed stream: when its compute is done (``end``), the cycles its last windows'
    collectives outlast it (``after``) and the staging of those still running then, counted from
    its end (``carry``: the next loop iteration's stream shares its first cycles with them)."""

    end: float
    after: float
    carry: tuple[Span, ...] = ()


def replay_windows(tiles: Sequence[int], sizes: Sequence[float], loads: Sequence[int], per_tile: int,
                   fill: int, gate: float, buffer: float, windows: Sequence[tuple[float, ...]],
                   delay: float, staged: StagedStream | None = None, carried: Sequence[Span] = ()) -> tuple[float, float]:
    """``(end, after)`` of :func:`replay_stream`."""
    got = replay_stream(tiles, sizes, loads, per_tile, fill, gate, buffer, windows, delay, staged, carried)
    return got.end, got.after


def replay_stream(tiles: Sequence[int], sizes: Sequence[float], loads: Sequence[int], per_tile: int,
                  fill: int, gate: float, buffer: float, windows: Sequence[tuple[float, ...]],
                  delay: float, staged: StagedStream | None = None, carried: Sequence[Span] = (),
                  run_on: RunOn | None = None) -> Replay:
    """When the compute of a stream of chunks (``tiles``, ``sizes``, ``loads`` as
    :func:`~.read_ahead.stream_ahead_cycles` takes them) is done, its waits mid-way included, and
    the cycles its last windows' collectives outlast it. ``windows``: ``(first, stop, body, tail)``
    or ``(first, stop, body, tail, staged bytes)`` per window, its data tiles ``[first, stop)``
    (chunk boundaries), its collective's cycles, its last share's (or a function of the cycles
    that cover it giving its time past them when positive,
    :meth:`~.windows.OverlapWindow.tail_beyond`) and the bytes it stages while on the links; each
    collective starts ``delay`` cycles after its window opens. With ``staged``, a chunk's stream in
    the staging tier shares it with the collectives staging then, and with the ``carried``
    staging of the previous loop iteration's. With ``run_on`` (each tier's bytes of each chunk),
    the streams run on across the chunks' ends (:class:`~.read_ahead.RunOn`; ``staged`` then
    names its tier); without, each chunk arrives its ``loads`` after it starts, or, sharing, at the
    whole cycle after its last byte."""
    n_tiles = sum(tiles)
    links, after, end = 0.0, 0.0, 0.0
    bodies: dict[int, float] = {}
    asked: list[tuple[float, int]] = []   # collectives asked for and not yet on the links
    spans: list[Span] = list(carried)

    def on_links(at: float, j: int, free: float) -> tuple[float, Span | None]:
        # a collective asked for at ``at`` on links free from ``free``: its end and its staging
        body = windows[j][2]
        begin = max(at, free)
        rate = windows[j][4] / body if len(windows[j]) > 4 and body else 0.0
        return begin + body, ((begin, begin + body, rate) if rate else None)

    def grant(until: float) -> None:
        # the links take what was asked for by ``until``, in the order it was asked for
        nonlocal links
        while asked and asked[0][0] <= until:
            at, j = asked.pop(0)
            links, span = on_links(at, j, links)
            bodies[j] = links
            if span:
                spans.append(span)

    def arrive(i: int, start: float) -> float:
        # the staging of the collectives on the links or asked for by now (the later ones are
        # asked for once the compute is done with this chunk, after its stream)
        late = list(spans)
        free = links
        for at, j in asked:
            free, span = on_links(at, j, free)
            if span:
                late.append(span)
        alone = start + loads[i]
        if staged is None or not staged.parts[i] or not any(a < alone and e > start for a, e, _ in late):
            return alone if run_on is None else run_on.arrive(i, start)
        if run_on is not None:
            return run_on.arrive(i, start, (
                staged.tier, lambda t, n: shared_arrival(t, n, staged.rate, staged.capacity, late),
                lambda a, b: shared_bytes(a, b, staged.rate, staged.capacity, late)))
        shared = shared_arrival(start, staged.parts[i], staged.rate, staged.capacity, late)
        return max(start + staged.others[i], math.ceil(shared - 1e-9))

    def reach(tile: int, now: float) -> float:
        nonlocal links, after, end
        for j, (first, *_) in enumerate(windows):
            if first == tile:
                asked.append((now + delay, j))
        ends = []
        for j, (_, stop, _, tail, *_) in enumerate(windows):
            if stop == tile:
                # the collective takes the links after those asked for before it, not after one
                # asked for later (a window opened here, asked for ``delay`` cycles on), which
                # would then hold its share back
                grant(next((at for at, k in asked if k == j), now))
                # the share the collective's own time past the window's end has not covered takes
                # the links once that has ended, after the transfers asked for before it
                # a window's share may be given lazily (its collective then timed only if it is
                # needed, :meth:`~.windows.OverlapWindow.tail_beyond`)
                cover = max(0.0, bodies[j] - now)
                needed = tail(cover) if callable(tail) else tail - cover
                done = bodies[j]
                if needed > 0:
                    grant(max(now, bodies[j]) - 1e-9)
                    done = links = max(now, bodies[j], links) + needed
                ends.append(done)
        if tile < n_tiles:
            return max([now, *ends])
        after = max([after, *(done - now for done in ends)])
        end = now
        return now

    total = float(stream_ahead_cycles(tiles, sizes, loads, per_tile, fill, gate, buffer, reach,
                                      arrive if staged is not None or run_on is not None else None))
    # this iteration's collectives still staging at its end (the ones carried in have ended by then)
    carry = tuple((a - end, e - end, rate) for a, e, rate in spans[len(carried):] if e > end)
    return Replay(total, float(after), carry)


def _path_bytes_per_cycle(socket: SocketSpec, tier: str) -> float:
    """The engine's capacity for a stream to ``tier``: the tier at its achievable fraction, or the
    TLN it crosses, the narrower (:func:`sn40l_sim.engine.staging.path_bytes_per_cycle`)."""
    return min(figures.memory_bytes_per_s(socket, tier) * socket.memory[tier].efficiency,
               figures.agcus(socket) * socket.tln.bytes_per_s) / socket.clock_hz


def first_tile_cycles(socket: SocketSpec, plan: SectionPlan) -> int:
    """Cycles until a call's first data tile of ``plan`` leaves the pipeline once its fill is done:
    its compute, or its bytes of each tier at the rate that tier's stream gets, whichever is longer
    (the engine's ``_first_tile_cycles``, ``sn40l_sim/engine/kernel_process.py``)."""
    out = plan.compute_cycles_per_tile
    for tier, (parts, rate) in tier_chunks(socket, plan, (1, plan.n_tiles - 1) if plan.n_tiles > 1 else (1,)).items():
        if parts[0]:
            out = max(out, math.ceil(parts[0] / min(rate, _path_bytes_per_cycle(socket, tier))))
    return out


def windowed_section_cycles(socket: SocketSpec, plan: SectionPlan, fill: int, gate: float,
                            windows: Sequence[OverlapWindow], delay: float, tier: str | None = None,
                            carried: Sequence[Span] = ()) -> Replay:
    """A one-section call or loop iteration ``plan`` with ``windows`` replayed (see the module
    docstring): its stream from the ``gate`` and the ``fill`` before its compute, its waits
    mid-way included, the cycles its last collectives outlast it, and what they stage in ``tier``
    (the activations', default the socket's first) still running at its end. ``carried``: the
    previous loop iteration's staging still running at this one's start."""
    n = plan.n_tiles
    tiles, sizes, loads, by_tier = section_streams(socket, plan, CHUNKS_PER_SECTION, window_points(windows, n))
    spans = []
    for w in windows:
        first, stop = window_tiles((w.start, w.end), n)
        spans.append((first, stop, float(w.body_cycles), functools.partial(w.tail_beyond, stop - first),
                      float(w.staged_bytes)))
    tier = tier if tier is not None else next(iter(socket.memory))
    staged = None
    if tier in by_tier and any(w.staged_bytes for w in windows):
        parts, rate = by_tier[tier]
        others = [max((math.ceil(p[i] / r - 1e-9) for t, (p, r) in by_tier.items() if t != tier), default=0)
                  for i in range(len(tiles))]
        staged = StagedStream(parts, rate, _path_bytes_per_cycle(socket, tier), others, tier)
    return replay_stream(tiles, sizes, loads, plan.compute_cycles_per_tile, fill, gate, read_ahead_bytes(socket),
                         spans, delay, staged, carried, RunOn(by_tier))


def looped_window_cycles(socket: SocketSpec, plan: SectionPlan, fill: int, gate: float,
                         windows: Sequence[OverlapWindow], delay: float, tier: str | None, iterations: int,
                         gate_staging: Sequence[tuple[int, int]] = ()) -> float:
    """The mean iteration of a loop of ``iterations`` iterations of the one-section ``plan`` with
    ``windows``, each replayed (:func:`windowed_section_cycles`) after the one before it, as the
    engine runs them (:mod:`sn40l_sim.engine.kernel_process`), and the last one's windows'
    collectives past its tiles spread over them: the kernel after the loop waits for those (each
    earlier iteration's are in the next one's gate). Their last data tile's share is the bytes over
    the window's tiles, so it differs by plan; left out, the loop was scored without it and a plan of
    coarser data tiles, its share 15 bytes against 8, won by 0.7 cycles an iteration and ran 1,295
    cycles longer (Llama-3.1-405B's decoder on 16 sockets at batch 1 with 200 GB/s per P2P port,
    docs/validation.md, "A loop's last windows"). The first is the loop's call: no
    gate, its pipeline filled before its stream starts (the fill is not hidden under a stream
    running ahead) and its windows' collectives starting once its first tile is out. Each later
    one waits for its ``gate`` (the collectives after the tiles, ``(cycles, staged bytes)`` each
    in ``gate_staging``, which take the links once the previous iteration's windows' have ended)
    and the previous iteration's time past its tiles, its stream sharing its first cycles with
    their staging, until they repeat, which the rest then do: a loop whose stream hides the
    windows' waits at first takes several iterations to reach its steady state (Llama-3.1-70B's
    decoder at batch 16 on 16 sockets: 112,813, 112,882, 118,060, then 122,043 cycles in the
    engine), which no few replays reached. Replayed as a later one, the first hid its fill: plans
    of one iteration but fills of 1,113 and 1,579 cycles tied, and Llama-3.1-8B's decoder at
    batch 4 took the longer fill with P2P links twice as fast, a slower step (docs/validation.md,
    "Invariants over random configurations")."""
    # its windows' collectives start once its first tile's bytes are in, not after its compute
    # alone (the engine's ``_first_tile_cycles``)
    first = windowed_section_cycles(socket, plan, 0, 0, windows, first_tile_cycles(socket, plan), tier)
    after, carry, ends = first.after, first.carry, [fill + first.end]
    while len(ends) < iterations:
        spans, start = list(carry), after
        for cycles, staged in gate_staging:
            if cycles and staged:
                spans.append((start, start + cycles, staged / cycles))
            start += cycles
        got = windowed_section_cycles(socket, plan, fill, gate + after, windows, delay, tier, spans)
        ends.append(got.end)
        # the next iteration repeats this one when it starts as this one did
        if got.after == after and got.carry == carry:
            break
        after, carry = got.after, got.carry
    # ``after``: the last iteration's (the steady state's once the iterations repeat)
    return (sum(ends) + (iterations - len(ends)) * ends[-1] + after) / iterations
