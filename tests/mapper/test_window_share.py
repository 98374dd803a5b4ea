"""A window's last share is scored as the engine charges it: its collective's bytes over the
window's data tiles (sn40l_sim/engine/windows.py), not over the next power of two of them
(sn40l_sim/mapper/windows.py, ``OverlapWindow.tail_cycles``).

Llama-3.1-70B's decoder at batch 256 with 4K caches, kernel looping off: its ``dense_down``
all-reduce's window ends the stream, and the call ends with that window's last share. Of 321 tiles
on 8 sockets the share was scored as 512 tiles' (11,646 cycles against the engine's 12,501), and of
94 on 16 sockets as 128 tiles' (the collective's time past the stream, 22,591, against the share's
24,032): each call 855 and 1,441 cycles short of the engine's (docs/validation.md, "Decode
all-reduces under the GEMM").
"""
from __future__ import annotations

import math
from dataclasses import replace

import pytest
from mapper_checks import check_windowed_calls_as_run, unlooped_decode

from sn40l_sim.ir import Collective, FusedKernel, Operator
from sn40l_sim.mapper._examples import example_socket
from sn40l_sim.mapper.windows import overlap_windows


def _cycles(c: Collective) -> float:
    """A collective's cycles: a latency and its bytes at 64 B/cycle."""
    return 1000 + c.bytes / 64


@pytest.mark.parametrize("tiles", [1, 3, 321, 512, 1000])
def test_a_windows_share_is_its_bytes_over_its_own_tiles(tiles):
    op = Operator("a", "gemm", flops=2 * 4096 * 4096, m=1, k=4096, n=4096, weight_bytes=2 * 4096 * 4096)
    ar = Collective("all_reduce", 4 << 20, 8, True, after="a")
    (window,) = overlap_windows(example_socket(), FusedKernel("k", "k", "decode", (op,), (ar,)), _cycles)
    # 321 tiles were charged 512 tiles' share: 1000 + 8,192 / 64 = 1,128 cycles, not 1000 + 13,067 / 64 = 1,204
    assert window.tail_cycles(tiles) == round(_cycles(replace(ar, bytes=math.ceil(ar.bytes / tiles))))


@pytest.mark.parametrize("sockets", [8, 16])
def test_the_70b_unlooped_decoders_score_is_the_engines_call(sockets):
    # one decoder call a layer, each with its windows
    check_windowed_calls_as_run(*unlooped_decode("llama3_1_70b", sockets, 256, 4096), calls=80)
