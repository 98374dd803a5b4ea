"""The socket the unit-model tests run on: the project's SN40L YAML once it exists, else a local
double built from REFERENCE.md values (only so these tests can run before the HW loader lands)."""
from __future__ import annotations

from pathlib import Path

from sn40l_sim.hardware.spec import SocketSpec

ROOT = Path(__file__).resolve().parents[3]
SN40L_YAML = ROOT / "hw_configs" / "sn40l.yaml"

# Test double only: REFERENCE.md §1 values, with placeholders where nothing is published.
_REFERENCE_SOCKET = {
    "name": "sn40l-test-double",
    "clock_hz": "1.6 GHz",
    "dies": 2,
    "tiles_per_die": 2,
    "tile": {
        "grid_rows": 20, "grid_cols": 26, "pcus": 260, "pmus": 260, "agcus": 16,
        "vector_network": {"link_bytes_per_cycle": 64, "links_per_direction": 1, "hop_latency_cycles": 1},
        "scalar_network": {"link_bytes_per_cycle": 4, "links_per_direction": 1, "hop_latency_cycles": 1},
        "control_network": {"link_bytes_per_cycle": 1, "links_per_direction": 1, "hop_latency_cycles": 1},
    },
    "pcu": {"lanes": 32, "stages": 6, "modes": ["systolic", "simd"],
            "macs_per_lane_stage_per_cycle": {"bf16": 1, "fp16": 1, "fp32": 0.5, "int8": 2, "fp8": 2},
            "pipeline_latency_cycles": 8, "reduction_tree_latency_cycles": 5,
            "tail_stage": {"transcendentals_per_lane_per_cycle": 1}},
    "pmu": {"capacity_bytes": "512 KiB", "banks": 16, "bank_width_bytes": 4, "read_ports": 1,
            "write_ports": 1, "addresses_per_cycle": 4},
    "agcu": {"burst_bytes": 64, "bytes_per_cycle": 64, "max_outstanding_bursts": 64},
    "hbm": {"units_per_die": 2, "capacity_bytes_per_unit": "16 GB",
            "bytes_per_s_per_unit": "409.6 GB/s", "latency_s": "120 ns"},
    "ddr": {"units_per_die": 3, "capacity_bytes_per_unit": "256 GB",
            "bytes_per_s_per_unit": "16.67 GB/s", "latency_s": "150 ns"},
    "tln": {"bytes_per_s": "1 TB/s", "latency_s": "50 ns"},
    "die_to_die": {"bytes_per_s": "1 TB/s", "latency_s": "20 ns"},
    "p2p": {"ports": 8, "bytes_per_s_per_port": "50 GB/s", "latency_s": "1 us"},
    "reconfiguration_cycles": 10000,
    "calibrated": {"kernel_call_overhead_s": "10 us", "hbm_efficiency": 0.9, "ddr_efficiency": 0.8,
                   "p2p_efficiency": 0.8, "transfer_setup_s": "5 us", "systolic_efficiency": 0.9},
}


def reference_socket() -> SocketSpec:
    """The project's SN40L socket if its YAML and loader exist, else the local test double."""
    if SN40L_YAML.exists():
        try:
            from sn40l_sim.hardware.loader import load_hardware
        except ImportError:
            pass
        else:
            return load_hardware(SN40L_YAML).socket
    return SocketSpec.model_validate(_REFERENCE_SOCKET)
