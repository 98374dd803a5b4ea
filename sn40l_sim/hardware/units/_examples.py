"""Small spec objects for the docstring examples of the unit models, and nothing else.

The simulator always reads its hardware from ``hw_configs/*.yaml``; these only make the running
examples in the docstrings self-contained. The values are round placeholders in the shape of the
docs/reference.md §1 geometry (32 lanes x 6 stages), not a description of any part.
"""
from __future__ import annotations

from sn40l_sim.hardware.spec import AGCUSpec, MemoryTierSpec, NetworkSpec, PCUSpec, PMUSpec


def example_pcu() -> PCUSpec:
    """A 32-lane x 6-stage PCU with a 10-cycle pipeline.

    >>> example_pcu().lanes * example_pcu().stages
    192
    """
    return PCUSpec(lanes=32, stages=6, modes=("systolic", "simd"),
                   macs_per_lane_stage_per_cycle={"bf16": 1, "fp32": 0.5, "int8": 2},
                   pipeline_latency_cycles=10, reduction_tree_latency_cycles=5,
                   tail_stage={"transcendentals_per_lane_per_cycle": 0.5}, accumulator_dtype="fp32")


def example_pmu() -> PMUSpec:
    """A 512 KiB PMU of 16 x 4-byte banks, one read and one write port.

    >>> example_pmu().banks * example_pmu().bank_width_bytes
    64
    """
    return PMUSpec(capacity_bytes="512 KiB", banks=16, bank_width_bytes=4, read_ports=1,
                   write_ports=1, addresses_per_cycle=4,
                   read_ahead_share=0.5, score_share=0.5)


def example_agcu() -> AGCUSpec:
    """An AGCU with 64-byte bursts.

    >>> example_agcu().burst_bytes
    64
    """
    return AGCUSpec(burst_bytes=64, bytes_per_cycle=64, max_outstanding_bursts=64)


def example_hbm() -> MemoryTierSpec:
    """Two 400 GB/s memory units per die with 100 ns latency, 90% of it achievable.

    >>> example_hbm().units_per_die
    2
    """
    return MemoryTierSpec(units_per_die=2, capacity_bytes_per_unit="16 GB",
                          bytes_per_s_per_unit="400 GB/s", latency_s="100 ns", efficiency=0.9)


def example_network() -> NetworkSpec:
    """A mesh network of 64-byte links, one per direction, 2 cycles per hop.

    >>> example_network().link_bytes_per_cycle
    64
    """
    return NetworkSpec(link_bytes_per_cycle=64, links_per_direction=1, hop_latency_cycles=2)
