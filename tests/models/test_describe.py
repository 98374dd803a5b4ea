"""``describe`` of model files: the headline numbers appear, SnapStream is used when available."""
from __future__ import annotations

from pathlib import Path

import pytest

from sn40l_sim.commands.cli import main
from sn40l_sim.models.loader import load_model
from sn40l_sim.models.params import active_params
from sn40l_sim.models.template import GRAPHS_DIR
from sn40l_sim.report.describe import describe_model


def test_describe_deepseek(capsys):
    assert main(["describe", str(GRAPHS_DIR / "deepseek_r1.yaml")]) == 0
    text = capsys.readouterr().out
    for needle in ("671.03 B total", "36.63 B active", "70,272 B per token", "9.21 GB for 131,072 tokens",
                   "2.30 GB for 32,768", "L03.qkv", "L03.mha", "L03.o_proj", "L03.router", "L03.moe_ffn",
                   "L03.mla", "L03.ffn", "batch 16", "batch 64", "experts_touched"):
        assert needle in text, needle
    assert "L03.snapkv" in text and "L03.ring_buffer" in text
    assert "SnapStream cache of 32,768 tokens" in text


def test_describe_llama():
    text = describe_model(GRAPHS_DIR / "llama3_1_8b.yaml")
    assert "8.03 B total" in text and "131,072 B per token" in text and "L00.attention" in text


def test_describe_gives_the_weights_per_socket_in_the_total_s_unit_too():
    # the total was in GB (16.06 GB) and the share per socket only in GiB (1.87 GiB): 16.06 / 8 did
    # not read as 1.87; the share is 1/8 of the total (2.007 GB) and the replicated norms (under 1 MB)
    text = describe_model(GRAPHS_DIR / "llama3_1_8b.yaml")
    assert "weights         16.06 GB stored" in text
    assert "                1.87 GiB (2.01 GB) per socket at TP8;" in text


def test_describe_keeps_its_example_prompt_within_the_models_context(tmp_path):
    # a 64K-context variant was described at a 128K prompt, which run refuses
    text = (GRAPHS_DIR / "llama3_1_8b.yaml").read_text()
    assert "max_context: 131072" in text and "kernels: kernels_llama.yaml" in text
    path = tmp_path / "llama_64k.yaml"
    path.write_text(text.replace("max_context: 131072", "max_context: 65536")
                    .replace("kernels: kernels_llama.yaml", f"kernels: {GRAPHS_DIR / 'kernels_llama.yaml'}"))
    described = describe_model(path)
    assert "131,072 tokens" not in described
    assert "8.59 GB for 65,536 tokens, 2.15 GB for 16,384" in described
    assert "prompt 65,536 tokens" in described and "SnapStream cache of 16,384 tokens" in described


def test_describe_counts_the_mtp_caches_the_drafts_run(tmp_path):
    # one module: the MTP layer's cache (576 BF16 elements more per token); three: one module's
    # cache or all three, as run reserves those of the modules its drafts run
    assert "71,424 B with the MTP layer's cache" in describe_model(GRAPHS_DIR / "deepseek_r1.yaml")
    path = tmp_path / "r1_mtp3.yaml"
    path.write_text(f"kind: model\nbase: {GRAPHS_DIR / 'deepseek_r1.yaml'}\nname: r1-mtp3\nmtp: {{modules: 3}}\n")
    text = describe_model(path)
    assert f"{70272 + 1152:,} B with one MTP module's cache, {70272 + 3 * 1152:,} B with all 3" in text


def test_describe_gives_the_active_count_with_the_whole_embedding_table(capsys):
    # Mixtral-8x7B's card quotes 12.9B active: its one-row count (12.75B) was the only figure shown,
    # 1% short for Mixtral and 12% for Qwen1.5-MoE-A2.7B, which reads as a wrong model file
    path = Path(__file__).parent / "public_models" / "mixtral_8x7b.yaml"
    model = load_model(path)
    assert main(["describe", str(path)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("parameters"))
    whole = active_params(model) - 4096 + 32000 * 4096
    assert whole == pytest.approx(12.9e9, rel=0.002)
    assert f"{active_params(model) / 1e9:.2f} B active per token ({whole / 1e9:.2f} B with the whole embedding table" in line
    # a tied head reads the whole table already: one count
    assert main(["describe", str(Path(__file__).parent / "public_models" / "llama3_2_1b.yaml")]) == 0
    assert "whole embedding table" not in capsys.readouterr().out


def test_describe_states_the_models_maximum_context(tmp_path):
    # the longest prompt plus output check and run accept, which describe left out: a user sizing a
    # 1M-token study read the KV bytes of the model and not that it refuses prompts past 128K
    assert "context         163,840 tokens at most (max_context)" in describe_model(GRAPHS_DIR / "deepseek_r1.yaml")
    path = tmp_path / "long.yaml"
    path.write_text(f"kind: model\nbase: {GRAPHS_DIR / 'llama3_1_8b.yaml'}\nname: long\nmax_context: 1048576\n")
    assert "context         1,048,576 tokens at most (max_context)" in describe_model(path)
