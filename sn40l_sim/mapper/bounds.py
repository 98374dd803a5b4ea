"""A floor under every plan of a kernel on a given number of tiles: :func:`plan_floor`.

The kernel mapper (:func:`~sn40l_sim.mapper.kernel.best_plan`) searches the tilings of each tile
choice and keeps the plan of least objective; a tile choice whose floor already exceeds the best
plan found on another cannot win, so its search is skipped. The floor holds for every tiling
(``n_tiles``), dataflow and allocation, so skipping changes nothing but the time taken:

* **memory**: a section's memory stage moves its tier's bytes whatever the tiling; its stream
  (latency excluded) is spread over the data tiles, so ``n_tiles x cycles per tile`` is at least
  the stream of its slowest tier (:func:`~sn40l_sim.mapper.stages.memory_stage`);
* **compute**: a GEMM of ``count x m x k x n`` takes at least ``count m n k x row_cycles /
  (lanes x stages x k_per_stage)`` PCU-cycles at the calibrated systolic efficiency, in either
  dataflow and whatever its pieces and splits (padding and the partial sums' round trips only
  add: :mod:`~sn40l_sim.mapper.work`), and a section's stages share at most the kernel's PCUs per
  tile on each tile in use, so its slowest stage takes at least their total over all of them per
  data tile;
* **configuration**: a section's configuration covers at least the switches of the tiles in use.

The objective of a plan (:func:`~sn40l_sim.mapper.kernel_cost.plan_kernel`) is at least the reload
charge plus, per section, the larger of the first two times its data tiles (a looped kernel's
iteration includes each section's stream and its compute chain alike).

The two whole-kernel rooflines a placed kernel reports beside its cycles live here too:
:func:`compute_bound_cycles` (every PCU at its systolic peak) and :func:`memory_bound_cycles` (the
bytes alone over every memory unit).

Examples
--------
>>> from sn40l_sim.mapper._examples import example_socket, example_decode_kernel
>>> from sn40l_sim.mapper.kernel import best_plan
>>> from sn40l_sim.mapper.tier_split import TierSplit
>>> socket, kernel, tiers = example_socket(), example_decode_kernel(), TierSplit.all_in("hbm")
>>> plan = best_plan(socket, kernel, tiers)
>>> ranges = [(0, len(kernel.operators))]
>>> plan_floor(socket, kernel.operators, ranges, [], tiers, plan.chip_tiles) <= plan.objective[0]
True
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

from sn40l_sim.hardware import figures
from sn40l_sim.hardware.spec import SocketSpec
from sn40l_sim.hardware.units.memory import offchip_cycles
from sn40l_sim.hardware.units.pcu import gemm_geometry, mac_rate, pcu_peak_flops_per_cycle
from sn40l_sim.ir import Operator
from sn40l_sim.mapper.attention import with_combines
from sn40l_sim.mapper.budget import NO_LIMITS, UnitBudget
from sn40l_sim.mapper.stages import memory_stage
from sn40l_sim.mapper.tier_split import TierSplit

if TYPE_CHECKING:
    from collections.abc import Sequence

#: the floor is lowered by this share (and one cycle) so that float rounding in the plans'
#: arithmetic (``ceil(x - 1e-9)`` and the like) can never put a plan below it
_SLACK = 1e-6


def gemm_floor_cycles(socket: SocketSpec, op: Operator) -> float:
    """PCU-cycles (at efficiency 1) no tiling, dataflow or split of GEMM ``op`` goes below.

    >>> from sn40l_sim.mapper._examples import example_socket
    >>> gemm_floor_cycles(example_socket(), Operator("g", "gemm", m=64, k=64, n=64))   # 64^3 / (32 x 6 x 1)
    1365.3333333333333
    """
    pcu = socket.pcu
    _, row_cycles = gemm_geometry(pcu, op.dtype)
    per_stage = pcu.stages * (int(math.floor(mac_rate(pcu, op.dtype))) if mac_rate(pcu, op.dtype) >= 1 else 1)
    return op.count * op.m * op.n * op.k * row_cycles / (pcu.lanes * per_stage)


def plan_floor(socket: SocketSpec, operators: Sequence[Operator], ranges: Sequence[tuple[int, int]],
               spills: Sequence[int], tiers: TierSplit, chip_tiles: int, budget: UnitBudget = NO_LIMITS,
               iterations: float = 1) -> float:
    """A value no plan's objective on ``chip_tiles`` tiles goes below (see the module docstring).

    Parameters
    ----------
    socket : SocketSpec
    operators : sequence of Operator
        The kernel's operators, cut into sections by ``ranges`` (``(start, stop)``), with
        ``spills[i]`` bytes written between sections ``i`` and ``i + 1``.
    tiers : TierSplit
    chip_tiles : int
    budget : UnitBudget
        Its PCUs per tile bound the compute.
    iterations : float
        Consecutive calls sharing one section's configuration (``inf`` when it stays resident).
    """
    pcus = chip_tiles * budget.tile_pcus(socket.tile.pcus)
    efficiency = socket.calibrated.systolic_efficiency
    total = 0.0
    for i, (start, stop) in enumerate(ranges):
        ops = with_combines(socket, operators[start:stop], chip_tiles)
        spill_in = spills[i - 1] if i > 0 else 0
        spill_out = spills[i] if i < len(spills) else 0
        by_tier: dict[str, int] = {}
        for j, op in enumerate(ops):
            spill = (spill_in if j == 0 else 0) + (spill_out if j == len(ops) - 1 else 0)
            for tier, n in tiers.split(op, spill).items():
                by_tier[tier] = by_tier.get(tier, 0) + n
        stream = max([memory_stage(socket, tier, n, 1, chip_tiles).stream_cycles
                      for tier, n in by_tier.items() if n and tier in socket.memory] + [0])
        compute = sum(gemm_floor_cycles(socket, op) for op in ops if op.kind == "gemm") / (efficiency * pcus)
        total += max(stream, compute)
    config = figures.config_cycles(socket, figures.config_bytes(socket, 0, 0, chip_tiles))
    reload = config / iterations if len(ranges) == 1 else config * len(ranges)
    return (total + reload) * (1 - _SLACK) - 1


def compute_bound_cycles(socket: SocketSpec, flops: int) -> int:
    """Cycles of ``flops`` with every PCU of the socket at its BF16 systolic peak.

    >>> from sn40l_sim.mapper._examples import example_socket
    >>> compute_bound_cycles(example_socket(), 1040 * 384 * 1000)
    1000
    """
    peak = pcu_peak_flops_per_cycle(socket.pcu, "bf16") * figures.pcus(socket)
    return math.ceil(flops / peak - 1e-9)


def memory_bound_cycles(socket: SocketSpec, tier_bytes: dict[str, int]) -> int:
    """Cycles to move the bytes alone over all memory units at the calibrated efficiencies (the
    tiers in parallel); ``tier_bytes`` is tier -> bytes."""
    out = 0
    agcus = figures.agcus(socket)
    for tier, n in tier_bytes.items():
        spec = socket.memory[tier]
        if n:
            out = max(out, offchip_cycles(spec, socket.agcu, socket.clock_hz, n, spec.efficiency,
                                          units_used=socket.dies * spec.units_per_die, agcus=agcus))
    return out
