"""What a KV policy keeps per sequence, and where: the cache decode attention reads, the policy's own
state beside it, and a store of the whole cache in another memory tier.

A policy describes one sequence by a :class:`KVFootprint` (per layer, from its parameters and the
point's lengths: :meth:`sn40l_sim.kvcache.base.KVPolicy.footprint`); :func:`kv_bytes_by_use` turns
it into bytes on the busiest socket with the one sharding and rounding rule of
:func:`sn40l_sim.kvcache.sizing.kv_bytes_per_socket`:

``kv``
    the cache decode attention reads (``slots`` rows, the static slot length) plus the policy's
    state kept beside it (``state_bytes`` per KV head: H2O's accumulated scores, ArkVale's page
    digests), in the first memory tier with the rest of the KV;
``kv_offload``
    the store (``store_rows`` rows, in ``store_tier``): ArkVale keeps every token of the sequence
    there and recalls pages from it.

The state is kept whole on every socket holding a share of its KV head (sockets sharing a KV head
agree on one selection), so it is not divided by row shards.

Examples
--------
>>> from sn40l_sim.ir import ParallelPlan
>>> from sn40l_sim.models.loader import load_model
>>> r1 = load_model("graphs/deepseek_r1.yaml")
>>> fp = KVFootprint(slots=32768, state_bytes=4 * 32768)      # an FP32 score per slot
>>> uses = kv_bytes_by_use(r1, ParallelPlan(16, 16), 64, fp, include_mtp=True)
>>> uses["kv"] == 4 * 32768 * (71424 + 62 * 4), uses["kv_offload"]
(True, 0)
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass

from sn40l_sim.ir import ParallelPlan
from sn40l_sim.kvcache.sizing import kv_bytes_per_socket, state_bytes_per_socket
from sn40l_sim.models.spec import ModelSpec


@dataclass(frozen=True)
class KVFootprint:
    """What one sequence keeps, per cache layer.

    Attributes
    ----------
    slots : int
        Rows of the cache decode attention reads (the static slot length, ``Shape.kv_len``).
    state_bytes : int
        Bytes of the policy's own state per KV head kept beside that cache (0 for none).
    store_rows : int
        Rows of the store in ``store_tier`` (0: no store).
    store_tier : str or None
        The memory tier holding the store.
    """

    slots: int
    state_bytes: int = 0
    store_rows: int = 0
    store_tier: str | None = None

    def __post_init__(self) -> None:
        # a plug-in's footprint was used unchecked: negative state bytes were taken off the KV memory
        # without a word, and a fractional slot count was blamed on cache_len at line 1 of the experiment
        for name, least in (("slots", 1), ("state_bytes", 0), ("store_rows", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < least:
                raise ValueError(f"KVFootprint.{name}: expected an integer >= {least}, got {value!r}")
        if self.store_tier is not None and not isinstance(self.store_tier, str):
            raise ValueError(f"KVFootprint.store_tier: expected a memory tier's name or None, got {self.store_tier!r}")

    @property
    def context_rows(self) -> int:
        """Rows the sequence keeps in all: its store when it has one, else its slots."""
        return self.store_rows if self.store_tier is not None else self.slots


def kv_bytes_by_use(model: ModelSpec, plan: ParallelPlan, batch: int, footprint: KVFootprint, *,
                    include_mtp: bool | int = False) -> dict[str, int]:
    """Decode bytes on the busiest socket for ``batch`` sequences: ``kv`` (the cache attention
    reads plus the policy's state) and ``kv_offload`` (the store, 0 without one)."""
    cache = kv_bytes_per_socket(model, plan, batch, footprint.slots, include_mtp=include_mtp)
    state = state_bytes_per_socket(model, plan, batch, footprint.state_bytes, include_mtp=include_mtp)
    store = kv_bytes_per_socket(model, plan, batch, footprint.store_rows, include_mtp=include_mtp) \
        if footprint.store_tier is not None else 0
    return {"kv": cache + state, "kv_offload": store}
