"""Where a phase's time goes: every cycle of the simulated socket attributed to one cause.

Each kernel's interval is split into

- ``overheads``: kernel-call overhead and reconfigurations between sections,
- ``pipeline_fill``: the pipeline fill before the first tile,
- streaming time bounded by memory (a chunk whose memory stage finished after its compute),
  shared out in proportion to the kernel's bytes by use: ``weights_streaming``, ``kv_reads``
  (KV-cache reads and writes), ``activations``,
- streaming time bounded by compute, shared out in proportion to FLOPs: ``attention_compute``
  (scores, softmax, weighted values) and ``other_compute`` (projections, experts, ...),
- ``collectives``: time after the compute finished waiting for the kernel's collectives,

and time between kernels (waiting on dependencies) is ``idle``. The parts add up to the phase's
cycles exactly (up to float rounding of the proportional splits).
"""
from __future__ import annotations

from sn40l_sim.engine.phase import KernelTiming, PhaseTiming

CATEGORIES = ("weights_streaming", "kv_reads", "activations", "attention_compute", "other_compute",
              "collectives", "overheads", "pipeline_fill", "idle")


def kernel_breakdown(k: KernelTiming) -> dict[str, float]:
    """Cycles of one kernel by cause (see the module docstring); sums to ``k.cycles``."""
    out = dict.fromkeys(CATEGORIES, 0.0)
    out["overheads"] += k.overhead_cycles
    out["pipeline_fill"] += k.fill_cycles
    out["collectives"] += k.collective_exposed_cycles
    by_use = {"weights_streaming": k.weight_bytes, "kv_reads": k.kv_bytes, "activations": k.activation_bytes}
    used = sum(by_use.values())
    for cat, n in by_use.items():
        share = n / used if used else (1.0 if cat == "activations" else 0.0)
        out[cat] += k.memory_bound_cycles * share
    attention = k.attention_flops / k.flops if k.flops else 0.0
    out["attention_compute"] += k.compute_bound_cycles * attention
    out["other_compute"] += k.compute_bound_cycles * (1.0 - attention)
    # anything the parts above do not cover (e.g. a wait for the socket's links before a
    # collective could start) is time the kernel held the socket without progress
    out["idle"] += k.cycles - sum(out.values())
    return out


def step_breakdown_cycles(timing: PhaseTiming) -> dict[str, float]:
    """Cycles of ``timing`` by cause, over all kernels and the gaps between them."""
    out = dict.fromkeys(CATEGORIES, 0.0)
    cursor = 0
    for k in sorted(timing.kernels, key=lambda k: (k.start_cycle, k.end_cycle)):
        if k.start_cycle > cursor:
            out["idle"] += k.start_cycle - cursor
        # kernels only overlap on the socket when one waits for its collectives while the next,
        # independent one computes; count each cycle once
        overlap = max(0, cursor - k.start_cycle)
        parts = kernel_breakdown(k)
        scale = (k.cycles - min(overlap, k.cycles)) / k.cycles if k.cycles else 0.0
        for cat, v in parts.items():
            out[cat] += v * scale
        cursor = max(cursor, k.end_cycle)
    out["idle"] += max(0, timing.cycles - cursor)
    return out


def decode_step_breakdown(timing: PhaseTiming) -> dict[str, float]:
    """Seconds of a decode step (or any phase) by cause; the values add up to ``timing.seconds``.

    Examples
    --------
    >>> from sn40l_sim.engine.phase import PhaseTiming, KernelTiming
    >>> k = KernelTiming("L0.mla", "mla", 0, 0, 1000, overhead_cycles=100, fill_cycles=50,
    ...     compute_busy_cycles=300, memory_bound_cycles=600, compute_bound_cycles=0,
    ...     collective_exposed_cycles=250, collective_cycles=400, tier_bytes={"hbm": 3000, "ddr": 0},
    ...     weight_bytes=1000, kv_bytes=2000, activation_bytes=0, flops=10, attention_flops=5)
    >>> t = PhaseTiming("decode", 1, 1, 1, 1000, 1e-6 * 1000 / 1600, {}, {}, 0, {}, {}, {}, {}, (), (k,))
    >>> {c: round(v * 1.6e9) for c, v in decode_step_breakdown(t).items() if v}
    {'weights_streaming': 200, 'kv_reads': 400, 'collectives': 250, 'overheads': 100, 'pipeline_fill': 50}
    """
    cycles = step_breakdown_cycles(timing)
    per_cycle = timing.seconds / timing.cycles if timing.cycles else 0.0
    return {cat: v * per_cycle for cat, v in cycles.items()}
