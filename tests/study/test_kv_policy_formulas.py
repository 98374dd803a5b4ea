"""Every shipped KV policy against its own formulas, end to end (docs/validation.md, "KV policies
against their formulas"): Llama-3.1-8B (BF16, 8 KV heads of 128, 32 layers: 131,072 bytes a token)
on the 8-socket node, decode TP8 with attention data-parallel over 8, so each socket holds 8 of the
64 sequences whole; 16K and 32K prompts, 256 output tokens.

What a record says is held to what the policy's parameters give by hand: the slots a sequence keeps,
the HBM they take on a socket (and the state beside them: H2O's scores, ArkVale's digests), the
largest batch those bytes allow, the KV a decode step reads, a step that does not get dearer as the
cache shrinks, the prefill kernels that grow with the prompt and the observation window as their
work does, and each record labelled with its policy and parameters.
"""
from __future__ import annotations

import math
import textwrap
from pathlib import Path

import pytest

from sn40l_sim.study.assemble import assemble
from sn40l_sim.study.experiment import load_experiment
from sn40l_sim.study.runner import simulate_points

REPO = Path(__file__).resolve().parents[2]

#: Llama-3.1-8B: 32 layers x 8 KV heads x 128 channels x (K, V) x 2 bytes
BYTES_PER_TOKEN = 32 * 8 * 128 * 2 * 2
LAYERS, KV_HEADS, HEAD_DIM = 32, 8, 128
NEW_TOKENS, BATCH, SEQS_PER_SOCKET = 256, 64, 8
#: rows the output adds to a slot that grows: every generated token but the last is fed back
FED_BACK = NEW_TOKENS - 1
PROMPTS = (16384, 32768)
GIB = 2**30

POLICIES = {
    "full": "{policy: full}",
    "ss8k": "{policy: snapstream, params: {budget: 8192}}",                 # sink 4, recent 1024, top-K 7164
    "ss8k_w64": "{policy: snapstream, params: {budget: 8192, observation_window: 64}}",
    "ss4k": "{policy: snapstream, params: {budget: 4096}}",                 # sink 4, recent 512, top-K 3580
    "sllm8k": "{policy: streamingllm, params: {budget: 8192}}",
    "snapkv8k": "{policy: snapkv, params: {budget: 8192}}",                 # window 32, top-K 8160
    "snapkv8k_w256": "{policy: snapkv, params: {budget: 8192, observation_window: 256}}",
    "h2o8k": "{policy: h2o, params: {budget: 8192}}",                       # heavy 4096, recent 4096
    "ark8k": "{policy: arkvale, params: {budget: 8192}}",                   # recent 1024, 224 pages of 32
    # budgets the 16K prompts fit and their contexts (16,640 tokens) outgrow
    "h2o16k": "{policy: h2o, params: {budget: 16384}}",
    "ark16k": "{policy: arkvale, params: {budget: 16384}}",                 # recent 2048, 448 pages of 32
}
#: the policies that add no decode kernel: their step differs only by the cache it reads
READ_ONLY = ("full", "ss8k", "ss4k", "sllm8k", "snapkv8k")


@pytest.fixture(scope="module")
def records(tmp_path_factory) -> dict[str, dict]:
    entries = "".join(f"  - {{name: {name}, {body[1:]}\n" for name, body in POLICIES.items())
    text = textwrap.dedent(f"""\
        kind: experiment
        name: formulas
        hardware: {REPO / 'hw_configs/sn40l_node8.yaml'}
        model: {REPO / 'graphs/llama3_1_8b.yaml'}
        parallel:
          prefill: {{tp: 8}}
          decode: {{tp: 8, attention_dp: 8}}
        policies:
        """) + entries + textwrap.dedent(f"""\
        prompt_lens: [{PROMPTS[0]}, {PROMPTS[1]}]
        shape: {{prompt_len: {PROMPTS[1]}}}
        workload: {{kind: fixed, count: 1, output_len: 16}}
        serving: {{batch: {BATCH}, max_new_tokens: {NEW_TOKENS}}}
        report: {{extra_fields: [kv_policies]}}
        """)
    path = tmp_path_factory.mktemp("formulas") / "formulas.yaml"
    path.write_text(text)
    exp = load_experiment(path)
    asm = assemble(exp)
    return {r["name"]: r for r in simulate_points(exp, asm.node, asm.model, serve=False)}


def point(records: dict[str, dict], name: str, prompt: int) -> dict:
    return records[f"{name}@{prompt // 1024}K"]


