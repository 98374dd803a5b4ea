"""Kernels the unit level cannot run are refused with the field named, by the kernel itself (so the
tile-level formulas refuse them too) or, for what depends on the socket, by :func:`simulate`.

Before, an empty dimension ended in a KeyError or TypeError deep in the simulation (or a silent 0
cycles for an attention head of no rows), and negative hops ran as zero hops in the unit level while
the tile level refused them.
"""
from __future__ import annotations

import pytest
from unit_level_cases import SOCKET

from sn40l_sim.hardware.units.tile_kernels import AttentionKernel, GatherKernel, GemmKernel
from sn40l_sim.reference.unit_level import simulate

BAD = [
    (lambda: GemmKernel(0, 8, 8), r"GemmKernel\.m: expected a positive integer, got 0"),
    (lambda: GemmKernel(8, 0, 8), r"GemmKernel\.k: "),
    (lambda: GemmKernel(8, 8, 0), r"GemmKernel\.n: "),
    (lambda: GemmKernel(8.5, 8, 8), r"GemmKernel\.m: expected a positive integer, got 8\.5"),
    (lambda: GemmKernel(8, 8, 8, pcus=0), r"GemmKernel\.pcus: "),
    (lambda: GemmKernel(8, 8, 8, hops=-1), r"GemmKernel\.hops: expected an integer >= 0, got -1"),
    (lambda: AttentionKernel(0, 32, 16, 8), r"AttentionKernel\.q_len: "),
    (lambda: AttentionKernel(16, 0, 16, 8), r"AttentionKernel\.kv_len: "),
    (lambda: AttentionKernel(16, 32, 0, 8), r"AttentionKernel\.head_dim: "),
    (lambda: AttentionKernel(16, 32, 16, 0), r"AttentionKernel\.q_tile: "),
    (lambda: AttentionKernel(16, 32, 16, 5), r"AttentionKernel\.q_len: expected a multiple of q_tile 5, got 16"),
    (lambda: GatherKernel(0, 4, 4), r"GatherKernel\.table_rows: "),
    (lambda: GatherKernel(16, 0, 4), r"GatherKernel\.row_elems: "),
    (lambda: GatherKernel(16, 4, 0), r"GatherKernel\.n_indices: "),
    (lambda: GatherKernel(16, 4, 4, seed=-1), r"GatherKernel\.seed: "),
]


@pytest.mark.parametrize("make, message", BAD, ids=[m.split(":")[0].replace("\\", "") + f"-{i}" for i, (_, m) in enumerate(BAD)])
def test_a_kernel_the_unit_level_cannot_run_is_refused_naming_the_field(make, message):
    with pytest.raises(ValueError, match=message):
        simulate(make(), SOCKET)


def test_a_datatype_the_pcu_lacks_is_refused_naming_the_field():
    with pytest.raises(ValueError, match=r"GemmKernel\.dtype: expected one of the PCU's datatypes .*got 'int4'"):
        simulate(GemmKernel(8, 8, 8, dtype="int4"), SOCKET)


def test_zero_hops_two_units_on_one_switch_still_runs():
    assert simulate(GemmKernel(8, 8, 8, hops=0), SOCKET).cycles > 0
