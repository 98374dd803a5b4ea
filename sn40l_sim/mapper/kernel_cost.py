"""What one candidate plan of a fused kernel costs per call, and the objective the mapper
(:mod:`.kernel`) chooses it by: :class:`LoopContext` (how the kernel is called) and
:func:`plan_kernel` (a tiling and tile choice planned section by section, with its cycles and
objective).

Per section, with ``C`` the slowest stage or stream per data tile::

    fill    = the memory streams' cycles per tile + memory latency - C + the longest path through
              the compute stages' graph, each stage its cycles per tile and its fill and drain
              (hops to and from its PMUs, pipeline, trees, reduction rounds), each edge its
              hand-over (data past the neighbouring switch, a control token)
    section = fill + n_tiles x C

so a kernel of one stage still pays its stage's fill and drain. The graph's edges are the streams
between operators, each reading its producers' outputs (:attr:`~sn40l_sim.ir.Operator.producers`):
a chain's path is every stage, and parallel branches fill side by side (:mod:`.fill_path`).

and for the kernel (``sections`` configurations in sequence; the first is loaded by the call)::

    cycles  = sum of the sections' configuration loads + sections x (fill + n_tiles x C)

with ``fill`` and ``C`` the per-section means (the fill rounded up) when there are several sections,
and the streaming ``sections x n_tiles x C`` rounded up to whole cycles: ``C`` is a compute stage's
(or the mesh's) whole cycles per data tile, or a memory stream's share, unrounded, since an off-chip
stream does not pause at data-tile boundaries (:attr:`~sn40l_sim.mapper.stages.StageWork.paced_cycles`).
Collectives stay on the kernel for the engine, which times them; but a call's overlapped ones
(``overlapped=True``) start once its first data tile has left the pipeline and run one after the
other on the links (:mod:`sn40l_sim.engine.kernel_process`), and the call ends when they have. So a
call is chosen for (``overlap``, the cycles the engine will charge them, given by the caller)::

    cycles + held + max(0, fill + C_0 + overlap - (cycles + held - config_0)) + shares

(``C_0`` the first section's slowest stage per data tile; ``config_0`` the configuration loaded by
the call; ``held`` what their staging, sharing the activations' tier with the first section's
stream, holds that stream back: :func:`held_back_cycles`): the collectives' time past the rest of
the kernel, and then their last data tile's shares (:func:`~.shares.shares_after`, those naming no
operator), as :func:`~.calls.as_called` charges the call. Its collectives that do not overlap
start when the tiles are done, whatever the plan, and are left out. Fewer, larger data tiles
shorten the stream but start the collectives later; ``cycles`` alone would not see it. Where the
collectives outlast the kernel, plans of many tilings end alike; of those, the one of fewer kernel
cycles wins (then fewer data tiles, as for every call).

A kernel called ``L`` times in a row keeps its configuration loaded between the calls, so a kernel
of one section is charged ``config / L`` per call. Run as one looped call (kernel looping,
:mod:`.loops`) it is chosen for its time per iteration instead, the engine's
(:func:`~.read_ahead.looped_iteration_cycles`): an iteration gets the socket when the previous
one's tiles are done and its compute waits for that one's collectives (``gate``, the cycles the
engine will charge them, given by the caller), then the fill, then each of the engine's ``c`` (at
most 8) chunks of data tiles as it arrives; its first section's stream ``S`` meanwhile runs ahead into
the PMUs, but only as many whole chunks as fit in half the SRAM (``k``, at least one) ahead of the
compute. So, with ``C`` the slowest compute stage per data tile and ``n_0`` the data tiles of a chunk::

    iteration ~ max(S + C, gate + fill + n_tiles x C)         k = c: the stream within half the SRAM
    iteration ~ gate + fill + n_0 x C + (1 - k / c) x S + C   k < c, memory-bound, k chunks loaded during
                                                              the gate, the rest once the first is computed

and exactly the chunk-by-chunk recurrence of :mod:`.read_ahead`, which equals the engine's iteration
but for the previous iteration's collectives staging their bytes through the same channel (a few
hundred cycles in 400,000 at most on the shipped looped decoders); a one-section kernel whose
collectives carry one operator's output (its windows) is replayed with their staging
(:mod:`.window_replay`). Later sections add their fill and
stream and reload their configuration every iteration. The loop's first iteration is its call
(:mod:`sn40l_sim.engine.kernel_process`): it waits for no gate, and its pipeline fills before its
stream starts, so its fill is not hidden; a loop of ``L`` iterations is chosen for its mean,
``(first + (L - 1) x iteration) / L`` (scored as a later one, the first hid the fill, and plans
that stream alike tied whatever their fills: docs/validation.md, "Invariants over random
configurations"). Of plans with equal iteration times the one with the shorter compute chain wins.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from sn40l_sim.hardware import figures
from sn40l_sim.hardware.spec import SocketSpec
from sn40l_sim.hardware.units._cycles import ceil_cycles
from sn40l_sim.ir import FusedKernel
from sn40l_sim.mapper.budget import UnitBudget
from sn40l_sim.mapper.planning import plan_section, replay_memo
from sn40l_sim.mapper.plans import KernelPlan, SectionPlan
from sn40l_sim.mapper.read_ahead import looped_iteration_cycles
from sn40l_sim.mapper.shares import OverlapTail, shares_after
from sn40l_sim.mapper.spending import section_calls, section_chain_paced
from sn40l_sim.mapper.tier_split import TierSplit
from sn40l_sim.mapper.window_replay import first_tile_cycles, looped_window_cycles, windowed_section_cycles
from sn40l_sim.mapper.windows import OverlapWindow, exposed_cycles, streams_ahead, window_points


@dataclass(frozen=True)
class LoopContext:
    """How a kernel is called: one of ``iterations`` consecutive calls of it (its configuration
    stays loaded between them), run as one looped call if ``pipelined``, each iteration then
    waiting ``gate_cycles`` for the previous one's collectives after its tiles; a call has its
    overlapped collectives that name no operator take ``overlap_cycles`` from its first tile out
    (a looped iteration's too, the next iteration waiting for their end); a ``resident`` kernel
    finds its configuration loaded at every call (:mod:`.residency`). The default is a lone call
    without collectives."""

    iterations: int = 1
    gate_cycles: int = 0
    pipelined: bool = False
    overlap_cycles: int = 0
    #: bytes the overlapped collectives stage (write) in the activations' tier, which the call's
    #: own streams share with them (those without a window; :func:`held_back_cycles`)
    overlap_staged_bytes: int = 0
    #: ``(cycles, staged bytes)`` of each collective after a looped iteration's tiles (not
    #: overlapped), in order: they run in the next iteration's gate, staging their bytes through the
    #: activations' tier while its stream runs ahead (:func:`~.window_replay.looped_window_cycles`)
    gate_staging: tuple[tuple[int, int], ...] = ()
    #: the overlapped collectives that carry one operator's output (:mod:`.windows`): a call waits
    #: for them where its stream reaches their readers and after its last tile, a looped call's
    #: next iteration at its gate
    windows: tuple[OverlapWindow, ...] = ()
    #: the overlapped collectives that name no operator (those ``overlap_cycles`` times), in order:
    #: their last data tile's shares, which follow the call's stream (:mod:`.shares`)
    overlap_tails: tuple[OverlapTail, ...] = ()
    #: units the balanced allocation leaves idle are given only where they pay for their
    #: configuration (:mod:`.spending`; the experiment's ``execution.idle_units: priced``)
    priced: bool = False
    resident: bool = False

    @property
    def calls_per_load(self) -> float:
        """Calls that share one load of a one-section kernel's configuration: the run's
        ``iterations``, or every call when it stays resident."""
        return math.inf if self.resident else self.iterations


#: a kernel called once
LONE_CALL = LoopContext()


def plan_kernel(socket: SocketSpec, kernel: FusedKernel, ranges: list[tuple[int, int]], spills: list[int],
                n_tiles: int, tiers: TierSplit, chip_tiles: int, budget: UnitBudget,
                loop: LoopContext = LONE_CALL, planned: str = "") -> KernelPlan | None:
    """``kernel`` planned at ``n_tiles`` data tiles on ``chip_tiles`` tiles, its operators cut into
    the sections ``ranges`` (``spills``: the bytes each section hands the next through memory), with
    its cycles and the objective it is chosen by when called as ``loop`` says (see the module
    docstring); None if a section does not fit."""
    plans = []
    for i, (start, stop) in enumerate(ranges):
        spill_in = spills[i - 1] if i > 0 else 0
        spill_out = spills[i] if i < len(spills) else 0
        plan = plan_section(socket, kernel.operators[start:stop], n_tiles, tiers, chip_tiles, spill_in, spill_out,
                            budget, planned, section_calls(loop, len(ranges), i),
                            section_chain_paced(loop, i, len(ranges) * n_tiles))
        if plan is None:
            return None
        plans.append(plan)
    n = len(plans)
    fill = math.ceil(sum(p.fill_cycles for p in plans) / n)
    # a memory stream's share of a data tile is not rounded (it does not pause at tile boundaries)
    cpt = sum(p.cycles_per_tile for p in plans) / n
    # each section's configuration is loaded before it streams (the first one by the kernel call)
    configs = [figures.config_cycles(socket, p.config_bytes(socket)) for p in plans]
    cycles = sum(configs) + n * fill + ceil_cycles(n * n_tiles * cpt)
    # one section stays loaded over consecutive calls; several replace each other every call
    reload = configs[0] / loop.calls_per_load if n == 1 else sum(configs)
    objective: tuple[float, int] = (cycles - sum(configs) + reload, 0)
    overlap_stream: int | None = None
    shares = 0
    # the call's windows: a wait mid-stream for the collectives its later operators read, and
    # the last ones' time past its tiles (the next iteration's gate when looped). A looped
    # iteration's stream ran ahead during the gate, and a call's runs ahead once a window opens or
    # closes mid-way (the engine's ``_stream_ahead``), so their tiles pass at the compute's pace, but no
    # sooner than their data arrives: at the stream's pace (the fastest section's slowest stage),
    # which starts with the call's compute and a looped iteration's gate and fill before it
    ahead = loop.pipelined or streams_ahead(loop.windows, n * n_tiles)
    pace = plans[0].compute_cycles_per_tile if ahead else cpt
    stream = min(p.cycles_per_tile for p in plans) if ahead else 0.0
    lead = loop.gate_cycles + fill if loop.pipelined else 0.0
    stall, after = exposed_cycles(loop.windows, n * n_tiles, pace, pace, stream, lead) if loop.windows else (0, 0)
    # the engine cuts the stream's chunks where a window opens or closes (its data arrived there)
    points = window_points(loop.windows, n * n_tiles)
    replayed = loop.windows and ahead and n == 1
    if replayed:
        # one section: the engine's stream replayed chunk by chunk, its waits mid-way where they
        # are, under the stream that runs on (:mod:`.window_replay`); a call fills its pipeline
        # before its stream starts, a looped iteration's stream runs ahead during its gate, which
        # holds the previous iteration's collectives' time past its tiles: the loop's iterations
        # replayed one after the other, their mean (the engine's loop is not at its steady state
        # from the start)
        compute = plans[0].compute_cycles_per_tile
        if loop.pipelined:
            mean = _replayed(planned, plans[0], (fill, loop.gate_cycles, loop.iterations, loop.gate_staging),
                             loop.windows, tiers.activations,
                             lambda: looped_window_cycles(socket, plans[0], fill, loop.gate_cycles, loop.windows,
                                                          compute, tiers.activations, loop.iterations,
                                                          loop.gate_staging))
            objective = (reload + mean, sum(p.chain_cycles for p in plans))
        else:
            # a call's windows' collectives start once its first tile is out, its bytes in (the
            # engine's ``_first_tile_cycles``), not after its compute alone: a memory-bound tile
            # started them later than scored (docs/validation.md, "Decode all-reduces under the GEMM")
            got = _replayed(planned, plans[0], (), loop.windows, tiers.activations,
                            lambda: windowed_section_cycles(socket, plans[0], 0, 0, loop.windows,
                                                            first_tile_cycles(socket, plans[0]),
                                                            tiers.activations))
            after = got.after
            objective = (reload + fill + got.end + after, math.ceil(objective[0]))
        stall = 0
    elif loop.windows and not loop.pipelined:
        if ahead:
            # the wait counted where the compute starts, a floor of it mid-way (the stream ahead
            # holds at most half the SRAM either way)
            tiles = looped_iteration_cycles(socket, plans, fill, math.ceil(stall), configs, points=points)
            objective = (reload + (sum(configs[1:]) if n > 1 else 0) + tiles + after, math.ceil(objective[0]))
        else:
            objective = (objective[0] + stall + after, math.ceil(objective[0]))
    if loop.overlap_cycles and not loop.pipelined:
        # the overlapped collectives start after the fill and the first tile (the engine's
        # ``_first_tile_cycles``: the first section's slowest stage) and may outlast the rest; of
        # plans they end alike, the one of fewer kernel cycles wins (it holds the socket for less);
        # while they run, their staging holds the kernel's own stream in that tier back
        held = held_back_cycles(socket, tiers.activations, plans[0], n_tiles, loop)
        exposed = fill + plans[0].cycles_per_tile + loop.overlap_cycles - (cycles + held - configs[0])
        objective = (objective[0] + held + max(0, exposed - after), math.ceil(objective[0] + held - stall - after))
        if not loop.windows:
            # the stream left once they start: those that end sooner send their last tile's share
            # after it, behind those still on the links (the engine's ``Windows``; calls.as_called,
            # which charges the call them): the plan is chosen for them too, a share being
            # ``bytes / n_tiles`` and the stream's end moving with the tiling
            overlap_stream = math.ceil(cycles + held - configs[0] - fill - plans[0].cycles_per_tile)
            shares = shares_after(tuple((t.cycles, t.share_cycles(n_tiles)) for t in loop.overlap_tails),
                                  overlap_stream)
            objective = (objective[0] + shares, objective[1])
    if loop.pipelined and not replayed:
        # the engine's iteration: the stream runs ahead of the gated chain as far as half the SRAM;
        # but the loop's first iteration is its call, ungated, its pipeline filled before its
        # tiles stream (:mod:`sn40l_sim.engine.kernel_process`): the loop's mean iteration
        iteration = looped_iteration_cycles(socket, plans, fill, math.ceil(loop.gate_cycles + stall + after), configs,
                                            points=points)
        first = cycles - sum(configs) + stall + after
        objective = (reload + (first + (loop.iterations - 1) * iteration) / loop.iterations,
                     sum(p.chain_cycles for p in plans))
    if loop.pipelined and loop.overlap_cycles:
        # the overlapped collectives naming no operator start with the iteration's first data tile
        # out, after its gate (none in the first, the loop's call) and fill, and the next
        # iteration's compute waits for their end (the engine's loop, :mod:`sn40l_sim.engine.units`):
        # an iteration lasts at least that long
        least = mean_gate_cycles(loop) + fill + plans[0].cycles_per_tile + loop.overlap_cycles
        objective = (max(objective[0], reload + least), objective[1])
    return KernelPlan(n_tiles, chip_tiles, plans, fill, cpt, cycles, objective, overlap_stream, shares, loop.pipelined)


def mean_gate_cycles(loop: LoopContext) -> float:
    """The gate an iteration of ``loop`` waits for, on average over the loop: every iteration's but
    the first's, the loop's call, which waits for none."""
    return loop.gate_cycles * (loop.iterations - 1) / loop.iterations if loop.iterations > 1 else 0.0


def _replayed(planned: str, plan: SectionPlan, call: tuple, windows: tuple[OverlapWindow, ...], tier: str,
              compute):
    """``compute()``, a replay of ``plan``'s ``windows`` (the call's other parts ``call``), memoised
    by the section plan when ``planned`` (the socket as planned) is given: a replay reads the plan,
    the call and the socket's memory path alone, and the rooms the side-by-side search tries
    (:mod:`.side_by_side`) share the plan of a section they do not fill (:mod:`.planning`), so
    their calls replay the same windows again."""
    if not planned:
        return compute()
    return replay_memo.get(plan, (planned, call, windows, tier), compute)


def held_back_cycles(socket: SocketSpec, tier: str, plan: SectionPlan, n_tiles: int, loop: LoopContext) -> int:
    """Cycles a call's first section loses to its overlapped collectives' staging. From about the
    stream's start they write ``loop.overlap_staged_bytes`` to ``tier``, at most at the pace their
    links set (those bytes over ``loop.overlap_cycles``), and the engine shares the tier's rate
    between that and the section's own stream there, max-min fair (:mod:`sn40l_sim.engine.staging`):
    where both want more than the rate, the staging takes its pace or half the rate, whichever is
    less, and the section the rest, until the staging is done. A data tile then takes at least its
    bytes in the tier over the section's share; once the staging ends the section goes at its own
    pace again (a compute-bound section does not catch up).

    Llama-3.1-70B's 8K prefill on 16 sockets chose, at 200 GB/s per P2P port, an output projection
    streaming at 71 cycles a data tile, which the staging of its all-reduce (252 MB) held to 141 for
    the 511,000 cycles the staging then took (docs/validation.md, "A faster machine is not always
    faster in the simulator")."""
    staged, window = loop.overlap_staged_bytes, loop.overlap_cycles
    own = sum(st.tier_bytes for st in plan.stages if st.is_memory and st.resource == tier)
    if not staged or not window or not own:
        return 0
    # the engine's rate of a stream to the tier: the tier at its achievable fraction, or the TLN
    rate = min(figures.memory_bytes_per_s(socket, tier) * socket.memory[tier].efficiency,
               figures.agcus(socket) * socket.tln.bytes_per_s) / socket.clock_hz
    per_tile = own / n_tiles
    wanted, pace = per_tile / plan.cycles_per_tile, staged / window
    if wanted + pace <= rate:
        return 0
    staging = min(pace, max(rate / 2, rate - wanted))
    share = rate - staging
    held = per_tile / share
    if held <= plan.cycles_per_tile:
        return 0
    lasts = staged / staging
    return math.ceil(min(n_tiles, lasts / held) * (held - plan.cycles_per_tile))
