"""The last data tile's shares of a call's overlapped collectives that name no operator:
:class:`OverlapTail` (one collective, as a call's :class:`~.kernel_cost.LoopContext` carries it)
and :func:`shares_after` (what their shares add past the call's stream).

Such a collective (a token-sliced kernel's all-reduce, prefill's) starts once the call's first
data tile is out and carries each tile's output as the tile comes out; the engine sends its last
tile's share after the call's last tile (``sn40l_sim/engine/windows.py``). That share is
``bytes / n_tiles`` of the collective, so it depends on the plan's data tiles: the mapper's
objective counts it (:func:`~.kernel_cost.plan_kernel`) with the same figures
:func:`~.calls.as_called` charges the call, so the plan it keeps is the cheapest as called.
Left out, Llama-3.1-8B's 64-row prefill chunk after 2,624 earlier tokens on 8 sockets planned its
output projection at 1,024 data tiles for an objective of 20,510 cycles against 20,550 at 256,
and was charged 28,067 against 23,815 (tests/mapper/test_objective_as_called.py).

Examples
--------
>>> from sn40l_sim.ir import Collective
>>> ar = Collective("all_reduce", 1 << 20, 8, True)
>>> tail = overlap_tail(ar, lambda c: c.bytes / 100)
>>> tail.cycles, tail.share_cycles(4), tail.tails[2]
(10485.76, 2621.44, 2621.44)
>>> shares_after(((1000.0, 300.0), (1000.0, 300.0)), 1800)   # all of the first's; the second's past 200
400
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from sn40l_sim.ir import Collective

#: the largest data-tile count whose share :class:`OverlapTail`'s record holds (2**MAX_TILES_LOG2)
MAX_TILES_LOG2 = 24


@dataclass(frozen=True)
class OverlapTail:
    """An overlapped collective that names no operator, as a call's context carries it: its
    ``cycles`` and ``tails[j]``, the cycles of its share of ``2**j`` data tiles (``bytes / 2**j``,
    rounded up as the engine cuts it), the record the context's key spells out (the disk cache's
    text, :mod:`.disk_cache`); ``share`` gives any tile count's (the data tiles the mapper tries
    are powers of two, so the record holds each of theirs)."""

    cycles: float
    tails: tuple[float, ...]
    share: Callable[[int], float] | None = field(default=None, compare=False, repr=False)

    def share_cycles(self, tiles: int) -> float:
        """Cycles of the collective's share of ``tiles`` data tiles (at least one)."""
        tiles = max(1, tiles)
        if self.share is not None:
            return self.share(tiles)
        return self.tails[min(len(self.tails) - 1, math.ceil(math.log2(tiles)))]


def overlap_tail(collective: Collective, collective_cycles: Callable[[Collective], float]) -> OverlapTail:
    """``collective`` as an :class:`OverlapTail`, timed by ``collective_cycles`` (unrounded, as
    :func:`~.calls.as_called` adds them up), each tile count's share worked out once."""
    memo: dict[int, float] = {}

    def share(tiles: int) -> float:
        got = memo.get(tiles)
        if got is None:
            got = memo[tiles] = collective_cycles(replace(collective, bytes=math.ceil(collective.bytes / tiles)))
        return got

    return OverlapTail(collective_cycles(collective), tuple(share(2**j) for j in range(MAX_TILES_LOG2 + 1)), share)


def shares_after(tails: tuple[tuple[float, float], ...], stream: int) -> int:
    """Cycles the last data tiles' shares of a call's overlapped collectives add past its stream's
    end or its collectives', whichever is later, as the engine's ``Windows`` runs them
    (``sn40l_sim/engine/windows.py``): the collectives start together, once the first tile is out,
    and run one after the other for their ``cycles``; ``stream`` the cycles the call's stream
    takes from then on. ``tails``: each collective as ``(cycles, its share's cycles)``, in order. A
    collective that ends before the stream does sends all of its share once the stream has ended,
    behind whatever still holds the links; one that ends later, what of it its own time past the
    stream's end has not covered. A memory-bound MoE kernel of DeepSeek-R1's 1K prefill was scored
    without its shares (the stream its collectives' staging held back was taken for their time past
    it), 26,530 cycles short of the engine's call; its 8K output projection and FFN without its
    first all-reduce's share, which waits for the second (docs/validation.md, "The last tile's
    share of a prefill collective")."""
    end, shares = 0.0, 0.0
    for cycles, share in tails:
        end += cycles
        shares += max(0.0, share - max(0.0, end - stream))
    return round(shares)
