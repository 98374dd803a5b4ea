"""The acceptance model of speculative decoding against first principles (serving/speculation.py):
tokens per step in closed form over the whole range of drafts and acceptance, the distribution a
step draws, and the steps a request of ``m`` tokens takes (renewal counting, exact)."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from sn40l_sim.errors import InputError
from sn40l_sim.serving.drafts import drafted_tokens
from sn40l_sim.serving.speculation import Speculation, expected_tokens_per_step

ACCEPTANCES = [0.0, 1e-9, 0.1, 0.5, 0.8, 0.95, 1 - 1e-9, 1.0]


def closed_form(k: int, a: float) -> float:
    """``(1 - a^(k+1)) / (1 - a)`` for ``a < 1``, its limit ``k + 1`` at ``a = 1``, in exact rational
    arithmetic on the float ``a`` (in floats the quotient cancels near ``a = 1``)."""
    exact = Fraction(a)
    return float(k + 1) if exact == 1 else float((1 - exact ** (k + 1)) / (1 - exact))


def step_distribution(k: int, a: float) -> list[float]:
    """``P(A = j)``, j = 0 .. k, of the drafts a step accepts: ``P(A >= j) = a^j``, truncated at k."""
    at_least = [a ** j for j in range(k + 2)]
    return [at_least[j] - at_least[j + 1] for j in range(k)] + [at_least[k]]


def expected_steps(m: int, k: int, a: float) -> tuple[float, float]:
    """Mean and standard deviation of the steps that give ``m`` tokens at ``1 + A`` a step (the last
    step capped), by the renewal recursion ``N(n) = 1 + N(n - 1 - A)``, ``N(n <= 0) = 0``."""
    p = step_distribution(k, a)
    mean, second = [0.0] * (m + 1), [0.0] * (m + 1)
    for n in range(1, m + 1):
        rest = [max(n - 1 - j, 0) for j in range(k + 1)]
        mean[n] = 1 + sum(pj * mean[r] for pj, r in zip(p, rest, strict=True))
        second[n] = 1 + sum(pj * (2 * mean[r] + second[r]) for pj, r in zip(p, rest, strict=True))
    return mean[m], math.sqrt(max(second[m] - mean[m] ** 2, 0.0))


@pytest.mark.parametrize("k", range(16))
@pytest.mark.parametrize("a", ACCEPTANCES)
def test_tokens_per_step_is_the_closed_form_and_the_mean_of_the_step_distribution(k, a):
    tokens = expected_tokens_per_step(k, a)
    assert tokens == pytest.approx(closed_form(k, a), rel=1e-12)
    assert tokens == pytest.approx(sum((1 + j) * p for j, p in enumerate(step_distribution(k, a))), rel=1e-12)
    assert 1.0 <= tokens <= k + 1


@pytest.mark.parametrize("k", range(16))
def test_the_ends_of_the_range_are_exact(k):
    # no drafts: plain decode whatever the acceptance; nothing accepted: one token; all: k + 1
    assert expected_tokens_per_step(0, 0.8) == 1.0
    assert expected_tokens_per_step(k, 0.0) == 1.0
    assert expected_tokens_per_step(k, 1.0) == k + 1
    assert Speculation(k, 1.0).tokens_per_step == k + 1


def test_tokens_per_step_grows_with_the_drafts_by_a_to_the_k():
    # the (k+1)-th draft adds a^(k+1): the gain a step's extra cost must pay for
    for a in (0.5, 0.8, 0.95):
        gains = [expected_tokens_per_step(k + 1, a) - expected_tokens_per_step(k, a) for k in range(15)]
        assert gains == pytest.approx([a ** (k + 1) for k in range(15)], rel=1e-12)


def test_a_step_draws_the_distribution_the_formula_is_the_mean_of():
    # the draw reads one uniform u and accepts j drafts when a^(j+1) <= u < a^j: the frequencies of a
    # long stream are P(A = j)
    rng = np.random.default_rng(11)
    for k, a in ((2, 0.8), (4, 0.5), (3, 1.0), (3, 0.0)):
        spec = Speculation(k, a)
        draws = np.bincount([spec.accepted(rng) for _ in range(40_000)], minlength=k + 1) / 40_000
        assert draws == pytest.approx(step_distribution(k, a), abs=0.01)


@pytest.mark.parametrize(("k", "a"), [(1, 0.8), (2, 0.8), (5, 0.8), (8, 0.8), (2, 0.5), (3, 0.95)])
def test_a_request_takes_the_renewal_count_of_steps_on_average(k, a):
    # 2,047 tokens after the prefill's first (the main experiment's 2,048-token outputs): over 2,000
    # requests' own draws the mean number of steps is the exact renewal mean (a little above
    # m / tokens per step, the last step being capped) within 4 standard errors
    m, n = 2047, 2000
    spec = Speculation(k, a)
    steps = np.array([len(v) for v in drafted_tokens(spec, 0, {i: m for i in range(n)}).values()])
    mean, sd = expected_steps(m, k, a)
    assert m / spec.tokens_per_step <= mean <= m / spec.tokens_per_step + 1
    assert abs(steps.mean() - mean) <= 4 * sd / math.sqrt(n)
    assert all(int(v.sum()) == m for v in drafted_tokens(spec, 0, {i: m for i in range(20)}).values())


@pytest.mark.parametrize("k", [1, 2, 7, 15])
def test_steps_at_the_ends_of_the_acceptance_range_are_exact(k):
    for m in (1, 2, 2047):
        for a, steps in ((0.0, m), (1.0, math.ceil(m / (k + 1)))):
            drawn = drafted_tokens(Speculation(k, a), 5, {i: m for i in range(30)})
            assert {len(v) for v in drawn.values()} == {steps}, (a, m)
            assert expected_steps(m, k, a) == pytest.approx((steps, 0.0), abs=1e-9)


@pytest.mark.parametrize(("drafts", "acceptance", "field"), [
    (-1, 0.8, "drafts"), (1.5, 0.8, "drafts"), (True, 0.8, "drafts"), ("2", 0.8, "drafts"),
    (2, -0.1, "acceptance"), (2, 1.0000001, "acceptance"), (2, math.nan, "acceptance"),
    (2, math.inf, "acceptance"), (2, True, "acceptance"), (2, "0.8", "acceptance")])
def test_bad_drafts_or_acceptance_name_the_field(drafts, acceptance, field):
    with pytest.raises(InputError) as info:
        Speculation(drafts, acceptance)
    assert info.value.field == field
    with pytest.raises(InputError):
        expected_tokens_per_step(drafts, acceptance)
