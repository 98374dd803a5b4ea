"""``describe`` of an experiment states the compiled sizes run pads to: the prefill graph a prompt
runs (the smallest of the compiled prompt lengths that holds it) when it is longer than the prompt,
and the compiled batches ``serving.batch: max`` chooses from when the file gives them. A prompt of
8,192 tokens with ``prefill_lens: [4096, 12288]`` ran the 12,288-token graph (results'
``prefill_len_compiled``), and ``batch_sizes: [8, 24]`` capped the batch at 24, with describe
saying "prompt 8,192 tokens ... serving batch max" of both."""
from __future__ import annotations

from pathlib import Path

from sn40l_sim.commands.describe import describe_experiment

REPO = Path(__file__).resolve().parents[2]


def _lines(text: str, label: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip().startswith(label)]


def _experiment(tmp_path: Path, serving: str) -> Path:
    text = (REPO / "experiments" / "llama8b_node8.yaml").read_text().replace("../", f"{REPO}/")
    path = tmp_path / "compiled.yaml"
    path.write_text(text.replace("shape: {prompt_len: 32768}", "shape: {prompt_len: 8192}")
                    .replace("  seed: 7\n", f"  seed: 7\n{serving}"))
    return path


def test_a_prompt_padded_to_a_longer_compiled_graph_is_described(tmp_path):
    out = describe_experiment(_experiment(tmp_path, "  prefill_lens: [4096, 12288]\n"))
    assert _lines(out, "prefill") == ["prefill    a prompt of 8,192 tokens runs the graph compiled for 12,288 "
                                      "(the smallest compiled prompt length that holds it)"]


def test_the_compiled_batches_a_max_batch_chooses_from_are_described(tmp_path):
    out = describe_experiment(_experiment(tmp_path, "  batch_sizes: [8, 24]\n"))
    assert _lines(out, "shape")[0].endswith("; serving batch max (the largest of serving.batch_sizes 8, 24 whose "
                                            "KV fits)")


def test_the_long_context_prompt_is_run_on_the_graph_of_the_models_context():
    out = describe_experiment(REPO / "experiments" / "long_context_1m.yaml")
    assert _lines(out, "prefill") == ["prefill    a prompt of 1,048,320 tokens runs the graph compiled for "
                                      "1,048,576 (the smallest compiled prompt length that holds it)"]


def test_prompts_of_a_compiled_length_need_no_line():
    assert _lines(describe_experiment(REPO / "experiments" / "deepseek_tp16.yaml"), "prefill") == []
