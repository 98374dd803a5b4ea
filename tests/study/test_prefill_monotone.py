"""A longer prompt never prefills faster: Llama-3.1-8B on 8 sockets around powers of two, where a
tie between two equally small GEMM halvings once made 1025 tokens map faster than 1024
(mapper/halving.py, ``tied_pieces``)."""
from __future__ import annotations

from pathlib import Path

from sn40l_sim.study.assemble import assemble
from sn40l_sim.study.experiment import load_experiment

REPO = Path(__file__).resolve().parents[2]


def test_llama8b_prefill_cycles_do_not_fall_as_the_prompt_grows_past_a_power_of_two():
    asm = assemble(load_experiment(REPO / "experiments/llama8b_node8.yaml"))
    timer = asm.step_timer(asm.setup(asm.points[0]))
    lengths = [2**k + d for k in range(8, 14) for d in (-1, 0, 1)]
    cycles = [timer.prefill(n).cycles for n in lengths]
    falls = [(lengths[i], lengths[i + 1]) for i in range(len(lengths) - 1) if cycles[i + 1] < cycles[i]]
    assert not falls
