"""The unit-level test kernels as fused kernels for the mapper, with the units they run on.

:mod:`sn40l_sim.hardware.units.tile_kernels` describes each small kernel by the layout the
unit-level simulation builds (operands preloaded in PMUs, a fixed number of PCUs per stage);
:func:`as_fused` gives the same computation as mapper operators (no off-chip bytes: everything is
on chip) and :func:`budget_for` the same PCUs and PMUs as a :class:`UnitBudget`, so that the
mapper's prediction for that layout can be set beside the simulation's cycles.
"""
from __future__ import annotations

from sn40l_sim.hardware.units.tile_kernels import AttentionKernel, GatherKernel, GemmKernel
from sn40l_sim.ir import FusedKernel, Operator
from sn40l_sim.mapper.budget import WEIGHT_STATIONARY, UnitBudget

#: softmax rows of the unit-level kernel: row max | exp and row sum | divide by the sum
SOFTMAX_PCUS = 3


def as_fused(kernel: GemmKernel | AttentionKernel | GatherKernel) -> FusedKernel:
    """The kernel's operators, all operands on chip."""
    if isinstance(kernel, GemmKernel):
        m, k, n = kernel.m, kernel.k, kernel.n
        ops: tuple[Operator, ...] = (Operator("gemm", "gemm", flops=2 * m * k * n, m=m, k=k, n=n, dtype=kernel.dtype),)
    elif isinstance(kernel, AttentionKernel):
        q, kv, d = kernel.q_len, kernel.kv_len, kernel.head_dim
        ops = (Operator("scores", "gemm", flops=2 * q * d * kv, m=q, k=d, n=kv),
               # exp and the division by the row sum both run in the tail stage; scores are FP32
               Operator("softmax", "softmax", elements=q * kv, transcendentals=2 * q * kv, n=kv, dtype="fp32"),
               Operator("pv", "gemm", flops=2 * q * kv * d, m=q, k=kv, n=d))
    elif isinstance(kernel, GatherKernel):
        ops = (Operator("gather", "gather", elements=kernel.n_indices * kernel.row_elems, k=kernel.row_elems),)
    else:
        raise TypeError(f"unknown kernel {kernel!r}")
    return FusedKernel(name=type(kernel).__name__, kind="unit_level", phase="prefill", operators=ops)


def budget_for(kernel: GemmKernel | AttentionKernel | GatherKernel) -> UnitBudget:
    """One tile, the PCUs and PMUs of the unit-level layout, its (weight-stationary) dataflow and,
    for attention, its query tiles as the data tiles.

    A mapper stage keeps its input and output buffers striped over its PMUs; the unit-level layouts
    keep an input in one PMU and the output in another, which has the ports of one mapper PMU (one
    read port for the input, one write port for the output).
    """
    if isinstance(kernel, GemmKernel):
        # one A PMU multicast to every PCU; a weight PMU and an output PMU per PCU
        return UnitBudget(chip_tiles=1, stage_pcus=(("gemm", kernel.pcus),),
                          stage_pmus=(("gemm", 2 * kernel.pcus + 1),), dataflows=(WEIGHT_STATIONARY,))
    if isinstance(kernel, AttentionKernel):
        # Q, K, V; S, P and O double-buffered
        return UnitBudget(chip_tiles=1, pcus_per_tile=2 + SOFTMAX_PCUS, pmus_per_tile=9,
                          stage_pcus=(("scores", 1), ("softmax", SOFTMAX_PCUS), ("pv", 1)),
                          dataflows=(WEIGHT_STATIONARY,), n_tiles=kernel.q_len // kernel.q_tile,
                          gemm_cuts=("m",))
    if isinstance(kernel, GatherKernel):
        # the table's PMU and the output PMU: the ports of one mapper PMU
        return UnitBudget(chip_tiles=1, stage_pmus=(("gather", 1),))
    raise TypeError(f"unknown kernel {kernel!r}")
