"""The lowest cycle target a section's compute stages reach together, searched exactly.

Reaching a target is not monotone in it: at a higher target a stage may take fewer PCUs, and its
division on fewer PCUs can need more PMUs, so the stages that fit a tile at one target can overflow
its PMUs at a higher one (DeepSeek-R1's decode MLA on four tiles reaches 342-344 cycles, not
345-353; docs/architecture.md, "Speed: what is computed once, and what is kept"). A bisection,
or the allocator's gallop (:func:`galloping_fit`), therefore gives a target reached, not the
lowest. :func:`lowest_reached` walks down from it over the targets where the answer can change,
and only those:

- A stage's answer at a target (fewest PCUs, their division, fewest PMUs serving it within the
  target) is a step function of the target. The divisions reaching a target are those of at most
  that many cycles, and the PMU counts serving a division within it those of at most that many
  cycles, so both sets change only at a target equal to some division's or some PMU count's
  cycles. The answer found at ``T`` is therefore the answer at every ``T'`` from the cycles it
  reaches (its division's, its PMUs') up to ``T``: ``T'`` is reached by the same division on the
  same fewest PCUs and served by the same fewest PMUs (the reasoning is spelled out in
  :func:`sn40l_sim.mapper.allocate._stage_units`). Every target strictly between two such
  breakpoints gets the same answer as the breakpoint below it. A stage whose division even its
  most PMUs cannot serve within ``T`` has no answer down to that division's cycles either: the
  division is the same there, its PMUs no faster.
- The stages together reach a target when every stage has an answer and their PCUs and PMUs fit
  the tile: a function of the stages' answers alone. So on ``[L, T]``, ``L`` the highest of the
  stages' lowest targets, every target has the answers ``T`` has and is reached exactly when ``T``
  is; the next target that can differ is ``L - 1``. (A reason not to reach ``T`` that involves
  only some stages, one stage without an answer or a prefix of them over the tile's PMUs, holds
  down to the highest of those stages' lowest targets, a jump at least as far.)
- A stage's fewest PCUs never fall as the target falls (a division reaching a lower target
  reaches the higher one, so the fewest reaching the higher are no more), and a stage no division
  brings under a target has none under a lower one. So once the PCUs exceed the tile, or a stage
  has no division at all, no lower target is reached and the walk stops. Only the PMUs, the reason
  the bisection can miss, make the walk go on through targets not reached.

The walk asks one target for each distinct set of answers between the search's target and the
first target where the PCUs overflow or a stage has no division, most often one (the target just
below the search's), and gives the same target as asking every target from 1, whatever reached
target it starts from (a test compares the two on real kernels).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import NamedTuple

from sn40l_sim.mapper.division import Division
from sn40l_sim.mapper.pmus import least_fitting

#: a compute stage's answer at a target (PCUs and PMUs per tile, division; None: it cannot reach
#: the target) and the lowest target it holds for
StageAnswer = tuple[tuple[int, int, Division] | None, int]


class Probe(NamedTuple):
    """What the stages' answers at one target say."""

    #: whether the stages reach the target together
    reached: bool
    #: the lowest target for which the same holds for the same reason (the same answers, or the
    #: same answers of the stages that make it fail)
    holds_from: int
    #: not reached, and no lower target is either
    none_below: bool


def galloping_fit(lo: int, hi: int, fits: Callable[[int], bool]) -> int:
    """A value in ``[lo, hi]`` for which ``fits`` holds, ``fits`` holding at ``hi``: ``lo`` if it
    fits, else found galloping up from it and bisecting, the least where ``fits`` is monotone.

    The allocator's answer is most often its lower bound itself; where it is not, it was a median 17%
    above it in a cold run (deepseek_tp16), so the gallop's first step is an eighth of the bound (a
    64th asked 7% more stage answers in `run`'s and `validate`'s allocations).

    >>> galloping_fit(10, 100, lambda n: n >= 10), galloping_fit(10, 100, lambda n: n >= 37)
    (10, 37)
    """
    if lo < hi and not fits(lo):
        lo += 1
        step = max(1, lo // 8)
        while lo < hi and not fits(min(hi, lo + step)):
            lo = min(hi, lo + step + 1)
            step *= 2
        lo = least_fitting(lo, min(hi, lo + step), fits)
    return lo


def lowest_reached(probe: Callable[[int], Probe], above: int) -> int | None:
    """The lowest target below ``above`` that ``probe`` says is reached, or None if none is.

    >>> reached = {3, 4, 7, 8, 9}          # step answers: 3-4, 5-6, 7-9 (1-2: none below)
    >>> def probe(t):
    ...     low = 7 if t >= 7 else 5 if t >= 5 else 3 if t >= 3 else 1
    ...     return Probe(t in reached, low, t < 3)
    >>> lowest_reached(probe, 10), lowest_reached(probe, 7), lowest_reached(probe, 3)
    (3, 3, None)
    """
    lowest = None
    target = above - 1
    while target >= 1:
        got = probe(target)
        if got.none_below:
            break
        if got.reached:
            lowest = got.holds_from
        target = got.holds_from - 1
    return lowest


def probe_tile(answers: Iterable[StageAnswer], tile_pcus: int, tile_pmus: int, target: int) -> Probe:
    """Whether compute stages of these ``answers`` at ``target`` fit the tile's PCUs and PMUs
    together, down to which target that holds, and whether no lower target can be reached.

    >>> division = Division(1, 10, 0)
    >>> probe_tile([((2, 3, division), 7), ((1, 1, division), 9)], 4, 4, 12)       # same from 9
    Probe(reached=True, holds_from=9, none_below=False)
    >>> probe_tile([((2, 3, division), 7), ((1, 2, division), 9)], 4, 4, 12)       # PMUs over
    Probe(reached=False, holds_from=9, none_below=False)
    >>> probe_tile([((3, 1, division), 7), ((2, 1, division), 9)], 4, 4, 12)       # PCUs over
    Probe(reached=False, holds_from=9, none_below=True)
    >>> probe_tile([(None, 5), ((1, 1, division), 9)], 4, 4, 12)                   # no PMUs enough
    Probe(reached=False, holds_from=5, none_below=False)
    """
    pcus = pmus = 0
    same_from = 1              # the answers so far are the same from here up to ``target``
    fails_from = target + 1    # the lowest target a reason found not to reach holds down to
    for got, low in answers:
        if got is None:
            if low <= 1:       # no answer at any target from 1 up to this one
                return Probe(False, 1, True)
            fails_from = min(fails_from, low)
            continue
        same_from = max(same_from, low)
        pcus += got[0]
        pmus += got[1]
        if pcus > tile_pcus:   # the fewest PCUs never fall with the target
            return Probe(False, same_from, True)
        if pmus > tile_pmus:   # a prefix of the stages over the PMUs: the same down to same_from
            fails_from = min(fails_from, same_from)
    if fails_from <= target:
        return Probe(False, fails_from, False)
    return Probe(True, same_from, False)
