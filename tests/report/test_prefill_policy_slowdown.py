"""What a KV policy adds to the prefill at the point's prompt (``prefill_policy_slowdown``), beside its
kernels' own cycles (``prefill_policy_overhead``, the paper's definition; docs/validation.md,
"SnapStream's prefill at short prompts").

Llama-3.1-70B on 16 sockets with a 1K prompt and SnapStream's cache a quarter of it
(``experiments/prefix_cache.yaml``'s policy): the two policy kernels take units that the four layer
kernels otherwise keep configured, so the others reload at every layer and the prefill grows by far
more than the policy's kernels take.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sn40l_sim.report.table import side_by_side
from sn40l_sim.study.runner import simulate_experiment

ROOT = Path(__file__).resolve().parents[2]
POLICY_KINDS = ("ring_buffer", "snapkv")


def _experiment(directory: Path, prompt_len: int, snapstream: dict | None = None, trace: Path | None = None) -> Path:
    spec = {
        "kind": "experiment", "name": f"slowdown_{prompt_len}",
        "hardware": str(ROOT / "hw_configs" / "sn40l_node16.yaml"),
        "model": str(ROOT / "graphs" / "llama3_1_70b.yaml"),
        "parallel": {"prefill": {"tp": 16}, "decode": {"tp": 16, "attention_dp": 16}},
        "policies": [{"name": "full", "policy": "full"},
                     snapstream or {"name": "snapstream", "policy": "snapstream", "prompt_fraction": {"budget": 0.25}}],
        "shape": {"prompt_len": prompt_len, "batch": 1, "max_new_tokens": 4},
        "workload": {"kind": "fixed", "count": 1, "output_len": 4},
        "serving": {"batch": 1, "max_new_tokens": 4},
    }
    if trace is not None:
        spec["workload"] = {"kind": "trace", "path": str(trace)}
    path = directory / f"slowdown_{prompt_len}_{trace is not None}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> dict[str, dict]:
    path = _experiment(tmp_path_factory.mktemp("slowdown"), 1024)
    return {r["kv_policy"]: r for r in simulate_experiment(path)[1]}


def test_the_slowdown_is_the_prefill_over_the_same_prompts_without_the_policy(served):
    full, snap = served["full"], served["snapstream"]
    assert full["prefill_policy_slowdown"] == 0.0 and full["prefill_policy_overhead"] == 0.0
    # the full point prefills the same graph without the policy's kernels, on the same prefill node
    assert snap["prefill_len_compiled"] == full["prefill_len_compiled"] == 1024
    assert snap["prefill_policy_slowdown"] == pytest.approx(snap["prefill_cycles"] / full["prefill_cycles"] - 1,
                                                            rel=1e-12)


def test_at_a_short_prompt_the_slowdown_is_more_than_the_policy_kernels_own_cycles(served):
    full, snap = served["full"], served["snapstream"]
    cycles = snap["prefill_kernel_cycles"]
    own = sum(cycles[k] for k in POLICY_KINDS)
    assert snap["prefill_policy_overhead"] == pytest.approx(own / (snap["prefill_cycles"] - own))
    # the other kernels take longer beside the policy's: their configurations are reloaded each layer
    others = {k: v for k, v in cycles.items() if k not in POLICY_KINDS}
    assert sum(others.values()) > 1.1 * sum(full["prefill_kernel_cycles"].values())
    assert snap["prefill_policy_slowdown"] > 2 * snap["prefill_policy_overhead"] > 0


def test_run_prints_both_figures_under_names_that_say_which(served):
    table = side_by_side([served["full"], served["snapstream"]])
    rows = {line[:50].strip(): line[50:].split() for line in table.splitlines()}
    slowdown = served["snapstream"]["prefill_policy_slowdown"]
    assert rows["KV-policy prefill slowdown (%)"] == ["0.00", f"{100 * slowdown:.2f}"]
    assert "KV-policy prefill kernels (% of rest)" in rows


def test_a_steps_only_evaluation_leaves_the_slowdown_empty(tmp_path):
    # validate and calibrate do not time the prompt a second time without the policy
    records = {r["kv_policy"]: r for r in simulate_experiment(_experiment(tmp_path, 1024), serve=False)[1]}
    assert records["snapstream"]["prefill_policy_slowdown"] is None
    assert records["snapstream"]["served_prefill_policy_slowdown"] is None
    assert records["snapstream"]["prefill_policy_overhead"] > 0
    assert records["full"]["prefill_policy_slowdown"] == 0.0


def test_over_a_trace_the_served_slowdown_weighs_each_prompt_at_its_compiled_length(tmp_path):
    # two 512-token prompts and one of 1,024 against the 1,024-token point, SnapStream's budget fixed
    snap = {"name": "snapstream", "policy": "snapstream", "params": {"budget": 256}}
    trace = tmp_path / "trace.csv"
    trace.write_text("arrival_s,prompt_len,output_len\n0,512,4\n1,1000,4\n2,300,4\n")
    cycles = {}
    for prompt in (512, 1024):
        for r in simulate_experiment(_experiment(tmp_path, prompt, snap))[1]:
            cycles[r["kv_policy"], prompt] = r["prefill_cycles"]
    records = {r["kv_policy"]: r for r in simulate_experiment(_experiment(tmp_path, 1024, snap, trace))[1]}
    expected = sum(cycles["snapstream", p] for p in (512, 1024, 512)) / \
        sum(cycles["full", p] for p in (512, 1024, 512)) - 1
    assert records["snapstream"]["served_prefill_policy_slowdown"] == pytest.approx(expected, rel=1e-12)
    # the point's own figure is the 1,024-token prompt's, which the served prompts dilute
    point = cycles["snapstream", 1024] / cycles["full", 1024] - 1
    assert records["snapstream"]["prefill_policy_slowdown"] == pytest.approx(point, rel=1e-12)
    assert records["snapstream"]["served_prefill_policy_slowdown"] < point
    assert records["full"]["served_prefill_policy_slowdown"] == 0.0
