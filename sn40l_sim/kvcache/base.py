"""The KV-cache policy contract and its registry.

A policy says how long each sequence's cache is over its life, how many bytes that is, which
extra kernels prefill runs, and what decode reads and writes. Policies are looked up by name
(``full``, ``snapstream``, ``streamingllm``, ``snapkv``) from experiment files.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Callable, ClassVar

from sn40l_sim.models.kernels import FusedKernel
from sn40l_sim.models.spec import ModelSpec


class KVPolicy(ABC):
    """Base class of KV-cache policies. Subclasses are frozen dataclasses of their parameters."""

    name: ClassVar[str]

    @abstractmethod
    def cache_len(self, prompt_len: int, generated: int) -> int:
        """Tokens held per layer for one sequence after prefill and ``generated`` decode steps."""

    @abstractmethod
    def static_cache_len(self, prompt_len: int, max_new_tokens: int) -> int:
        """Slot length of the static decode graph: what decode attention reads each step and what
        memory is reserved per sequence."""

    @abstractmethod
    def prefill_kernels(self, model: ModelSpec, prompt_len: int, tp: int) -> list[FusedKernel]:
        """Extra kernels per layer that prefill runs for this policy (empty for ``full``)."""


POLICIES: dict[str, type[KVPolicy]] = {}


def register(cls: type[KVPolicy]) -> type[KVPolicy]:
    """Class decorator adding a policy to :data:`POLICIES` under ``cls.name``."""
    POLICIES[cls.name] = cls
    return cls


PolicyFactory = Callable[..., KVPolicy]
