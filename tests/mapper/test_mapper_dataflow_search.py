"""The mapper's retry with every GEMM in one dataflow searches the tilings around the per-operator
choice's best, not only its two neighbours (:func:`sn40l_sim.mapper.kernel._uniform_dataflows`).

Llama-3.1-8B's decoder layer, looped on 16 sockets at batch 1, waits about 28,500 cycles per
iteration for the previous iteration's all-reduces while its weights stream ahead into the PMUs;
what is left after that wait is its compute, which is short only on many PCUs. With each GEMM in
the dataflow it chose alone the best tiling is 1024 data tiles (59,076 cycles per call), and the
retry at its neighbours found 512 with every GEMM weight-stationary (56,425, on 28 PCUs a tile);
the best is 128 data tiles, every GEMM weight-stationary, on 128 PCUs a tile (45,539), 19% shorter
than what the neighbours gave. Its compute after the wait is 128 x 26 cycles, not 512 x 38.
"""
from __future__ import annotations

import math
from dataclasses import replace

from conftest import ROOT

import sn40l_sim.mapper.kernel as kernel_mod
from sn40l_sim.hardware.loader import load_hardware
from sn40l_sim.ir import ParallelPlan, Shape
from sn40l_sim.mapper.budget import NO_LIMITS
from sn40l_sim.mapper.kernel import LoopContext, best_plan
from sn40l_sim.mapper.sections import output_bytes, split_sections
from sn40l_sim.mapper.stages import TierSplit
from sn40l_sim.models.builder import build_graph
from sn40l_sim.models.loader import load_model

#: the engine's wait per iteration for the previous iteration's two all-reduces (8 KB, 16 sockets)
#: at the shipped calibration, as ``map_graph`` gives it to the mapper
GATE_CYCLES = 28_544


def _decoder():
    model = load_model(ROOT / "graphs" / "llama3_1_8b.yaml")
    graph = build_graph(model, Shape("decode", 1, 1024, 2048, 0, context_len=2048), ParallelPlan(16))
    return next(k for k in graph.kernels() if k.name == "L00.decoder").signature()


def _every_plan(socket, kernel, tiers, loop):
    """Every tiling of every tile choice, with the per-operator dataflows and with each one alone."""
    plans = []
    for chip_tiles in NO_LIMITS.tiles_for(4):
        ranges = split_sections(socket, kernel.operators, 4, kernel.name, NO_LIMITS)
        spills = [output_bytes(socket, kernel.operators[stop - 1]) for _, stop in ranges[:-1]]
        planned = kernel_mod.socket_key(socket, kernel_mod.UNPLANNED_CALIBRATED)
        for budget in [NO_LIMITS] + [replace(NO_LIMITS, dataflows=(d,)) for d in NO_LIMITS.dataflows]:
            for n_tiles in kernel_mod._candidate_tiles(socket, kernel):
                plan = kernel_mod._plan_kernel(socket, kernel, ranges, spills, n_tiles, tiers, chip_tiles, budget,
                                               loop, planned)
                if plan is not None:
                    plans.append((budget is NO_LIMITS, plan))
    return plans


def test_the_looped_decoder_gets_the_best_plan_of_every_tiling_and_dataflow():
    socket = load_hardware(ROOT / "hw_configs" / "sn40l_node16.yaml").socket
    kernel, tiers = _decoder(), TierSplit.all_in("hbm")
    loop = LoopContext(iterations=32, gate_cycles=GATE_CYCLES, pipelined=True)
    every = _every_plan(socket, kernel, tiers, loop)
    best = best_plan(socket, kernel, tiers, loop=loop)
    assert best.objective[0] == min(p.objective[0] for _, p in every)
    # the winner is one no per-operator plan reaches, two or more tilings from the per-operator best
    per_operator = min((p for default, p in every if default), key=lambda p: p.objective)
    assert best.objective[0] < 0.85 * per_operator.objective[0]
    assert math.log2(per_operator.n_tiles / best.n_tiles) >= 2
