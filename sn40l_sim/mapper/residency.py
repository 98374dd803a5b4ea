"""Which kernels of a repeated graph find their configuration still loaded: :func:`resident_calls`.

A unit (PCU, PMU) holds the configuration of one dataflow graph at a time, and loading a kernel
writes only the units it uses (and the switches of its tiles, whose routing tables the compiler
writes for every kernel resident on the tile). So a kernel's configuration survives the calls of
other kernels as long as none of them was given one of its units: kernels whose units fit on the
tiles together stay loaded side by side, the way a compiler placing a decode step's small
kernels (embedding, ``lm_head``, sampling) beside its decoder would keep them. When a kernel does
not fit beside those loaded, the least recently called ones give up their units until it does.

A decode or prefill step is the same graph called again and again, so what counts is its steady
state: the graph's calls are replayed twice and a call is *resident* when, in the second pass,
its kernel's configuration is still loaded at the call. The first pass is the graph called on units
another graph has just taken (a co-located node's prefill before a decode step, another model's
step): the calls resident in the steady state but not there load their configuration once more
(:func:`switch_loads`). A kernel of several sections reloads them
on every call (they take turns on the same units), so its calls are never resident. Which tiles a
kernel uses is the mapper's choice (its ``pcus_per_tile``, ``pmus_per_tile`` per tile index).

Examples
--------
A step of four kernels on one tile of 260 PCUs and 260 PMUs: a decoder (80 PCUs), a head (20)
and a sampler (1) fit together, so in the steady state every call finds its configuration; a
kernel that takes every PCU leaves nothing resident beside it.

>>> from types import SimpleNamespace as K
>>> from sn40l_sim.mapper._examples import example_socket
>>> socket = example_socket()
>>> small = lambda name, pcus: K(kernel=K(signature=lambda: name), sections=1,
...                              pcus_per_tile=(pcus, 0, 0, 0), pmus_per_tile=(pcus, 0, 0, 0))
>>> resident_calls(socket, [small("embed", 1), small("dec", 80), small("dec", 80), small("head", 20)])
(True, True, True, True)
>>> resident_calls(socket, [small("mla", 260), small("ffn", 21), small("mla", 260), small("ffn", 21)])
(False, False, False, False)
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sn40l_sim.hardware.spec import SocketSpec

if TYPE_CHECKING:
    from sn40l_sim.mapper.placement import PlacedKernel


def resident_calls(socket: SocketSpec, kernels: Sequence[PlacedKernel]) -> tuple[bool, ...]:
    """For each call of ``kernels`` (a graph's kernels in their calling order), whether its
    configuration is still loaded when the graph is called again and again (see the module
    docstring)."""
    return tuple(_replay(socket, kernels)[len(kernels):])


def switch_loads(socket: SocketSpec, kernels: Sequence[PlacedKernel]) -> tuple[bool, ...]:
    """For each call of ``kernels``, whether it loads its configuration when the graph is called
    right after another graph took every unit, though it finds it loaded when the graph is called
    again and again (the first and second passes of the module docstring).
    :func:`call_residency` gives both answers from one replay.

    >>> from types import SimpleNamespace as K
    >>> from sn40l_sim.mapper._examples import example_socket
    >>> small = lambda name, pcus: K(kernel=K(signature=lambda: name), sections=1,
    ...                              pcus_per_tile=(pcus, 0, 0, 0), pmus_per_tile=(pcus, 0, 0, 0))
    >>> switch_loads(example_socket(), [small("embed", 1), small("dec", 80), small("dec", 80), small("head", 20)])
    (True, True, False, True)
    """
    return call_residency(socket, kernels)[1]


def call_residency(socket: SocketSpec, kernels: Sequence[PlacedKernel]
                   ) -> tuple[tuple[bool, ...], tuple[bool, ...]]:
    """:func:`resident_calls` and :func:`switch_loads` of ``kernels``, from one replay."""
    hits = _replay(socket, kernels)
    n = len(kernels)
    steady = tuple(hits[n:])
    return steady, tuple(s and not cold for cold, s in zip(hits[:n], steady, strict=True))


def _replay(socket: SocketSpec, kernels: Sequence[PlacedKernel]) -> list[bool]:
    """Whether each call finds its configuration loaded, over the graph's calls replayed twice
    from units holding none of its kernels."""
    capacity = (socket.tile.pcus, socket.tile.pmus)
    ids: dict[Any, int] = {}
    kinds = [ids.setdefault(k.kernel.signature(), len(ids)) for k in kernels]   # one hash a call
    loaded: OrderedDict[int, tuple[tuple[int, ...], tuple[int, ...]]] = OrderedDict()
    hits: list[bool] = []
    calls = list(zip(kinds, kernels, strict=True))
    for kind, k in calls + calls:
        footprint = (tuple(k.pcus_per_tile), tuple(k.pmus_per_tile))
        hit = kind in loaded and k.sections == 1
        if hit:
            loaded.move_to_end(kind)
        elif any(footprint[0]) or any(footprint[1]):
            loaded.pop(kind, None)
            while loaded and not _fits(loaded.values(), footprint, capacity):
                loaded.popitem(last=False)
            loaded[kind] = footprint
        hits.append(hit)
    return hits


def _fits(loaded: Any, footprint: tuple[tuple[int, ...], tuple[int, ...]], capacity: tuple[int, int]) -> bool:
    """Whether ``footprint`` fits on every tile beside the ``loaded`` footprints."""
    for unit, cap in enumerate(capacity):
        for tile, need in enumerate(footprint[unit]):
            if need and need + sum(f[unit][tile] for f in loaded if tile < len(f[unit])) > cap:
                return False
    return True
