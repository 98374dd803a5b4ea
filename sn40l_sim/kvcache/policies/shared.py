"""What the ring and budgeted KV policies share: defaults, length checks, the ring's length, and
the split of a total ``budget`` into a policy's parameters.

Lengths are tokens per layer and sequence. ``generated`` counts decode steps run: decode step
``g`` (1-based) writes the KV of position ``prompt_len + g - 1`` (the token sampled from the
previous step) and then attends.

Ring policies (``snapstream``, ``streamingllm``) keep a fixed ``[sink | ring | top-K]`` cache
(docs/reference.md §3). After prefill of a prompt of length ``L >= sink + recent`` the ring holds the
``recent - 1`` positions ``L - recent + 1 .. L - 1`` and one empty slot, the one position ``L``
lands in (paper Fig. 4); from the first decode step on it holds the last ``recent`` positions.
Position ``L - recent`` is thus in neither the ring nor the evictable middle
``[sink, L - recent)``: the paper's construction drops it. :mod:`sn40l_sim.reference.snapstream`
implements the same rules on arrays, and the tests check that the two agree.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from numbers import Integral
from typing import Any

from sn40l_sim.errors import InputError
from sn40l_sim.kvcache.base import KVPolicy, check_int

#: StreamingLLM keeps 4 attention-sink tokens (Xiao et al. 2023); SnapStream's are unpublished
DEFAULT_SINK = 4
#: the share of a ``budget`` given to the recent ring when only the total is known (assumed:
#: the paper publishes only the total; one eighth leaves the bulk to the top-K selection)
DEFAULT_RECENT_FRACTION = 8
#: SnapKV's published defaults (Li et al. 2024): 32-token observation (and kept) window, pooling
#: kernel 7
DEFAULT_WINDOW = 32
DEFAULT_POOL_KERNEL = 7
#: the DeepSeek deployment's cache: 32K tokens for 128K prompts (SnapStream paper, Table 5)
DEFAULT_BUDGET = 32768


def check_lengths(prompt_len: int, other: int, other_name: str) -> None:
    """Lengths a policy accepts: a prompt of at least one token, a count of steps >= 0, whole numbers
    (a Python caller's 1.5 came back as a cache of 1.5 tokens, None was a TypeError, and a negative
    count a ValueError, where bad input is an InputError)."""
    if not all(isinstance(n, Integral) and not isinstance(n, bool) for n in (prompt_len, other)) \
            or prompt_len < 1 or other < 0:
        raise InputError(f"need integers prompt_len >= 1 and {other_name} >= 0, got {prompt_len!r}, {other!r}")


def ring_cache_len(prompt_len: int, generated: int, sink: int, recent: int, topk: int) -> int:
    """Valid tokens of a ``[sink | ring | top-K]`` cache after ``generated`` decode steps.

    >>> ring_cache_len(26, 0, 1, 4, 8), ring_cache_len(26, 1, 1, 4, 8)  # 26 - 5 = 21 evictable
    (12, 13)
    >>> ring_cache_len(3, 0, 1, 4, 8), ring_cache_len(3, 4, 1, 4, 8)    # short prompt
    (3, 5)
    """
    check_lengths(prompt_len, generated, "generated")
    written = prompt_len + generated
    if prompt_len < sink + recent:
        return min(written, sink + recent)
    valid_topk = min(prompt_len - sink - recent, topk)
    ring = recent if generated > 0 else recent - 1
    return sink + ring + valid_topk


def padded(tokens: int, pad_to: int) -> int:
    """``tokens`` rounded up to a multiple of ``pad_to``.

    >>> padded(131073, 1024)
    132096
    """
    return math.ceil(tokens / pad_to) * pad_to


class Budgeted(KVPolicy):
    """Policies that can also be given by their total cache ``budget`` (``params: {budget: N}``):
    a subclass says how the total splits into its parameters."""

    other_params = ("budget",)

    @classmethod
    def _split_budget(cls, budget: Any, params: dict[str, Any]) -> dict[str, Any]:
        """``params`` with ``budget`` split into the policy's own parameters (subclasses say how)."""
        raise NotImplementedError

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> KVPolicy:
        params = dict(params)
        if "budget" in params:
            budget = params.pop("budget")
            check_int(cls.name, "budget", budget, 1)
            params = cls._split_budget(budget, params)
        return super().from_params(params)


def check_pool_kernel(policy: str, value: Any) -> None:
    """An odd average-pooling kernel of at least 1."""
    check_int(policy, "pool_kernel", value, 1)
    if value % 2 == 0:
        # an even kernel has no centre: pooled scores would shift by half a position
        raise InputError(f"KV policy {policy!r}: expected an odd integer, got {value}",
                         field="pool_kernel")