def slots(name: str, prompt: int) -> int:
    """The static slot of each policy by hand: sink + recent + top-K for the rings, the kept prompt
    plus the output for SnapKV (it grows in decode), the budget capped by the context for H2O and
    ArkVale's HBM buffer, the whole context for full; the output's rows are those of the tokens fed
    back, all but the last (kvcache/base.py, slot_new_tokens)."""
    return {"full": prompt + FED_BACK, "ss8k": 4 + 1024 + 7164, "ss8k_w64": 8192, "ss4k": 4 + 512 + 3580,
            "sllm8k": 4 + 8188, "snapkv8k": 32 + 8160 + FED_BACK, "snapkv8k_w256": 256 + 7936 + FED_BACK,
            "h2o8k": min(prompt + FED_BACK, 4096 + 4096), "ark8k": min(prompt + FED_BACK, 1024 + 224 * 32),
            "h2o16k": min(prompt + FED_BACK, 8192 + 8192), "ark16k": min(prompt + FED_BACK, 2048 + 448 * 32)}[name]


def state_bytes(name: str, prompt: int) -> int:
    """What a sequence keeps beside its slots in HBM: an FP32 score per slot, KV head and layer
    (H2O); per 32-token page of the context, a max and a min key row in BF16 per layer (ArkVale)."""
    if name.startswith("h2o"):
        return slots(name, prompt) * 4 * KV_HEADS * LAYERS
    if name.startswith("ark"):
        return math.ceil((prompt + FED_BACK) / 32) * 2 * KV_HEADS * HEAD_DIM * 2 * LAYERS
    return 0


@pytest.mark.parametrize("prompt", PROMPTS)
@pytest.mark.parametrize("name", POLICIES)
def test_each_point_keeps_the_slots_and_bytes_its_formula_gives(records, name, prompt):
    r = point(records, name, prompt)
    assert r["kv_len"] == slots(name, prompt)
    assert r["kv_bytes_per_token"] == BYTES_PER_TOKEN
    per_sequence = slots(name, prompt) * BYTES_PER_TOKEN + state_bytes(name, prompt)
    assert r["memory"]["hbm"]["kv"] == SEQS_PER_SOCKET * per_sequence
    if name.startswith("ark"):      # the whole context in 32-token pages, in DDR
        assert r["memory"]["ddr"]["kv_offload"] == SEQS_PER_SOCKET * math.ceil((prompt + NEW_TOKENS) / 32) * 32 \
            * BYTES_PER_TOKEN


@pytest.mark.parametrize("prompt", PROMPTS)
@pytest.mark.parametrize("name", POLICIES)
def test_the_largest_batch_is_the_largest_power_of_two_whose_bytes_fit(records, name, prompt):
    r = point(records, name, prompt)
    hbm = r["memory"]["hbm"]
    per_sequence = hbm["kv"] / SEQS_PER_SOCKET
    room = hbm["kv"] + hbm["free"]          # what the batch-64 point leaves for KV on a socket
    largest = r["max_batch"]
    assert largest & (largest - 1) == 0
    assert largest // 8 * per_sequence <= room < 2 * largest // 8 * per_sequence


@pytest.mark.parametrize("prompt", PROMPTS)
def test_a_decode_step_reads_the_kv_it_holds_and_a_smaller_cache_is_never_dearer(records, prompt):
    rows = [point(records, name, prompt) for name in READ_ONLY]
    # HBM a step reads beyond the KV its socket holds: the weights and activations, the same for all
    rest = {r["decode_tier_bytes"]["hbm"] - r["memory"]["hbm"]["kv"] for r in rows}
    assert len(rest) == 1 and 0 < rest.pop() < 2.5 * GIB
    by_len = sorted(rows, key=lambda r: r["kv_len"])
    steps = [r["decode_step_s"] for r in by_len]
    assert steps == sorted(steps), [(r["name"], r["kv_len"], r["decode_step_s"]) for r in by_len]
    assert steps[0] < steps[-1] / 3          # 4,096 slots against 16K or 32K and the output
    for r in rows:
        assert set(r["decode_kernel_cycles"]) == {"decoder", "embedding", "lm_head", "sampling"}


@pytest.mark.parametrize("prompt", PROMPTS)
def test_policies_working_in_decode_charge_it_beside_a_ring_of_the_same_slots(records, prompt):
    ring, h2o, ark = (point(records, name, prompt) for name in ("ss8k", "h2o8k", "ark8k"))
    assert ring["kv_len"] == h2o["kv_len"] == ark["kv_len"] == 8192
    assert h2o["decode_kernel_cycles"]["h2o_evict"] > 0 and ark["decode_kernel_cycles"]["recall"] > 0
    assert h2o["decode_step_s"] > ring["decode_step_s"] and ark["decode_step_s"] > ring["decode_step_s"]
    # H2O re-reads the keys (half the cache) and reads and writes an FP32 score per slot and KV head
    scores = SEQS_PER_SOCKET * 8192 * KV_HEADS * 4 * LAYERS
    extra = h2o["decode_tier_bytes"]["hbm"] - ring["decode_tier_bytes"]["hbm"] - scores
    assert extra >= SEQS_PER_SOCKET * 8192 * BYTES_PER_TOKEN // 2 + scores
    assert ring["decode_tier_bytes"]["ddr"] == h2o["decode_tier_bytes"]["ddr"] == 0 < ark["decode_tier_bytes"]["ddr"]


