"""The KV-cache policies: ``full``, ``snapstream``, ``streamingllm`` and ``snapkv``.

Lengths are tokens per layer and sequence. ``generated`` counts decode steps run: decode step
``g`` (1-based) writes the KV of position ``prompt_len + g - 1`` (the token sampled from the
previous step) and then attends.

Ring policies (``snapstream``, ``streamingllm``) keep a fixed ``[sink | ring | top-K]`` cache
(REFERENCE §3). After prefill of a prompt of length ``L >= sink + recent`` the ring holds the
``recent - 1`` positions ``L - recent + 1 .. L - 1`` and one empty slot, the one position ``L``
lands in (paper Fig. 4); from the first decode step on it holds the last ``recent`` positions.
Position ``L - recent`` is thus in neither the ring nor the evictable middle
``[sink, L - recent)``: the paper's construction drops it. :mod:`sn40l_sim.reference.snapstream`
implements the same rules on arrays, and the tests check that the two agree.

Examples
--------
>>> s = SnapStream.from_budget(32768)
>>> (s.sink, s.recent, s.topk), s.static_cache_len(131072, 1024)
((4, 4096, 28668), 32768)
>>> s.cache_len(131072, 0), s.cache_len(131072, 5)
(32767, 32768)
>>> Full(pad_to=1024).static_cache_len(131072, 100), Full().cache_len(131072, 5)
(132096, 131077)
>>> SnapKV(topk=1000, observation_window=32).cache_len(131072, 3)
1035
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sn40l_sim.errors import InputError
from sn40l_sim.ir import FusedKernel
from sn40l_sim.kvcache.base import KVPolicy, check_int, register
from sn40l_sim.kvcache.prefill_kernels import ring_buffer_kernel, snapkv_kernel
from sn40l_sim.models.spec import ModelSpec

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


def _check_len(prompt_len: int, other: int, other_name: str) -> None:
    if prompt_len < 1 or other < 0:
        raise ValueError(f"need prompt_len >= 1 and {other_name} >= 0, got {prompt_len}, {other}")


def ring_cache_len(prompt_len: int, generated: int, sink: int, recent: int, topk: int) -> int:
    """Valid tokens of a ``[sink | ring | top-K]`` cache after ``generated`` decode steps.

    >>> ring_cache_len(26, 0, 1, 4, 8), ring_cache_len(26, 1, 1, 4, 8)  # 26 - 5 = 21 evictable
    (12, 13)
    >>> ring_cache_len(3, 0, 1, 4, 8), ring_cache_len(3, 4, 1, 4, 8)    # short prompt
    (3, 5)
    """
    _check_len(prompt_len, generated, "generated")
    written = prompt_len + generated
    if prompt_len < sink + recent:
        return min(written, sink + recent)
    valid_topk = min(prompt_len - sink - recent, topk)
    ring = recent if generated > 0 else recent - 1
    return sink + ring + valid_topk


def _padded(tokens: int, pad_to: int) -> int:
    return math.ceil(tokens / pad_to) * pad_to


@register
@dataclass(frozen=True)
class Full(KVPolicy):
    """No compression: a static cache padded to the graph's maximum length.

    Parameters
    ----------
    pad_to : int
        Round the static length ``prompt_len + max_new_tokens`` up to a multiple of this (the
        granularity static graphs are compiled at). Default 1: no rounding.
    """

    name = "full"
    pad_to: int = 1

    def __post_init__(self) -> None:
        check_int(self.name, "pad_to", self.pad_to, 1)

    def cache_len(self, prompt_len: int, generated: int) -> int:
        _check_len(prompt_len, generated, "generated")
        return prompt_len + generated

    def static_cache_len(self, prompt_len: int, max_new_tokens: int) -> int:
        _check_len(prompt_len, max_new_tokens, "max_new_tokens")
        return _padded(prompt_len + max_new_tokens, self.pad_to)

    def prefill_kernels(self, model: ModelSpec, prompt_len: int, tp: int) -> list[FusedKernel]:
        return []


class _Budgeted(KVPolicy):
    """Policies that can also be given by their total cache ``budget``."""

    @classmethod
    def _split_budget(cls, budget: Any, params: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> KVPolicy:
        params = dict(params)
        if "budget" in params:
            budget = params.pop("budget")
            check_int(cls.name, "budget", budget, 1)
            params = cls._split_budget(budget, params)
        return super().from_params(params)


@register
@dataclass(frozen=True)
class SnapStream(_Budgeted):
    """SnapStream: ``[sink | ring of recent tokens | SnapKV top-K]``, fixed length.

    Parameters
    ----------
    sink : int
        Attention-sink tokens kept from the prompt's start (default 4, StreamingLLM's).
    recent : int
        Ring of the most recent tokens, written in place in decode (>= 1).
    topk : int
        ``K``: positions of the evictable middle kept by SnapKV selection.
    observation_window : int
        Last prompt queries that score the middle. Default: ``recent``. In SnapKV the
        observation window is the prompt's last tokens, the ones it keeps whole, and the middle
        it selects from ends where the window starts; SnapStream keeps the last ``recent``
        tokens in the ring and selects from ``[sink, L - recent)``, so the window is the ring.
        (Table 4 agrees: see docs/validation.md.)
    pool_kernel : int
        Odd average-pooling kernel along the sequence (default 7, SnapKV's).

    The defaults are :meth:`from_budget` of 32768 (the DeepSeek deployment's cache), and
    ``params: {budget: N}`` in an experiment file does the same split for another total.
    """

    name = "snapstream"
    sink: int = DEFAULT_SINK
    recent: int = DEFAULT_BUDGET // DEFAULT_RECENT_FRACTION
    topk: int = DEFAULT_BUDGET - DEFAULT_SINK - DEFAULT_BUDGET // DEFAULT_RECENT_FRACTION
    observation_window: int | None = None
    pool_kernel: int = DEFAULT_POOL_KERNEL

    def __post_init__(self) -> None:
        check_int(self.name, "sink", self.sink, 0)
        check_int(self.name, "recent", self.recent, 1)
        check_int(self.name, "topk", self.topk, 0)
        if self.observation_window is None:
            object.__setattr__(self, "observation_window", self.recent)
        check_int(self.name, "observation_window", self.observation_window, 1)
        _check_pool_kernel(self.name, self.pool_kernel)

    @classmethod
    def from_budget(cls, budget: int, *, sink: int = DEFAULT_SINK, recent: int | None = None,
                    observation_window: int | None = None,
                    pool_kernel: int = DEFAULT_POOL_KERNEL) -> SnapStream:
        """Split a total ``budget`` = sink + recent + topk: ``sink`` 4 and ``recent`` an eighth of
        the budget unless given; top-K takes the rest.

        >>> SnapStream.from_budget(16384)
        SnapStream(sink=4, recent=2048, topk=14332, observation_window=2048, pool_kernel=7)
        """
        params = cls._split_budget(budget, {"sink": sink, "recent": recent,
                                            "observation_window": observation_window,
                                            "pool_kernel": pool_kernel})
        return cls(**params)

    @classmethod
    def _split_budget(cls, budget: Any, params: dict[str, Any]) -> dict[str, Any]:
        check_int(cls.name, "budget", budget, 1)
        sink = params.setdefault("sink", DEFAULT_SINK)
        if params.get("recent") is None:
            params["recent"] = max(1, budget // DEFAULT_RECENT_FRACTION)
        check_int(cls.name, "sink", sink, 0)
        check_int(cls.name, "recent", params["recent"], 1)
        topk = budget - sink - params["recent"]
        if "topk" in params and params["topk"] != topk:
            raise InputError(f"KV policy {cls.name!r}: budget {budget} != sink {sink} + recent "
                             f"{params['recent']} + topk {params['topk']}; give budget or topk, "
                             "not both", field="budget")
        if topk < 0:
            raise InputError(f"KV policy {cls.name!r}: expected budget >= sink + recent = "
                             f"{sink + params['recent']}, got {budget}", field="budget")
        params["topk"] = topk
        return params

    def cache_len(self, prompt_len: int, generated: int) -> int:
        return ring_cache_len(prompt_len, generated, self.sink, self.recent, self.topk)

    def static_cache_len(self, prompt_len: int, max_new_tokens: int) -> int:
        _check_len(prompt_len, max_new_tokens, "max_new_tokens")
        return self.sink + self.recent + self.topk

    def valid_topk(self, prompt_len: int) -> int:
        """``min(max(L - (sink + recent), 0), K)``: top-K slots holding selected tokens."""
        return min(max(prompt_len - (self.sink + self.recent), 0), self.topk)

    def prefill_kernels(self, model: ModelSpec, prompt_len: int, tp: int) -> list[FusedKernel]:
        kernels = [
            snapkv_kernel(model, prompt_len, tp, sink=self.sink, recent=self.recent,
                          topk=self.topk, window=self.observation_window,
                          pool_kernel=self.pool_kernel) if self.topk > 0 else None,
            ring_buffer_kernel(model, prompt_len, tp, sink=self.sink, recent=self.recent),
        ]
        return [k for k in kernels if k is not None]


@register
@dataclass(frozen=True)
class StreamingLLM(_Budgeted):
    """StreamingLLM: ``[sink | ring of recent tokens]``, no selection, no SnapKV kernel.

    Parameters
    ----------
    sink : int
        Attention-sink tokens (default 4).
    recent : int
        Ring of recent tokens (default 32764, a 32768-token cache); ``params: {budget: N}``
        sets ``recent = N - sink``.
    """

    name = "streamingllm"
    sink: int = DEFAULT_SINK
    recent: int = DEFAULT_BUDGET - DEFAULT_SINK

    def __post_init__(self) -> None:
        check_int(self.name, "sink", self.sink, 0)
        check_int(self.name, "recent", self.recent, 1)

    @classmethod
    def _split_budget(cls, budget: Any, params: dict[str, Any]) -> dict[str, Any]:
        sink = params.setdefault("sink", DEFAULT_SINK)
        check_int(cls.name, "sink", sink, 0)
        if "recent" in params and params["recent"] != budget - sink:
            raise InputError(f"KV policy {cls.name!r}: budget {budget} != sink {sink} + recent "
                             f"{params['recent']}", field="budget")
        params["recent"] = budget - sink
        check_int(cls.name, "budget", budget, sink + 1)
        return params

    def cache_len(self, prompt_len: int, generated: int) -> int:
        return ring_cache_len(prompt_len, generated, self.sink, self.recent, 0)

    def static_cache_len(self, prompt_len: int, max_new_tokens: int) -> int:
        _check_len(prompt_len, max_new_tokens, "max_new_tokens")
        return self.sink + self.recent

    def prefill_kernels(self, model: ModelSpec, prompt_len: int, tp: int) -> list[FusedKernel]:
        kernel = ring_buffer_kernel(model, prompt_len, tp, sink=self.sink, recent=self.recent)
        return [kernel] if kernel is not None else []


@register
@dataclass(frozen=True)
class SnapKV(_Budgeted):
    """SnapKV: compress the prompt to the observation window + ``topk`` selected positions, then
    append every generated token (the cache grows in decode).

    Prompts of at most ``observation_window + topk`` tokens are kept whole (no kernel runs).

    Parameters
    ----------
    topk : int
        Positions selected from the prefix ``[0, L - observation_window)`` (default 32736, a
        32768-token compressed prompt); ``params: {budget: N}`` sets ``topk = N - window``.
    observation_window : int
        The last queries that score the prefix; they are kept too (default 32).
    pool_kernel : int
        Odd average-pooling kernel (default 7).
    pad_to : int
        Round the static length up to a multiple of this (default 1).
    """

    name = "snapkv"
    topk: int = DEFAULT_BUDGET - DEFAULT_WINDOW
    observation_window: int = DEFAULT_WINDOW
    pool_kernel: int = DEFAULT_POOL_KERNEL
    pad_to: int = 1

    def __post_init__(self) -> None:
        check_int(self.name, "topk", self.topk, 0)
        check_int(self.name, "observation_window", self.observation_window, 1)
        _check_pool_kernel(self.name, self.pool_kernel)
        check_int(self.name, "pad_to", self.pad_to, 1)

    @classmethod
    def _split_budget(cls, budget: Any, params: dict[str, Any]) -> dict[str, Any]:
        window = params.setdefault("observation_window", DEFAULT_WINDOW)
        check_int(cls.name, "observation_window", window, 1)
        if "topk" in params and params["topk"] != budget - window:
            raise InputError(f"KV policy {cls.name!r}: budget {budget} != observation_window "
                             f"{window} + topk {params['topk']}", field="budget")
        check_int(cls.name, "budget", budget, window)
        params["topk"] = budget - window
        return params

    def kept_prompt_len(self, prompt_len: int) -> int:
        """Prompt tokens left after compression."""
        return min(prompt_len, self.observation_window + self.topk)

    def cache_len(self, prompt_len: int, generated: int) -> int:
        _check_len(prompt_len, generated, "generated")
        return self.kept_prompt_len(prompt_len) + generated

    def static_cache_len(self, prompt_len: int, max_new_tokens: int) -> int:
        _check_len(prompt_len, max_new_tokens, "max_new_tokens")
        return _padded(self.kept_prompt_len(prompt_len) + max_new_tokens, self.pad_to)

    def prefill_kernels(self, model: ModelSpec, prompt_len: int, tp: int) -> list[FusedKernel]:
        if prompt_len <= self.observation_window + self.topk:
            return []
        kernel = snapkv_kernel(model, prompt_len, tp, sink=0, recent=self.observation_window,
                               topk=self.topk, window=self.observation_window,
                               pool_kernel=self.pool_kernel, copy_kept_window=True)
        return [kernel] if kernel is not None else []


def _check_pool_kernel(policy: str, value: Any) -> None:
    check_int(policy, "pool_kernel", value, 1)
    if value % 2 == 0:
        # an even kernel has no centre: pooled scores would shift by half a position
        raise InputError(f"KV policy {policy!r}: expected an odd integer, got {value}",
                         field="pool_kernel")
