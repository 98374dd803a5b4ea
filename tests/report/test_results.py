"""Records, results.json / results.csv, the table and the plot, from points simulated with doubles
(tests/serving/serving_doubles.py), so every number here can be checked by hand."""
from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path
from types import SimpleNamespace as NS

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "serving"))
from serving_doubles import DECODE, PREFILL, FakePlacer, fixed_costs, r1_model  # noqa: E402

from sn40l_sim.hardware.loader import load_hardware  # noqa: E402
from sn40l_sim.kvcache import make_policy  # noqa: E402
from sn40l_sim.report.fields import RESULTS  # noqa: E402
from sn40l_sim.report.metrics import kv_occupancy, throughput  # noqa: E402
from sn40l_sim.report.plot import throughput_plot  # noqa: E402
from sn40l_sim.report.records import build_record  # noqa: E402
from sn40l_sim.report.results import to_csv, to_json, write_results  # noqa: E402
from sn40l_sim.report.table import side_by_side  # noqa: E402
from sn40l_sim.serving.point import PointSetup, simulate_point  # noqa: E402
from sn40l_sim.serving.serving_log import StepLog  # noqa: E402
from sn40l_sim.serving.speculation import Speculation  # noqa: E402
from sn40l_sim.serving.step_table import StepTable  # noqa: E402
from sn40l_sim.serving.workload import Request  # noqa: E402
from sn40l_sim.study.assemble import memory_placer  # noqa: E402
from sn40l_sim.study.experiment import POWERS_OF_TWO_BATCH, POWERS_OF_TWO_PREFILL  # noqa: E402

NODE = load_hardware("hw_configs/sn40l_node16.yaml")
PROMPT = 32768


def simulate(policy_name, params, arrivals=(0.0, 0.1, 0.25, 3.0), mode="disaggregated"):
    policy = make_policy(policy_name, params)
    s = PointSetup(name=policy_name, node=NODE, model=r1_model(mtp=True), policy=policy, prompt_len=PROMPT,
                   prefill_plan=PREFILL, decode_plan=DECODE, batch_sizes=POWERS_OF_TWO_BATCH,
                   prefill_lens=POWERS_OF_TWO_PREFILL, max_new_tokens=16, batch=4,
                   speculation=Speculation(drafts=2, acceptance=0.8), mode=mode)
    clock = NODE.socket.clock_hz

    def requests(slots):
        return [Request(i, round(t * clock), PROMPT, 4 + 3 * i) for i, t in enumerate(arrivals)]

    result = simulate_point(s, requests, fixed_costs(policy), FakePlacer(40 * 2**30, 20 * 2**30))
    return build_record(result, experiment="demo", policy_params=params), result


@pytest.fixture(scope="module")
def records():
    return [simulate("full", {})[0], simulate("snapstream", {"budget": 8192})[0]]


def test_records_have_the_design_fields_with_consistent_values(records):
    full, snap = records
    for rec in records:
        assert set(RESULTS.design) <= set(rec)
        assert rec["decode_tokens_per_s"] == pytest.approx(rec["batch"] / rec["decode_step_s"])
        # two drafts at 80% acceptance: (1 - 0.8^3) / (1 - 0.8) = 2.44 tokens per step
        assert rec["tokens_per_forward"] == pytest.approx(2.44)
        assert (rec["speculative_drafts"], rec["draft_acceptance"]) == (2, 0.8)
        assert rec["decode_tokens_per_s_reported"] == pytest.approx(2.44 * rec["decode_tokens_per_s"])
        assert rec["prefill_len"] == PROMPT and rec["batch"] == 4
        assert rec["ttft_s"] >= rec["prefill_s"]
        assert rec["latency"]["ttft_s"]["p99"] >= rec["latency"]["ttft_s"]["p50"] >= rec["prefill_s"]
        assert sum(rec["prefill_kernel_share"].values()) == pytest.approx(1.0)
        assert list(rec["memory"]) == ["hbm", "ddr"]   # the socket's tiers, fastest first
        for tier in ("hbm", "ddr"):
            row = rec["memory"][tier]
            assert {"weights", "kv", "activations", "reserved", "free", "capacity"} <= set(row)
            assert row["free"] == row["capacity"] - row["weights"] - row["kv"] - row["activations"] - row["reserved"]
        assert rec["throughput"]["output_tokens"] == sum(4 + 3 * i for i in range(4))
    # a full slot holds the rows of the max_new_tokens - 1 tokens fed back and the two drafts after
    # the last of them; the ring does not grow
    assert (full["kv_len"], snap["kv_len"]) == (PROMPT + 16 - 1 + 2, 8192)
    assert full["prefill_policy_overhead"] == 0.0
    # the fake prefill: mha 700 + moe_ffn 300 cycles per token, each SnapStream kernel 10
    assert snap["prefill_policy_overhead"] == pytest.approx(20 / 1000)
    assert snap["memory"]["hbm"]["reserved"] == NODE.socket.memory["hbm"].reserved_bytes
    # the fake decode step reads batch x kv_len tokens at 10 cycles each on top of 40M
    assert full["decode_step_cycles"] == 40_000_000 + 10 * 4 * (PROMPT + 16 - 1 + 2)


