"""KV policies side by side, end to end on a small model (Llama-3.1-8B on the 8-socket node): the KV
format per policy entry, the opt-in kv_policies fields, DDR offload with recall moving the capacity
limit from HBM to DDR and paying its recall over DDR, and bad parameters stopping with one line
naming the field (exit 2)."""
from __future__ import annotations

import math
import textwrap
from pathlib import Path

import pytest

from sn40l_sim.commands.cli import main
from sn40l_sim.hardware.loader import with_overrides
from sn40l_sim.report.fields import RESULTS
from sn40l_sim.study.assemble import assemble
from sn40l_sim.study.experiment import load_experiment
from sn40l_sim.study.runner import simulate_points

REPO = Path(__file__).resolve().parents[2]

POLICIES = """\
  - {name: full, policy: full}
  - {name: fp8, policy: full, model_overrides: {kv_dtype: fp8}}
  - {name: snap_fp8, policy: snapstream, prompt_fraction: {budget: 0.125}, model_overrides: {kv_dtype: fp8}}
  - {name: h2o, policy: h2o, prompt_fraction: {budget: 0.125}}
  - {name: ark, policy: arkvale, params: {budget: 8192}}
"""


def experiment(tmp_path, policies=POLICIES, prompt=65536, extra="report: {extra_fields: [kv_policies]}\n"):
    text = textwrap.dedent(f"""\
        kind: experiment
        name: kv
        hardware: {REPO / 'hw_configs/sn40l_node8.yaml'}
        model: {REPO / 'graphs/llama3_1_8b.yaml'}
        parallel:
          prefill: {{tp: 8}}
          decode: {{tp: 8, attention_dp: 8}}
        policies:
        """) + policies + textwrap.dedent(f"""\
        shape: {{prompt_len: {prompt}}}
        workload: {{kind: fixed, count: batch, output_len: 16}}
        serving:
          batch_sizes: [8, 16, 32, 64, 128, 256, 512, 1024]
          max_new_tokens: 16
        """) + extra
    path = tmp_path / "kv.yaml"
    path.write_text(text)
    return path, text


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    path, _ = experiment(tmp_path_factory.mktemp("kv"))
    exp = load_experiment(path)
    asm = assemble(exp)
    return {r["name"]: r for r in simulate_points(exp, asm.node, asm.model, serve=False)}


def test_records_carry_the_kv_policy_fields_when_asked(records):
    for r in records.values():
        assert RESULTS.mismatches(r) == []
        assert set(RESULTS.in_group("kv_policies")) <= set(r)
    full, fp8, snap = records["full"], records["fp8"], records["snap_fp8"]
    assert (full["kv_bit_fraction"], fp8["kv_bit_fraction"]) == (1.0, 0.5)
    assert fp8["kv_bytes_per_token"] * 2 == full["kv_bytes_per_token"]
    assert fp8["kv_bytes_per_context_token"] * 2 == full["kv_bytes_per_context_token"]
    assert snap["kv_retained_token_fraction"] == snap["kv_attended_token_fraction"] == 8192 / (65536 + 16)
    assert fp8["max_batch"] >= 2 * full["max_batch"]
    assert snap["kv_len"] == 8192 and snap["kv_policy"] == "snapstream"


def test_h2o_keeps_its_scores_beside_the_cache_and_pays_a_kernel_per_layer(records):
    h2o = records["h2o"]
    per_token = h2o["kv_bytes_per_token"]
    # an FP32 score per slot for each of the 8 KV heads of each of the 32 layers
    assert h2o["kv_bytes_per_context_token"] * (65536 + 16) == pytest.approx(8192 * (per_token + 8 * 32 * 4))
    assert h2o["decode_kernel_cycles"]["h2o_evict"] > 0
    assert h2o["prefill_policy_overhead"] > 0 and "h2o_prefill" in h2o["prefill_kernel_cycles"]


