"""Speculative decoding with a draft model: how many tokens a verify step yields.

A decode step with ``k`` drafts verifies, for every sequence, the ``k`` tokens the draft model
proposed (:mod:`sn40l_sim.models.builder`: the main model over ``k + 1`` rows, the draft run ``k``
times). Draft ``j`` is accepted only if drafts ``1 .. j - 1`` were, each with probability ``a``
(the *acceptance rate*, independent per token), and the step always yields one more token: the
main model's own at the first rejected position, or after the last draft. The accepted count ``A``
is a geometric variable truncated at ``k``:

    P(A >= j) = a ** j  (j = 0 .. k),   so   E[1 + A] = sum_{j=0..k} a ** j = (1 - a ** (k + 1)) / (1 - a).

With ``k = 2`` and ``a = 0.8`` that is 2.44 tokens per step: the "x 2.4 for multi-token prediction
at an assumed 80% acceptance" of the SnapStream paper (docs/reference.md §3).

Rejected drafts' cache rows were written by the verify step; the next step writes its rows over
them (the slots after the last accepted token), so they never count as cached tokens. A static slot
that grows with the output (a full cache) therefore holds ``max_new_tokens + k`` rows; a ring cache
keeps its length, the rejected rows taking up to ``k`` of its recent slots until they are
overwritten.

Examples
--------
>>> spec = Speculation(drafts=2, acceptance=0.8)
>>> round(spec.tokens_per_step, 4)
2.44
>>> Speculation().tokens_per_step, Speculation(drafts=3, acceptance=1.0).tokens_per_step
(1.0, 4.0)
>>> rng = np.random.default_rng(0)
>>> draws = [spec.accepted(rng) for _ in range(100_000)]
>>> sorted(set(draws)), round(1 + sum(draws) / len(draws), 2)
([0, 1, 2], 2.44)
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from sn40l_sim.errors import InputError


def expected_tokens_per_step(drafts: int, acceptance: float) -> float:
    """``(1 - a ** (k + 1)) / (1 - a)``: expected tokens a step yields per sequence (``k + 1`` when
    every draft is accepted, 1 without drafts).

    >>> round(expected_tokens_per_step(2, 0.8), 12), expected_tokens_per_step(0, 0.5), expected_tokens_per_step(4, 1.0)
    (2.44, 1.0, 5.0)
    """
    _check(drafts, acceptance)
    return float(sum(acceptance ** j for j in range(drafts + 1)))


@dataclass(frozen=True)
class Speculation:
    """The speculation a decode node runs: ``drafts`` per step, each accepted with probability
    ``acceptance`` (given the ones before it were).

    Raises
    ------
    InputError
        For a negative or non-integer ``drafts`` or an ``acceptance`` outside ``[0, 1]``, naming
        the field.
    """

    drafts: int = 0
    acceptance: float = 0.0

    def __post_init__(self) -> None:
        _check(self.drafts, self.acceptance)

    @property
    def tokens_per_step(self) -> float:
        """Expected tokens per sequence and step (:func:`expected_tokens_per_step`)."""
        return expected_tokens_per_step(self.drafts, self.acceptance)

    def accepted(self, rng: np.random.Generator) -> int:
        """Draw the drafts one step accepts for one sequence: ``A`` with ``P(A >= j) = a ** j``.

        One uniform ``u`` per draw: ``A`` is the number of ``j`` in ``1 .. k`` with ``u < a ** j``,
        so the same generator gives the same draws whatever ``k`` reads them.
        """
        if self.drafts == 0:
            return 0
        u = rng.random()
        return sum(1 for j in range(1, self.drafts + 1) if u < self.acceptance ** j)


def _check(drafts: int, acceptance: float) -> None:
    if isinstance(drafts, bool) or not isinstance(drafts, (int, np.integer)) or drafts < 0:
        raise InputError(f"expected an integer >= 0 (0: no speculation), got {drafts!r}", field="drafts")
    if isinstance(acceptance, bool) or not isinstance(acceptance, (int, float)) \
            or not math.isfinite(acceptance) or not 0.0 <= acceptance <= 1.0:
        raise InputError(f"expected a probability in [0, 1], got {acceptance!r}", field="acceptance")
