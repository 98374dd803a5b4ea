"""Of a GEMM's equally small pieces (mapper/halving.py, ``tied_pieces``) the tiling takes the one
cheapest on one PCU (mapper/tiling.py, ``gemm_tilings``), where work divides without remainder; a
stage spreads a piece's whole items over the PCUs it is given, and the piece of more items spreads
more evenly. With the fill the longest path through the stage graph (mapper/fill_path.py), this
makes Llama-3.1-8B's prefill ``qkv`` kernel map faster at 1,025 rows than at 1,024 on its own: the
1,024-row tiling never plans the cut that 1,025 rows get, because 1,024 rows tie it with a cut
cheaper on one PCU. The kernel mapper now also plans every GEMM cut to its tied piece of most
items (``gemm_piece`` finest, mapper/kernel.py ``_uniform_dataflows``)."""
from __future__ import annotations

import pytest

from sn40l_sim.hardware.loader import load_hardware
from sn40l_sim.ir import Operator, ParallelPlan, Shape
from sn40l_sim.mapper.budget import FINEST_PIECE, OUTPUT_STATIONARY, UnitBudget
from sn40l_sim.mapper.division import stage_division
from sn40l_sim.mapper.halving import tied_pieces
from sn40l_sim.mapper.kernel import map_kernel
from sn40l_sim.mapper.tiling import _b_element_bytes, _gemm_limits, _gemm_option, gemm_tilings
from sn40l_sim.models.builder import build_graph
from sn40l_sim.models.loader import load_model

SOCKET = "hw_configs/sn40l_node8.yaml"
OS_ONLY = UnitBudget(dataflows=(OUTPUT_STATIONARY,))


def _k_proj(rows: int) -> Operator:
    # Llama-3.1-8B's K projection on one socket of eight (TP8): 4,096 in, 128 out, BF16 weights
    return Operator("k_proj", "gemm", flops=2 * rows * 4096 * 128, m=rows, k=4096, n=128, weight_bytes=4096 * 128 * 2)


def test_the_cut_a_row_more_gets_is_tied_at_a_power_of_two_but_not_taken():
    socket = load_hardware(SOCKET).socket
    eff = socket.calibrated.systolic_efficiency
    op = _k_proj(1024)
    dims, low = _gemm_limits(socket, op)
    tied = [(p["m"], p["k"], p["n"]) for p in tied_pieces(dims, low, _b_element_bytes(op), 32, OS_ONLY.gemm_cuts)]
    # 1,024 rows in 32 pieces tie their m and k halvings; 1,025 rows tie them on their mean pieces
    # (mapper/halving.py, ``smallest_halvings``), are offered both cuts and take the one 1,024 take
    # (before, their rounded-up halves did not tie and they were cut 513 x 256 only)
    assert (256, 512, 128) in tied and (512, 256, 128) in tied
    more = _k_proj(1025)
    dims_more, low_more = _gemm_limits(socket, more)
    tied_more = [(p["m"], p["k"]) for p in tied_pieces(dims_more, low_more, _b_element_bytes(more), 32,
                                                       OS_ONLY.gemm_cuts)]
    assert (513, 256) in tied_more and (257, 512) in tied_more
    taken = gemm_tilings(socket, op, 32, eff, OS_ONLY)[0][2]
    longer = gemm_tilings(socket, more, 32, eff, OS_ONLY)[0][2]
    assert (taken.m, taken.k) == (256, 512) and (longer.m, longer.k) == (257, 512)
    # the one taken is cheaper on one PCU (half the partial sums reloaded) and has half the items
    cost, _, other = _gemm_option(socket, op, dims, {"count": 1, "m": 512, "k": 256, "n": 128}, _b_element_bytes(op),
                                  OUTPUT_STATIONARY, eff)
    assert gemm_tilings(socket, op, 32, eff, OS_ONLY)[0][0] < cost and other.work.items == 2 * taken.work.items
    # on the 39 PCUs the kernel's plan gives each of the K and V projections it takes five rounds
    # of its items against nine of half the length: the cut 1,025 rows get is faster there
    assert stage_division(other.work, 1.0, 39).cycles < stage_division(taken.work, 1.0, 39).cycles
    _, _, finer = _gemm_option(socket, more, dims_more, {"count": 1, "m": 513, "k": 256, "n": 128},
                               _b_element_bytes(more), OUTPUT_STATIONARY, eff)
    assert stage_division(other.work, 1.0, 39).cycles == stage_division(finer.work, 1.0, 39).cycles


@pytest.mark.parametrize("rows", [256, 1024, 2048])
def test_llama8b_qkv_kernel_maps_no_slower_at_a_power_of_two_of_rows_than_one_row_more(rows):
    # before the kernel mapper planned the finest tied pieces too (mapper/kernel.py), 1,024 rows
    # took 264,230 cycles (64 data tiles, weight-stationary) and 1,025 rows 264,189 (32,
    # output-stationary, the K and V projections cut 513 x 256); now 263,436 and 263,865
    socket = load_hardware(SOCKET).socket
    model = load_model("graphs/llama3_1_8b.yaml")

    def cycles(n: int) -> int:
        graph = build_graph(model, Shape("prefill", 1, n), ParallelPlan(tp=8))
        return map_kernel(socket, next(k for k in graph.kernels() if k.name.endswith("qkv"))).cycles

    assert cycles(rows) <= cycles(rows + 1)


def test_the_finest_budget_takes_the_tied_piece_of_most_items():
    socket = load_hardware(SOCKET).socket
    eff = socket.calibrated.systolic_efficiency
    fine = gemm_tilings(socket, _k_proj(1024), 32, eff, UnitBudget(dataflows=(OUTPUT_STATIONARY,),
                                                                    gemm_piece=FINEST_PIECE))[0][2]
    assert (fine.m, fine.k, fine.n) == (512, 256, 128)
    with pytest.raises(ValueError, match="gemm_piece"):
        UnitBudget(gemm_piece="coarsest")
