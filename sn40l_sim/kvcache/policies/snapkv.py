"""``snapkv``: compress the prompt to the observation window + top-K selected positions, then
append every generated token (Li et al. 2024).

>>> SnapKV(topk=1000, observation_window=32).cache_len(131072, 3)
1035
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
    DEFAULT_WINDOW,
    Budgeted,
    check_lengths,
    check_pool_kernel,
    padded,
)
from sn40l_sim.kvcache.prefill_kernels import kept_window_kernel, snapkv_kernel
from sn40l_sim.models.spec import ModelSpec


@register
@dataclass(frozen=True)
class SnapKV(Budgeted):
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
        check_pool_kernel(self.name, self.pool_kernel)
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

    def budget_tokens(self) -> int:
        return self.observation_window + self.topk

    def kept_prompt_len(self, prompt_len: int) -> int:
        """Prompt tokens left after compression."""
        return min(prompt_len, self.observation_window + self.topk)

    def cache_len(self, prompt_len: int, generated: int) -> int:
        check_lengths(prompt_len, generated, "generated")
        return self.kept_prompt_len(prompt_len) + generated

    def static_cache_len(self, prompt_len: int, max_new_tokens: int) -> int:
        check_lengths(prompt_len, max_new_tokens, "max_new_tokens")
        return padded(self.kept_prompt_len(prompt_len) + max_new_tokens, self.pad_to)

    def prefill_kernels(self, model: ModelSpec, prompt_len: int, tp: int) -> list[FusedKernel]:
        if prompt_len <= self.observation_window + self.topk:
            return []
        if self.topk == 0:
            # a selection of nothing: the window is copied, nothing scored (as snapstream does)
            return [kept_window_kernel(model, tp, self.observation_window)]
        kernel = snapkv_kernel(model, prompt_len, tp, sink=0, recent=self.observation_window,
                               topk=self.topk, window=self.observation_window,
                               pool_kernel=self.pool_kernel, copy_kept_window=True)
        return [kernel] if kernel is not None else []
