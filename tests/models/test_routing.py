"""The routing model: expected distinct experts per batch."""
from __future__ import annotations

import itertools
import math
from itertools import pairwise

import pytest

from sn40l_sim.errors import InputError
from sn40l_sim.models.params import expected_distinct_experts
from sn40l_sim.models.routing import inclusion_probabilities


def test_uniform_matches_brute_force_enumeration():
    experts, k, batch = 5, 2, 3
    sets = list(itertools.combinations(range(experts), k))
    total = sum(len(set().union(*choice)) for choice in itertools.product(sets, repeat=batch))
    exact = total / len(sets) ** batch
    assert expected_distinct_experts(experts, k, batch) == pytest.approx(exact, rel=1e-12)


def test_uniform_formula_for_deepseek():
    assert expected_distinct_experts(256, 8, 16) == pytest.approx(256 * (1 - (1 - 8 / 256) ** 16), rel=1e-12)
    assert expected_distinct_experts(256, 8, 1) == pytest.approx(8)


@pytest.mark.parametrize("skew", [0.0, 0.5, 1.0, 2.0])
def test_monotone_in_batch_and_within_bounds(skew):
    values = [expected_distinct_experts(256, 8, b, skew) for b in (1, 2, 4, 16, 64, 256, 4096)]
    assert values[0] == pytest.approx(8)
    assert all(b > a for a, b in pairwise(values))
    assert all(8 - 1e-9 <= v <= 256 for v in values)


def test_skew_concentrates_traffic():
    at_64 = [expected_distinct_experts(256, 8, 64, s) for s in (0.0, 0.5, 1.0, 2.0)]
    assert all(b < a for a, b in pairwise(at_64))


def test_inclusion_probabilities_are_a_valid_design():
    for skew in (0.0, 0.7, 3.0):
        pi = inclusion_probabilities(256, 8, skew)
        assert math.fsum(pi) == pytest.approx(8)
        assert all(0 < p <= 1 for p in pi)
        assert pi == sorted(pi, reverse=True)


def test_bad_routing_inputs():
    with pytest.raises(InputError):
        expected_distinct_experts(8, 9, 1)
    with pytest.raises(InputError):
        expected_distinct_experts(8, 2, 4, skew=-1.0)
