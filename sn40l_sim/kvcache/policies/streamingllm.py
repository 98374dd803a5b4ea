"""``streamingllm``: ``[sink | ring of recent tokens]``, no selection (Xiao et al. 2023).

>>> StreamingLLM(sink=4, recent=28).cache_len(100, 0), StreamingLLM(sink=4, recent=28).cache_len(100, 3)
(31, 32)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sn40l_sim.errors import InputError
from sn40l_sim.ir import FusedKernel
from sn40l_sim.kvcache.base import check_int, register
from sn40l_sim.kvcache.policies.shared import DEFAULT_BUDGET, DEFAULT_SINK, Budgeted, check_lengths, ring_cache_len
from sn40l_sim.kvcache.prefill_kernels import ring_buffer_kernel
from sn40l_sim.models.spec import ModelSpec


@register
@dataclass(frozen=True)
class StreamingLLM(Budgeted):
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

    def budget_tokens(self) -> int:
        return self.sink + self.recent

    def cache_len(self, prompt_len: int, generated: int) -> int:
        return ring_cache_len(prompt_len, generated, self.sink, self.recent, 0)

    def static_cache_len(self, prompt_len: int, max_new_tokens: int) -> int:
        check_lengths(prompt_len, max_new_tokens, "max_new_tokens")
        return self.sink + self.recent

    def prefill_kernels(self, model: ModelSpec, prompt_len: int, tp: int) -> list[FusedKernel]:
        kernel = ring_buffer_kernel(model, prompt_len, tp, sink=self.sink, recent=self.recent)
        return [kernel] if kernel is not None else []
