"""decode_step_breakdown from Python: a PhaseTiming is what it splits; a mapped graph (map_phase's
PlacedGraph, which has kernels but no timing) is named, where it was an AttributeError inside."""
from __future__ import annotations

from types import SimpleNamespace as NS

import pytest

from sn40l_sim.engine.breakdown import decode_step_breakdown, memory_roofline_s, step_breakdown_cycles
from sn40l_sim.engine.phase import KernelTiming, PhaseTiming
from sn40l_sim.errors import InputError
from sn40l_sim.mapper.placement import PlacedGraph


def test_a_phase_timing_splits_and_anything_else_is_named():
    k = KernelTiming("L0.ffn", "ffn", 0, 0, 1000, overhead_cycles=100, fill_cycles=50, compute_busy_cycles=300,
                     memory_bound_cycles=600, compute_bound_cycles=0, collective_exposed_cycles=0,
                     collective_cycles=0, tier_bytes={"hbm": 3000}, weight_bytes=3000, kv_bytes=0,
                     activation_bytes=0, flops=10, attention_flops=0, launch_cycles=20, barrier_cycles=30,
                     config_cycles=50, stream_end_cycle=750)
    timing = PhaseTiming("decode", 1, 1, 1, 1000, 1e-6 * 1000 / 1600, {}, {}, 0, {}, {}, {}, {}, (), (k,))
    assert sum(decode_step_breakdown(timing).values()) == pytest.approx(timing.seconds, rel=1e-12)
    for wrong, kind in ((PlacedGraph(graph=None, kernels=(), memory=None), "PlacedGraph"), ({}, "dict")):
        with pytest.raises(InputError, match=rf"^timing: expected a PhaseTiming \(StepTimer.decode_step or "
                                             rf"\.prefill\), got {kind}$"):
            decode_step_breakdown(wrong)


@pytest.mark.parametrize("ddr_bytes, seconds", [(50e6, 1e-3), (200e6, 2e-3)])
def test_the_memory_roofline_is_the_slowest_tiers_time_not_their_sum(ddr_bytes, seconds):
    # the tiers stream side by side: 1.6384 GB over 1,638.4 GB/s of HBM is 1 ms, and the DDR's
    # 100 GB/s take 0.5 ms of 50 MB (the step still 1 ms) or 2 ms of 200 MB (the DDR sets it)
    socket = NS(dies=2, memory={"hbm": NS(units_per_die=2, bytes_per_s_per_unit=409.6e9),
                                "ddr": NS(units_per_die=3, bytes_per_s_per_unit=100e9 / 6)})
    kernels = (NS(tier_bytes={"hbm": 1_000_000_000, "ddr": ddr_bytes / 2}), NS(tier_bytes={"hbm": 638_400_000,
                                                                                         "ddr": ddr_bytes / 2}))
    assert memory_roofline_s(NS(kernels=kernels), socket) == pytest.approx(seconds)


def test_two_kernels_overlapping_on_the_socket_count_each_cycle_once():
    # an independent kernel computes from cycle 600 while the first waits for its collectives until
    # 1000: the step is 1,600 cycles, and its causes add up to those, not to the kernels' 2,000
    def kernel(name, start, end):
        return KernelTiming(name, "ffn", 0, start, end, overhead_cycles=100, fill_cycles=50, compute_busy_cycles=300,
                            memory_bound_cycles=400, compute_bound_cycles=0, collective_exposed_cycles=0,
                            collective_cycles=0, tier_bytes={"hbm": 3000}, weight_bytes=3000, kv_bytes=0,
                            activation_bytes=0, flops=10, attention_flops=0, launch_cycles=20, barrier_cycles=30,
                            config_cycles=50, stream_end_cycle=start + 600)
    timing = PhaseTiming("decode", 1, 1, 1, 1600, 1e-6, {}, {}, 0, {}, {}, {}, {}, (),
                         (kernel("a", 0, 1000), kernel("b", 600, 1600)))
    assert sum(step_breakdown_cycles(timing).values()) == pytest.approx(1600)
