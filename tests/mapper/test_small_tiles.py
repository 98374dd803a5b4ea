"""A hypothetical socket whose tiles are small for the model: a kernel whose sections were cut by
each operator's fewest units but whose tilings do not fit them is cut one operator a section (a
128K-token prefill attention on PMUs of 1 KiB stopped with an AssertionError and a traceback), and
one that fits nowhere is refused as infeasible, naming the socket's fields (docs/architecture.md,
"Writing a hardware file")."""
from __future__ import annotations

import pytest

from sn40l_sim.errors import InfeasibleError
from sn40l_sim.hardware import figures
from sn40l_sim.hardware.loader import with_overrides
from sn40l_sim.ir import FusedKernel, Operator
from sn40l_sim.mapper._examples import example_node
from sn40l_sim.mapper.kernel import map_kernel
from sn40l_sim.mapper.sections import split_sections


def _prefill_attention(length: int, heads: int, head_dim: int = 192, value_dim: int = 128) -> FusedKernel:
    """Scores, softmax and the value GEMM of ``heads`` heads over a ``length``-token prompt (the
    shape of DeepSeek-R1's 128K prefill attention: 8K-token query tiles, 1,088 head-tiles)."""
    n = length * length * heads
    return FusedKernel(name="attn", kind="mha", phase="prefill", operators=(
        Operator("qk", "gemm", flops=2 * n * head_dim, m=length, n=length, k=head_dim, count=heads,
                 act_in_bytes=2 * length * head_dim * heads * 2),
        Operator("softmax", "softmax", elements=n, transcendentals=n),
        Operator("pv", "gemm", flops=2 * n * value_dim, m=length, n=value_dim, k=length, count=heads,
                 act_out_bytes=length * value_dim * heads * 2)))


def _socket(pmu_capacity: str):
    return with_overrides(example_node("sn40l.yaml"), {"socket.pmu.capacity_bytes": pmu_capacity}).socket


def test_a_kernel_whose_one_section_fits_no_tiling_is_cut_one_operator_a_section():
    socket = _socket("1 KiB")
    kernel = _prefill_attention(8192, 1088)
    # the fewest units of each operator fit one section together ...
    assert split_sections(socket, kernel.operators, figures.tiles(socket)) == [(0, 3)]
    placed = map_kernel(socket, kernel)
    # ... but no tiling of it does: the mapper cuts it into one section per operator
    assert placed.sections == 3
    assert placed.cycles > 0
    # with SN40L's 512 KiB PMUs the same kernel is one section, and faster than on the small PMUs
    full = map_kernel(_socket("512 KiB"), kernel)
    assert full.sections == 1 and full.cycles < placed.cycles


def test_a_kernel_that_fits_no_tile_even_alone_is_infeasible_naming_the_fields():
    socket = _socket("128 B")   # one row of its 32 banks of 4 B: the smallest PMU the loader takes
    with pytest.raises(InfeasibleError) as raised:
        map_kernel(socket, _prefill_attention(8192, 1088))
    message = str(raised.value)
    assert "pmu.capacity_bytes" in message and "tile.pmus" in message and "SN40L" in message, message
    assert not isinstance(raised.value, AssertionError)
