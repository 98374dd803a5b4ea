"""``snapstream``: ``[sink | ring of recent tokens | SnapKV top-K]``, fixed length (docs/reference.md §3).

>>> s = SnapStream.from_budget(32768)
>>> (s.sink, s.recent, s.topk), s.static_cache_len(131072, 1024)
((4, 4096, 28668), 32768)
>>> s.cache_len(131072, 0), s.cache_len(131072, 5)
(32767, 32768)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sn40l_sim.errors import InputError
from sn40l_sim.ir import FusedKernel
from sn40l_sim.kvcache.base import check_int, register
from sn40l_sim.kvcache.policies.shared import (
    DEFAULT_BUDGET,
    DEFAULT_POOL_KERNEL,
    DEFAULT_RECENT_FRACTION,
    DEFAULT_SINK,
    Budgeted,
    check_lengths,
    check_pool_kernel,
    ring_cache_len,
)
from sn40l_sim.kvcache.prefill_kernels import evictable_len, kept_middle_kernel, ring_buffer_kernel, snapkv_kernel
from sn40l_sim.models.spec import ModelSpec


@register
@dataclass(frozen=True)
class SnapStream(Budgeted):
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
        check_pool_kernel(self.name, self.pool_kernel)

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

    def budget_tokens(self) -> int:
        return self.sink + self.recent + self.topk

    def cache_len(self, prompt_len: int, generated: int) -> int:
        return ring_cache_len(prompt_len, generated, self.sink, self.recent, self.topk)

    def static_cache_len(self, prompt_len: int, max_new_tokens: int) -> int:
        check_lengths(prompt_len, max_new_tokens, "max_new_tokens")
        return self.sink + self.recent + self.topk

    def valid_topk(self, prompt_len: int) -> int:
        """``min(max(L - (sink + recent), 0), K)``: top-K slots holding selected tokens."""
        return min(max(prompt_len - (self.sink + self.recent), 0), self.topk)

    def prefill_kernels(self, model: ModelSpec, prompt_len: int, tp: int) -> list[FusedKernel]:
        selects = self.topk > 0 and evictable_len(prompt_len, self.sink, self.recent) > self.topk
        kernels = [
            snapkv_kernel(model, prompt_len, tp, sink=self.sink, recent=self.recent,
                          topk=self.topk, window=self.observation_window,
                          pool_kernel=self.pool_kernel) if selects
            # a middle that fits in the top-K slots is kept whole: copied, not scored
            else kept_middle_kernel(model, prompt_len, tp, sink=self.sink, recent=self.recent) if self.topk > 0
            else None,
            ring_buffer_kernel(model, prompt_len, tp, sink=self.sink, recent=self.recent),
        ]
        return [k for k in kernels if k is not None]
