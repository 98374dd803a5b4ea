"""Where in a fused kernel's stream an overlapped collective may run: its *window*.

An overlapped collective that names the operator whose output it carries
(:attr:`~sn40l_sim.ir.Collective.after`, a decoder layer's all-reduce after its row-parallel
output or down projection) runs beside that operator's part of the kernel's stream only: it cannot
carry rows before they are produced, and the kernel's operators after it read the reduced rows, so
the stream's later data tiles wait for it (and its last data tile's share, sent after the window's
last tile). A fused decoder's data tiles at decode are weight tiles (the mapper cuts a GEMM's
pieces along whichever dimension shrinks its buffer most, and the weights dominate it, so a piece
holds every token's rows): the FFN after ``o_proj``'s all-reduce needs whole reduced rows, so it
cannot follow the all-reduce tile by tile (docs/validation.md, "Decode all-reduces under the
GEMM").

The operators of a kernel run in lockstep in the mapper's pipeline, so their parts of the stream
are not separate in its plan. A window is placed by each operator's roofline time alone on the
socket (its FLOPs at the peak rate, its weight and KV bytes at the bandwidths of the tiers they
live in, as the memory placement's :class:`~sn40l_sim.mapper.tier_split.TierSplit` says, whichever
is longer), as a fraction of the kernel's: the operator's part runs from the sum of
those before it to the sum up to it. An overlapped collective that names no operator carries every
data tile's output as the tile comes out (a token-sliced kernel, prefill's) and its window is the
whole stream.

Examples
--------
>>> from sn40l_sim.mapper._examples import example_socket
>>> from sn40l_sim.ir import Collective, FusedKernel, Operator
>>> socket = example_socket()
>>> a = Operator("a", "gemm", flops=2 * 4096 * 4096, m=1, k=4096, n=4096, weight_bytes=2 * 4096 * 4096)
>>> b = Operator("b", "gemm", flops=2 * 4096 * 4096, m=1, k=4096, n=4096, weight_bytes=2 * 4096 * 4096)
>>> k = FusedKernel("k", "k", "decode", (a, b), (Collective("all_reduce", 8192, 8, True, after="a"),))
>>> window_fractions(socket, k, k.collectives[0])
(0.0, 0.5)
>>> window_tiles((0.0, 0.5), 64), window_tiles((0.5, 1.0), 64), window_tiles((0.99, 1.0), 8)
((0, 32), (32, 64), (7, 8))
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from sn40l_sim.hardware import figures
from sn40l_sim.hardware.spec import SocketSpec
from sn40l_sim.ir import Collective, FusedKernel, Operator
from sn40l_sim.mapper.tier_split import TierSplit

#: the largest data-tile count whose share :class:`OverlapWindow` holds (2**MAX_TILES_LOG2)
MAX_TILES_LOG2 = 24


def operator_seconds(socket: SocketSpec, op: Operator, tiers: TierSplit | None = None) -> float:
    """``op``'s roofline time alone on the socket: its FLOPs at the BF16 peak or its weight and KV
    bytes at the bandwidth of the tiers ``tiers`` puts them in (the tiers stream side by side, so
    the slowest one's share), whichever is longer. Without ``tiers``, everything is in the socket's
    first tier.

    The hardware file's first tier timed weights the placement had put in DDR (an experiment's
    ``memory.order`` listing DDR first, or weights spilled there) at HBM's bandwidth:

    >>> from sn40l_sim.mapper._examples import example_socket
    >>> socket = example_socket()
    >>> op = Operator("w", "gemm", flops=2 * 4096 * 4096, m=1, k=4096, n=4096, weight_bytes=2 * 4096 * 4096)
    >>> in_hbm, in_ddr = operator_seconds(socket, op), operator_seconds(socket, op, TierSplit.all_in("ddr"))
    >>> in_hbm == operator_seconds(socket, op, TierSplit.all_in("hbm")), round(in_ddr / in_hbm, 1)
    (True, 16.4)
    """
    tiers = tiers or TierSplit.all_in(next(iter(socket.memory)))
    streamed = tiers.split_bytes(op.weight_bytes, op.kv_read_bytes + op.kv_write_bytes, 0, 0)
    memory_s = max((n / figures.memory_bytes_per_s(socket, tier) for tier, n in streamed.items() if n), default=0.0)
    return max(op.flops / figures.peak_flops(socket), memory_s)


def window_fractions(socket: SocketSpec, kernel: FusedKernel, collective: Collective,
                     tiers: TierSplit | None = None) -> tuple[float, float]:
    """The part of ``kernel``'s stream ``collective`` may run beside, as fractions of it (see the
    module docstring), its operators' bytes in the tiers of ``tiers``; ``(0, 1)`` for one that
    names no operator."""
    if not collective.after:
        return 0.0, 1.0
    times = [operator_seconds(socket, op, tiers) for op in kernel.operators]
    total = sum(times)
    names = [op.name for op in kernel.operators]
    if not total or collective.after not in names:
        return 0.0, 1.0
    at = names.index(collective.after)
    return sum(times[:at]) / total, sum(times[:at + 1]) / total


def window_tiles(fractions: tuple[float, float], n_tiles: int) -> tuple[int, int]:
    """The data tiles ``[first, stop)`` of a stream of ``n_tiles`` a window covers: from the tile
    its operator starts in to the one it ends in, at least one."""
    first = min(n_tiles - 1, math.floor(fractions[0] * n_tiles + 1e-9)) if n_tiles else 0
    stop = max(first + 1, min(n_tiles, math.ceil(fractions[1] * n_tiles - 1e-9)))
    return first, stop


@dataclass(frozen=True)
class OverlapWindow:
    """An overlapped collective naming its operator, as the mapper scores a call with it: its
    window's fractions of the stream, its cycles, ``tails[j]`` the cycles of its share of
    ``2**j`` data tiles (``bytes / 2**j``), and the bytes it stages in the activations' tier while
    it runs (:func:`sn40l_sim.engine.staging.staged_bytes`), sharing that tier with the stream.
    ``share``, when the collective's cost is known (:func:`overlap_windows`), gives the share of
    any number of data tiles; ``tails`` stays its record in the window's key (the disk cache's
    text spells a call's windows out, :mod:`.disk_cache`)."""

    start: float
    end: float
    body_cycles: int
    tails: tuple[int, ...]
    staged_bytes: int = 0
    share: Callable[[int], int] | None = field(default=None, compare=False, repr=False)

    def tail_cycles(self, tiles: int) -> int:
        """The share of a window of ``tiles`` data tiles: its collective's bytes over them, as the
        engine charges it (``sn40l_sim/engine/windows.py``). Without ``share``, the share of the
        next power of two's tiles, fewer bytes, a floor of it: Llama-3.1-70B's decoder at batch 256
        with 4K caches on 8 sockets, its last window of 321 tiles, was scored the share of 512,
        855 cycles short of the engine's call (docs/validation.md, "Decode all-reduces under the
        GEMM")."""
        if self.share is not None:
            return self.share(max(1, tiles))
        return self.tails[min(len(self.tails) - 1, max(0, math.ceil(math.log2(max(1, tiles)))))]

    def tail_at_most(self, tiles: int, budget: int) -> bool:
        """Whether ``tail_cycles(tiles) <= budget``, its collective timed only as far as that
        needs when ``share`` can bound it (:meth:`_Shares.at_most`): a share within what its
        collective outlasts its window by is never charged, and its exact cycles can be dear (an
        odd byte count's direct all-reduce on a ring or torus).

        >>> w = OverlapWindow(0.0, 0.5, 1000, (300,) * 4)
        >>> w.tail_at_most(4, 300), w.tail_at_most(4, 299)
        (True, False)
        """
        at_most = getattr(self.share, "at_most", None)
        if at_most is not None:
            return at_most(max(1, tiles), budget)
        return self.tail_cycles(tiles) <= budget

    def tail_beyond(self, tiles: int, cover: float) -> float:
        """``tail_cycles(tiles) - cover`` when that is positive (the share's time past ``cover``,
        what the replay charges); otherwise some number at most 0, the share not always timed.

        >>> w = OverlapWindow(0.0, 0.5, 1000, (300,) * 4)
        >>> w.tail_beyond(4, 100.5), w.tail_beyond(4, 400.0) <= 0
        (199.5, True)
        """
        # an integer share within floor(cover) is within cover, so the difference is not positive
        if math.isfinite(cover) and self.tail_at_most(tiles, math.floor(cover)):
            return 0.0
        return self.tail_cycles(tiles) - cover