def test_json_is_byte_identical_across_runs_and_sorted():
    a = to_json([simulate("snapstream", {"budget": 8192})[0]])
    b = to_json([simulate("snapstream", {"budget": 8192})[0]])
    assert a == b
    data = json.loads(a)
    assert list(data[0]) == sorted(data[0])
    assert "t_s" in json.dumps(data[0]["kv_occupancy"]["series"])  # the series is in the JSON


def test_csv_has_one_row_per_point_with_the_design_fields_first(records):
    text = to_csv(records)
    rows = list(csv.DictReader(io.StringIO(text)))
    header = text.splitlines()[0].split(",")
    assert len(rows) == 2 and [r["name"] for r in rows] == ["full", "snapstream"]
    assert header[:4] == ["name", "model", "hardware", "kv_policy"]
    assert "memory.hbm.kv" in header and "prefill_kernel_share.mha" in header
    assert not any(c.startswith("kv_occupancy.series") for c in header)  # lists stay in the JSON
    assert float(rows[1]["decode_tokens_per_s_reported"]) == pytest.approx(records[1]["decode_tokens_per_s_reported"])


def test_write_results_table_and_plot(tmp_path, records):
    json_path, csv_path = write_results(records, tmp_path / "out")
    assert json.loads(json_path.read_text())[1]["name"] == "snapstream" and csv_path.exists()
    table = side_by_side(records)
    assert table.splitlines()[0].split() == ["full", "snapstream"]
    row = next(line for line in table.splitlines() if line.startswith("max batch"))
    assert row.split()[-2:] == [str(records[0]["max_batch"]), str(records[1]["max_batch"])]
    plot = throughput_plot(records, tmp_path / "out" / "throughput.png")
    assert plot.read_bytes()[:4] == b"\x89PNG"


def test_a_colocated_point_transfers_no_kv(records):
    """docs/results.md: kv_transfer_bytes is 0 when co-located (the node prefills into its own cache),
    so the table's "KV transfer per request (GB)" row does not show a transfer that never happens."""
    rec, _ = simulate("full", {}, mode="colocated")
    assert rec["mode"] == "colocated"
    assert rec["kv_transfer_bytes"] == 0 and rec["kv_transfer_s"] == 0
    assert records[0]["kv_transfer_bytes"] > 0   # a disaggregated point still sends its cache
    row = next(line for line in side_by_side([rec]).splitlines() if line.startswith("KV transfer per request (GB)"))
    assert row.split()[-1] == "0.00"


def test_full_s_static_slot_holds_the_prompt_the_output_and_the_last_drafts(records):
    # results.md said "prompt plus new tokens": 131,072 + 2,048 = 133,120, where run showed 133,122;
    # the last token is never fed back, so it has no row: 131,072 + 2,047 + 2
    full = records[0]
    assert full["kv_len"] == PROMPT + full["max_new_tokens"] - 1 + full["speculative_drafts"] == PROMPT + 17
    assert "last step's drafts" in RESULTS["kv_len"].description


def test_a_colocated_node_s_busy_time_is_split_into_the_roles_results_md_names():
    # a co-located node reported decode 0.48 beside colocated_prefill 0.51 and graph_switch 0.008,
    # roles results.md did not name: decode alone read as the node's busy fraction
    rec, result = simulate("full", {}, mode="colocated")
    nodes = rec["utilisation"]["nodes"]
    assert set(nodes) == {"prefill", "link", "decode", "colocated_prefill", "graph_switch"}
    assert nodes["prefill"] == nodes["link"] == []
    busy = nodes["decode"][0] + nodes["colocated_prefill"][0] + nodes["graph_switch"][0]
    assert nodes["colocated_prefill"][0] > 0 and nodes["decode"][0] > 0 and busy <= 1 + 1e-9
    (field,) = [part for part in RESULTS["utilisation"].parts if part.name == "nodes"]
    assert all(role in field.description for role in nodes)


def test_kv_occupancy_series_stays_under_capacity_and_keeps_the_peak():
    rec, result = simulate("full", {}, arrivals=tuple(0.01 * i for i in range(4)))
    occ = rec["kv_occupancy"]
    assert 0 < occ["peak_fraction"] <= 1 and occ["mean_fraction"] <= occ["peak_fraction"]
    assert max(p["kv_bytes"] for p in occ["series"]) == occ["peak_bytes"]
    assert occ["peak_bytes"] == max(s.kv_bytes for s in result.log.steps)
    assert all(p["slots_in_use"] <= rec["batch"] for p in occ["series"])


