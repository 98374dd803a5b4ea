"""``scripts/decode_rooflines.py`` (docs/validation.md, "Decode across batch sizes against the
rooflines"): Llama-3.1-8B's decode on 8 sockets with 1K caches over batches 1 to 64 never runs under
its HBM or compute roofline computed from the model's figures, never shortens as the batch doubles,
keeps its tokens/s rising while memory-bound, and stays near the HBM roofline at small batch
(kernel looping on); the simulator's bytes are the first-principles ones. A bad ``--cases`` is
refused in one line with exit status 2."""
from __future__ import annotations

import sys
from itertools import pairwise
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
import decode_rooflines as script  # noqa: E402


@pytest.fixture(scope="module")
def rows() -> list:
    return script.case_rows(script.CASES["8b-tp8-1k"], 64)


def test_every_batch_to_64_fits_and_is_timed(rows):
    assert [r.batch for r in rows] == [1, 2, 4, 8, 16, 32, 64]


def test_the_step_is_never_under_either_roofline(rows):
    for r in rows:
        assert r.step_s >= r.hbm_s and r.step_s >= r.compute_s, r
        assert r.memory_bound, r        # 1K caches: far under the ridge at every batch here
        assert not r.flags, r


def test_a_larger_batch_is_never_shorter_and_yields_more_tokens_per_second(rows):
    for smaller, larger in pairwise(rows):
        assert smaller.step_s <= larger.step_s <= 2 * smaller.step_s, (smaller, larger)
        assert larger.tokens_per_s > smaller.tokens_per_s, (smaller, larger)


def test_small_batches_stream_near_the_hbm_roofline(rows):
    # the weights (1.88 GB a socket) dominate: the looped step at 0.93 of the roofline at batch 1
    # (docs/validation.md; kernel looping's "over 90% of peak", arXiv 2410.23668)
    for r in rows[:4]:
        assert r.hbm_s / r.step_s >= 0.85, r


def test_the_simulators_bytes_and_flops_are_the_first_principles_ones(rows):
    for r in rows:
        assert r.sim_bytes == pytest.approx(r.bytes_, rel=1e-3), r
        assert r.sim_flops == pytest.approx(r.flops, rel=1e-2), r


def test_the_kv_reads_grow_with_the_batch_and_the_weights_do_not(rows):
    # the first principles' bytes are the weights plus one cache a sequence, so linear in the batch
    one, last = rows[0], rows[-1]
    kv_step = rows[1].bytes_ - one.bytes_          # one sequence's cache (1K tokens, its socket's head)
    assert kv_step == pytest.approx(1024 * 131072 / 8, rel=1e-9)
    assert last.bytes_ - one.bytes_ == pytest.approx(kv_step * (last.batch - one.batch), rel=1e-9)
    assert last.parts["kv_reads"] + last.parts.get("attention_compute", 0.0) > \
        one.parts["kv_reads"] + one.parts.get("attention_compute", 0.0)


@pytest.mark.parametrize("argv", [["--cases", "8b-tp3-1k"], ["--cases", ""], ["--max-batch", "0"]])
def test_a_bad_argument_exits_2_in_one_line(capsys, argv):
    with pytest.raises(SystemExit) as stop:
        script.main(argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert ": expected" in err and "Traceback" not in err
