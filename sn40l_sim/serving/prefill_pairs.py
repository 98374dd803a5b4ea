"""The configuration loads of one prefill graph run right after another on a co-located node.

Each graph is timed in its steady state, its kernels finding the configurations they left loaded
(:mod:`sn40l_sim.mapper.residency`). Run right after another prefill graph (a chunk after its
prompt's previous chunk, a prompt of one compiled length after one of another, a prefix hit's
suffix after either), some of those configurations are gone: the first graph's kernels took their
units. The pair's residency replay (:func:`~sn40l_sim.mapper.residency.loaded_after`: the first
graph called on units holding neither's kernels, then the second) says which of the second's calls
find their configuration, on which tiles; each call loads its first section there before it
streams, on the critical path as every load is, on those tiles only
(:func:`~sn40l_sim.mapper.residency.load_bytes`). So the second graph's engine cycles with the
pair's residency are its steady cycles plus exactly its calls' loads there less their steady ones
(less where a call finds after the first graph what it loads in its steady state, a configuration
the two share), which :func:`reload_after` sums without running the engine
(tests/serving/test_prefill_pairs.py checks the equality on Llama-3.1-70B's pairs). docs/architecture.md,
serving: "A co-located node that switches graphs".

Examples
--------
Two graphs of one-tile kernels on tiles of 260 PCUs: the second's two kernels fit side by side and
stay loaded in its steady state; after the first, which left ``b`` loaded beside its 200-PCU
kernel, ``b`` is found and ``attn`` loads once more:

>>> from types import SimpleNamespace as K
>>> from sn40l_sim.mapper._examples import example_socket
>>> def kernel(name, pcus, tile=0):
...     per_tile = tuple(pcus if t == tile else 0 for t in range(4))
...     return K(kernel=K(signature=lambda: name), sections=1, section_config_bytes=(pcus * 1000,),
...              pcus_per_tile=per_tile, pmus_per_tile=per_tile)
>>> pairs = GraphPairs(example_socket())
>>> records = lambda *kernels: call_records(example_socket(), True, kernels)
>>> first = pairs.profile(records(kernel("big", 200), kernel("b", 50)))
>>> second = pairs.profile(records(kernel("attn", 100), kernel("b", 50)))
>>> pairs.reload_after(first, second) == second.loads[0] > 0, pairs.reload_after(second, second)
(True, 0)
"""
from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, NamedTuple

from sn40l_sim.hardware import figures
from sn40l_sim.hardware.spec import SocketSpec
from sn40l_sim.mapper import disk_cache
from sn40l_sim.mapper.residency import Footprint, Loads, footprint_load_bytes, loaded_after, reload_tiles


class CallRecords(NamedTuple):
    """A placed graph's calls as a pair's reload reads them, kept on disk beside the graph's timing
    (:meth:`~sn40l_sim.serving.step_costs.StepTimer.prefill_calls`)."""

    #: each distinct kernel's signature, as text (kernels of one signature load one configuration)
    signatures: tuple[str, ...]
    #: ``(index into signatures, footprint, one section)`` of each call
    calls: tuple[tuple[int, Footprint, bool], ...]
    #: cycles of loading each call's first section on every tile (what a call that finds none pays)
    loads: tuple[int, ...]
    #: the tiles each call loads its configuration on in the graph's steady state (none: found)
    steady: tuple[Loads, ...]
    #: bytes of each call's first section (none without kernel boundaries), which a call that finds
    #: it on some tiles loads on the others only
    config_bytes: tuple[int, ...] = ()


def call_records(socket: SocketSpec, kernel_boundaries: bool, kernels: Sequence[Any]) -> CallRecords:
    """The :class:`CallRecords` of a placed graph's ``kernels`` in their calling order on ``socket``;
    ``kernel_boundaries``: the engine's option of that name (without it a call loads nothing)."""
    index: dict[Any, int] = {}
    calls = tuple((index.setdefault(k.kernel.signature(), len(index)),
                   (tuple(k.pcus_per_tile), tuple(k.pmus_per_tile)), k.sections == 1) for k in kernels)
    # the engine's load of section 0 (engine/kernel_costs.py: none without kernel boundaries)
    config = tuple(k.section_config_bytes[0] if kernel_boundaries and k.section_config_bytes else 0 for k in kernels)
    loads = tuple(figures.config_cycles(socket, n) for n in config)
    # the steady state the engine read when it timed the graph (the replay is memoised)
    return CallRecords(tuple(repr(signature) for signature in index), calls, loads, reload_tiles(socket, kernels),
                       config)


class CallLoads(NamedTuple):
    """A graph's calls numbered by a :class:`GraphPairs`, with their loads and steady state."""

    #: ``(kind, footprint, one section)`` of each call
    calls: tuple
    loads: tuple[int, ...]
    steady: tuple[Loads, ...]
    #: tiles the footprints span
    tiles: int
    #: names the records (the disk cache's key for a pair)
    digest: str
    #: bytes of each call's first section (:attr:`CallRecords.config_bytes`)
    config_bytes: tuple[int, ...] = ()


class GraphPairs:
    """Graphs' :class:`CallRecords` on ``socket`` numbered alike (kernels of one signature are one
    kind in every graph), and the reloads between them, each ordered pair worked out once (kept in
    the disk cache, :mod:`sn40l_sim.mapper.disk_cache`)."""

    def __init__(self, socket: SocketSpec) -> None:
        self.socket = socket
        self.capacity = (socket.tile.pcus, socket.tile.pmus)
        self._kinds: dict[str, int] = {}

    def profile(self, records: CallRecords) -> CallLoads:
        """``records`` with their kinds numbered here."""
        kinds = [self._kinds.setdefault(text, len(self._kinds)) for text in records.signatures]
        calls = tuple((kinds[i], footprint, one) for i, footprint, one in records.calls)
        tiles = max((len(footprint[0]) for _, footprint, _ in calls), default=0)
        return CallLoads(calls, records.loads, records.steady, tiles, hashlib.sha256(repr(records).encode()).hexdigest(),
                         records.config_bytes)

    def reload_after(self, before: CallLoads, graph: CallLoads) -> int:
        """Cycles ``graph`` takes beyond its steady state when it runs right after ``before``: its
        calls' loads on the tiles they load on after ``before``, less their loads in the steady
        state (the engine's difference, exactly)."""
        if before.calls == graph.calls:
            return 0
        key = f"{self.capacity} {before.digest} {graph.digest}"
        cycles = disk_cache.load("prefill_pair", key)
        if cycles is None:
            after = loaded_after(before.calls, graph.calls, self.capacity, max(before.tiles, graph.tiles))
            cycles = sum(self._load(call, n, tiles) - self._load(call, n, steady)
                         for call, n, steady, tiles in zip(graph.calls, graph.config_bytes, graph.steady, after,
                                                           strict=True))
            disk_cache.store("prefill_pair", key, cycles)
        return cycles

    def _load(self, call: tuple[int, Footprint, bool], config_bytes: int, tiles: Loads) -> int:
        """Cycles of a call's first-section load on ``tiles`` (as the engine's run_graph charges it)."""
        return figures.config_cycles(self.socket, footprint_load_bytes(self.socket, call[1], call[2], config_bytes, tiles))
