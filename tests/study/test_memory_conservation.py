"""Memory figures of ``run`` against hand calculations from the model files, on a few cheap real
configurations (docs/validation.md, "Memory figures against hand calculation"): KV bytes per token
from the config's widths, the tokens each policy keeps, KV bytes per socket x sockets = KV bytes
per token x tokens x batch (x the sockets sharing a KV head), weights per socket x sockets = the
parameters' bytes, each tier's uses adding up to its capacity, the maximum batch the largest
compiled batch that fits (the next power of two over the usable HBM by hand), the KV capacity and
transfer of the served run, and the printed table showing what results.json holds."""
from __future__ import annotations

import contextlib
import io
import json
import math
import re
from pathlib import Path

import pytest
import yaml

from sn40l_sim.commands.cli import main

REPO = Path(__file__).resolve().parents[2]
GIB = 2**30
NEW = 256          # generated tokens per request (serving.max_new_tokens)
PROMPT = 4096
SNAP_BUDGET = 1024
H2O_BUDGET = 1024
SCORE_BYTES = 4    # H2O's accumulated score per slot, KV head and layer: FP32


def experiment(tmp_path: Path, model: str, node: str, tp: int, dp: int, policies: str) -> Path:
    path = tmp_path / "e.yaml"
    path.write_text(f"""\
kind: experiment
name: conservation
hardware: {REPO / 'hw_configs' / node}
model: {REPO / 'graphs' / model}
parallel: {{prefill: {{tp: {tp}}}, decode: {{tp: {tp}, attention_dp: {dp}}}}}
policies: {policies}
shape: {{prompt_len: {PROMPT}}}
workload: {{kind: fixed, count: 1, output_len: {NEW}}}
serving: {{batch: max, max_new_tokens: {NEW}}}
""")
    return path


def run(tmp_path: Path, path: Path, *sets: str) -> tuple[list[dict], dict[str, list[str]]]:
    """results.json's records and the printed table's rows (label -> one cell per record)."""
    out = io.StringIO()
    argv = ["run", str(path), "--out", str(tmp_path / "out"), "--no-plot", "--quiet"]
    for s in sets:
        argv += ["--set", s]
    with contextlib.redirect_stdout(out):
        assert main(argv) == 0
    records = json.loads((tmp_path / "out" / "results.json").read_text())
    rows = {}
    for line in out.getvalue().splitlines():
        match = re.match(r"^(\S.*?)\s{2,}(\S.*)$", line)
        if match:
            rows[match.group(1)] = match.group(2).split()
    return records, rows


def config(model: str) -> dict:
    return yaml.safe_load((REPO / "graphs" / model).read_text())


def kv_bytes_per_token(cfg: dict, dtype_bytes: float = 2) -> int:
    """Keys and values of every KV head of every layer (GQA)."""
    a = cfg["attention"]
    return int(2 * cfg["layers"] * a["kv_heads"] * a["head_dim"] * dtype_bytes)


def weight_bytes(cfg: dict) -> int:
    """A Llama's BF16 parameters: embedding and head, and per layer Q, K, V, O, the SwiGLU FFN and
    two norms, and the final norm."""
    h, a = cfg["hidden"], cfg["attention"]
    layer = (h * a["heads"] * a["head_dim"] + 2 * h * a["kv_heads"] * a["head_dim"] + a["heads"] * a["head_dim"] * h
             + 3 * h * cfg["dense_ffn"] + 2 * h)
    return 2 * (2 * cfg["vocab"] * h + cfg["layers"] * layer + h)


POLICIES = ("[{name: full, policy: full}, {name: fp8, policy: full, model_overrides: {kv_dtype: fp8}}, "
            f"{{name: snap, policy: snapstream, params: {{budget: {SNAP_BUDGET}}}}}, "
            f"{{name: h2o, policy: h2o, params: {{budget: {H2O_BUDGET}}}}}]")

CASES = {
    # whole sequences on each socket (attention_dp = tp)
    "8b_tp8_dp8": ("llama3_1_8b.yaml", "sn40l_node8.yaml", 8, 8, POLICIES, ()),
    # tensor-parallel attention: 8 KV heads over 16 sockets, each head held by 2
    "8b_tp16_dp1": ("llama3_1_8b.yaml", "sn40l_node16.yaml", 16, 1, "[{name: full, policy: full}]", ()),
    # 70B on 4 sockets: 32.9 GiB of weights a socket leave room for 16 sequences of 4.3K tokens
    "70b_tp4_dp4": ("llama3_1_70b.yaml", "sn40l_node16.yaml", 4, 4,
                    f"[{{name: full, policy: full}}, {{name: snap, policy: snapstream, params: {{budget: {SNAP_BUDGET}}}}}]",
                    ("hardware.sockets=4",)),
}


@pytest.fixture(scope="module", params=list(CASES))
def case(request, tmp_path_factory):
    model, node, tp, dp, policies, sets = CASES[request.param]
    tmp = tmp_path_factory.mktemp(request.param)
    records, rows = run(tmp, experiment(tmp, model, node, tp, dp, policies), *sets)
    return config(model), tp, dp, records, rows


