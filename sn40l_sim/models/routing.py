"""The routing model: how many distinct experts a batch of tokens touches.

Each token picks ``k`` distinct experts out of ``E``; tokens pick independently. Expert ``i`` is in
one token's set with probability ``pi_i`` (the *inclusion probability*, ``sum(pi) = k``), so the
expected number of distinct experts touched by ``B`` tokens is exactly

    D(B) = sum_i [1 - (1 - pi_i) ** B].

Uniform routing (``skew = 0``) has ``pi_i = k / E`` and gives ``E * (1 - (1 - k/E) ** B)``.

Skewed routing gives expert ``i`` (``i = 1..E`` in popularity order) a Zipf popularity
``p_i ~ i ** -skew``; its inclusion probability is proportional to ``p_i`` and capped at 1,
``pi_i = min(1, c * p_i)`` with ``c`` chosen so that ``sum(pi) = k`` (water-filling). These are the
inclusion probabilities of a fixed-size sampling design with probabilities proportional to size
(Sampford / conditional Poisson), so the formula stays exact for such a router; it is a model of
load imbalance, not a fit to DeepSeek's trained router, whose balancing bias keeps expert loads
close to uniform. Expert groups (``topk_groups``) are not modelled.

``D(1) = k``, ``D`` rises with ``B`` towards ``E``, and for a given ``B`` falls as ``skew`` grows.
"""
from __future__ import annotations

from sn40l_sim.errors import InputError


def inclusion_probabilities(experts: int, per_token: int, skew: float = 0.0) -> list[float]:
    """``pi_i`` for each expert in popularity order (sums to ``per_token``).

    Examples
    --------
    >>> inclusion_probabilities(4, 2)
    [0.5, 0.5, 0.5, 0.5]
    >>> [round(p, 4) for p in inclusion_probabilities(4, 2, skew=3.0)]
    [1.0, 0.7036, 0.2085, 0.0879]
    """
    _check(experts, per_token, 1, skew)
    weights = [(i + 1) ** -skew for i in range(experts)]
    capped = 0
    while True:
        # the first ``capped`` experts are certain; share the rest of k in proportion to popularity
        rest = sum(weights[capped:])
        scale = (per_token - capped) / rest
        if capped < experts and weights[capped] * scale > 1.0:
            capped += 1
            continue
        return [1.0] * capped + [min(1.0, w * scale) for w in weights[capped:]]


def expected_distinct_experts(experts: int, per_token: int, batch_tokens: int, skew: float = 0.0) -> float:
    """Expected number of distinct experts that ``batch_tokens`` tokens route to.

    Parameters
    ----------
    experts : int
        Routed experts ``E``.
    per_token : int
        Experts per token ``k`` (distinct within a token).
    batch_tokens : int
        Tokens ``B`` routed together (one decode step's batch).
    skew : float
        Zipf exponent of expert popularity; 0 is uniform.

    Examples
    --------
    >>> expected_distinct_experts(256, 8, 1)
    8.0
    >>> round(expected_distinct_experts(256, 8, 16), 2)   # 256 * (1 - (1 - 8/256) ** 16)
    101.96
    >>> round(expected_distinct_experts(256, 8, 16, skew=1.0), 2)
    64.12
    """
    _check(experts, per_token, batch_tokens, skew)
    if skew == 0.0:
        return experts * (1.0 - (1.0 - per_token / experts) ** batch_tokens)
    return sum(1.0 - (1.0 - p) ** batch_tokens for p in inclusion_probabilities(experts, per_token, skew))


def _check(experts: int, per_token: int, batch_tokens: int, skew: float) -> None:
    if experts < 1 or not 1 <= per_token <= experts:
        raise InputError(f"routing needs 1 <= experts_per_token <= routed_experts, got "
                         f"experts_per_token={per_token}, routed_experts={experts}")
    if batch_tokens < 0:
        raise InputError(f"batch_tokens must be >= 0, got {batch_tokens}")
    if not skew >= 0.0:
        raise InputError(f"routing skew must be >= 0 (0 is uniform), got {skew}")
