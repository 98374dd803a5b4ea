"""``scripts/sequences_per_socket.py``: one socket's DeepSeek-R1 decode attention for one long cache
and for several short ones of the same bytes, the sizes of the split-KV mechanisms, and a bad case
refused with exit status 2."""
from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
import sequences_per_socket as script  # noqa: E402

from sn40l_sim.hardware.loader import load_hardware  # noqa: E402
from sn40l_sim.ir import ParallelPlan  # noqa: E402
from sn40l_sim.kvcache import make_policy  # noqa: E402
from sn40l_sim.models.loader import load_model  # noqa: E402
from sn40l_sim.study.assemble import step_timer  # noqa: E402


def _number(pattern: str, text: str) -> float:
    found = re.search(pattern, text)
    assert found, (pattern, text)
    return float(found.group(1))


def test_equal_bytes_give_equal_flops_and_only_a_split_cache_has_partials_to_merge():
    one, four = script.kernel_lines(1, 131072), script.kernel_lines(4, 32768)
    assert one[0].split(":", 1)[1] == four[0].split(":", 1)[1]      # same KV MiB, same GFLOP
    assert "qk.combine" in one[1] and "qk.combine" not in four[1]
    long_sizes, short_sizes = script.size_lines(1, 131072), script.size_lines(4, 32768)
    # one cache over the four tiles: four fragments, three merges per query row (3 x 128 rows)
    assert _number(r"(\d+) merges", long_sizes[0]) == 3 * 384
    assert _number(r"(\d+) merges", short_sizes[0]) == 0
    assert _number(r"([\d.]+) MB of partials", long_sizes[0]) == pytest.approx(3 * 384 * 514 * 4 / 1e6, abs=0.01)
    # both fit a tile's score rows on chip, and both are compute-bound
    for line in (long_sizes[1], short_sizes[1]):
        assert _number(r"per tile ([\d.]+) MiB", line) < _number(r"against ([\d.]+) MiB", line)
        assert _number(r"KV at achievable HBM ([\d.]+) us", line) < _number(r"at peak ([\d.]+) us", line)


def test_the_step_lines_are_the_step_timers():
    # the step is StepTimer.decode_step's for the main experiment's deployment at 16 sequences, and
    # its breakdown, in ms to two decimals, adds up to it (the causes share the step's critical path)
    line, = script.step_lines([(1, 4096)])
    assert line.startswith("1x4096 step (batch 16): ")
    node = load_hardware(REPO / "hw_configs" / "sn40l_node16.yaml")
    model = load_model(REPO / "graphs" / "deepseek_r1.yaml")
    timer = step_timer(node, model, make_policy("full", {}), ParallelPlan(tp=16), ParallelPlan(tp=16, attention_dp=16),
                       {"expert_loading": "all"})
    step_ms = timer.decode_step(16, 4096, 2).seconds * 1e3
    assert _number(r": ([\d.]+) ms", line) == pytest.approx(step_ms, abs=0.005)
    parts = ast.literal_eval(line[line.index("{"):])
    assert {"configuration", "weights_streaming", "attention_compute"} <= set(parts)
    assert sum(parts.values()) == pytest.approx(step_ms, abs=0.005 * len(parts) + 1e-6)


def test_a_bad_case_exits_2(capsys):
    with pytest.raises(SystemExit) as stop:
        script.main(["--cases", "1x"])
    assert stop.value.code == 2
    assert "SEQUENCESxTOKENS" in capsys.readouterr().err


def test_a_cache_longer_than_the_models_context_exits_2(capsys):
    # DeepSeek-R1's context is 163,840 tokens: a 100M-token cache was mapped and sized all the same
    with pytest.raises(SystemExit) as stop:
        script.main(["--cases", "1x100000000", "--no-steps"])
    assert stop.value.code == 2
    assert "maximum context" in capsys.readouterr().err
