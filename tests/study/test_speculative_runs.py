"""Speculative decoding end to end, on experiment files as a user writes them: DeepSeek-R1 at batch 1
with a 1K prompt (experiments/per_user_speed.yaml's point) and its MTP module drafting ``k`` tokens.

What follows from first principles whatever the calibration: the reported rate is the batch times
the tokens per step over the step; the acceptance changes what a step yields, never what it
computes; the cache per token gains the MTP layer's (62 layers' worth instead of 61) and the slot
the last step's drafts; more drafts do more work (more query rows routed to more experts, one more
MTP run each); the prompt's MTP pass is paid once whatever ``k``; and a request of ``m`` tokens
takes ``m - 1`` steps when no draft is accepted, ``ceil((m - 1) / (k + 1))`` when all are
(docs/architecture.md, "Speculative decoding: the numbers").
"""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from sn40l_sim.study.evaluation import LoadedExperiments

ROOT = Path(__file__).resolve().parents[2]
# drafts never accepted are run on purpose here (tests/study/test_check_is_run.py checks the warning)
pytestmark = pytest.mark.filterwarnings("ignore:.*serving.speculative.acceptance. 0 with:UserWarning")
PROMPT, NEW = 1024, 64
R1_KV_PER_TOKEN = (512 + 64) * 61 * 2    # MLA's latent and RoPE key, BF16, 61 layers


@pytest.fixture(scope="module")
def loaded() -> LoadedExperiments:
    return LoadedExperiments()


def _experiment(tmp_path: Path, drafts: int, acceptance: float) -> Path:
    spec = {
        "kind": "experiment", "name": f"spec_{drafts}_{acceptance}",
        "hardware": str(ROOT / "hw_configs" / "sn40l_node16.yaml"),
        "model": str(ROOT / "graphs" / "deepseek_r1.yaml"),
        "parallel": {"prefill": {"tp": 16}, "decode": {"tp": 16}},
        "policies": [{"name": "full", "policy": "full"}],
        "shape": {"prompt_len": PROMPT, "batch": 1, "max_new_tokens": NEW},
        "workload": {"kind": "fixed", "count": 1, "output_len": NEW},
        "serving": {"batch": 1, "max_new_tokens": NEW, "prefill_nodes": 1, "decode_nodes": 1,
                    "speculative": {"drafts": drafts, "acceptance": acceptance}},
    }
    path = tmp_path / f"spec_{drafts}_{acceptance}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def _record(loaded, tmp_path, drafts, acceptance, serve=False, prefill=False) -> dict:
    (record,) = loaded.records(_experiment(tmp_path, drafts, acceptance), serve=serve,
                               reads_prefill=None if prefill or serve else ())
    return record


def test_reported_rate_is_batch_times_tokens_per_step_over_the_step(loaded, tmp_path):
    for drafts, acceptance in ((0, 0.8), (1, 0.8), (2, 0.8), (2, 0.0), (2, 1.0)):
        r = _record(loaded, tmp_path, drafts, acceptance)
        tokens = sum(acceptance ** j for j in range(drafts + 1))   # (1 - a^(k+1)) / (1 - a)
        assert r["speculative_drafts"] == drafts and r["tokens_per_forward"] == pytest.approx(tokens, rel=1e-9)
        assert r["decode_tokens_per_s"] == pytest.approx(r["batch"] / r["decode_step_s"], rel=1e-9)
        assert r["decode_tokens_per_s_reported"] == pytest.approx(
            r["batch"] * r["tokens_per_forward"] / r["decode_step_s"], rel=1e-9)


def test_the_acceptance_changes_what_a_step_yields_not_what_it_computes(loaded, tmp_path):
    steps = {a: _record(loaded, tmp_path, 2, a) for a in (0.0, 0.8, 1.0)}
    assert len({r["decode_step_s"] for r in steps.values()}) == 1
    assert len({r["kv_bytes_per_token"] for r in steps.values()}) == 1
    assert [steps[a]["tokens_per_forward"] for a in (0.0, 1.0)] == [1.0, 3.0]
    # drafts never accepted are paid for: slower than not drafting at all
    plain = _record(loaded, tmp_path, 0, 0.8)
    assert steps[0.0]["decode_tokens_per_s_reported"] < plain["decode_tokens_per_s_reported"]


def test_drafting_adds_the_mtp_layers_cache_and_the_last_steps_drafts_to_the_slot(loaded, tmp_path):
    records = {k: _record(loaded, tmp_path, k, 0.8) for k in (0, 1, 2, 3)}
    assert records[0]["kv_bytes_per_token"] == R1_KV_PER_TOKEN == 70_272
    for k in (1, 2, 3):   # DeepSeek-R1's one MTP module: one more layer's cache whatever k
        assert records[k]["kv_bytes_per_token"] * 61 == R1_KV_PER_TOKEN * 62
    for k, r in records.items():
        assert r["kv_len"] == PROMPT + NEW - 1 + k   # the tokens fed back and the last step's drafts


def test_more_drafts_do_more_work(loaded, tmp_path):
    # the step's bytes and FLOPs at the hardware's peaks (its roofline) grow with every draft: the
    # main model's k + 1 rows route to more experts and each draft runs the MTP module once more
    # (the simulated step need not be monotone: docs/architecture.md, "Speculative decoding: the
    # numbers")
    roofline = [_record(loaded, tmp_path, k, 0.8)["decode_roofline_s"] for k in (0, 1, 2, 3)]
    assert roofline == sorted(roofline) and len(set(roofline)) == 4


def test_the_prompts_mtp_pass_is_paid_once_whatever_the_drafts(loaded, tmp_path):
    prefill = {k: _record(loaded, tmp_path, k, 0.8, prefill=True)["prefill_s"] for k in (0, 1, 3)}
    assert prefill[1] == prefill[3] > prefill[0]
    assert prefill[1] < 1.1 * prefill[0]     # one MTP block after 61 layers


@pytest.mark.parametrize("drafts", [1, 3])
def test_a_request_takes_the_steps_its_acceptance_gives_at_the_ends_of_the_range(loaded, tmp_path, drafts):
    # one request of NEW tokens, the first from the prefill: every draft rejected takes NEW - 1
    # steps, every draft accepted ceil((NEW - 1) / (k + 1)); TPOT is those steps (and the wait for
    # the first of them) over NEW - 1 tokens
    for acceptance, steps in ((0.0, NEW - 1), (1.0, math.ceil((NEW - 1) / (drafts + 1)))):
        r = _record(loaded, tmp_path, drafts, acceptance, serve=True)
        assert r["throughput"]["decode_steps"] == steps
        assert r["throughput"]["output_tokens"] == NEW
        assert r["tpot_s"] >= steps * r["decode_step_s"] / (NEW - 1)
        assert r["tpot_s"] <= (steps * r["decode_step_s"] + r["kv_transfer_s"] + r["decode_step_s"]) / (NEW - 1)
