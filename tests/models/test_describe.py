"""``describe`` of model files: the headline numbers appear, SnapStream is used when available."""
from __future__ import annotations

from sn40l_sim.commands.cli import main
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
