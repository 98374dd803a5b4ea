"""Where a phase's time goes: every cycle of the simulated socket attributed to one cause.

Each kernel's interval is split into

- the kernel-call boundary (:mod:`.boundary`): ``launch`` (the host starting the kernel),
  ``synchronisation`` (the barrier of the sockets and tiles taking part) and ``configuration``
  (loading the kernel's configuration when another kernel had taken some of its units, and its later
  sections'),
- ``pipeline_fill``: the pipeline fill before the first tile,
- streaming time bounded by memory (a chunk whose memory stage finished after its compute),
  shared out in proportion to the kernel's bytes by use: ``weights_streaming``, ``kv_reads``
  (KV-cache reads and writes, a KV policy's store traffic included), ``activations`` (each use's
  bytes weighted by the time a byte takes in the tiers holding it, when the uses live in tiers of
  different speeds: :attr:`~sn40l_sim.engine.phase.PhaseTiming.byte_seconds`),
- streaming time bounded by compute, shared out in proportion to FLOPs: ``attention_compute``
  (scores, softmax, weighted values) and ``other_compute`` (projections, experts, ...),
- ``collectives``: time after the compute finished waiting for the kernel's collectives, and, in
  a kernel loop, an iteration's compute waiting for the previous iteration's collectives (whose
  own tail overlaps the next iteration and is counted there, once) when that wait was exposed: an
  iteration whose weight stream alone set its length hid the wait, and all of it is streaming,

and time between kernels (waiting on dependencies) is ``idle``. The parts add up to the phase's
cycles exactly (up to float rounding of the proportional splits).
"""
from __future__ import annotations

from collections.abc import Sequence

from sn40l_sim.engine.phase import KernelTiming, PhaseTiming
from sn40l_sim.errors import InputError
from sn40l_sim.hardware import figures
from sn40l_sim.hardware.spec import SocketSpec
from sn40l_sim.mapper.tier_split import TierSplit

#: the uses of ``PhaseTiming.byte_seconds``: weights, KV and activations in the order of the
#: categories they are charged to, and a KV policy's store (charged to ``kv_reads``)
USES = ("weights", "kv", "activations", "kv_offload")
CATEGORIES = ("weights_streaming", "kv_reads", "activations", "attention_compute", "other_compute",
              "collectives", "launch", "synchronisation", "configuration", "pipeline_fill", "idle")


def kernel_breakdown(k: KernelTiming, end_cycle: int | None = None,
                     byte_seconds: dict[str, float] | None = None) -> dict[str, float]:
    """Cycles of one kernel by cause (see the module docstring), up to ``end_cycle`` (default its
    end; a loop iteration followed by the next ends where its tiles do); sums to that span.
    ``byte_seconds``: the seconds a byte of each use takes where it lives (default: alike)."""
    end = k.end_cycle if end_cycle is None else end_cycle
    out = dict.fromkeys(CATEGORIES, 0.0)
    out["launch"] += k.launch_cycles
    out["synchronisation"] += k.barrier_cycles
    out["configuration"] += k.config_cycles
    out["pipeline_fill"] += k.fill_cycles
    out["collectives"] += max(0, end - k.stream_end_cycle) + k.gate_cycles
    # a stream from a slow tier holds the kernel longer per byte than one from a fast tier
    per_byte = byte_seconds or dict.fromkeys(USES, 1.0)
    by_use = {"weights_streaming": k.weight_bytes * per_byte["weights"],
              "kv_reads": k.kv_bytes * per_byte["kv"] + k.kv_offload_bytes * per_byte["kv_offload"],
              "activations": k.activation_bytes * per_byte["activations"]}
    used = sum(by_use.values())
    for cat, n in by_use.items():
        share = n / used if used else (1.0 if cat == "activations" else 0.0)
        out[cat] += k.memory_bound_cycles * share
    attention = k.attention_flops / k.flops if k.flops else 0.0
    out["attention_compute"] += k.compute_bound_cycles * attention
    out["other_compute"] += k.compute_bound_cycles * (1.0 - attention)
    # anything the parts above do not cover (e.g. a wait for the socket's links before a
    # collective could start) is time the kernel held the socket without progress
    out["idle"] += (end - k.start_cycle) - sum(out.values())
    return out


def byte_seconds(socket: SocketSpec, split: TierSplit) -> tuple[tuple[str, float], ...]:
    """Seconds one byte of each use takes at the achievable bandwidths of the tiers ``split`` puts
    it in (:attr:`~sn40l_sim.engine.phase.PhaseTiming.byte_seconds`); empty when every use takes
    the same, as when everything lives in one tier (the breakdown then shares by bytes).

    >>> from types import SimpleNamespace as NS
    >>> socket = NS(dies=1, memory={"hbm": NS(units_per_die=1, bytes_per_s_per_unit=1e12, efficiency=1.0),
    ...                             "ddr": NS(units_per_die=1, bytes_per_s_per_unit=1e11, efficiency=1.0)})
    >>> [(use, round(s * 1e12, 3)) for use, s in byte_seconds(socket, TierSplit((("hbm", 0.5), ("ddr", 0.5)),
    ...                                                                        (("hbm", 1.0),), "hbm"))]
    [('weights', 5.5), ('kv', 1.0), ('activations', 1.0), ('kv_offload', 1.0)]
    >>> byte_seconds(socket, TierSplit.all_in("ddr"))
    ()
    """
    def per_byte(shares: tuple[tuple[str, float], ...]) -> float:
        return sum(share / (figures.memory_bytes_per_s(socket, tier) * socket.memory[tier].efficiency)
                   for tier, share in shares)

    out = ((USES[0], per_byte(split.weights)), (USES[1], per_byte(split.kv)),
           (USES[2], per_byte(split.activation_shares or ((split.activations, 1.0),))), (USES[3], per_byte(split.kv_offload or split.kv)))
    return () if len({s for _, s in out}) == 1 else out


