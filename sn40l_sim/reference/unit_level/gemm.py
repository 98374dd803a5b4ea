"""Unit-level run of a small GEMM on one tile."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import simpy

from sn40l_sim.hardware.spec import SocketSpec
from sn40l_sim.hardware.units.tile_kernels import GemmKernel
from sn40l_sim.reference.unit_level.fabric import PMU
from sn40l_sim.reference.unit_level.systolic import GemmWiring, systolic_gemm, systolic_geometry

BF16_BYTES = 2


@dataclass
class UnitLevelResult:
    """Outcome of a unit-level run: cycles to the last output write, the computed outputs, and
    busy cycles per unit (for utilisation)."""

    cycles: int
    outputs: dict[str, np.ndarray]
    busy_cycles: dict[str, int] = field(default_factory=dict)


def simulate_gemm(kernel: GemmKernel, socket: SocketSpec, seed: int = 0) -> UnitLevelResult:
    """Run ``kernel`` cycle by cycle on ``socket``'s units; return cycles and the product.

    Examples
    --------
    >>> from sn40l_sim.hardware.loader import load_hardware
    >>> socket = load_hardware("hw_configs/sn40l.yaml").socket
    >>> res = simulate_gemm(GemmKernel(m=32, k=32, n=64, pcus=2), socket)
    >>> res.cycles > 32 * 6       # 32 rows x 6 K blocks at least
    True
    """
    rates = socket.pcu.macs_per_lane_stage_per_cycle
    if kernel.dtype not in rates:
        raise ValueError(f"GemmKernel.dtype: expected one of the PCU's datatypes {sorted(rates)}, got {kernel.dtype!r}")
    env = simpy.Environment()
    rng = np.random.default_rng(seed)
    m, k, n, pcus = kernel.m, kernel.k, kernel.n, kernel.pcus
    a = rng.standard_normal((m, k))
    b = rng.standard_normal((k, n))
    lanes = socket.pcu.lanes
    n_blocks = -(-n // lanes)
    nbl = n_blocks // max(pcus, 1)
    a_pmu = PMU(env, socket.pmu, "A")
    a_pmu.store("A", a)
    b_pmus = [PMU(env, socket.pmu, f"B{p}") for p in range(pcus)]
    for pmu in b_pmus:
        pmu.store("B", b)
    c_pmus = [PMU(env, socket.pmu, f"C{p}") for p in range(pcus)]
    done = {"t": None}

    def a_slice(t, row, k0, k1):
        return "A", (row * k + k0) * BF16_BYTES, (k1 - k0) * BF16_BYTES, lambda d: d[row, k0:k1]

    def b_vector(nb, kk):
        if kk >= k:
            return None
        c0, c1 = nb * lanes, min((nb + 1) * lanes, n)
        local = (nb % nbl) * lanes
        return "B", (kk * nbl * lanes + local) * BF16_BYTES, (c1 - c0) * BF16_BYTES, \
            lambda d: d[kk, c0:c1]

    def tile_done(t):
        done["t"] = env.now

    wiring = GemmWiring(a_pmu=lambda t: a_pmu, a_slice=a_slice, b_pmus=b_pmus, b_vector=b_vector,
                        c_pmu=lambda t, p: c_pmus[p], tile_ready=lambda t: None, tile_done=tile_done)
    units = systolic_gemm(env, socket, 1, m, k, n, pcus, kernel.hops, wiring, kernel.dtype)
    env.run()
    _, kpb, _ = systolic_geometry(socket.pcu, kernel.dtype)
    k_last = -(-k // kpb) - 1
    c = np.zeros((m, n_blocks * lanes))
    for p in range(pcus):
        for j in range(nbl):
            nb = p * nbl + j
            for row in range(m):
                c[row, nb * lanes:(nb + 1) * lanes] = c_pmus[p].data[(0, p, j, k_last, row)]
    busy = {f"pcu{p}": u.busy_cycles for p, u in enumerate(units)}
    busy.update({f"C{p}.write": pmu.ports["write"].busy_cycles for p, pmu in enumerate(c_pmus)})
    return UnitLevelResult(cycles=int(done["t"]), outputs={"C": c[:, :n], "expected": a @ b},
                           busy_cycles=busy)