class _Shares:
    """A collective's share of ``tiles`` data tiles, in cycles (``collective_cycles`` of its bytes
    over them, rounded up as the engine cuts it), each tile count worked out once: the mapper asks
    it for every plan it replays."""

    def __init__(self, collective: Collective, collective_cycles: Callable[[Collective], float]) -> None:
        self.collective, self.collective_cycles = collective, collective_cycles
        self.memo: dict[int, int] = {}
        self.fits: dict[int, int] = {}   # the least budget each tile count's share is known within

    def _share(self, tiles: int) -> Collective:
        return replace(self.collective, bytes=math.ceil(self.collective.bytes / tiles))

    def __call__(self, tiles: int) -> int:
        got = self.memo.get(tiles)
        if got is None:
            got = self.memo[tiles] = round(self.collective_cycles(self._share(tiles)))
        return got

    def at_most(self, tiles: int, budget: int) -> bool:
        """Whether ``self(tiles) <= budget``, asking ``collective_cycles.at_most(collective,
        budget)`` when it has one (the engine's lone cycles do: an integer, so rounding keeps it)."""
        got = self.memo.get(tiles)
        bounded = getattr(self.collective_cycles, "at_most", None)
        if got is not None or bounded is None or budget < 0:
            return self(tiles) <= budget
        if budget >= self.fits.get(tiles, budget + 1):
            return True
        if bounded(self._share(tiles), budget):
            self.fits[tiles] = budget
            return True
        return self(tiles) <= budget   # over the budget: the search ran to its end, its result kept


