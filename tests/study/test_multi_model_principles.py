"""Several models on one node against first principles, through ``run`` (docs/validation.md,
"Several models on one node against first principles"): a model that draws every request is its
single-model run but for the first copy of its weights; a switch waits for its bytes over the copy
bandwidth and nothing else; the node's time is its models' steps and prefills, its copies and its
configuration loads, nothing more."""
from __future__ import annotations

import csv
import json
import math
import textwrap
from pathlib import Path

import pytest

from sn40l_sim.commands.cli import main

REPO = Path(__file__).resolve().parents[2]
M8 = REPO / "graphs/llama3_1_8b.yaml"
HEAD = f"""\
    kind: experiment
    name: mm_principles
    hardware: {REPO / 'hw_configs/sn40l_node8.yaml'}
    model: {M8}
    parallel: {{prefill: {{tp: 8}}, decode: {{tp: 8}}}}
    policies: [{{name: full, policy: full}}]
    shape: {{prompt_len: 512}}
    workload: {{kind: poisson, rate_per_s: RATE, count: 30, output_len: {{dist: uniform, low: 1, high: 16}}}}
    serving: {{mode: colocated, batch_sizes: [4], prefill_lens: [512], max_new_tokens: 16BATCH}}
"""


def write(tmp_path: Path, name: str, rate: float, section: str = "") -> Path:
    """The experiment; without a multi_model ``section``, one 8B at the batch the entries give."""
    path = tmp_path / f"{name}.yaml"
    head = textwrap.dedent(HEAD).replace("RATE", str(rate)).replace("BATCH", "" if section else ", batch: 4")
    path.write_text(head + textwrap.dedent(section))
    return path


def run(path: Path, *extra: str) -> tuple[list[dict], dict[str, dict[int, dict]]]:
    out = path.with_suffix("")
    assert main(["run", str(path), "--out", str(out), "--requests", str(out / "requests.csv"), "--quiet",
                 "--no-plot", *extra]) == 0
    rows: dict[str, dict[int, dict]] = {}
    with open(out / "requests.csv") as f:
        for row in csv.DictReader(f):
            rows.setdefault(row["point"], {})[int(row["request"])] = row
    return json.loads((out / "results.json").read_text()), rows


@pytest.mark.filterwarnings("ignore:.*no request of the workload")
def test_a_model_that_draws_every_request_is_its_single_model_run_but_for_its_first_copy(tmp_path):
    # the other model (a 70B that fits beside it) draws none of the 30 requests: nothing switches
    # after the first copy of the 8B's weights, so every step, prefill and configuration load is
    # the single-model co-located loop's, shifted by at most that copy
    single, single_rows = run(write(tmp_path, "single", 20))
    section = f"""\
        multi_model:
          models:
            - {{name: only, model: {M8}, share: 0.999999, batch: 4}}
            - {{name: idle, model: {REPO / 'graphs/llama3_1_70b.yaml'}, share: 0.000001, batch: 4}}
        """
    multi, multi_rows = run(write(tmp_path, "multi", 20, section))
    alone = single_rows["full"]
    assert len(multi) == 3 and {r["multi_model"]["served_model"] for r in multi} == {"only"}
    for record in multi:
        mm = record["multi_model"]
        assert mm["loads"] == mm["switches"] == 1
        for key in ("decode_step_s", "prefill_s", "decode_switch_load_s", "memory", "batch"):
            assert record[key] == single[0][key], key
        # the one copy: the 8B's weights (1.87 GiB, 2.01 GB, a socket, each socket at 80 GB/s: 25.1 ms)
        copy_s = mm["weight_bytes"] / mm["copy_bytes_per_s"]
        assert mm["weight_bytes"] == record["memory"]["hbm"]["weights"] * record["sockets"]
        assert copy_s == pytest.approx(mm["switch_time_s"], abs=1e-9) == pytest.approx(0.02510, abs=1e-5)
        rows = multi_rows[record["name"]]
        assert sorted(rows) == sorted(alone) == list(range(30))
        shifts = {i: float(rows[i]["last_token_s"]) - float(alone[i]["last_token_s"]) for i in rows}
        first = min(rows, key=lambda i: float(rows[i]["arrival_s"]))
        assert float(rows[first]["prefill_start_s"]) - float(alone[first]["prefill_start_s"]) == \
            pytest.approx(copy_s, abs=1e-9)
        # the node's work is the same, begun one copy later: the run ends at most that much later;
        # a request can move more (the first one's later tokens wait behind prefills that came
        # in meanwhile: +55 ms)
        end = [max(float(r["last_token_s"]) for r in table.values()) for table in (rows, alone)]
        assert 0 <= end[0] - end[1] <= copy_s + 1e-9
        # and one moves earlier only where the later start held a prefill back: a prefill blocks the
        # decode steps only while a slot is free (serving/loop.py, co-located), so with the first
        # request still decoding the slots fill, and a prefill run before the request finished in
        # the single-model run waits for it here (at 20 requests/s: request 1's 3 tokens end
        # 9.5 ms sooner, beside request 0, while request 4's prefill waits for their slots)
        for i in (i for i, s in shifts.items() if s < -1e-9):
            assert any(float(alone[j]["prefill_start_s"]) < float(alone[i]["last_token_s"])
                       and float(rows[j]["prefill_start_s"]) >= float(rows[i]["last_token_s"]) for j in rows if j != i)
        # once the node has caught up, a request's times are the single-model run's to the cycle
        assert sum(abs(s) < 1e-12 for s in shifts.values()) >= 20


