"""A longer prompt never prefills faster: Llama-3.1-8B on 8 sockets around powers of two, where a
tie between two equally small GEMM halvings once made 1025 tokens map faster than 1024
(mapper/halving.py, ``tied_pieces``); and Llama-3.1-8B and -70B on 8 sockets one token short of
whole FlashAttention tiles, whose edge tiles, each shape its own GEMM stage, once made 16,383 and
32,767 tokens prefill slower than 16,384 and 32,768 (models/flash.py, ``padded_tile_pairs``)."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sn40l_sim.study.assemble import assemble
from sn40l_sim.study.experiment import load_experiment
from sn40l_sim.study.sweep.base import experiment_with_sets

REPO = Path(__file__).resolve().parents[2]


def _timer(path: Path):
    asm = assemble(load_experiment(path))
    return asm.step_timer(asm.setup(asm.points[0]))


def _falls(timer, lengths: list[int]) -> list[tuple[int, int]]:
    cycles = [timer.prefill(n).cycles for n in lengths]
    return [(lengths[i], lengths[i + 1]) for i in range(len(lengths) - 1) if cycles[i + 1] < cycles[i]]


def _llama70b_node8(tmp_path: Path) -> Path:
    spec = {
        "kind": "experiment", "name": "llama70b_node8",
        "hardware": str(REPO / "hw_configs" / "sn40l_node8.yaml"),
        "model": str(REPO / "graphs" / "llama3_1_70b.yaml"),
        "parallel": {"prefill": {"tp": 8}, "decode": {"tp": 8}},
        "policies": [{"name": "full", "policy": "full"}],
        "shape": {"prompt_len": 1024, "batch": 1, "max_new_tokens": 64},
        "workload": {"kind": "fixed", "count": 1, "output_len": 64},
        "serving": {"batch": 1, "max_new_tokens": 64},
    }
    path = tmp_path / "llama70b_node8.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def test_llama8b_prefill_cycles_do_not_fall_as_the_prompt_grows_past_a_power_of_two():
    timer = _timer(REPO / "experiments/llama8b_node8.yaml")
    assert not _falls(timer, [2**k + d for k in range(8, 14) for d in (-1, 0, 1)])


@pytest.mark.parametrize("model", ["8b", "70b"])
def test_a_prompt_short_of_whole_flash_tiles_prefills_no_slower_than_the_whole_tiles(model, tmp_path):
    # flash tiles of 8192 (graphs/kernels_llama.yaml): when the edge tiles could not be padded, the
    # 8B's attention kernel took 10,515 cycles longer at 16,383 tokens than at 16,384, and 107,321
    # and 114,501 longer at 32,704 and 32,767 than at 32,768; 32,256 is faster with its edge tiles
    path = REPO / "experiments/llama8b_node8.yaml" if model == "8b" else _llama70b_node8(tmp_path)
    assert not _falls(_timer(path), [16383, 16384, 32256, 32704, 32767, 32768])


@pytest.mark.xfail(strict=True, reason="at a multiple of 32 tokens the shared expert's gate/up GEMM is cut one "
                   "piece a data tile, 13 cycles a data tile above the stream's 11.1 (docs/validation.md, "
                   "'A random hunt of prefills')")
def test_deepseek_r1_prefill_on_8_sockets_does_not_fall_past_a_multiple_of_32_tokens():
    # open: DeepSeek-R1 (FP8, two MTP drafts, all experts streamed) on 8 sockets, TP8, the full
    # cache: 91.24 ms at 416 tokens, 83.83 at 424 (-8.1%), the same placement at both; the moe_ffn
    # kernel takes 2,108,129 cycles a call against 1,859,872 on the same 123 PCUs a tile and
    # 131,072 data tiles. The falls repeat every 32 tokens (264, 296, 328, ... 456). It was 118.81
    # ms at 416 while the MoE kernel's tiling search stopped at 32,768 data tiles and 257 PCUs,
    # beside which every other layer kernel reloaded its configuration
    exp, hw = experiment_with_sets(REPO / "experiments/deepseek_tp16.yaml", {
        "hardware": str(REPO / "hw_configs/sn40l_node8.yaml"), "parallel.prefill.tp": 8,
        "parallel.decode.tp": 8, "parallel.decode.attention_dp": 8,
        "policies": [{"name": "full", "policy": "full"}]})
    asm = assemble(exp, hardware_overrides=hw)
    timer = asm.step_timer(asm.setup("full"))
    assert not _falls(timer, [416, 424])