def _held_until(kernels: Sequence[KernelTiming], i: int) -> int:
    # a loop iteration hands the socket to the next one when its tiles are done; its
    # collectives then overlap the next iteration, which counts what it waits for them
    looped_on = i + 1 < len(kernels) and kernels[i + 1].iteration > 0
    return kernels[i].stream_end_cycle if looped_on else kernels[i].end_cycle


def kernel_causes(kernels: Sequence[KernelTiming],
                  byte_seconds: dict[str, float] | None = None) -> list[tuple[int, int, dict[str, float]]]:
    """Each kernel's share of the phase by cause, each cycle of the socket counted once: ``(index
    in kernels, idle cycles before it, its cycles by cause)`` in the order the kernels started.
    The shares and the gaps, summed in this order, are :func:`step_breakdown_cycles` (the Chrome
    trace puts each kernel's share on its event: :mod:`sn40l_sim.report.chrome_trace`)."""
    out = []
    cursor = 0
    for i, k in sorted(enumerate(kernels), key=lambda ik: (ik[1].start_cycle, ik[1].end_cycle)):
        gap = max(0, k.start_cycle - cursor)
        end = _held_until(kernels, i)
        span = end - k.start_cycle
        # other kernels only overlap on the socket when one waits for its collectives while the
        # next, independent one computes; count each cycle once
        overlap = max(0, cursor - k.start_cycle)
        parts = kernel_breakdown(k, end, byte_seconds)
        scale = (span - min(overlap, span)) / span if span else 0.0
        out.append((i, gap, {cat: v * scale for cat, v in parts.items()}))
        cursor = max(cursor, end)
    return out


def step_breakdown_cycles(timing: PhaseTiming) -> dict[str, float]:
    """Cycles of ``timing`` by cause, over all kernels and the gaps between them."""
    out = dict.fromkeys(CATEGORIES, 0.0)
    cursor = 0
    kernels = timing.kernels
    for i, gap, parts in kernel_causes(kernels, dict(timing.byte_seconds)):
        if gap:
            out["idle"] += gap
        for cat, v in parts.items():
            out[cat] += v
        cursor = max(cursor, _held_until(kernels, i))
    out["idle"] += max(0, timing.cycles - cursor)
    # idle is what the proportional splits leave: float rounding can leave it a hair below zero
    # (-1e-18 s), which is no time at all and must not read as negative time
    if out["idle"] < 0 and -out["idle"] <= 1e-9 * max(1, timing.cycles):
        out["idle"] = 0.0
    return out


def decode_step_breakdown(timing: PhaseTiming) -> dict[str, float]:
    """Seconds of a decode step (or any phase) by cause; the values add up to ``timing.seconds``.

    Examples
    --------
    >>> from sn40l_sim.engine.phase import PhaseTiming, KernelTiming
    >>> k = KernelTiming("L0.mla", "mla", 0, 0, 1000, overhead_cycles=100, fill_cycles=50,
    ...     compute_busy_cycles=300, memory_bound_cycles=600, compute_bound_cycles=0,
    ...     collective_exposed_cycles=250, collective_cycles=400, tier_bytes={"hbm": 3000, "ddr": 0},
    ...     weight_bytes=1000, kv_bytes=2000, activation_bytes=0, flops=10, attention_flops=5,
    ...     launch_cycles=20, barrier_cycles=30, config_cycles=50, stream_end_cycle=750)
    >>> t = PhaseTiming("decode", 1, 1, 1, 1000, 1e-6 * 1000 / 1600, {}, {}, 0, {}, {}, {}, {}, (), (k,))
    >>> {c: round(v * 1.6e9) for c, v in decode_step_breakdown(t).items() if v}
    {'weights_streaming': 200, 'kv_reads': 400, 'collectives': 250, 'launch': 20, 'synchronisation': 30, 'configuration': 50, 'pipeline_fill': 50}
    """
    if not isinstance(timing, PhaseTiming):   # a PlacedGraph, say: an AttributeError deep inside otherwise
        raise InputError(f"timing: expected a PhaseTiming (StepTimer.decode_step or .prefill), got {type(timing).__name__}")
    cycles = step_breakdown_cycles(timing)
    per_cycle = timing.seconds / timing.cycles if timing.cycles else 0.0
    return {cat: v * per_cycle for cat, v in cycles.items()}


def memory_roofline_s(timing: PhaseTiming, socket: SocketSpec) -> float:
    """Seconds the phase's kernel traffic takes at the peak bandwidth of each memory tier (the
    stated figures, no achievable fraction), the slowest tier setting it: the memory roofline a
    memory-bound step approaches. Collectives' staging is not counted (it is not the kernels'
    data). Zero when the kernels move no bytes.

    >>> from types import SimpleNamespace as NS
    >>> k = NS(tier_bytes={"hbm": 1_638_400_000, "ddr": 0})
    >>> socket = NS(dies=2, memory={"hbm": NS(units_per_die=2, bytes_per_s_per_unit=409.6e9),
    ...                             "ddr": NS(units_per_die=3, bytes_per_s_per_unit=16.6667e9)})
    >>> round(memory_roofline_s(NS(kernels=(k,)), socket), 6)
    0.001
    """
    out = 0.0
    for tier in socket.memory:
        n_bytes = sum(k.tier_bytes.get(tier, 0) for k in timing.kernels)
        if n_bytes:
            out = max(out, n_bytes / figures.memory_bytes_per_s(socket, tier))
    return out
