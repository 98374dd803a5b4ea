"""Tile-level unit models: integer cycle costs of PCUs, PMUs, off-chip memory and networks.

Pure functions of the spec objects in :mod:`sn40l_sim.hardware.spec`; every hardware number comes
from the YAML (calibrated efficiencies are passed in by the caller from ``socket.calibrated``).
The mapper composes them into per-stage cycles; :mod:`sn40l_sim.reference.unit_level` checks them
against a cycle-by-cycle simulation of small kernels.
"""
from sn40l_sim.hardware.units.memory import offchip_bytes_per_cycle, offchip_cycles
from sn40l_sim.hardware.units.network import link_cycles, mesh_bytes_per_cycle, mesh_cycles, mesh_latency_cycles
from sn40l_sim.hardware.units.pcu import (
                                             gemm_cycles,
                                             gemm_geometry,
                                             gemm_padding_waste,
                                             gemm_pipeline_cycles,
                                             mac_rate,
                                             output_stationary_cycles,
                                             output_stationary_tile_cycles,
                                             partial_sum_round_trip_cycles,
                                             pcu_peak_flops_per_cycle,
                                             reduction_cycles,
                                             simd_cycles,
                                             weight_stationary_steady_cycles,
)
from sn40l_sim.hardware.units.pmu import (
                                             pmu_cycles,
                                             pmu_gather_cycles,
                                             pmu_port_bytes_per_cycle,
                                             pmu_random_access_rate,
                                             pmus_for_buffer,
)

__all__ = [
    "gemm_cycles", "gemm_geometry", "gemm_padding_waste", "gemm_pipeline_cycles", "link_cycles", "mac_rate",
    "mesh_bytes_per_cycle", "mesh_cycles", "mesh_latency_cycles", "offchip_bytes_per_cycle", "offchip_cycles",
    "output_stationary_cycles", "output_stationary_tile_cycles", "partial_sum_round_trip_cycles", "pcu_peak_flops_per_cycle", "pmu_cycles", "pmu_gather_cycles", "pmu_port_bytes_per_cycle",
    "pmu_random_access_rate", "pmus_for_buffer",
    "reduction_cycles", "simd_cycles", "weight_stationary_steady_cycles",
]