def overlap_windows(socket: SocketSpec, kernel: FusedKernel, collective_cycles: Callable[[Collective], float],
                    staging_bytes: Callable[[Collective], int] | None = None,
                    tiers: TierSplit | None = None) -> tuple[OverlapWindow, ...]:
    """The windows of ``kernel``'s overlapped collectives that name their operator, in order, with
    the bytes each stages (``staging_bytes``; default: none), its operators' bytes in the tiers of
    ``tiers`` (default: the socket's first)."""
    out = []
    for c in kernel.collectives:
        if c.overlapped and c.after:
            start, end = window_fractions(socket, kernel, c, tiers)
            share = _Shares(c, collective_cycles)
            tails = tuple(share(2**j) for j in range(MAX_TILES_LOG2 + 1))
            staged = staging_bytes(c) if staging_bytes is not None else 0
            out.append(OverlapWindow(start, end, round(collective_cycles(c)), tails, staged, share))
    return tuple(out)


def interior_window(windows: Sequence[OverlapWindow], n_tiles: int) -> bool:
    """Whether one of ``windows`` closes before a stream of ``n_tiles`` ends (the stream then waits
    there for its collective)."""
    return any(window_tiles((w.start, w.end), n_tiles)[1] < n_tiles for w in windows)


def streams_ahead(windows: Sequence[OverlapWindow], n_tiles: int) -> bool:
    """Whether a call's stream of ``n_tiles`` runs ahead of its compute for ``windows``: the
    engine does so once a window opens or closes inside the stream (its chunks are cut there,
    ``sn40l_sim/engine/kernel_process.py``), not only where the compute waits mid-way; DeepSeek-R1's
    FFN, its window over its last operators, was scored 15 to 122 cycles a call short."""
    return bool(window_points(windows, n_tiles))


def window_points(windows: Sequence[OverlapWindow], n_tiles: int) -> tuple[int, ...]:
    """The data tiles inside a stream of ``n_tiles`` where one of ``windows`` opens or closes (the
    engine's :attr:`sn40l_sim.engine.windows.Windows.points`)."""
    edges = {t for w in windows for t in window_tiles((w.start, w.end), n_tiles)}
    return tuple(sorted(t for t in edges if 0 < t < n_tiles))


