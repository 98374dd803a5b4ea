"""Kernels too big for one configuration of the chip are split into sections, or refused."""
from __future__ import annotations

from pathlib import Path

import pytest
from mapper_checks import check_all

from sn40l_sim.errors import InfeasibleError
from sn40l_sim.hardware import figures
from sn40l_sim.hardware.loader import load_hardware
from sn40l_sim.ir import FusedKernel, Operator, ParallelPlan, Shape
from sn40l_sim.kvcache import make_policy
from sn40l_sim.mapper import map_kernel
from sn40l_sim.mapper.budget import UnitBudget
from sn40l_sim.mapper.sections import min_units, output_bytes
from sn40l_sim.models.builder import build_graph
from sn40l_sim.models.loader import load_model


def _chain(n_ops: int, **op) -> FusedKernel:
    ops = [Operator(f"op{i:03d}", **op) for i in range(n_ops)]
    ops[0] = Operator("op000", **{**op, "act_in_bytes": 1 << 20})
    return FusedKernel("chain", "chain", "prefill", tuple(ops))


def test_a_kernel_that_fits_has_one_section(socket):
    pk = map_kernel(socket, _chain(100, kind="elementwise", elements=1 << 20))
    assert pk.sections == 1 and pk.reconfig_cycles == 0


def test_more_stages_than_pcus_per_tile_split_into_sections(socket):
    n = socket.tile.pcus + 40                       # one PCU per stage per tile at least
    kernel = _chain(n, kind="elementwise", elements=1 << 20)
    pk = map_kernel(socket, kernel)
    check_all(socket, pk)
    assert pk.sections == 2
    assert pk.reconfig_cycles == figures.config_cycles(socket, pk.section_config_bytes[1]) > 0
    assert {s.section for s in pk.stages} == {0, 1}
    # the tensor crossing the boundary goes out to HBM and back
    boundary = [s.operator for s in pk.stages if s.section == 0 and s.kind == "elementwise"][-1]
    spill = output_bytes(socket, next(op for op in kernel.operators if op.name == boundary))
    assert pk.tier_bytes["hbm"] == (1 << 20) + 2 * spill
    one = map_kernel(socket, _chain(socket.tile.pcus, kind="elementwise", elements=1 << 20))
    assert pk.cycles > one.cycles + pk.reconfig_cycles


def test_buffers_over_pmu_capacity_split_into_sections(socket):
    # one 2^20-element FP32 row per piece: 8 MiB in + out, double-buffered over 4 tiles = 8 PMUs per tile
    kernel = _chain(40, kind="softmax", elements=1 << 22, n=1 << 20, transcendentals=1 << 22, dtype="fp32")
    pk = map_kernel(socket, kernel)
    check_all(socket, pk)
    assert pk.sections >= 2
    need = [min_units(socket, op, 4) for op in kernel.operators]
    # PMUs, not PCUs, forced the split
    assert sum(q for q, _ in need) <= socket.tile.pcus
    assert sum(r for _, r in need) > socket.tile.pmus


def test_an_operator_that_cannot_fit_alone_is_infeasible(socket):
    huge_row = Operator("softmax", "softmax", elements=1 << 28, n=1 << 28, dtype="fp32")
    with pytest.raises(InfeasibleError, match="softmax.*cannot be placed.*PMUs"):
        map_kernel(socket, FusedKernel("big", "big", "prefill", (huge_row,)))


def test_a_room_too_small_for_any_tiling_is_infeasible_not_an_internal_error():
    """Within a room whose PCUs and PMUs fit each section's fewest units but no tiling's allocation
    (DeepSeek-R1's decode MLA kernel within 4 PCUs and 88 PMUs a tile, a room the side-by-side
    search may ask about), the mapping is refused as infeasible, which that search skips."""
    root = Path(__file__).resolve().parents[2]
    node = load_hardware(root / "hw_configs" / "sn40l_node16.yaml")
    graph = build_graph(load_model(root / "graphs" / "deepseek_r1.yaml"),
                        Shape("decode", 1, 131072, 133122, 2, context_len=133122), ParallelPlan(16, 16),
                        make_policy("full", {}))
    mla = next(k for k in graph.kernels() if k.name == "L03.mla").signature()
    with pytest.raises(InfeasibleError, match="no tiling fits within pcus_per_tile 4, pmus_per_tile 88"):
        map_kernel(node.socket, mla, budget=UnitBudget(pcus_per_tile=4, pmus_per_tile=88))
