"""Several models on one node through ``run``: one record per scheduler and model, each request
served once, the tiers within capacity, and bad multi_model sections refused in one line, exit 2."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from sn40l_sim.commands.cli import main
from sn40l_sim.hardware.loader import load_hardware

REPO = Path(__file__).resolve().parents[2]
M8 = REPO / "graphs/llama3_1_8b.yaml"
MODELS = f"""\
          - {{name: small, model: {M8}, share: 0.7, batch: 4}}
          - {{name: other, model: {M8}, share: 0.3, batch: 4}}
"""


def experiment(tmp_path, models=MODELS, serving="mode: colocated, ", extra=""):
    path = tmp_path / "e.yaml"
    path.write_text(textwrap.dedent(f"""\
        kind: experiment
        name: mm_demo
        hardware: {REPO / 'hw_configs/sn40l_node8.yaml'}
        model: {REPO / 'graphs/llama3_1_8b.yaml'}
        parallel: {{prefill: {{tp: 8}}, decode: {{tp: 8}}}}
        policies: [{{name: full, policy: full}}]
        shape: {{prompt_len: 512}}
        workload: {{kind: poisson, rate_per_s: 20, count: 30, output_len: {{dist: uniform, low: 1, high: 16}}}}
        serving: {{{serving}batch_sizes: [4], prefill_lens: [512], max_new_tokens: 16}}
        multi_model:
          models:
        """) + textwrap.indent(textwrap.dedent(models), "    ") + extra)
    return path


def test_each_scheduler_serves_every_request_once_within_the_tiers(tmp_path, capsys):
    path = experiment(tmp_path)
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet", "--no-plot"]) == 0
    # two entries of one model file are two models on the node (two copies of the weights): the
    # heading names both, where it used to print "llama-3.1-8b sharing one node"
    out = capsys.readouterr().out
    assert "mm_demo: small (llama-3.1-8b) + other (llama-3.1-8b) sharing one node on SN40L-8" in out
    records = json.loads((tmp_path / "out" / "results.json").read_text())
    # the memory rows are each model alone (DDR used 0.00 though the node keeps both models' weights
    # there); the node's peaks are printed beside them, and a note says which is which
    assert "note: the HBM/DDR per-socket rows are each model's alone on the node" in out
    slow_row = next(line for line in out.splitlines() if line.startswith("slow tier held at peak, all models"))
    assert slow_row.split()[-1] == f"{records[-1]['multi_model']['peak_slow_bytes'] / 2**30:.1f}"
    assert records[0]["multi_model"]["peak_slow_bytes"] >= 2 * records[0]["multi_model"]["weight_bytes"]
    assert [r["name"] for r in records] == [f"full/{s}/{m}" for s in ("on_demand", "batch_by_model", "prewarm")
                                            for m in ("small", "other")]
    for scheduler in ("on_demand", "batch_by_model", "prewarm"):
        pair = [r for r in records if r["multi_model"]["scheduler"] == scheduler]
        assert sum(r["throughput"]["requests"] for r in pair) == 30
        assert pytest.approx(sum(r["multi_model"]["request_share"] for r in pair)) == 1.0
        mm = pair[0]["multi_model"]
        assert mm["peak_fast_bytes"] <= mm["fast_capacity_bytes"] and mm["peak_slow_bytes"] <= mm["slow_capacity_bytes"]
        assert "requests_served_once" in pair[0]["invariants"]
    # the two 8B models fit in HBM together at 4 slots each: every switch after the first copies is free
    assert all(r["multi_model"]["loads"] == 1 for r in records)


@pytest.mark.parametrize(("models", "serving", "extra", "message"), [
    (MODELS.replace("0.3", "0.2"), "mode: colocated, ", "", "multi_model.models: the shares of the requests add up to 0.9, not 1"),
    (MODELS.replace("name: other", "name: small"), "mode: colocated, ", "", "multi_model.models[1].name: duplicate model name 'small'"),
    (MODELS, "", "", "serving.mode: several models share one co-located node"),
    (MODELS, "mode: colocated, ", "  weights_tier: flash\n", "multi_model.weights_tier: the hardware"),
    (MODELS.replace(str(REPO / "graphs/llama3_1_8b.yaml"), "nope.yaml", 1), "mode: colocated, ", "",
     "multi_model.models[0].model: model file 'nope.yaml' not found"),
    (MODELS, "mode: colocated, ", "  schedulers: [fifo]\n", "multi_model.schedulers[0]"),
    # a serving.batch beside the entries' batches: no model read it, and the run printed batch 4
    (MODELS, "mode: colocated, batch: 2, ", "", "serving.batch: several models on a node take each model's batch "
     "from its entry (multi_model.models[i].batch, default max); remove serving.batch"),
    # an entry's batch that does not fit: it was located at serving.batch, on the serving: line
    (MODELS.replace("share: 0.3, batch: 4", "share: 0.3, batch: 100000"), "mode: colocated, ", "",
     "e.yaml:13: multi_model.models[1].batch: a batch of 100000 does not fit"),
])
def test_bad_multi_model_sections_are_one_line_errors(tmp_path, capsys, models, serving, extra, message):
    path = experiment(tmp_path, models, serving, extra)
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert str(path) in err and message in err


def test_sockets_a_plan_leaves_idle_neither_hold_nor_copy_a_model(tmp_path):
    # tp=8 on the 16-socket node runs every model on the same 8 sockets as the 8-socket node does:
    # the same fast and slow tiers, the same copy bandwidth, so the same switches and time lost
    mm = {}
    for hw in ("sn40l_node8", "sn40l_node16"):
        path = experiment(tmp_path)
        path.write_text(path.read_text().replace("sn40l_node8.yaml", f"{hw}.yaml"))
        out = tmp_path / hw
        assert main(["run", str(path), "--out", str(out), "--quiet", "--no-plot"]) == 0
        mm[hw] = [r["multi_model"] for r in json.loads((out / "results.json").read_text())]
    assert mm["sn40l_node16"] == mm["sn40l_node8"]


def test_the_trace_draws_every_scheduler_and_model(tmp_path):
    # the multi-model records used to skip the runner's result callback, so `run --trace` wrote a
    # trace of no events for such an experiment and said it had written it
    path = experiment(tmp_path)
    trace_path = tmp_path / "mm.json"
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--trace", str(trace_path), "--quiet",
                 "--no-plot"]) == 0
    trace = json.loads(trace_path.read_text())
    records = json.loads((tmp_path / "out" / "results.json").read_text())
    assert trace["otherData"]["points"] == [r["name"] for r in records]
    pids = {e["args"]["name"]: e["pid"] for e in trace["traceEvents"]
            if e["ph"] == "M" and e["name"] == "process_name"}
    for record in records:
        assert f"{record['name']} · decode · socket 0" in pids
        node = pids[f"{record['name']} · node 0"]
        served = {e["args"]["request"] for e in trace["traceEvents"]
                  if e["ph"] == "X" and e["pid"] == node and e["cat"] == "sequence"}
        assert len(served) == record["throughput"]["requests"] > 0


@pytest.mark.parametrize("model_text, words", [
    # a served model whose context is shorter than the prompt: run refused it once it timed that model
    (M8.read_text().replace("max_context: 131072", "max_context: 256"),
     "shape.prompt_len: a prompt of 512 tokens exceeds the maximum context of llama-3.1-8b, 256 tokens"),
    # a file of another kind named as a served model
    ((REPO / "hw_configs/sn40l.yaml").read_text(), "kind: expected 'kind: model' in a model file, got 'socket'"),
    # a served model whose weights alone overflow a socket: check accepted it, and run blamed the
    # experiment's model: line (an 8B model that fits) instead of the served model's entry
    (M8.read_text().replace("layers: 32 ", "layers: 2000 "),
     "multi_model.models[1].model: the model does not fit on the decode node at tp=8, whatever the batch and "
     "prompt"),
], ids=["context shorter than the prompt", "a hardware file", "weights beyond a socket"])
def test_check_refuses_a_served_model_run_refuses_with_the_same_line(tmp_path, capsys, model_text, words):
    (tmp_path / "graphs").mkdir()
    served = tmp_path / "graphs" / "served.yaml"
    served.write_text(model_text.replace("kernels: ", f"kernels: {REPO / 'graphs'}/"))
    path = experiment(tmp_path, MODELS.replace(f"model: {M8}, share: 0.3", f"model: {served}, share: 0.3"))
    lines = []
    for argv in (["check", str(path)], ["run", str(path), "--out", str(tmp_path / "out"), "--quiet"]):
        assert main(argv) == 2
        lines.append(capsys.readouterr().err)
    assert lines[0] == lines[1] and lines[0].count("\n") == 1 and words in lines[0], lines


def test_check_refuses_an_entrys_batch_run_refuses_with_the_same_line(tmp_path, capsys):
    """An entry's explicit batch whose KV does not fit the node: check said ok (it checked each
    served model at the smallest compiled batch) and run refused it at the entry's batch."""
    path = experiment(tmp_path, MODELS.replace("share: 0.3, batch: 4", "share: 0.3, batch: 100000"))
    lines = []
    for argv in (["check", str(path)], ["run", str(path), "--out", str(tmp_path / "out"), "--quiet"]):
        assert main(argv) == 2
        lines.append(capsys.readouterr().err)
    assert lines[0] == lines[1] and lines[0].count("\n") == 1, lines
    assert "multi_model.models[1].batch: a batch of 100000 does not fit" in lines[0] and "(model other)" in lines[0]


