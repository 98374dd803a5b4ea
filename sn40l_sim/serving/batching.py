"""Static-graph batching: decode slots, compiled sizes, and the largest batch that fits in memory.

The decode graph is compiled for a fixed number of batch slots and a fixed (static) cache length
per slot. A sequence holds one slot from the moment its KV cache starts arriving until its last
token; a finished sequence frees its slot for the next waiting request (continuous batching).
A static graph computes every compiled slot each step, empty or not, so a decode step always
costs ``decode_step(compiled_batch, static_cache_len)``.

The maximum batch is the largest compiled batch size whose memory, as placed by
:func:`sn40l_sim.mapper.memory.place_memory`, fits on every socket: weights, reserved memory,
activations and the KV slots (``ceil(batch / attention_dp)`` sequences per socket, each
``static_cache_len`` tokens).

Examples
--------
>>> table = SlotTable(2)
>>> table.acquire(7), table.acquire(8), table.free
(0, 1, 0)
>>> table.release(0, 7); table.acquire(9)
0
>>> def fits(batch):
...     if batch > 16:
...         raise InfeasibleError(f"batch {batch}: KV needs {batch} GB, 16 GB free")
...     return f"placement at {batch}"
>>> search = find_max_batch(fits, (1, 2, 4, 8, 16, 32, 64))
>>> search.max_batch, search.placement, str(search.next_failure)
(16, 'placement at 16', 'batch 32: KV needs 32 GB, 16 GB free')
"""
from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sn40l_sim.errors import InfeasibleError


class SlotTable:
    """The batch slots of one decode node's static graph; each holds at most one sequence.

    Parameters
    ----------
    slots : int
        Compiled batch size of the decode graph.
    """

    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError("a decode graph needs at least one slot")
        self._holder: list[int | None] = [None] * slots
        # the free slots, lowest first, and their count: the loop asks for both at every dispatch
        self._free_slots = list(range(slots))
        self._free = slots

    @property
    def size(self) -> int:
        return len(self._holder)

    @property
    def free(self) -> int:
        """Slots holding no sequence."""
        return self._free

    @property
    def in_use(self) -> int:
        """Slots holding a sequence."""
        return len(self._holder) - self._free

    def holder(self, slot: int) -> int | None:
        """The sequence id in ``slot`` (None when free)."""
        return self._holder[slot]

    def acquire(self, seq_id: int) -> int:
        """Put ``seq_id`` in the lowest free slot and return the slot index."""
        if not self._free_slots:
            raise RuntimeError(f"no free slot for sequence {seq_id}")
        slot = heapq.heappop(self._free_slots)
        self._holder[slot] = seq_id
        self._free -= 1
        return slot

    def release(self, slot: int, seq_id: int) -> None:
        """Free ``slot``, which must hold ``seq_id``."""
        if self._holder[slot] != seq_id:
            raise RuntimeError(f"slot {slot} holds {self._holder[slot]}, not {seq_id}")
        self._holder[slot] = None
        heapq.heappush(self._free_slots, slot)
        self._free += 1


@dataclass(frozen=True)
class BatchSearch:
    """Result of :func:`find_max_batch`.

    Attributes
    ----------
    max_batch : int
        Largest compiled size that fits.
    placement : Any
        What ``fits(max_batch)`` returned (a ``MemoryPlacement`` in the simulator).
    next_failure : InfeasibleError or None
        Why the next compiled size does not fit (None when every size fits).
    """

    max_batch: int
    placement: Any
    next_failure: InfeasibleError | None


def find_max_batch(fits: Callable[[int], Any], batch_sizes: Sequence[int]) -> BatchSearch:
    """The largest of ``batch_sizes`` for which ``fits`` does not raise :class:`InfeasibleError`.

    Memory grows with the batch, so fitting is monotone and a bisection over the sorted sizes
    finds the boundary with about log2(len(batch_sizes)) + 1 calls of ``fits``.

    Raises
    ------
    InfeasibleError
        When even the smallest compiled size does not fit (the message says why).
    """
    sizes = sorted(set(batch_sizes))
    if not sizes:
        raise ValueError("batch_sizes must not be empty")
    results: dict[int, Any] = {}

    def ok(i: int) -> bool:
        try:
            results[i] = fits(sizes[i])
            return True
        except InfeasibleError as exc:
            results[i] = exc
            return False

    if not ok(0):
        raise InfeasibleError(f"no compiled batch size fits, not even {sizes[0]}: {results[0]}")
    lo, hi = 0, len(sizes)          # sizes[lo] fits; sizes[hi] (if any) does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid
    failure = results[hi] if hi < len(sizes) else None
    return BatchSearch(sizes[lo], results[lo], failure)


def choose_batch(requested: int | str, search: BatchSearch, fits: Callable[[int], Any]) -> tuple[int, Any]:
    """The decode batch to run and its placement: the maximum, or an explicit size that must fit.

    >>> search = BatchSearch(16, "p16", InfeasibleError("batch 32: 4 GB short"))
    >>> choose_batch("max", search, lambda b: f"p{b}")
    (16, 'p16')
    >>> choose_batch(12, search, lambda b: f"p{b}")
    (12, 'p12')
    """
    if requested == "max":
        return search.max_batch, search.placement
    batch = int(requested)
    try:
        return batch, fits(batch)
    except InfeasibleError as exc:
        raise InfeasibleError(f"a batch of {batch} does not fit (largest compiled batch that fits: "
                              f"{search.max_batch}): {exc}") from None


def compiled_size(value: int, sizes: Sequence[int], what: str) -> int:
    """The smallest compiled size that holds ``value`` (static graphs pad up to it).

    >>> compiled_size(100000, (65536, 131072), "prefill length")
    131072
    """
    for size in sorted(sizes):
        if size >= value:
            return size
    raise InfeasibleError(f"{what} {value} exceeds the largest compiled size {max(sizes)}")