def kept_tokens(name: str) -> int:
    """Tokens a sequence's slot holds, by hand: the prompt and its output, or the policy's budget."""
    # the output but its last token, which is never fed back (kvcache/base.py, slot_new_tokens)
    return {"full": PROMPT + NEW - 1, "fp8": PROMPT + NEW - 1, "snap": SNAP_BUDGET, "h2o": H2O_BUDGET}[name]


def test_kv_bytes_per_token_and_tokens_kept_follow_the_model_file_and_the_policy(case):
    cfg, _, _, records, _ = case
    for r in records:
        assert r["kv_bytes_per_token"] == kv_bytes_per_token(cfg, 1 if r["name"] == "fp8" else 2)
        assert r["kv_len"] == kept_tokens(r["name"])


def test_kv_per_socket_times_sockets_is_kv_per_token_times_tokens_times_batch(case):
    cfg, tp, dp, records, _ = case
    # sockets holding each KV head: tp / dp sockets share a sequence, split over the model's KV heads
    replicas = max(1, (tp // dp) // cfg["attention"]["kv_heads"])
    for r in records:
        kv_socket = sum(tier["kv"] for tier in r["memory"].values())
        assert r["batch"] % dp == 0
        cache = r["kv_bytes_per_token"] * r["kv_len"] * r["batch"]
        # H2O's FP32 scores beside the cache: one per slot, KV head and layer (its context outgrows the budget)
        state = (r["kv_len"] * SCORE_BYTES * cfg["attention"]["kv_heads"] * cfg["layers"] * r["batch"]
                 if r["name"] == "h2o" else 0)
        assert kv_socket * tp == (cache + state) * replicas
        # the served run's capacity is the node's slots, each holding its kept tokens once
        assert r["kv_occupancy"]["capacity_bytes_per_node"] == cache


def test_weights_per_socket_times_sockets_are_the_parameters_bytes(case):
    cfg, tp, _, records, _ = case
    for r in records:
        weights = sum(tier["weights"] for tier in r["memory"].values())
        # the norms (2 a layer and the final one) are on every socket, the rest split
        norms = 2 * cfg["hidden"] * (2 * cfg["layers"] + 1)
        kv_proj = 2 * 2 * cfg["hidden"] * cfg["attention"]["kv_heads"] * cfg["attention"]["head_dim"] * cfg["layers"]
        replicas = max(1, tp // cfg["attention"]["kv_heads"])    # a KV head's projections on each socket holding it
        assert weights * tp == pytest.approx(weight_bytes(cfg) + (tp - 1) * norms + (replicas - 1) * kv_proj,
                                             abs=tp)


def test_each_tier_s_uses_add_up_to_its_capacity(case):
    for r in case[3]:
        for memory in (r["memory"], r["memory_prefill_node"]):
            for tier in memory.values():
                assert tier["free"] >= 0
                assert sum(tier[use] for use in ("weights", "kv", "activations", "reserved", "free")) == \
                    tier["capacity"]


def test_max_batch_fits_and_the_next_power_of_two_does_not(case):
    _, _, _, records, _ = case
    for r in records:
        assert r["batch"] == r["max_batch"] and r["max_batch"] & (r["max_batch"] - 1) == 0
        hbm = r["memory"]["hbm"]
        usable = hbm["capacity"] - hbm["reserved"]
        assert hbm["weights"] + hbm["kv"] + hbm["activations"] <= usable and r["memory"]["ddr"]["kv"] == 0
        # twice the batch holds twice the KV a socket (every socket holds whole batches' shares)
        assert hbm["weights"] + 2 * hbm["kv"] > usable
        assert r["max_batch_limit"].startswith(f"decode batch {2 * r['max_batch']} does not fit in HBM")


def test_the_kv_transfer_is_the_prompt_s_cache_as_the_policy_keeps_it_after_prefill(case):
    cfg = case[0]
    for r in case[3]:
        # a ring policy's ring holds recent - 1 prompt tokens after prefill (kvcache/policies/shared.py)
        kept = {"snap": SNAP_BUDGET - 1, "h2o": H2O_BUDGET}.get(r["name"], PROMPT)
        # H2O's scores go with its cache: decode evicts by them
        state = H2O_BUDGET * SCORE_BYTES * cfg["attention"]["kv_heads"] * cfg["layers"] if r["name"] == "h2o" else 0
        assert r["kv_transfer_bytes"] == r["kv_bytes_per_token"] * kept + state


def test_the_printed_table_shows_the_figures_of_results_json(case):
    _, _, _, records, rows = case
    for i, r in enumerate(records):
        assert rows["max batch"][i] == str(r["max_batch"]) and rows["batch"][i] == str(r["batch"])
        for label, key, tier, use in (("HBM/socket weights (GiB)", "memory", "hbm", "weights"),
                                      ("HBM/socket KV (GiB)", "memory", "hbm", "kv"),
                                      ("HBM/socket free (GiB)", "memory", "hbm", "free"),
                                      ("prefill node HBM/socket KV (GiB)", "memory_prefill_node", "hbm", "kv")):
            assert float(rows[label][i]) == pytest.approx(r[key][tier][use] / GIB, abs=0.005)
        assert int(rows["KV cache per sequence (tokens)"][i]) == r["kv_len"]
        assert math.isclose(float(rows["KV transfer per request (GB)"][i]), r["kv_transfer_bytes"] / 1e9,
                            abs_tol=0.005)
