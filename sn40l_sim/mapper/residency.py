"""Which kernels of a repeated graph find their configuration still loaded: :func:`resident_calls`.

A unit (PCU, PMU) holds the configuration of one dataflow graph at a time, and loading a kernel
writes only the units it uses (and the switches of its tiles, whose routing tables the compiler
writes for every kernel resident on the tile). So a kernel's configuration survives the calls of
other kernels as long as none of them was given one of its units: kernels whose units fit on the
tiles together stay loaded side by side, the way a compiler placing a decode step's small
kernels (embedding, ``lm_head``, sampling) beside its decoder would keep them. When a kernel does
not fit beside those loaded, the least recently called ones give up their units until it does, on
the tiles where it lands only: a kernel on several tiles that loses its units on one keeps its
configuration on the others, and its next call loads that tile's units and switches alone
(:func:`reload_tiles`, :func:`load_bytes`).

A decode or prefill step is the same graph called again and again, so what counts is its steady
state: the graph's calls are replayed twice and a call is *resident* when, in the second pass,
its kernel's configuration is still loaded at the call. The first pass is the graph called on units
another graph has just taken, each kernel loaded where the steady state has it (a co-located node's prefill before a decode step, another model's
step): the calls resident in the steady state but not there load their configuration once more
(:func:`switch_loads`). A kernel of several sections reloads them
on every call (they take turns on the same units), so its calls are never resident. Which tiles a
kernel on several tiles uses is the mapper's choice (its ``pcus_per_tile``, ``pmus_per_tile`` per
tile index); a kernel on one tile is mapped alike on every tile (the tiles are the same), so its
configuration is loaded on the tile where it was last, else on the first where it fits, and only
when it fits on none do the least recently called give up their units. Loaded in calling order,
small kernels can take room on every tile that a larger one called later needs, though the step's
kernels fit together placed the largest first; the compiler places a static graph's
configurations knowing them all, so when they fit that way (those on several tiles where the
mapper put them, those on one tile first fit, the largest first) each has a place of its own and
every call after its kind's first finds its configuration loaded.

Examples
--------
A step of four kernels on tiles of 260 PCUs and 260 PMUs: a decoder (80 PCUs), a head (20)
and a sampler (1) fit together, so in the steady state every call finds its configuration; a
kernel that takes every PCU of every tile leaves nothing resident beside it, while two kernels of
one tile each that do not fit together stay loaded on two tiles.

>>> from types import SimpleNamespace as K
>>> from sn40l_sim.mapper._examples import example_socket
>>> socket = example_socket()
>>> small = lambda name, pcus: K(kernel=K(signature=lambda: name), sections=1,
...                              pcus_per_tile=(pcus, 0, 0, 0), pmus_per_tile=(pcus, 0, 0, 0))
>>> resident_calls(socket, [small("embed", 1), small("dec", 80), small("dec", 80), small("head", 20)])
(True, True, True, True)
>>> wide = lambda name, pcus: K(kernel=K(signature=lambda: name), sections=1,
...                             pcus_per_tile=(pcus,) * 4, pmus_per_tile=(pcus,) * 4)
>>> resident_calls(socket, [wide("mla", 260), wide("ffn", 21), wide("mla", 260), wide("ffn", 21)])
(False, False, False, False)
>>> resident_calls(socket, [small("mla", 133), small("ffn", 140), small("mla", 133), small("ffn", 140)])
(True, True, True, True)

A kernel on every PCU of four tiles called beside one that takes most of a tile (DeepSeek-R1's
dense MLA and FFN): the FFN takes the MLA's units on its tile only, so each MLA call loads that
tile's configuration again, a quarter of all of it, and the FFN its own on that tile:

>>> reload_tiles(socket, [wide("mla", 260), small("ffn", 200), wide("mla", 260), small("ffn", 200)])
((0,), (0,), (0,), (0,))
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sn40l_sim.hardware import figures
from sn40l_sim.hardware.spec import SocketSpec

if TYPE_CHECKING:
    from sn40l_sim.mapper.placement import PlacedKernel

#: PCUs and PMUs per tile of a loaded configuration
Footprint = tuple[tuple[int, ...], tuple[int, ...]]
#: passes of the graph replayed at most, looking for the steady state
MAX_PASSES = 8


#: the tiles of a kernel whose units must load its configuration at a call (empty: found loaded)
Loads = tuple[int, ...]


def reload_tiles(socket: SocketSpec, kernels: Sequence[PlacedKernel]) -> tuple[Loads, ...]:
    """For each call of ``kernels`` (a graph's kernels in their calling order), the tiles whose units
    load its configuration when the graph is called again and again (see the module docstring):
    none when it is still loaded, those another kernel took units of since the kernel's last call,
    every tile of a kernel of several sections."""
    return tuple(_replay(socket, kernels)[len(kernels):])


def resident_calls(socket: SocketSpec, kernels: Sequence[PlacedKernel]) -> tuple[bool, ...]:
    """For each call of ``kernels`` (a graph's kernels in their calling order), whether its
    configuration is still loaded, on every tile, when the graph is called again and again (see the
    module docstring); a kernel that uses no unit has none to find."""
    return tuple(not tiles and _uses_units(k) for tiles, k in zip(reload_tiles(socket, kernels), kernels, strict=True))


def switch_loads(socket: SocketSpec, kernels: Sequence[PlacedKernel]) -> tuple[bool, ...]:
    """For each call of ``kernels``, whether it loads its configuration (on some tile) when the
    graph is called right after another graph took every unit, though it finds it loaded there when
    the graph is called again and again (the first and second passes of the module docstring).
    :func:`call_residency` gives the tiles of both answers from one replay.

    >>> from types import SimpleNamespace as K
    >>> from sn40l_sim.mapper._examples import example_socket
    >>> small = lambda name, pcus: K(kernel=K(signature=lambda: name), sections=1,
    ...                              pcus_per_tile=(pcus, 0, 0, 0), pmus_per_tile=(pcus, 0, 0, 0))
    >>> switch_loads(example_socket(), [small("embed", 1), small("dec", 80), small("dec", 80), small("head", 20)])
    (True, True, False, True)
    """
    return tuple(bool(tiles) for tiles in call_residency(socket, kernels)[1])


def call_residency(socket: SocketSpec, kernels: Sequence[PlacedKernel]) -> tuple[tuple[Loads, ...], tuple[Loads, ...]]:
    """:func:`reload_tiles` of ``kernels``, and for each call the tiles it loads besides those when
    the graph is called right after another graph took every unit (:func:`switch_loads`), from one
    replay."""
    loads = _replay(socket, kernels)
    n = len(kernels)
    steady = tuple(loads[n:])
    # a kernel on one tile may load on another tile after the other graph than in the steady
    # state: the same load, nothing more
    one_tile = [len(_used((tuple(k.pcus_per_tile), tuple(k.pmus_per_tile)))) == 1 for k in kernels]
    return steady, tuple(() if one and s else tuple(t for t in cold if t not in s)
                         for cold, s, one in zip(loads[:n], steady, one_tile, strict=True))


def load_bytes(socket: SocketSpec, kernel: PlacedKernel, tiles: Loads) -> int:
    """Configuration bytes a call of ``kernel`` loads into its first section when ``tiles`` lost it
    (:func:`reload_tiles`): a kernel's units hold their configuration whatever other tiles lose, so
    loading writes only the units it uses on those tiles and those tiles' switches
    (:func:`~sn40l_sim.hardware.figures.config_bytes`), all of it when every tile it uses lost it.

    >>> from types import SimpleNamespace as K
    >>> from sn40l_sim.hardware import figures
    >>> from sn40l_sim.mapper._examples import example_socket
    >>> socket = example_socket()
    >>> mla = K(sections=1, pcus_per_tile=(260,) * 4, pmus_per_tile=(165,) * 4,
    ...         section_config_bytes=(figures.config_bytes(socket, 260, 165, 4),))
    >>> load_bytes(socket, mla, (3,)) * 4 == load_bytes(socket, mla, (0, 1, 2, 3)) == mla.section_config_bytes[0]
    True
    >>> load_bytes(socket, mla, ())
    0
    """
    whole = kernel.section_config_bytes[0] if kernel.section_config_bytes else 0
    return footprint_load_bytes(socket, (tuple(kernel.pcus_per_tile), tuple(kernel.pmus_per_tile)),
                                kernel.sections == 1, whole, tiles)


def footprint_load_bytes(socket: SocketSpec, footprint: Footprint, one_section: bool, whole: int, tiles: Loads) -> int:
    """:func:`load_bytes` of a kernel given by its ``footprint``, whether it has ``one_section``, and
    the ``whole`` bytes of its first section (what a call that loads it on every tile loads)."""
    if not tiles or not whole:
        return 0
    # the tiles are among those of its place, which for a kernel on one tile may be any tile
    if not one_section or len(set(tiles)) >= len(_used(footprint)):
        return whole
    # a one-section plan has the same units on each of its tiles (mapper/plans.py, placed_kernel)
    return sum(figures.config_bytes(socket, footprint[0][t], footprint[1][t], 1) for t in tiles)


def loaded_after(previous: tuple[tuple[int, Footprint, bool], ...], calls: tuple[tuple[int, Footprint, bool], ...],
                 capacity: tuple[int, int], tiles: int) -> tuple[Loads, ...]:
    """For each of ``calls`` (a graph's calls as :func:`_replay_calls` takes them, the kinds numbered
    over both graphs), the tiles that load its configuration when the graph is called right after
    the graph of ``previous``, itself called on units holding none of either's kernels: the first pass
    of the pair's replay, so a kernel the two share (same configuration) is found where the first left
    it, and the second's own load where the first's took their units."""
    both = previous + calls
    # one pass suffices (the pair runs once); where the two graphs' kernels all fit together, each
    # kind loads at its first call only, as :func:`_replay_calls` places a graph whose kernels do
    loads = _one_pass(both, OrderedDict(), capacity, tiles)
    if any(loads[len(previous):]) and _packed(both, capacity, tiles):
        loads = _first_calls_load(both)
    return tuple(loads[len(previous):])


def _uses_units(kernel: PlacedKernel) -> bool:
    """Whether ``kernel`` has any unit to hold its configuration."""
    return any(kernel.pcus_per_tile) or any(kernel.pmus_per_tile)


def _replay(socket: SocketSpec, kernels: Sequence[PlacedKernel]) -> list[Loads]:
    """The tiles each call loads its configuration on, over the graph's calls replayed from
    units holding none of its kernels: the first pass, then the steady state (the pass after which
    the units hold what they held before it; a kernel loaded on another tile may take a few)."""
    capacity = (socket.tile.pcus, socket.tile.pmus)
    ids: dict[Any, int] = {}
    kinds = [ids.setdefault(k.kernel.signature(), len(ids)) for k in kernels]   # one hash a call
    tiles = max((len(k.pcus_per_tile) for k in kernels), default=0)
    calls = tuple((kind, (tuple(k.pcus_per_tile), tuple(k.pmus_per_tile)), k.sections == 1)
                  for kind, k in zip(kinds, kernels, strict=True))
    # the replay reads only these: a graph's calls are replayed when it is mapped and again when it
    # is run, and a looped graph's passes go through its thousand calls several times each
    key = (capacity, tiles, calls)
    got = _replays.get(key)
    if got is None:
        if len(_replays) >= _REPLAYS_KEPT:
            _replays.clear()
        got = _replays[key] = _replay_calls(calls, capacity, tiles)
    return list(got)


#: replays by what they read (:func:`_replay`), at most this many kept
_REPLAYS_KEPT = 256
_replays: dict[tuple, tuple[Loads, ...]] = {}


def _replay_calls(calls: tuple[tuple[int, Footprint, bool], ...], capacity: tuple[int, int],
                  tiles: int) -> tuple[Loads, ...]:
    """:func:`_replay` of the calls as ``(kind, footprint, one section)``."""
    loaded: OrderedDict[int, Footprint] = OrderedDict()
    # where each kind was last loaded: a static step's configurations have their places, so an
    # evicted one-tile kernel is loaded again where it was when that tile has room; first fit
    # instead put DeepSeek-R1's MoE MLA, after its dense layers, on a tile its FFN takes, so the
    # next layer's call loaded it again on the free tile, every step (docs/validation.md,
    # "Configurations stay loaded where no other kernel takes their units")
    last: dict[int, Footprint] = {}
    passes: list[list[Loads]] = []
    states: list[list[tuple[int, Footprint]]] = []
    while not passes or (list(loaded.items()) not in states and len(passes) < MAX_PASSES):
        states.append(list(loaded.items()))
        passes.append(_one_pass(calls, loaded, capacity, tiles, last))
    if len(passes) == 1:
        # the graph left the units as it found them: empty, so the steady state is the first pass again
        passes.append(passes[0])
    if any(passes[-1]) and _packed(calls, capacity, tiles):
        # each configuration has a place of its own: loaded at its kind's first call, found after
        return tuple(_first_calls_load(calls) + [()] * len(calls))
    # called on units another graph took, the kernels load where the steady state has them (the
    # compiler's places): a first pass that still looks for them made Llama-3.1-70B's 2K prefill FFN
    # lose the tile its layer's one-tile kernels take only until they find their own
    cold = _one_pass(calls, OrderedDict(), capacity, tiles, dict(last))
    return tuple(cold + passes[-1])


def _one_pass(calls: tuple[tuple[int, Footprint, bool], ...], loaded: OrderedDict[int, Footprint],
              capacity: tuple[int, int], tiles: int, last: dict[int, Footprint] | None = None) -> list[Loads]:
    """The tiles on which each call loads its configuration, not finding it in ``loaded`` (where
    each kind holds its configuration, updated as the calls load theirs); ``last``: where each kind
    was last loaded (updated too), where an evicted one is loaded again when that place has room.

    A kernel is given units on the tiles where it lands, and only the configurations of those tiles'
    units are overwritten: the least recently called give up their units on a tile, and on that tile
    only, until it fits there (a unit holds one configuration; loading writes the units a kernel
    uses, docs/validation.md, "Only the tiles that lost a configuration load it again")."""
    last = {} if last is None else last
    loads: list[Loads] = []
    for kind, footprint, one_section in calls:
        held = loaded.get(kind) if one_section else None
        # where it holds units: a one-tile kernel may have been loaded on any tile (last[kind])
        used = _used(footprint if held is None else last[kind])
        lost = tuple(t for t in used if held is None or not (held[0][t] or held[1][t]))
        if not lost:
            if held is not None:
                loaded.move_to_end(kind)
            loads.append(())
            continue
        loaded.pop(kind, None)
        options = _placements(footprint, tiles) if held is None else [last[kind]]
        if kind in last and last[kind] in options:
            options.remove(last[kind])
            options.insert(0, last[kind])
        place = next((f for f in options if _fits(loaded.values(), f, capacity)), None)
        if place is None:
            # the place the least recently called make room for, as many of them as it takes ...
            room = OrderedDict(loaded)
            while room and place is None:
                room.popitem(last=False)
                place = next((f for f in options if _fits(room.values(), f, capacity)), None)
            place = place or options[0]
            # ... though each gives up its units only on the tiles where the kernel lands
            for t in _used(place):
                _make_room(loaded, place, t, capacity)
        loaded[kind] = last[kind] = place
        loads.append(_used(place) if held is None else lost)
    return loads


def _make_room(loaded: OrderedDict[int, Footprint], place: Footprint, tile: int, capacity: tuple[int, int]) -> None:
    """Take the units of ``loaded`` kernels on ``tile``, the least recently called first, until
    ``place`` fits there; their units on other tiles keep their configuration."""
    for victim in list(loaded):
        if all(place[u][tile] + sum(f[u][tile] for f in loaded.values() if tile < len(f[u])) <= cap
               for u, cap in enumerate(capacity)):
            return
        f = loaded[victim]
        if tile < len(f[0]) and (f[0][tile] or f[1][tile]):
            kept = tuple(tuple(0 if t == tile else n for t, n in enumerate(per_tile)) for per_tile in f)
            if any(kept[0]) or any(kept[1]):
                loaded[victim] = kept
            else:
                del loaded[victim]


def _used(footprint: Footprint) -> Loads:
    """The tiles on which ``footprint`` has units."""
    return tuple(t for t in range(len(footprint[0])) if footprint[0][t] or footprint[1][t])


def _first_calls_load(calls: tuple[tuple[int, Footprint, bool], ...]) -> list[Loads]:
    """Each kind's first call loads its configuration on every tile it uses, the others find it
    (each has a place of its own)."""
    first_calls = {kind: i for i, (kind, _, _) in reversed(list(enumerate(calls)))}
    return [_used(f) if first_calls[kind] == i else () for i, (kind, f, _) in enumerate(calls)]


def _packed(calls: tuple[tuple[int, Footprint, bool], ...], capacity: tuple[int, int], tiles: int) -> bool:
    """Whether every kernel of one section among ``calls`` fits on the tiles together, placed as
    :func:`packed_largest_first` places them (none of several sections: they reload anyway)."""
    if any(not one_section for _, f, one_section in calls if any(f[0]) or any(f[1])):
        return False
    kinds = {kind: f for kind, f, _ in calls}
    free, left_out = packed_largest_first(list(kinds.values()), capacity, tiles)
    return not left_out and min(min(per_tile) for per_tile in free) >= 0


def spread_over_tiles(footprints: list[Footprint], capacity: tuple[int, int], tiles: int,
                      ) -> tuple[list[list[int]], list[tuple[int, int]]]:
    """Free PCUs and PMUs per tile (``[unit][tile]``, negative where too many) once the
    ``footprints`` on several tiles are placed where the mapper put them, and the PCUs and PMUs of
    those on one tile, which a one-tile plan may take on any tile, still to be placed.

    >>> spread_over_tiles([((100, 0), (10, 0)), ((30, 40), (1, 2))], (260, 260), 2)
    ([[230, 220], [259, 258]], [(100, 10)])
    """
    free = [[cap] * tiles for cap in capacity]
    singles = []
    for f in footprints:
        used = [t for t in range(len(f[0])) if f[0][t] or f[1][t]]
        if len(used) == 1:
            singles.append((f[0][used[0]], f[1][used[0]]))
            continue
        for unit in range(2):
            for t, n in enumerate(f[unit]):
                free[unit][t] -= n
    return free, singles


def packed_largest_first(footprints: list[Footprint], capacity: tuple[int, int], tiles: int,
                         ) -> tuple[list[list[int]], int]:
    """Free PCUs and PMUs per tile (negative where too many) once ``footprints`` are placed as a
    compiler places a static step's configurations: those on several tiles where the mapper put
    them, those on one tile first fit, the largest first; and how many of those fit on no tile
    (left out).

    >>> packed_largest_first([((100, 0), (10, 0)), ((0, 200), (0, 5)), ((150, 0), (1, 0))], (260, 260), 2)
    ([[60, 10], [255, 249]], 0)
    """
    free, singles = spread_over_tiles(footprints, capacity, tiles)
    left_out = 0
    for pcus, pmus in sorted(singles, reverse=True):
        t = next((t for t in range(tiles) if free[0][t] >= pcus and free[1][t] >= pmus), None)
        if t is None:
            left_out += 1
            continue
        free[0][t] -= pcus
        free[1][t] -= pmus
    return free, left_out


def _placements(footprint: Footprint, tiles: int) -> list[Footprint]:
    """Where a kernel's configuration may be loaded, in the order tried: a kernel on one tile on
    any tile, in tile order (the tiles are alike, so its plan is the same on each); a kernel on
    several tiles where the mapper put it."""
    used = [t for t in range(len(footprint[0])) if footprint[0][t] or footprint[1][t]]
    if len(used) != 1:
        return [footprint]
    units = [per_tile[used[0]] for per_tile in footprint]
    return [tuple(tuple(n if t == tile else 0 for t in range(tiles)) for n in units) for tile in range(tiles)]


def _fits(loaded: Any, footprint: Footprint, capacity: tuple[int, int]) -> bool:
    """Whether ``footprint`` fits on every tile beside the ``loaded`` footprints."""
    for unit, cap in enumerate(capacity):
        for tile, need in enumerate(footprint[unit]):
            if need and need + sum(f[unit][tile] for f in loaded if tile < len(f[unit])) > cap:
                return False
    return True


