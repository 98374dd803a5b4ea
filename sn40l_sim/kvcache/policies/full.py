"""``full``: no compression, a static cache padded to the graph's maximum length.

>>> Full(pad_to=1024).static_cache_len(131072, 100), Full().cache_len(131072, 5)
(132096, 131077)
"""
from __future__ import annotations

from dataclasses import dataclass

from sn40l_sim.ir import FusedKernel
from sn40l_sim.kvcache.base import KVPolicy, check_int, register
from sn40l_sim.kvcache.policies.shared import check_lengths, padded
from sn40l_sim.models.spec import ModelSpec


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
        check_lengths(prompt_len, generated, "generated")
        return prompt_len + generated

    def static_cache_len(self, prompt_len: int, max_new_tokens: int) -> int:
        check_lengths(prompt_len, max_new_tokens, "max_new_tokens")
        return padded(prompt_len + max_new_tokens, self.pad_to)

    def prefill_kernels(self, model: ModelSpec, prompt_len: int, tp: int) -> list[FusedKernel]:
        return []
