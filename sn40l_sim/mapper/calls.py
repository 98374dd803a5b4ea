"""A placed kernel's time as the graph calls it: :func:`as_called`.

:attr:`~sn40l_sim.mapper.placement.PlacedKernel.cycles` is a lone call: its configuration loaded,
then its data tiles. The mapper chooses each kernel's plan for the way the graph calls it
(:class:`~sn40l_sim.mapper.kernel_cost.LoopContext`, :mod:`.kernel_cost`), and that time is what a call
takes (:attr:`~sn40l_sim.mapper.placement.PlacedKernel.call_cycles`):

- a kernel called ``L`` times in a row keeps one section's configuration loaded between the calls,
  so the mapper scores each call ``config / L`` of it (a kernel of several sections reloads them all
  on every call); where the step's replay (:mod:`.residency`) says which call loads it, that call is
  charged all of it and the others none, so a run reloaded every step counts its load once in full;
- a looped call (kernel looping) runs each iteration with its memory streams ahead of its compute
  (:attr:`~sn40l_sim.mapper.placement.PlacedKernel.iteration_cycles`), its compute waiting for the
  previous iteration's collectives;
- any other call ends no sooner than its overlapped collectives, which start after its first tile,
  nor than their last data tile's shares after its last tile, and its other collectives follow its
  tiles whatever the plan (the mapper leaves those out of the choice; :func:`as_called` adds them,
  ``after_cycles``; it chooses the plan for the shares, :mod:`.shares`, which :func:`as_called`
  charges from the call's ``tails``).

The kernel-call boundary (launch, barrier) is the engine's alone, as are the collectives after a
loop's last iteration that do not overlap its stream (its windows' time past its tiles is in the
loop's calls, :func:`~.window_replay.looped_window_cycles`), any contention on the links, and the memory tier a collective's staging
shares with the kernels' streams but where an overlapped collective's staging holds its own call's
stream back (the mapper charges that call its estimate, max-min fair as the engine shares the
tier: :func:`~sn40l_sim.mapper.kernel_cost.held_back_cycles`). So the calls of a graph add up to a
floor of the engine's step.

What bounds the call (``call_bound``) is what holds the largest part of it: the configuration it
is charged, its data tiles (their slowest resource) or its collectives. An overlapped collective
the call waits for (it outlasts the stream, or its window's readers wait for it) holds the call
from its start, so the tiles that run beside it are its part, not the tiles': a prefill output
projection whose all-reduce outlasts its GEMM is bound by the all-reduce (docs/validation.md,
"The output projection's call, part by part").

Examples
--------
>>> from sn40l_sim.mapper._examples import example_socket, example_decode_kernel
>>> from sn40l_sim.mapper.kernel import LONE_CALL, LoopContext, map_kernel
>>> socket = example_socket()
>>> lone = map_kernel(socket, example_decode_kernel())
>>> lone.call_cycles == lone.cycles, as_called(socket, lone, LONE_CALL) == lone
(True, True)
>>> run = LoopContext(iterations=80)
>>> one_of_80 = as_called(socket, map_kernel(socket, example_decode_kernel(), loop=run), run)
>>> one_of_80.call_cycles < lone.cycles, one_of_80.call_bound, lone.call_bound
(True, 'hbm', 'overhead')
>>> waiting = as_called(socket, lone, LONE_CALL, after_cycles=5000)
>>> waiting.call_cycles - lone.call_cycles, waiting.call_collective_cycles
(5000, 5000)
>>> tailed = as_called(socket, lone, LONE_CALL, tail_cycles=3000)
>>> tailed.call_cycles - lone.call_cycles, tailed.call_collective_cycles
(3000, 3000)
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

from sn40l_sim.frozen import copied
from sn40l_sim.hardware import figures
from sn40l_sim.hardware.spec import SocketSpec
from sn40l_sim.mapper.keys import IdentityMemo
from sn40l_sim.mapper.placement import PlacedKernel
from sn40l_sim.mapper.shares import shares_after
from sn40l_sim.mapper.windows import hidden_cycles

if TYPE_CHECKING:
    from sn40l_sim.mapper.kernel_cost import LoopContext

#: what takes most of a call that mostly waits for its own or the previous iteration's collectives
COLLECTIVE = "collective"
#: :func:`_hidden_cycles` by the call's context and what it reads of the plan: the mapper scores
#: every placement it tries (:mod:`.side_by_side`), each call of each, and the identical layers'
#: calls share their context object and their plan's figures (a tenth of a cold ``validate``'s
#: scoring time was spent working the same windows out again)
_HIDDEN: IdentityMemo[float] = IdentityMemo()


def as_called(socket: SocketSpec, pk: PlacedKernel, loop: LoopContext, after_cycles: int = 0,
              resident: bool | None = None, tail_cycles: int = 0,
              tails: tuple[tuple[float, float], ...] = (), load_bytes: int | None = None) -> PlacedKernel:
    """``pk``, mapped for ``loop`` on ``socket`` (its ``call_cycles`` the time the mapper chose the
    plan by), with ``after_cycles`` of collectives the call is followed by added, the part of the
    call spent on collectives and what takes most of it (see the module docstring). ``resident``
    says whether the call finds the kernel's configuration loaded (:mod:`.residency`): it is then
    charged none of a one-section configuration, else ``load_bytes`` of it (the tiles that lost it,
    :func:`~.residency.load_bytes`; default all of it); None keeps the mapper's charge
    (``loop.calls_per_load``). ``tail_cycles``: what the call's overlapped collectives take after
    its last tile (their last data tile's shares, the engine's ``engine/windows.py``); the call ends no
    sooner than its tiles and that, whatever of its overlapped collectives its plan's time holds.
    ``tails``: those collectives (naming no operator) one by one, in order, as ``(cycles, their
    share's cycles)``; with the plan's :attr:`~.placement.PlacedKernel.overlap_stream_cycles`, each
    share is charged as the engine runs it (:func:`~.shares.shares_after`), else their sum as
    ``tail_cycles``. The shares the plan's time counted already (its
    :attr:`~.placement.PlacedKernel.overlap_share_cycles`, the mapper's objective) are replaced by
    those of ``tails``, the same when the call is the one the plan was mapped for."""
    configs = [figures.config_cycles(socket, n) for n in pk.section_config_bytes]
    call = pk.call_cycles - pk.overlap_share_cycles + after_cycles
    if tails and pk.overlap_stream_cycles is not None and configs and not loop.pipelined:
        # the plan's time ends with its stream or its collectives, whichever is later; the shares
        # follow, one after the other on the links
        call += shares_after(tails, pk.overlap_stream_cycles)
        tails = ()
    tail_cycles += round(sum(share for _, share in tails))
    if not configs:
        call += max(0, tail_cycles - max(0, pk.call_cycles - pk.cycles))
        return copied(pk, call_cycles=call, call_collective_cycles=call - pk.cycles if call > pk.cycles else 0,
                      call_bound=COLLECTIVE if call > pk.cycles else pk.bounding_resource)
    # as the mapper's objective charges it: one section stays loaded over consecutive calls
    reload = configs[0] / loop.calls_per_load if len(configs) == 1 else sum(configs)
    if resident is not None and len(configs) == 1:
        # the plan's time with the load it does pay: a call that finds the configuration gone loads
        # it on the tiles that lost it, and the run's later calls then find it loaded (the replay
        # says so: charging each ``config / L`` would count a run's one load only once in L);
        # rounded so that the sum stays a floor
        whole = configs[0] if load_bytes is None else figures.config_cycles(socket, load_bytes)
        actual = 0.0 if resident else whole
        call += math.floor(actual - reload) if actual > reload else -math.ceil(reload - actual)
        reload = actual
    tiles = pk.iteration_cycles if loop.pipelined else pk.cycles - sum(configs)
    # the plan's time holds the wait for its overlapped collectives; their tails may outlast it
    call += max(0, tail_cycles - max(0, call - after_cycles - math.ceil(tiles + reload)))
    waits = max(0, call - math.ceil(tiles + reload))
    # an overlapped collective the call still waits for holds it from its start: the tiles beside it
    # are on no path to the call's end, so they are its collective's part, not the tiles'
    hidden = _HIDDEN.get(loop, (pk.sections, pk.n_tiles, pk.fill_cycles, pk.cycles_per_tile, tiles),
                         lambda: _hidden_cycles(pk, loop, tiles)) if waits > after_cycles else 0.0
    # the largest part; a tie goes to the configuration, then to the tiles (as map_kernel's bound)
    parts = (("overhead", reload), (pk.tiles_bound or pk.bounding_resource, tiles - hidden),
             (COLLECTIVE, waits + hidden))
    bound = max(parts, key=lambda part: part[1])[0]
    return copied(pk, call_cycles=call, call_collective_cycles=waits, call_bound=bound)


def _hidden_cycles(pk: PlacedKernel, loop: LoopContext, tiles: float) -> float:
    """Cycles of the call's ``tiles`` that run beside overlapped collectives it then waits for
    (docs/validation.md, "Reading map's totals"): those naming no operator start after the fill and
    the first data tile and run beside the rest of the stream, if they outlast it; those naming one
    beside their window's tiles (:func:`~sn40l_sim.mapper.windows.hidden_cycles`, at the call's
    mean pace)."""
    n = pk.sections * pk.n_tiles
    if not n:
        return 0.0
    per_tile = tiles / n
    hidden = hidden_cycles(loop.windows, n, per_tile, per_tile) if loop.windows else 0.0
    first = pk.fill_cycles + pk.cycles_per_tile
    if loop.overlap_cycles and not loop.pipelined and first + loop.overlap_cycles > tiles:
        # they outlast the stream: not only their last tile's shares, which cannot leave before it
        hidden += tiles - first
    return min(tiles, max(0.0, hidden))