def exposed_cycles(windows: Sequence[OverlapWindow], n_tiles: int, per_tile: float, first: float,
                   stream_per_tile: float = 0.0, lead: float = 0.0) -> tuple[float, float]:
    """``(stall, after)``: the cycles a stream of ``n_tiles`` data tiles at ``per_tile`` waits
    mid-way for windows that close before its end, and the cycles its last windows' collectives
    outlast it; each collective starts ``first`` cycles after its window's first tile, runs after
    the one before it on the links, and ends no sooner than its share after its window's last
    tile (the engine's arithmetic when nothing else contends, :mod:`sn40l_sim.engine.windows`).

    The compute passes a tile no sooner than its data has arrived: with its memory streams
    delivering a tile every ``stream_per_tile`` cycles from ``lead`` cycles before the first
    tile's compute (a looped iteration's stream runs ahead during its gate), tile ``t`` is passed
    at ``max(t x per_tile + the stalls before, t x stream_per_tile - lead)``. A memory-bound
    stream's windows are as long as its memory takes, and the stream runs on while its compute
    stalls. Both paces are floors of the engine's, so the stall and the stream's length are too.

    >>> w = OverlapWindow(0.0, 0.5, 1000, (300,) * 4)
    >>> exposed_cycles([w], 8, 100, 100)      # the stream's second half waits for it
    (700.0, 0.0)
    >>> exposed_cycles([replace(w, start=0.5, end=1.0)], 8, 100, 100)
    (0.0, 700.0)
    """
    stall = after = 0.0
    for span in _window_spans(windows, n_tiles, per_tile, first, stream_per_tile, lead):
        if span.interior:
            stall += max(0.0, span.end - span.close)
        else:
            after = max(after, span.end - span.close)
    return stall, after


def hidden_cycles(windows: Sequence[OverlapWindow], n_tiles: int, per_tile: float, first: float) -> float:
    """The cycles of a stream of ``n_tiles`` data tiles at ``per_tile`` that run beside a window's
    collective which then outlasts its window (the stream waits for it where the window closes,
    or the call ends with it): time the call would take with nothing to compute there, so its
    collective, not the tiles, holds it (:func:`exposed_cycles`' arithmetic; ``first`` as there).
    A window whose collective is done by its close but for its last tile's share holds its tiles:
    the share cannot leave before them.

    >>> w = OverlapWindow(0.0, 0.5, 1000, (300,) * 4)
    >>> hidden_cycles([w], 8, 100, 100)          # tiles 1-3 under the collective the stream waits for
    300.0
    >>> hidden_cycles([replace(w, body_cycles=100)], 8, 100, 100)   # only its share waited for
    0.0
    """
    return sum((max(0.0, s.close - s.opened) for s in _window_spans(windows, n_tiles, per_tile, first)
                if s.body_end > s.close), 0.0)


@dataclass(frozen=True)
class _Span:
    """A window as :func:`exposed_cycles` times it: when its collective may start (``opened``),
    when the stream passes its last tile (``close``; the stream's end for a window that does not
    close before it, ``interior`` False), when its collective has ended (``body_end``) and when
    its share too (``end``)."""

    opened: float
    close: float
    body_end: float
    end: float
    interior: bool


def _window_spans(windows: Sequence[OverlapWindow], n_tiles: int, per_tile: float, first: float,
                  stream_per_tile: float = 0.0, lead: float = 0.0) -> list[_Span]:
    """Each of ``windows`` timed as :func:`exposed_cycles` says, the stream's waits mid-way included."""
    links = stall = 0.0
    spans = []

    def passed(tile: int) -> float:
        return max(tile * per_tile + stall, tile * stream_per_tile - lead)

    for w in windows:
        first_tile, stop = window_tiles((w.start, w.end), n_tiles)
        opened = passed(first_tile) + first
        body_end = max(opened, links) + w.body_cycles
        close = passed(stop)
        end = body_end if _covered(w, stop - first_tile, close, body_end) else max(
            body_end, close + w.tail_cycles(stop - first_tile))
        links = end
        if stop < n_tiles:
            spans.append(_Span(opened, close, body_end, end, True))
            stall += max(0.0, end - close)
        else:
            spans.append(_Span(opened, passed(n_tiles), body_end, end, False))
    return spans


def _covered(w: OverlapWindow, tiles: int, close: float, body_end: float) -> bool:
    """Whether ``w``'s share of ``tiles`` sent from ``close`` ends by ``body_end`` (then
    ``max(body_end, close + share)`` is ``body_end``), its collective timed only as far as that
    needs: the share is an integer at most ``budget``, and ``close + budget <= body_end`` in floats
    bounds ``close + share`` too (rounding is monotonic)."""
    if not math.isfinite(body_end - close):
        return False
    budget = math.floor(body_end - close)
    for _ in range(2):   # the difference's rounding may put ``close + budget`` a cycle past
        if budget < 0:
            return False
        if close + budget <= body_end:
            return w.tail_at_most(tiles, budget)
        budget -= 1
    return False