def test_kv_occupancy_series_is_every_kth_step_with_the_peak_and_the_last_as_results_md_says():
    # 1,000 steps whose peak (step 555) and last (999) fall between the strided samples: 100 strided
    # samples and those two (results.md said "at most 100 per node"; the runs wrote up to 102)
    steps = StepTable([StepLog(node=0, start=i, end=i + 1, active=1, kv_bytes=1000 if i == 555 else i,
                               slots_in_use=1) for i in range(1000)])
    occ = kv_occupancy(NS(setup=NS(kv_capacity_bytes=2000), steps=steps), clock_hz=1.0)
    ends = [p["t_s"] for p in occ["series"]]
    assert len(ends) == 102 and ends[:3] == [1.0, 11.0, 21.0] and 556.0 in ends and ends[-1] == 1000.0
    (series,) = [part for part in RESULTS["kv_occupancy"].parts if part.name == "series"]
    assert "at most 102 per node" in series.description


def test_kv_occupancy_mean_is_weighted_by_step_time():
    # two steps of one node, 10 and 30 cycles, holding 100 and 300 B of a 1,000 B reservation: the
    # time-weighted mean is 250 B (an unweighted one would be 200)
    steps = StepTable([StepLog(node=0, start=0, end=10, active=1, kv_bytes=100, slots_in_use=1),
                       StepLog(node=0, start=10, end=40, active=2, kv_bytes=300, slots_in_use=2)])
    occ = kv_occupancy(NS(setup=NS(kv_capacity_bytes=1000), steps=steps), clock_hz=10.0)
    assert occ["mean_fraction"] == pytest.approx(0.25) and occ["peak_fraction"] == pytest.approx(0.3)
    assert [(p["t_s"], p["kv_bytes"]) for p in occ["series"]] == [(1.0, 100), (4.0, 300)]


def test_kv_occupancy_mean_counts_step_time_only_as_results_md_says():
    # a node steps for 10 cycles at 400 B, sits idle for 90 and steps 10 more at 400 B: its mean is
    # 0.4 of the 1,000 B over the time steps ran, not 0.08 over the 110-cycle span (results.md said
    # "time-weighted", which read as over the run)
    steps = StepTable([StepLog(node=0, start=0, end=10, active=1, kv_bytes=400, slots_in_use=1),
                       StepLog(node=0, start=100, end=110, active=1, kv_bytes=400, slots_in_use=1)])
    occ = kv_occupancy(NS(setup=NS(kv_capacity_bytes=1000), steps=steps), clock_hz=10.0)
    assert occ["mean_fraction"] == pytest.approx(0.4)
    (mean,) = [part for part in RESULTS["kv_occupancy"].parts if part.name == "mean_fraction"]
    assert "over the time decode steps ran, not over the makespan" in mean.description


def test_a_run_without_decode_steps_has_no_observed_decode_rate():
    # every output one token long: the prefill gives it, no decode step runs; the observed decode
    # rate and the mean filled slots are empty (undefined), not 0 tokens/s and 0 slots
    requests = [NS(request=NS(arrival_cycle=0), generated=1), NS(request=NS(arrival_cycle=5), generated=1)]
    served = throughput(NS(requests=requests, steps=StepTable(), end_cycle=20, span_start=0), clock_hz=10.0)
    assert served["decode_steps"] == 0 and served["output_tokens_per_s"] == pytest.approx(1.0)
    assert served["decode_tokens_per_s_observed"] is None and served["mean_active_slots"] is None
    row = next(csv.DictReader(io.StringIO(to_csv([{"name": "x", "throughput": served}]))))
    assert row["throughput.decode_tokens_per_s_observed"] == row["throughput.mean_active_slots"] == ""


def test_the_memory_record_lists_every_tier_of_the_socket_in_order():
    """A tier defined only in the hardware (a CXL tier added by an override) gets its own row, after
    the others, with its reservation; the KV the experiment lets spill lands in it."""
    from sn40l_sim.hardware.loader import with_overrides

    node = with_overrides(NODE, {"socket.memory.cxl": {
        "units_per_die": 1, "capacity_bytes_per_unit": "512 GiB", "bytes_per_s_per_unit": "30 GB/s",
        "latency_s": "500 ns", "efficiency": 0.75, "reserved_bytes": "1 GiB"}})
    s = PointSetup(name="full", node=node, model=r1_model(), policy=make_policy("full", {}), prompt_len=131072,
                   prefill_plan=PREFILL, decode_plan=DECODE, batch_sizes=POWERS_OF_TWO_BATCH,
                   prefill_lens=POWERS_OF_TWO_PREFILL, max_new_tokens=16, batch=256, may_spill=("activations", "kv"))
    result = simulate_point(s, lambda slots: [], fixed_costs(s.policy), memory_placer(node, s.model, ("hbm", "cxl")))
    record = build_record(result, experiment="demo", policy_params={})
    memory = record["memory"]
    assert list(memory) == ["hbm", "ddr", "cxl"]
    assert memory["cxl"]["kv"] > 0 and memory["ddr"]["kv"] == 0 and memory["cxl"]["reserved"] == 2**30
    assert memory["cxl"]["capacity"] == 2 * 512 * 2**30
    for row in memory.values():
        assert row["free"] == row["capacity"] - row["weights"] - row["kv"] - row["activations"] - row["reserved"]
    assert "memory.cxl.kv" in to_csv([record]).splitlines()[0].split(",")