def test_a_model_no_request_drew_is_named_in_a_warning_not_dropped_silently(tmp_path):
    # with a share of 0.001 none of the 30 requests (seed 0) asks for `other`: it has no record, and
    # its column used to vanish from the table without a word
    models = MODELS.replace("share: 0.7", "share: 0.999").replace("share: 0.3", "share: 0.001")
    path = experiment(tmp_path, models)
    with pytest.warns(UserWarning) as caught:
        assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet", "--no-plot"]) == 0
    records = json.loads((tmp_path / "out" / "results.json").read_text())
    assert {r["multi_model"]["served_model"] for r in records} == {"small"}
    assert all(r["throughput"]["requests"] == 30 for r in records)
    warned = [str(w.message) for w in caught if "multi_model.models[1]" in str(w.message)]
    assert len(warned) == 1   # once for the run, not once per scheduler
    assert warned[0].startswith(f"{path}:13: ")   # the entry's line
    assert "(other): no request of the workload's 30 drew this model" in warned[0]


def test_a_slow_tier_holding_the_weights_but_not_the_kv_written_back_is_refused_in_one_line(tmp_path, capsys):
    # HBM for one model at a time, so on_demand evicts models with sequences decoding: their KV is
    # written back to DDR beside both models' weights
    hbm = ["--set", "hardware.socket.memory.hbm.capacity_bytes_per_unit=2.75 GiB"]
    path = experiment(tmp_path, extra="  schedulers: [on_demand]\n")
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet", "--no-plot", *hbm]) == 0
    record = json.loads((tmp_path / "out" / "results.json").read_text())[0]
    mm, sockets = record["multi_model"], record["sockets"]
    weights, peak = 2 * mm["weight_bytes"], mm["peak_slow_bytes"]
    assert peak > weights and mm["written_back_bytes"] > 0
    # a DDR with room for the weights and half that KV: the run used to stop as "a bug in the
    # simulator" (invariant memory_within_capacity, exit 3)
    socket = load_hardware(REPO / "hw_configs/sn40l_node8.yaml").socket
    units = socket.memory["ddr"].units_per_die * socket.dies
    usable = (weights + (peak - weights) // 2) // sockets
    per_unit = (usable + record["memory"]["ddr"]["reserved"]) // units + 1
    argv = ["run", str(path), "--out", str(tmp_path / "out2"), "--quiet", "--no-plot", *hbm,
            "--set", f"hardware.socket.memory.ddr.capacity_bytes_per_unit={per_unit}"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and "invariant" not in err
    assert f"{path}:12: multi_model.models: under scheduler on_demand, evicting" in err
    assert " GiB over; give it more room or the models fewer slots (batch)" in err
    assert f"the models' weights ({weights / 2**30:.1f} GiB) and the KV written back" in err


@pytest.mark.parametrize("command", ["run", "sweep"])
def test_a_sweep_of_several_models_is_refused_in_one_line(tmp_path, capsys, command):
    # every point of such a sweep failed as "internal error ValueError: too many values to unpack"
    # (a sweep point gives one record per policy; these runs give one per scheduler and model)
    path = experiment(tmp_path, extra="sweep:\n  axes:\n    quantum: {path: multi_model.quantum_s, values: [0.01, 1]}\n")
    assert main([command, str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err == (f"error: {path}:15: sweep: a sweep with several models on a node is not supported; run each value "
                   "with --set, or remove sweep or multi_model\n")
