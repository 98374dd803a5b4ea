"""A chunk of a chunked prefill after fewer earlier tokens costs no more than after more: less
attention, the same other kernels (docs/validation.md, "A chunk after more earlier tokens,
cheaper"; sn40l_sim/mapper/side_by_side.py, rooms.py).

Llama-3.1-8B on 8 sockets (``experiments/llama8b_node8.yaml``, TP8), the 64-row chunk graph:
after 2,624 earlier tokens 5,718,152 cycles, after 2,688 4,431,464 (-22.5%), and ``map``'s own
total 4,712,264 against 3,395,656 cycles, so the search, not the score. The kernels are mapped again
side by side, the longest (the FFN) first, within what the others' first mappings (each alone, a
lone call paying its configuration) hold; the kernels called many times hold all of theirs. The
attention's first mapping takes 105 PCUs a tile after 2,624 tokens and 66 after 2,688, so the FFN
gets 28 PCUs and 19 PMUs a tile against 67 and 47. The 2,688-token rooms fit the 2,624-token
kernels: mapped within them ``map`` gives 3,390,321 cycles and the engine 4,426,128. Shrinking the
kernels called many times as well finds such rooms, but was measured before to make a prefill's
curve rise with the configuration rate, so it is not shipped. The rooms are now also read with the
one-tile kernels spread over the tiles (``balanced`` in ``_mapped_beside``), where the attention's
105 PCUs do not count on every tile: the FFN takes 131 PCUs a tile after 2,624 tokens, and ``map``
gives 3,391,342 cycles against 3,395,467 after 2,688. With a call's plan chosen for its collectives'
last-tile shares (sn40l_sim/mapper/shares.py) it fell again: the FFN spent all 131 PCUs of its room
for no shorter call (60,873 cycles; 60,870 on 67) and the attention after it got 32 PCUs a tile
(9,934 cycles a call) against 66 (5,352) after 2,688; ``map`` 3,362,175 against 3,183,146, the
engine 5,507,825 against 5,328,957. The placement kept is now tried once more with each kernel called many
times mapped again within the least room its call needs (sn40l_sim/mapper/rooms.py): the FFN on 69 PCUs a
tile, the attention on 68; ``map`` 3,176,607 against 3,183,018, the engine 5,322,385 against
5,328,829.
"""
from __future__ import annotations

from pathlib import Path

from sn40l_sim.ir import Shape
from sn40l_sim.study.assemble import assemble
from sn40l_sim.study.experiment import load_experiment

ROOT = Path(__file__).resolve().parents[2]


def test_a_chunk_after_fewer_earlier_tokens_costs_no_more():
    asm = assemble(load_experiment(ROOT / "experiments/llama8b_node8.yaml"))
    timer = asm.step_timer(asm.setup(asm.points[0]))
    fewer, more = 2624, 2688
    # the chunk graph of StepTimer.prefill(64, earlier=N): 64 rows over N cached tokens
    totals = [sum(pk.call_cycles for pk in timer.placed(Shape("prefill", 1, 64, earlier, 0, timer.context_len)).kernels)
              for earlier in (fewer, more)]
    assert totals[0] <= totals[1]   # map's own score: the search finds the rooms the longer prefix got
    assert timer.prefill(64, earlier=fewer).cycles <= timer.prefill(64, earlier=more).cycles
