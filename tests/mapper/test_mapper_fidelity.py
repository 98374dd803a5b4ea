"""The mapper's GEMM stage cycles agree with the tile-level kernel formulas of the unit models
(which the unit-level SimPy simulation holds within 5%)."""
from __future__ import annotations

import math

import pytest

from sn40l_sim.hardware.units.tile_kernels import GemmKernel, tile_level_cycles
from sn40l_sim.ir import Operator
from sn40l_sim.mapper.tiling import tile_operator


@pytest.mark.parametrize("m,k,n,pcus", [(64, 64, 64, 2), (256, 512, 1024, 4), (128, 576, 4096, 8),
                                        (512, 128, 256, 8), (16, 7168, 1536, 12), (1024, 1024, 1024, 16)])
def test_gemm_stage_on_its_pcus_matches_the_tile_level_formula(socket, m, k, n, pcus):
    # column blocks divide evenly over the PCUs, as in the tile-level kernel
    assert math.ceil(n / socket.pcu.lanes) % pcus == 0
    tiling = tile_operator(socket.pcu, Operator("g", "gemm", flops=2 * m * k * n, m=m, k=k, n=n), 1, 1.0)
    mapper = math.ceil(tiling.total_cycles / pcus)
    assert abs(mapper / tile_level_cycles(GemmKernel(m, k, n, pcus=pcus), socket) - 1) < 0.02