def test_switches_wait_for_their_bytes_over_the_copy_bandwidth_and_the_node_time_adds_up(tmp_path):
    # HBM for one 8B model at a time (2.75 GiB a socket), both saturated (30 requests in 30 ms):
    # every switch copies the model's weights (and the KV written back when it was evicted);
    # batch_by_model and prewarm stay 20 ms on a model while the other waits
    section = f"""\
        multi_model:
          models:
            - {{name: a, model: {M8}, share: 0.5, batch: 4}}
            - {{name: b, model: {M8}, share: 0.5, batch: 4}}
          schedulers: [on_demand, batch_by_model, prewarm]
          quantum_s: 20 ms
        """
    records, _ = run(write(tmp_path, "mm", 1000, section),
                     "--set", "hardware.socket.memory.hbm.capacity_bytes_per_unit=2.75 GiB")
    for scheduler in ("on_demand", "batch_by_model", "prewarm"):
        pair = [r for r in records if r["multi_model"]["scheduler"] == scheduler]
        mm = pair[0]["multi_model"]
        assert 2 * max(r["multi_model"]["fast_bytes"] for r in pair) > mm["fast_capacity_bytes"] >= mm["peak_fast_bytes"]
        loads = sum(r["multi_model"]["loads"] for r in pair)
        assert mm["copied_bytes"] == sum(r["multi_model"]["loads"] * r["multi_model"]["weight_bytes"] for r in pair) \
            + mm["written_back_bytes"]
        copy_s = (mm["copied_bytes"] + mm["written_back_bytes"]) / mm["copy_bytes_per_s"]
        if scheduler == "prewarm":   # nothing prewarmed fits beside the running model: the same waits
            assert mm["switch_time_s"] <= copy_s + 2 * loads / 1.6e9
        else:   # each copy and write-back rounded up to a whole cycle
            assert mm["switch_time_s"] == pytest.approx(copy_s, abs=2 * loads / 1.6e9)
        assert loads == mm["switches"] > 2
        # the node computes, copies or loads configurations, never idles, while requests wait
        busy = sum(r["throughput"]["decode_steps"] * r["decode_step_s"] + r["throughput"]["requests"] * r["prefill_s"]
                   for r in pair)
        span = pair[0]["throughput"]["makespan_s"]
        assert busy + mm["switch_time_s"] + mm["graph_switch_time_s"] == pytest.approx(span, rel=1e-6)
        for r in pair:   # a model's tokens per second of its own steps: at most its slots a step
            tokens_per_step = r["throughput"]["output_tokens"] - r["throughput"]["requests"]
            assert tokens_per_step <= r["batch"] * r["throughput"]["decode_steps"]
            assert math.isclose(r["decode_step_s"], pair[0]["decode_step_s"])


ARKVALE = f"""\
    kind: experiment
    name: mm_store
    hardware: {REPO / 'hw_configs/sn40l_node8.yaml'}
    model: {M8}
    parallel: {{prefill: {{tp: 8}}, decode: {{tp: 8}}}}
    policies: [{{name: arkvale, policy: arkvale, prompt_fraction: {{budget: 0.25}}}}]
    shape: {{prompt_len: 32768}}
    workload: {{kind: poisson, rate_per_s: 20, count: 6, output_len: 4}}
    serving: {{mode: colocated, batch_sizes: [4], prefill_lens: [32768], max_new_tokens: 4}}
    multi_model:
      models:
        - {{name: a, model: {M8}, share: 0.5, batch: 4}}
        - {{name: b, model: {M8}, share: 0.5, batch: 4}}
      schedulers: [batch_by_model]
"""


def test_a_kv_store_each_model_keeps_in_ddr_counts_in_the_slow_tier(tmp_path, capsys):
    # ArkVale keeps each model's offloaded pages in DDR whether or not the model is resident: the
    # node's DDR holds both stores beside both models' weights. The peak left them out (the
    # weights alone), and a DDR too small for them ran without a word
    path = tmp_path / "store.yaml"
    path.write_text(textwrap.dedent(ARKVALE))
    records, _ = run(path)
    mm, sockets, ddr = records[0]["multi_model"], records[0]["sockets"], records[0]["memory"]["ddr"]
    assert ddr["kv_offload"] > 0 and ddr["weights"] == 0
    assert mm["peak_slow_bytes"] >= 2 * (mm["weight_bytes"] + ddr["kv_offload"] * sockets)
    # a DDR with room for the weights and one store: one line naming both, exit 2
    usable = (mm["weight_bytes"] * 2 + ddr["kv_offload"] * sockets) // sockets
    per_unit = (usable + ddr["reserved"]) // 6 + 1
    argv = ["run", str(path), "--out", str(tmp_path / "out2"), "--quiet", "--no-plot",
            "--set", f"hardware.socket.memory.ddr.capacity_bytes_per_unit={per_unit}"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{path}:12: multi_model.models: the models' weights (" in err
    assert f"and the KV they keep there ({2 * ddr['kv_offload'] * sockets / 2**30:.1f} GiB) do not fit" in err


def test_weights_that_do_not_fit_the_slow_tier_together_are_one_line(tmp_path, capsys):
    # two 8B models on 8 sockets: 2 x 14.96 GiB of weights against 8 x (6 x 2.9 - 16) = 11.2 GiB of DDR
    section = f"""\
        multi_model:
          models:
            - {{name: a, model: {M8}, share: 0.5, batch: 4}}
            - {{name: b, model: {M8}, share: 0.5, batch: 4}}
        """
    path = write(tmp_path, "small_ddr", 20, section)
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet", "--no-plot",
                 "--set", "hardware.socket.memory.ddr.capacity_bytes_per_unit=2.9 GiB"]) == 2
    err = capsys.readouterr().err
    assert err == (f"error: {path}:12: multi_model.models: the models' weights (29.9 GiB) do not fit in the node's "
                   "usable DDR (11.2 GiB)\n")
