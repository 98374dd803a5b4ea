"""A call (not a looped iteration) whose stream waits mid-way for a window's collective is replayed
with its collectives starting once its first data tile is out, its bytes in (the engine's
``_first_tile_cycles``, sn40l_sim/engine/kernel_process.py), as the loop's first iteration already
was (sn40l_sim/mapper/window_replay.py, ``first_tile_cycles``).

Llama-3.1-8B's decoder at batch 16 with 2K caches on 16 sockets, kernel looping off: its o_proj
all-reduce was scored as starting one tile's compute after its window opens, where the engine starts
it once that tile's weights are in, and a plan of 32 data tiles was scored 2,758 cycles (3.4%) short of the engine's
call (77,742 against 80,500). The mapper chose it over 128 data tiles, which both now score at
79,488 cycles: the step 3,122,382 -> 3,089,998 cycles (1.0% faster; docs/validation.md, "Decode
all-reduces under the GEMM").
"""
from __future__ import annotations

from mapper_checks import check_windowed_calls_as_run, unlooped_decode


def test_a_windowed_calls_score_is_the_engines_call():
    # the 8B's unlooped decode on 16 sockets at batch 16, 2K caches: one decoder call a layer,
    # each with its windows
    check_windowed_calls_as_run(*unlooped_decode("llama3_1_8b", 16, 16, 2048), calls=32)
