"""The small kernels both fidelities run, the socket variants that move their bottleneck, and
their unit-level runs, each simulated once per test session (the simulation is slow).

``tests/reference/test_unit_level.py`` holds the tile-level formulas to these runs,
``tests/reference/test_mapper_vs_unit_level.py`` the mapper.
"""
from __future__ import annotations

from functools import cache
from pathlib import Path

from sn40l_sim.hardware.loader import load_hardware
from sn40l_sim.hardware.spec import SocketSpec
from sn40l_sim.hardware.units.tile_kernels import AttentionKernel, GatherKernel, GemmKernel
from sn40l_sim.reference.unit_level import UnitLevelResult, simulate

ROOT = Path(__file__).resolve().parents[2]
SOCKET = load_hardware(ROOT / "hw_configs" / "sn40l.yaml").socket

Kernel = GemmKernel | AttentionKernel | GatherKernel

GEMMS = [GemmKernel(64, 64, 64, 1), GemmKernel(64, 64, 64, 2), GemmKernel(32, 96, 64, 2),
         GemmKernel(16, 48, 128, 4), GemmKernel(8, 64, 64, 2), GemmKernel(1, 64, 32, 1),
         GemmKernel(64, 64, 64, 2, dtype="int8"), GemmKernel(32, 64, 64, 2, dtype="fp32"),
         # few FP32 rows: a K block waits for its partial sums to cross stages of four cycles each
         GemmKernel(6, 50, 48, 1, dtype="fp32")]
ATTENTIONS = [AttentionKernel(16, 32, 16, 8), AttentionKernel(64, 64, 32, 16),
              AttentionKernel(32, 64, 16, 8), AttentionKernel(32, 128, 8, 8),
              AttentionKernel(64, 32, 32, 8)]
GATHERS = [GatherKernel(4096, 1, 2048), GatherKernel(2048, 4, 2048), GatherKernel(1024, 16, 1024),
           GatherKernel(512, 64, 512), GatherKernel(256, 128, 256),
           # 200-byte rows on the 128-byte port: two port cycles a row, not the 1.56 of their bytes
           GatherKernel(586, 100, 1155, seed=17),
           # rows of three BF16 values (6 bytes) packed in the table: neighbours share banks
           GatherKernel(4000, 3, 4000)]

# Each variant moves the bottleneck to another unit; agreement must hold there too.
VARIANTS = [
    # 64 B PMU ports: FP32 partial sums and scores take two port cycles (and a few rows wait for
    # the extra cycle of each partial sum's write and read between K blocks)
    ("narrow_pmu_ports", dict(pmu__banks=16),
     [GemmKernel(64, 64, 64, 2), AttentionKernel(32, 64, 16, 8), GatherKernel(2048, 4, 2048),
      GemmKernel(4, 64, 64, 2)]),
    # far, slow hops: small-M GEMMs wait for the partial-sum round trip
    ("slow_hops", dict(tile__vector_network__hop_latency_cycles=6,
                       tile__scalar_network__hop_latency_cycles=6),
     [GemmKernel(4, 64, 64, 2, hops=3), AttentionKernel(32, 64, 16, 8, hops=3)]),
    # a quarter-rate tail stage: exp and the division bound the softmax
    ("slow_tail", dict(pcu__tail_stage__transcendentals_per_lane_per_cycle=0.25),
     [AttentionKernel(32, 128, 8, 8), AttentionKernel(64, 64, 16, 16)]),
    ("long_pipeline", dict(pcu__pipeline_latency_cycles=16, pcu__reduction_tree_latency_cycles=9),
     [GemmKernel(8, 64, 64, 2), AttentionKernel(32, 64, 16, 8)]),
    ("narrow_links", dict(tile__vector_network__link_bytes_per_cycle=64),
     [GemmKernel(64, 64, 64, 2), GatherKernel(512, 64, 512), GemmKernel(1, 64, 32, 1)]),
    ("two_addresses", dict(pmu__addresses_per_cycle=2), [GatherKernel(4096, 1, 2048)]),
    # BF16 partial sums on the 64 B ports: a partial-sum vector is one port cycle again
    ("narrow_bf16_sums", dict(pmu__banks=16, pcu__accumulator_dtype="bf16"),
     [GemmKernel(64, 64, 64, 2), GemmKernel(8, 64, 64, 2), AttentionKernel(32, 64, 16, 8)]),
]
CHANGES = {name: changes for name, changes, _ in VARIANTS}


def variant(**changes) -> SocketSpec:
    """The SN40L socket with fields changed, ``a__b=v`` setting ``socket.a.b = v``."""
    data = SOCKET.model_dump()
    for path, value in changes.items():
        *parents, leaf = path.split("__")
        node = data
        for part in parents:
            node = node[part]
        node[leaf] = value
    return SocketSpec.model_validate(data)


@cache
def socket_named(name: str = "base") -> SocketSpec:
    """The SN40L socket (``"base"``) or one of :data:`VARIANTS` by name."""
    return SOCKET if name == "base" else variant(**CHANGES[name])


@cache
def simulated(kernel: Kernel, socket_name: str = "base") -> UnitLevelResult:
    """The unit-level run of ``kernel`` on :func:`socket_named` ``(socket_name)``, once per session."""
    return simulate(kernel, socket_named(socket_name))