def policy_cycles(record: dict, kind: str) -> int:
    return record["prefill_kernel_cycles"].get(kind, 0)


def test_prefill_compression_grows_with_the_prompt_and_the_observation_window(records):
    short, long = PROMPTS
    # SnapKV scoring: each of the window's queries scores every prefix key, so more of both cost more
    for name in ("ss8k", "ss4k", "ss8k_w64", "snapkv8k", "snapkv8k_w256"):
        assert policy_cycles(point(records, name, short), "snapkv") < policy_cycles(point(records, name, long), "snapkv")
    for prompt in PROMPTS:
        assert (policy_cycles(point(records, "ss8k_w64", prompt), "snapkv")
                < policy_cycles(point(records, "ss8k", prompt), "snapkv"))          # window 64 < 1024
        assert (policy_cycles(point(records, "snapkv8k", prompt), "snapkv")
                < policy_cycles(point(records, "snapkv8k_w256", prompt), "snapkv"))  # window 32 < 256
    # H2O recomputes the causal Q K^T over the whole prompt: twice the prompt, over twice the work
    h2o = [policy_cycles(point(records, "h2o8k", p), "h2o_prefill") for p in PROMPTS]
    assert h2o[1] > 2 * h2o[0] > 0
    # ArkVale's digests are a pass over the prompt's keys; the ring copy moves sink + recent rows,
    # whatever the prompt
    ark = [policy_cycles(point(records, "ark8k", p), "digest_build") for p in PROMPTS]
    assert 0 < ark[0] < ark[1]
    for name in ("ss8k", "sllm8k"):
        ring = [policy_cycles(point(records, name, p), "ring_buffer") for p in PROMPTS]
        assert ring[0] == ring[1] > 0
    assert policy_cycles(point(records, "ss4k", long), "ring_buffer") < policy_cycles(point(records, "ss8k", long),
                                                                                       "ring_buffer")
    assert policy_cycles(point(records, "ss8k", long), "ring_buffer") < policy_cycles(point(records, "sllm8k", long),
                                                                                       "ring_buffer")
    for prompt in PROMPTS:
        full = point(records, "full", prompt)
        assert full["prefill_policy_overhead"] == 0.0
        for name in POLICIES:
            if name != "full":
                r = point(records, name, prompt)
                assert r["prefill_policy_overhead"] > 0 and r["prefill_s"] > full["prefill_s"]


def test_records_are_labelled_with_their_policy_and_parameters(records):
    for name, body in POLICIES.items():
        for prompt in PROMPTS:
            r = point(records, name, prompt)
            assert r["kv_policy"] == body.split(",")[0].split()[-1].rstrip("}")
            assert r["kv_policy_params"] == ({} if name == "full" else
                                             {"budget": {"ss4k": 4096, "h2o16k": 16384, "ark16k": 16384}.get(name, 8192),
                                              **({"observation_window": 64} if name == "ss8k_w64" else {}),
                                              **({"observation_window": 256} if name == "snapkv8k_w256" else {})})


def test_a_prompt_within_the_budget_still_prepares_the_state_decode_evicts_or_recalls_by(records):
    # 16K prompts within a 16K budget, 256 outputs past it: decode evicts (H2O) and recalls (ArkVale)
    # from the first step that outgrows it, by the prompt's accumulated scores and page digests,
    # which the prefill builds as it does for a prompt it compresses (it built none: H2O's 16K
    # prefill cost what full's does, where at an 8K budget it scores the same prompt)
    short = PROMPTS[0]
    h2o, h2o_8k = point(records, "h2o16k", short), point(records, "h2o8k", short)
    ark, ark_8k = point(records, "ark16k", short), point(records, "ark8k", short)
    assert h2o["decode_kernel_cycles"]["h2o_evict"] > 0 and ark["decode_kernel_cycles"]["recall"] > 0
    scoring, scoring_8k = policy_cycles(h2o, "h2o_prefill"), policy_cycles(h2o_8k, "h2o_prefill")
    assert scoring == pytest.approx(scoring_8k, rel=0.05)      # the same prompt scored, nothing gathered
    assert 0 < policy_cycles(ark, "digest_build") < policy_cycles(ark_8k, "digest_build")   # no buffer filled
    for r in (h2o, ark):
        assert r["prefill_policy_overhead"] > 0