def test_arkvale_moves_the_cache_to_ddr_and_recalls_over_it(records):
    ark, full = records["ark"], records["full"]
    ddr, hbm = ark["memory"]["ddr"], ark["memory"]["hbm"]
    batch = ark["batch"]
    per_token = ark["kv_bytes_per_token"]
    seqs = math.ceil(batch / 8)
    store_rows = 65536 + 32                       # 65552 tokens rounded up to 32-token pages
    assert ddr["kv_offload"] == seqs * store_rows * per_token and hbm.get("kv_offload", 0) == 0
    assert ddr["kv"] == 0                          # nothing spilled: the store is where the policy put it
    assert ark["kv_offload_bytes_per_context_token"] == pytest.approx(store_rows * per_token / 65552)
    assert ark["kv_retained_token_fraction"] == 1.0 and ark["kv_attended_token_fraction"] < 0.13
    assert ark["max_batch"] > 4 * full["max_batch"]
    # per step the socket recalls 1/8 of the 224 pages of each sequence's buffer, 32 tokens of
    # 8 KV heads x 256 BF16 elements, in every layer, and writes each new row to the store
    recalled = seqs * 28 * 32 * 8 * 256 * 2 + seqs * 8 * 256 * 2
    assert ark["decode_tier_bytes"]["ddr"] == 32 * recalled
    assert full["decode_tier_bytes"]["ddr"] == 0



def test_the_kv_transfer_carries_the_policy_s_state_with_the_cache(records):
    # prefill builds H2O's scores and ArkVale's page digests and decode reads them, so they cross
    # to the decode node with the cache (they were left behind: the transfer was the cache alone)
    for name, kept, state in (("full", 65536, 0), ("snap_fp8", 8191, 0),
                              # an FP32 score per slot, KV head and layer
                              ("h2o", 8192, 8192 * 4 * 8 * 32),
                              # per page of the prompt (65,536 rows in 32-token pages; the store's
                              # 2,049th holds generated tokens, which decode digests), KV head and
                              # layer: a max and a min key of 128 BF16 channels
                              ("ark", 65536, 2048 * 2 * 128 * 2 * 8 * 32)):
        r = records[name]
        assert r["kv_transfer_bytes"] == kept * r["kv_bytes_per_token"] + state, name

def test_a_smaller_ddr_moves_the_batch_limit_to_the_store(tmp_path):
    path, _ = experiment(tmp_path, policies="  - {name: ark, policy: arkvale, params: {budget: 8192}}\n")
    exp = load_experiment(path)
    asm = assemble(exp)
    (big,) = simulate_points(exp, asm.node, asm.model, serve=False)
    small_ddr = with_overrides(asm.node, {"socket.memory.ddr.capacity_bytes_per_unit": "12 GiB"})
    (small,) = simulate_points(exp, small_ddr, asm.model, serve=False)
    assert small["max_batch"] < big["max_batch"]
    assert "KV store" in small["max_batch_limit"] and "DDR" in small["max_batch_limit"]
    # HBM use per sequence is the same: the buffer and the digests
    per_seq = [r["memory"]["hbm"]["kv"] / math.ceil(r["batch"] / 8) for r in (big, small)]
    assert per_seq[0] == per_seq[1]


@pytest.mark.parametrize("entry, where, expected", [
    ("{name: h, policy: h2o, params: {budget: 100, recent: 200}}", "policies[0].params.budget",
     "expected budget >= recent = 200"),
    ("{name: a, policy: arkvale, params: {budget: 8192, tier: cxl}}", "policies[0].params.tier",
     "the hardware (SN40L-8) has no memory tier 'cxl'"),
    ("{name: q, policy: snapstream, model_overrides: {kv_dtype: int4, kv_quant: {group: 48}}}",
     "policies[0].model_overrides.kv_quant.group", "group 48 must divide the head width 128"),
    ("{name: q, policy: full, model_overrides: {kv_dtype: fp4}}", "policies[0].model_overrides.kv_dtype",
     "'bf16', 'fp8', 'int8' or 'int4'"),
    # a row of another model beside the others: the entry's own overrides are the KV format's
    ("{name: q, policy: full, model_overrides: {layers: 2}}", "policies[0].model_overrides.layers",
     "a policy entry overrides the KV format only (kv_dtype, kv_quant, kv_shared_layers); layers goes in the "
     "experiment's model_overrides"),
])
def test_bad_parameters_stop_with_one_line_naming_the_field(tmp_path, capsys, entry, where, expected):
    path, text = experiment(tmp_path, policies=f"  - {entry}\n")
    for command in (["check", str(path)], ["run", str(path), "--quiet", "--out", str(tmp_path / "out")]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1, err
        line = text.splitlines().index(f"  - {entry}") + 1
        assert f"{path}:{line}: {where}: " in err and expected in err, err


def test_an_unknown_group_of_fields_is_located(tmp_path, capsys):
    path, text = experiment(tmp_path, extra="report: {extra_fields: [kv_policy]}\n")
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:{len(text.splitlines())}: report.extra_fields[0]: unknown group of results fields 'kv_policy'" in err
