"""An example KV-policy plug-in (docs/architecture.md, "Extending the simulator"): ``recent_window``
keeps the last ``window`` tokens of each sequence and nothing else, a ring with no attention sinks.

It is written as a user outside the package writes one: a frozen dataclass of its parameters,
subclassing :class:`sn40l_sim.kvcache.KVPolicy`, decorated with :func:`sn40l_sim.kvcache.register`,
and listed under ``plugins:`` of the experiment that names it (``recent_window.yaml`` beside this
file). Its prefill compresses a prompt longer than the window with the simulator's own ring-buffer
copy kernel, so its numbers are those of ``streamingllm`` with ``sink: 0`` (a test holds them equal).
"""
from __future__ import annotations

from dataclasses import dataclass

from sn40l_sim.ir import FusedKernel
from sn40l_sim.kvcache import KVPolicy, register
from sn40l_sim.kvcache.base import check_int
from sn40l_sim.kvcache.policies.shared import ring_cache_len
from sn40l_sim.kvcache.prefill_kernels import ring_buffer_kernel
from sn40l_sim.models.spec import ModelSpec


@register
@dataclass(frozen=True)
class RecentWindow(KVPolicy):
    """The last ``window`` tokens (default 4096) of each sequence, per layer."""

    name = "recent_window"
    window: int = 4096

    def __post_init__(self) -> None:
        # a bad parameter is one line naming params.window at the policy's entry, exit status 2
        check_int(self.name, "window", self.window, 1)

    def budget_tokens(self) -> int:
        # checked against the model's maximum context, as the shipped policies' budgets are
        return self.window

    def cache_len(self, prompt_len: int, generated: int) -> int:
        # the shipped ring's rule: a prompt compressed into the ring leaves its last slot for the
        # first generated token (what the KV transfer after prefill carries)
        return ring_cache_len(prompt_len, generated, 0, self.window, 0)

    def static_cache_len(self, prompt_len: int, max_new_tokens: int) -> int:
        # the decode graph is static: its slot is the whole window, whatever the sequence holds
        return self.window

    def prefill_kernels(self, model: ModelSpec, prompt_len: int, tp: int) -> list[FusedKernel]:
        kernel = ring_buffer_kernel(model, prompt_len, tp, sink=0, recent=self.window)
        return [kernel] if kernel is not None else []
