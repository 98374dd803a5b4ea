"""``check`` is ``run`` without the simulation: what run (or sweep) refuses before simulating, check
refuses with the same line; every shipped file passes check and describe.
"""
from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from sn40l_sim.commands.cli import main

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted([*REPO.glob("hw_configs/*.yaml"), *REPO.glob("graphs/*.yaml"), *REPO.glob("experiments/*.yaml"),
                  *REPO.glob("experiments/reference/*.yaml")])
LLAMA = (REPO / "experiments" / "llama8b_node8.yaml").read_text().replace("../", f"{REPO}/")


def test_every_shipped_file_passes_check(capsys):
    assert main(["check", *map(str, SHIPPED)]) == 0
    out = capsys.readouterr().out
    assert out.count("ok: ") == len(SHIPPED) == 30
    assert "(kind: reference (20 measurements))" in out
    # a template is checked with the models beside it that use it
    assert "kernels_llama.yaml (kind: kernels (checked with llama3_1_405b.yaml, llama3_1_70b.yaml, llama3_1_8b.yaml))" in out
    assert "kernels_deepseek.yaml (kind: kernels (checked with deepseek_r1.yaml))" in out
    # (the one check of deepseek_sweep's 100 runs, ~3 CPU-s: the doctests of check_file and check_sweep
    # show a small sweep)
    assert "deepseek_sweep.yaml (kind: experiment (a sweep of 100 runs))" in out
    assert "kv_policies.yaml (kind: experiment (a sweep of 52 runs))" in out   # a scatter plot with labels
    assert "azure_conv.yaml (kind: experiment (a sweep of 4 runs))" in out     # the Azure trace, read once
    assert "max_rate.yaml (kind: experiment)" in out
    assert "long_context_1m.yaml (kind: experiment)" in out                    # a 1M prompt: max_context raised
    assert "multi_model.yaml (kind: experiment)" in out and "prefix_cache.yaml (kind: experiment (a sweep of 4 runs))" in out


def test_the_shipped_traces_pass_check(capsys):
    traces = sorted((REPO / "experiments" / "traces").glob("*.csv"))
    assert traces and main(["check", *map(str, traces)]) == 0
    assert "azure_llm_2023_conv_10min.csv (kind: trace (2867 requests over 600 s))" in capsys.readouterr().out


@pytest.mark.parametrize("path", [p for p in SHIPPED if "graphs" not in p.parts or "kernels" in p.name],
                         ids=lambda p: p.name)
def test_every_shipped_file_can_be_described(path, capsys):
    """(Model files are described by tests/models/test_describe.py: building their graphs takes a while.)"""
    assert main(["describe", str(path)]) == 0
    assert capsys.readouterr().out.strip()


#: (original text, replacement) -> words of the message both commands print
REFUSED = {
    "unknown KV policy": (("policy: snapstream", "policy: snapstreem"), "policies[1].policy: unknown KV policy"),
    "unknown policy parameter": (("prompt_fraction: {budget: 0.25}", "prompt_fraction: {budget: 0.25}, "
                                  "params: {sinks: 4}"), "policies[1].params.sinks: unknown parameter"),
    "bad policy parameter": (("prompt_fraction: {budget: 0.25}", "params: {budget: 1024, sink: -1}"),
                             "policies[1].params.sink: KV policy 'snapstream': expected an integer >= 0"),
    "TP8 on one socket": (("sn40l_node8.yaml", "sn40l.yaml"), "parallel.prefill: the prefill plan needs 8 sockets"),
    "missing hardware file": (("sn40l_node8.yaml", "sn40l_node9.yaml"), "hardware: hardware file"),
    "missing model file": (("llama3_1_8b.yaml", "llama3_1_9b.yaml"), "model: model file"),
    "output longer than the static graph": (("high: 512", "high: 600"),
                                            "workload.output_len.high: a request: output_len 600 exceeds max_new_tokens"),
    # a lognormal without high is clipped to [low, max_new_tokens]: a low above it draws only low, which
    # check passed and run refused at "workload: request 0" (the high it defaults to is not in the file)
    "lognormal output whose low exceeds the static graph": (
        ("{dist: uniform, low: 64, high: 512}", "{dist: lognormal, median: 200, sigma: 1, low: 600}"),
        "workload.output_len.low: a request: output_len 600 exceeds max_new_tokens 512"),
    "prompt longer than every compiled prefill": (("seed: 7", "seed: 7\n  prefill_lens: [1024]"),
                                                  "serving.prefill_lens: prompt length 32768 exceeds"),
    # a graph compiled for more positions than the model has: a 32K prompt ran on a 1M-token prefill
    # graph and reported its prefill time (a default list is closed by the context; a given one was not)
    "compiled prefill length beyond the model's maximum context": (
        ("seed: 7", "seed: 7\n  prefill_lens: [16384, 1048576]"),
        "serving.prefill_lens: a prompt of 32768 tokens runs on the compiled prefill length 1048576, beyond the "
        "maximum context of llama-3.1-8b, 131072 tokens"),
    "prompt beyond the model's maximum context": (("shape: {prompt_len: 32768}", "shape: {prompt_len: 262144}"),
                                                  "shape.prompt_len: a prompt of 262144 tokens exceeds the maximum "
                                                  "context of llama-3.1-8b, 131072 tokens"),
    # a prompt_fraction budget of such a prompt is past the context too: the refusal named the
    # budget's line ("a snapstream budget of 150000 tokens per sequence exceeds..."), not the prompt
    "prompt beyond the maximum context, its budget a fraction of it": (
        ("  - {name: full, policy: full}\n  - {name: snapstream, policy: snapstream, prompt_fraction: {budget: 0.25}}"
         "\nshape: {prompt_len: 32768}",
         "  - {name: snapstream, policy: snapstream, prompt_fraction: {budget: 0.25}}\nshape: {prompt_len: 600000}"),
        "shape.prompt_len: a prompt of 600000 tokens exceeds the maximum context of llama-3.1-8b, 131072 tokens"),
    "unknown graph option": (("seed: 7", "seed: 7\ngraph_options: {expert_load: all}"),
                             "graph_options: unknown graph option(s) expert_load"),
    "missing trace file": (("kind: poisson\n  rate_per_s: 4\n  count: 48\n  output_len: {dist: uniform, low: 64, "
                            "high: 512}", "kind: trace\n  path: nowhere.csv"), "workload.path: trace file"),
    "no workload": (("workload:\n  kind: poisson", "unused:\n  kind: poisson"), None),
    "empty policy name": (("{name: snapstream, policy", "{name: '', policy"),
                          "policies[1].name: expected a name (results rows and messages show it), got an empty one"),
    "H2O parameter": (("policy: snapstream, prompt_fraction: {budget: 0.25}", "policy: h2o, params: {budget: 1024, "
                       "recent: .nan}"), "policies[1].params.recent: KV policy 'h2o': expected an integer >= 1"),
    "ArkVale store in a tier the node lacks": (
        ("policy: snapstream, prompt_fraction: {budget: 0.25}", "policy: arkvale, prompt_fraction: {budget: 0.25}, "
         "params: {tier: hbm3}"), "policies[1].params.tier: the hardware (SN40L-8) has no memory tier 'hbm3'"),
    "ArkVale recall fraction": (("policy: snapstream, prompt_fraction: {budget: 0.25}", "policy: arkvale, "
                                 "prompt_fraction: {budget: 0.25}, params: {recall_fraction: .inf}"),
                                "policies[1].params.recall_fraction: KV policy 'arkvale': expected a fraction"),
    "integer KV without scales": (("prompt_fraction: {budget: 0.25}", "prompt_fraction: {budget: 0.25}, "
                                   "model_overrides: {kv_dtype: int4}"),
                                  "policies[1].model_overrides.kv_quant: kv_dtype int4 stores integers"),
    "salient fraction of every token": (
        ("prompt_fraction: {budget: 0.25}", "prompt_fraction: {budget: 0.25}, model_overrides: {kv_dtype: int4, "
         "kv_quant: {group: 32, salient: {fraction: 1, dtype: int8}}}"),
        "policies[1].model_overrides.kv_quant.salient.fraction: expected a salient token fraction greater than 0 and "
        "less than 1"),
    # the experiment's own model_overrides are located in the experiment, as a policy entry's are: they
    # named the model file (its kv_heads line, or '(overrides)' without a line) as if it were wrong
    "experiment override breaking a rule across fields": (
        ("seed: 7", "seed: 7\nmodel_overrides: {attention: {heads: 7}}"),
        "e.yaml:30: model_overrides.attention.kv_heads: heads (7) must be divisible by kv_heads (8)"),
    "experiment override of integer KV without scales": (
        ("seed: 7", "seed: 7\nmodel_overrides: {kv_dtype: int4}"),
        "e.yaml:30: model_overrides.kv_quant: kv_dtype int4 stores integers"),
    # a fixed-size cache larger than any sequence of the model can fill: SnapStream reserved 1M-token
    # slots per sequence of Llama-3.1-8B (128K); the other budgeted policies are held to the same limit
    "SnapStream budget above the maximum context": (
        ("prompt_fraction: {budget: 0.25}", "params: {budget: 1000000}"),
        "e.yaml:16: policies[1].params.budget: a snapstream budget of 1000000 tokens per sequence exceeds the "
        "maximum context of llama-3.1-8b, 131072 tokens"),
    "StreamingLLM budget above the maximum context": (
        ("policy: snapstream, prompt_fraction: {budget: 0.25}", "policy: streamingllm, params: {budget: 131073}"),
        "e.yaml:16: policies[1].params.budget: a streamingllm budget of 131073 tokens"),
    "H2O budget above the maximum context": (
        ("policy: snapstream, prompt_fraction: {budget: 0.25}", "policy: h2o, params: {budget: 262144}"),
        "e.yaml:16: policies[1].params.budget: a h2o budget of 262144 tokens"),
    "ArkVale budget above the maximum context": (
        ("policy: snapstream, prompt_fraction: {budget: 0.25}", "policy: arkvale, params: {budget: 262144}"),
        "e.yaml:16: policies[1].params.budget: a arkvale budget of 262144 tokens"),
    "SnapStream ring above the maximum context": (
        ("prompt_fraction: {budget: 0.25}", "params: {sink: 4, recent: 200000, topk: 0}"),
        "e.yaml:16: policies[1].params.recent: a snapstream budget of 200004 tokens"),
    # a fraction of the prompt too small for the policy is the prompt_fraction field's fault, not params'
    "prompt fraction too small for the policy": (
        ("prompt_fraction: {budget: 0.25}", "prompt_fraction: {budget: 0.00001}"),
        "e.yaml:16: policies[1].prompt_fraction.budget:"),
    "experiment override of an unknown field": (
        ("seed: 7", "seed: 7\nmodel_overrides: {layerz: 4}"), "e.yaml:30: model_overrides.layerz: unknown key"),
    # an option that changes nothing on this model is refused, not silently ignored
    "expert loading on a dense model": (
        ("seed: 7", "seed: 7\ngraph_options: {expert_loading: all}"),
        "e.yaml:30: graph_options.expert_loading: model 'llama-3.1-8b' has no MoE layers"),
    # overrides that the model's kernel template cannot build: the template is named, at the overrides
    # a model whose weights alone do not fit a socket needs no graph to be refused: 2,000 layers of
    # Llama-3.1-8B are 874.6 GB of BF16 weights (2000 x 218.1M + 1.05B embedding and head, x 2 B),
    # 101.84 GiB per socket of 8; 400 layers fit 8 decode sockets but not one prefill socket
    "weights alone beyond a decode socket": (
        ("seed: 7", "seed: 7\nmodel_overrides: {layers: 2000}"),
        "e.yaml:30: model_overrides: the model does not fit on the decode node at tp=8, whatever the batch and "
        "prompt: a socket's share of the weights does not fit in HBM per socket: weights 101.84 GiB"),
    "weights alone beyond a prefill socket": (
        ("  prefill: {tp: 8}\n  decode: {tp: 8, attention_dp: 8}\n",
         "  prefill: {tp: 1}\n  decode: {tp: 8, attention_dp: 8}\nmodel_overrides: {layers: 400}\n"),
        "parallel.prefill: the model does not fit on a prefill node at tp=1, whatever the prompt"),
    # an explicit batch whose KV does not fit: check said ok (the batch's memory needs its graph's
    # activations, which check did not build) and run refused it
    "explicit batch beyond the memory": (
        ("batch: max", "batch: 100000"),
        # (over HBM and DDR together, named by what is over HBM, where the KV must stay)
        "e.yaml:27: serving.batch: a batch of 100000 does not fit (largest compiled batch that fits: 64): decode "
        "batch 100000 does not fit in HBM per socket: weights 1.87 GiB + kv "),
    "explicit batch beyond HBM, within DDR": (
        ("batch: max", "batch: 128"),
        "e.yaml:27: serving.batch: a batch of 128 does not fit (largest compiled batch that fits: 64): decode batch "
        "128 does not fit in HBM per socket: weights 1.87 GiB + kv 65.00 GiB"),
    "experiment override the template cannot build": (
        # (every layer MoE: the dense FFN width goes, or it is refused as unused before the template)
        ("seed: 7", "seed: 7\nmodel_overrides: {dense_ffn: null, moe: {routed_experts: 8, experts_per_token: 2, "
         "expert_ffn: 1024, shared_experts: 0}}"),
        "e.yaml:30: model_overrides: the model's kernel template"),
}


@pytest.mark.parametrize("case", REFUSED, ids=list(REFUSED))
def test_check_refuses_what_run_refuses_with_the_same_line(tmp_path, capsys, case):
    (old, new), words = REFUSED[case]
    assert old in LLAMA
    path = tmp_path / "e.yaml"
    path.write_text(LLAMA.replace(old, new))
    if words is None:  # no workload: a map experiment, which check accepts and run refuses
        path.write_text(LLAMA.replace(old, new).replace("unused:\n  kind: poisson\n  rate_per_s: 4\n  count: 48\n"
                                                        "  output_len: {dist: uniform, low: 64, high: 512}\n", ""))
        assert main(["check", str(path)]) == 0 and "no workload: for map" in capsys.readouterr().out
        assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 2
        assert "workload: run needs a workload section" in capsys.readouterr().err
        return
    lines = []
    for argv in (["check", str(path)], ["run", str(path), "--out", str(tmp_path / "out"), "--quiet"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1, err
        lines.append(err)
    assert lines[0] == lines[1] and words in lines[0], lines
    assert not (tmp_path / "out" / "results.json").exists()


def test_a_point_that_does_not_fit_is_named_when_the_others_may(tmp_path, capsys):
    """Batch 128 fits SnapStream's 8K cache but not the full 32K one: the refusal named no point, and
    "a batch of 128 does not fit (largest compiled batch that fits: 64)" read as true of both."""
    path = tmp_path / "e.yaml"
    path.write_text(LLAMA.replace("batch: max", "batch: 128"))
    for argv in (["check", str(path)], ["run", str(path), "--out", str(tmp_path / "out"), "--quiet"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.endswith(" (point full)\n") and err.count("\n") == 1, err


def test_an_explicit_batch_that_fits_passes_check_and_runs(tmp_path, capsys):
    """The batch's memory check builds its graph: a batch that fits (not a compiled power of two)
    still passes, and run serves it at that batch."""
    path = tmp_path / "e.yaml"
    path.write_text(LLAMA.replace("batch: max", "batch: 7").replace("count: 48", "count: 4"))
    assert main(["check", str(path)]) == 0, capsys.readouterr().err
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet", "--no-plot"]) == 0
    import json
    assert [r["batch"] for r in json.loads((tmp_path / "out" / "results.json").read_text())] == [7, 7]


def test_a_budget_is_held_to_the_effective_models_maximum_context(tmp_path, capsys):
    """A long-context variant (model_overrides raising max_context) takes a budget the base model refuses."""
    path = tmp_path / "e.yaml"
    # 200,000 tokens: past the base model's 131,072, and a slot (24.4 GiB of Llama-3.1-8B's cache on
    # one socket) that fits beside the weights, which check now places as run does (1,000,000 did not)
    for budget, status in ((200000, 0), (1000000, 2)):
        path.write_text(LLAMA.replace("prompt_fraction: {budget: 0.25}", f"params: {{budget: {budget}}}")
                        .replace("seed: 7", "seed: 7\nmodel_overrides: {max_context: 1048576}"))
        assert main(["check", str(path)]) == status
        err = capsys.readouterr().err
        assert "maximum context" not in err, err
    assert "no compiled batch size fits, not even 1" in err, err
    path.write_text(LLAMA.replace("prompt_fraction: {budget: 0.25}", "params: {budget: 200000}"))
    assert main(["check", str(path)]) == 2
    assert "exceeds the maximum context of llama-3.1-8b, 131072 tokens" in capsys.readouterr().err


LONG = (REPO / "experiments" / "long_context_1m.yaml").read_text().replace("../", f"{REPO}/")


SET = "(model_overrides.max_context sets the maximum to 1048576; this needs at least %d)"


@pytest.mark.parametrize("changes, words", [
    ({"prompt_len: 1048320,": "prompt_len: 2000000,"},
     "shape.prompt_len: a prompt of 2000000 tokens exceeds the maximum context of deepseek-r1, 1048576 tokens "
     + SET % 2000001),
    ({"prompt_len: 1048320,": "prompt_len: 1048576,"}, "leaving no position for a generated token " + SET % 1048577),
    ({"output_len: 256": "output_len: 300", "max_new_tokens: 256\n": "max_new_tokens: 300\n"},
     "workload.output_len: request 0: a prompt of 1048320 tokens and 300 generated after it make 1048620, beyond the "
     "model's maximum context of 1048576 tokens: at most 256 after such a prompt " + SET % 1048620),
    ({"budget: 131072": "budget: 2000000"},
     "policies[0].params.budget: a snapstream budget of 2000000 tokens per sequence exceeds the maximum context of "
     "deepseek-r1, 1048576 tokens: no sequence can fill it " + SET % 2000000),
])
def test_a_context_refusal_says_what_the_experiments_max_context_is(tmp_path, capsys, changes, words):
    # the long-context variant sets model_overrides.max_context: its refusals told it to set
    # model_overrides: {max_context: N}, which it had; they now say what it sets and what is needed
    text = LONG
    for old, new in changes.items():
        assert old in text
        text = text.replace(old, new)
    path = tmp_path / "e.yaml"
    path.write_text(text)
    lines = []
    for argv in (["check", str(path)], ["run", str(path), "--out", str(tmp_path / "out"), "--quiet"]):
        assert main(argv) == 2
        lines.append(capsys.readouterr().err)
    assert lines[0] == lines[1] and words in lines[0] and "model_overrides: {" not in lines[0], lines
    # without the override, the model file's maximum holds and the message says how to raise it
    path.write_text(LLAMA.replace("prompt_len: 32768", "prompt_len: 200000"))
    assert main(["check", str(path)]) == 2
    assert "(a long-context variant raises the maximum: model_overrides: {max_context: N})" in capsys.readouterr().err


AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
TWO_REQUESTS = AZURE_HEADER + "2023-11-16 18:15:46.5,374,44\n2023-11-16 18:15:48.25,396,109\n"
POISSON = "kind: poisson\n  rate_per_s: 4\n  count: 48\n  output_len: {dist: uniform, low: 64, high: 512}"
SLO = "slo:\n  ttft: {max_s: 2 s, percentile: 90}\n"

#: (trace file content, workload lines after its path, extra sections) -> words of the line both print
TRACE_REFUSED = {
    "output above the graphs": ((AZURE_HEADER + "2023-11-16 18:15:46.5,374,600\n").encode(), "", "",
                                "trace.csv:2: output_len 600 exceeds max_new_tokens 512"),
    "timestamp that is not one": ((AZURE_HEADER + "yesterday,374,44\n").encode(), "", "",
                                  "trace.csv:2: TIMESTAMP: expected a date and time"),
    "trace that is not text": (b"arrival_s,prompt_len,output_len\n0,1,1\xff\n", "", "", "not a text file"),
    "window after the trace": (TWO_REQUESTS.encode(), "\n  start_s: 60", "",
                               "workload.start_s: the window starts 60 s after the first request of "),
    "window between two requests": (TWO_REQUESTS.encode(), "\n  start_s: 0.5\n  duration_s: 1", "",
                                    "workload.duration_s: no request of "),
    "rate search over one request": (TWO_REQUESTS.encode(), "\n  duration_s: 1", SLO + "rate_search: {low_per_s: 1, "
                                     "high_per_s: 8}\n", "a rate search on a trace needs at least two requests"),
}


@pytest.mark.parametrize("case", TRACE_REFUSED, ids=list(TRACE_REFUSED))
def test_check_refuses_what_run_refuses_for_traces_and_rate_searches(tmp_path, capsys, case):
    content, workload, sections, words = TRACE_REFUSED[case]
    (tmp_path / "trace.csv").write_bytes(content)
    assert POISSON in LLAMA
    path = tmp_path / "e.yaml"
    path.write_text(LLAMA.replace(POISSON, f"kind: trace\n  path: trace.csv{workload}") + sections)
    lines = []
    for argv in (["check", str(path)], ["run", str(path), "--out", str(tmp_path / "out"), "--quiet"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err, err
        lines.append(err)
    assert lines[0] == lines[1] and words in lines[0], lines
    assert not (tmp_path / "out" / "results.json").exists()


def test_a_window_after_the_trace_names_the_trace_file_and_its_end(tmp_path, capsys):
    (tmp_path / "trace.csv").write_text(TWO_REQUESTS)
    path = tmp_path / "e.yaml"
    path.write_text(LLAMA.replace(POISSON, "kind: trace\n  path: trace.csv\n  start_s: 60"))
    assert main(["check", str(path)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    at = path.read_text().splitlines().index("  start_s: 60") + 1
    assert line == (f"error: {path}:{at}: workload.start_s: the window starts 60 s after the first request "
                    f"of {tmp_path / 'trace.csv'}, past its last (2 requests, the last 1.75 s after the first): "
                    "expected a start_s of at most 1.75 s")


def test_a_window_starting_at_the_last_request_is_accepted(tmp_path, capsys):
    # the last request arrives 0.2 s after the first (0.3 s - 0.1 s, 0.19999999999999998 s in binary):
    # start_s: 0.2 was refused as "starts 0.2 s ... past its last (... 0.2 s after the first): expected
    # a start_s of at most 0.2 s"
    (tmp_path / "trace.csv").write_text("arrival_s,prompt_len,output_len\n0.1,100,10\n0.2,100,10\n0.3,100,10\n")
    path = tmp_path / "e.yaml"
    path.write_text(LLAMA.replace(POISSON, "kind: trace\n  path: trace.csv\n  start_s: 0.2"))
    assert main(["check", str(path)]) == 0, capsys.readouterr().err


def test_a_window_running_past_the_trace_is_said_and_runs(tmp_path, capsys):
    # the window's 60 s hold the trace's last 1.25 s: a rate read as requests over 60 s would be wrong
    (tmp_path / "trace.csv").write_text(TWO_REQUESTS)
    path = tmp_path / "e.yaml"
    path.write_text(LLAMA.replace(POISSON, "kind: trace\n  path: trace.csv\n  start_s: 0.5\n  duration_s: 60"))
    with pytest.warns(UserWarning) as said:
        assert main(["check", str(path)]) == 0
    (text,) = [str(w.message) for w in said if "workload.duration_s" in str(w.message)]
    assert text == (f"{path}:{path.read_text().splitlines().index('  duration_s: 60') + 1}: workload.duration_s: the "
                    f"window 0.5 s to 60.5 s runs past the last request of {tmp_path / 'trace.csv'} (1.75 s after "
                    "its first): it holds 1 request(s) arriving over 1.25 s, not 60 s")


def test_a_sweep_refuses_an_empty_window_before_running(tmp_path, capsys):
    # each run failed on its own (exit status 1, listed as an error); check refused the file (exit 2)
    (tmp_path / "trace.csv").write_text(TWO_REQUESTS)
    path = tmp_path / "e.yaml"
    text = LLAMA.replace(POISSON, "kind: trace\n  path: trace.csv")
    path.write_text(text + "sweep:\n  axes:\n    workload.start_s: [0, 60]\n")
    out = tmp_path / "out"
    assert main(["sweep", str(path), "--out", str(out), "--quiet", "--no-plot"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    at = path.read_text().splitlines().index("    workload.start_s: [0, 60]") + 1   # the axis that set it
    assert line.startswith(f"error: {path}:{at}: workload.start_s: the window starts 60 s ")
    assert line.endswith("(sweep run full[start_s=60])")
    assert not (out / "results.json").exists() and not list((out / "runs").glob("*.json"))


SWEEP = (REPO / "experiments" / "deepseek_sweep.yaml").read_text()


@pytest.mark.parametrize("old, new, words", [
    ("serving.batch: {start: 1, stop: 512, num: 10, scale: log}", "serving.batch: [1, 0]",
     "sweep.axes.serving.batch[1]: value 0"),
    ("shape.prompt_len: [8192", "policies.snapstream.policy: [snapstreem]\n    shape.prompt_len: [8192",
     "unknown KV policy 'snapstreem'"),
    ("infeasible: skip", "infeasible: maybe", "sweep.infeasible: expected fail or skip"),
    ("plot: {x: batch,", "plot: {where: batch, x: batch,", "sweep.plot.where"),
    ("plot: {x: batch,", "plot: {x: batchez,", "sweep.plot.x"),
    ("plot: {x: batch,", "plot: {label: kv_policy, x: batch,",
     "sweep.plot.label: labels are written beside the points of a scatter plot"),
    ("plot: {x: batch,", "plot: {kind: scatter, label: kv_policys, x: batch,", "sweep.plot.label: 'kv_policys'"),
    ("plot: {x: batch,", "plot: {kind: pie, x: batch,", "sweep.plot.kind: expected line, bar or scatter"),
    ("plot: {x: batch,", "plot: {kind: bar, x: batch,",   # logx: true is the section's own
     "sweep.plot.logx: a bar plot's x axis is categories"),   # the bars drew on a linear axis unsaid
    # a group of columns, or text on y: refused by the plot after every run of the sweep (exit status 2)
    ("y: decode_step_s", "y: latency.tpot_s", "sweep.plot.y: latency.tpot_s holds several values"),
    ("y: decode_step_s", "y: kv_policy", "sweep.plot.y: kv_policy is text, not a number"),
    ("y: decode_step_s", "y: sweep_point", "sweep.plot.y: sweep_point is text, not a number"),
    ("plot: {x: batch,", "plot: {x: memory,", "sweep.plot.x: memory holds several values"),
    ("plot: {x: batch,", "plot: {x: kv_policy,",   # the section's logx: true
     "sweep.plot.x: kv_policy is text, not a number: a logarithmic x axis"),
    ("plot: {x: batch, y: decode_step_s, hue: [kv_policy, prefill_len], logx: true}",
     "plot: {x: kv_policy, y: decode_step_s, hue: [prefill_len], kind: scatter}",
     "sweep.plot.x: kv_policy is text, not a number: a scatter plot places points by their numbers"),
    ("plot: {x: batch,", "plot: {where: {memory: 0}, x: batch,", "sweep.plot.where.memory: memory holds several"),
])
def test_check_refuses_bad_sweep_sections(tmp_path, capsys, old, new, words):
    assert old in SWEEP
    path = tmp_path / "sweep.yaml"
    path.write_text(SWEEP.replace(old, new).replace("base: deepseek_tp16.yaml",
                                                    f"base: {REPO / 'experiments' / 'deepseek_tp16.yaml'}"))
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err, err


def test_a_ring_budget_no_sequence_fills_is_warned_of(tmp_path, capsys):
    # 32K prompts and 512 output tokens (511 fed back): a 65,536-slot ring reserves 32,257 slots that stay empty
    path = tmp_path / "e.yaml"
    (warning,) = check_warnings(path, LLAMA.replace("prompt_fraction: {budget: 0.25}", "params: {budget: 65536}"))
    assert "e.yaml:16: policies[1] (point snapstream): a snapstream cache of 65536 slots" in warning
    assert "but the last token take at most 33279:" in warning
    assert check_warnings(path, LLAMA) == []   # a quarter of the prompt: no warning


def test_a_padded_full_cache_no_sequence_fills_is_told_to_pad_less(tmp_path, capsys):
    # 32K prompts and 512 output tokens: padded to 65,536 slots; the hint said to try "full", which it is
    path = tmp_path / "e.yaml"
    padded = LLAMA.replace("policy: snapstream, prompt_fraction: {budget: 0.25}", "policy: full, params: {pad_to: 65536}")
    (warning,) = check_warnings(path, padded)
    assert "a full cache of 65536 slots" in warning and "take at most 33279:" in warning
    assert warning.endswith("slots no sequence fills (pad_to: 1 costs less)"), warning
    assert check_warnings(path, padded.replace("pad_to: 65536", "pad_to: 1")) == []


def test_a_ring_budget_the_drafts_fill_is_not_warned_of(tmp_path, capsys):
    # 128K prompts, 128 output tokens (127 fed back) and 2 drafts: run reserves 131201 slots for the
    # whole cache, so a ring of 131200 holds less, and one of 131202 leaves a slot empty
    path = tmp_path / "e.yaml"
    table5 = (REPO / "experiments" / "snapstream_table5.yaml").read_text().replace("../", f"{REPO}/")
    table5 = table5.replace("prompt_lens: [131072, 65536, 32768]", "prompt_lens: [131072]")
    fills = table5.replace("prompt_fraction: {budget: 0.25}", "params: {budget: 131200}")
    assert check_warnings(path, fills) == []
    (warning,) = check_warnings(path, fills.replace("131200", "131202"))
    assert "a snapstream cache of 131202 slots" in warning and "(with its 2 drafts' rows) take at most 131201:" in warning


def test_an_observation_window_longer_than_the_prompt_is_warned_of(tmp_path, capsys):
    # 32K prompts: a 64K-query window was clamped to the prompt's 32K queries without a word, so the
    # file said one window and the simulation ran another
    path = tmp_path / "e.yaml"
    entry = "prompt_fraction: {budget: 0.25}"
    (warning,) = check_warnings(path, LLAMA.replace(entry, entry + ", params: {observation_window: 65536}"))
    assert warning.startswith(f"{path}:16: policies[1].params.observation_window (point snapstream): a snapstream "
                              "observation window of 65536 queries, longer than the prompt of 32768 tokens")
    assert "it is simulated as 32768 (write at most that)" in warning
    # a window given for one prompt length is located where it was written
    (warning,) = check_warnings(path, LLAMA.replace(entry, entry + ", per_prompt: [{prompt_len: 32768, params: "
                                                    "{observation_window: 40000}}]"))
    assert "e.yaml:16: policies[1].per_prompt[0].params.observation_window (point snapstream)" in warning
    assert "window of 40000 queries" in warning
    # SnapKV's window is held to the prompt too; a window of the whole prompt is no clamp
    snapkv = "policy: snapkv, params: {topk: 0, observation_window: %d}}"
    (warning,) = check_warnings(path, LLAMA.replace("policy: snapstream, " + entry + "}", snapkv % 32769))
    assert "a snapkv observation window of 32769 queries" in warning
    assert check_warnings(path, LLAMA.replace("policy: snapstream, " + entry + "}", snapkv % 32768)) == []
    assert check_warnings(path, LLAMA.replace(entry, entry + ", params: {observation_window: 32768}")) == []


def test_a_plan_leaving_sockets_of_the_node_idle_is_warned_of(tmp_path, capsys):
    # the 8-socket plan on the 16-socket node: the same numbers as on 8 sockets, said so
    path = tmp_path / "e.yaml"
    messages = check_warnings(path, LLAMA.replace("sn40l_node8.yaml", "sn40l_node16.yaml"))
    assert len(messages) == 2 and all("the other 8 stay idle" in m for m in messages)
    # attention_dp must divide tp: only a larger tp uses the idle sockets
    assert all("(raise tp to 16 to use them;" in m for m in messages)
    assert messages[0].startswith(f"{path}:12: parallel.prefill: the plan uses 8 of the 16 sockets of SN40L-16")
    assert "e.yaml:13: parallel.decode:" in messages[1]
    assert check_warnings(path, LLAMA) == []   # the plan on its own node: no warning


def test_a_plan_splitting_the_query_heads_unevenly_is_warned_of(tmp_path, capsys):
    # Llama-3.1-8B's 32 query heads over 12 sockets (the 16-socket node): the busiest holds 3. The
    # warning names the split the simulator times (the KV head counts assume consecutive runs of 3:
    # 10 hold 3, one 2, one none), not the even one it used to describe ("4 of the 12 hold 2"),
    # under which the KV heads per socket would differ; 32 over 8 or 16 sockets split evenly
    path = tmp_path / "e.yaml"
    uneven = LLAMA.replace("sn40l_node8.yaml", "sn40l_node16.yaml").replace("{tp: 8}", "{tp: 12}") \
        .replace("{tp: 8, attention_dp: 8}", "{tp: 12, attention_dp: 4}")
    messages = [m for m in check_warnings(path, uneven) if "unevenly" in m]
    assert len(messages) == 3   # decode's attention_dp 4 splits attention otherwise (the next test)
    assert messages[0] == (f"{path}:12: parallel.prefill: tp 12 splits the 32 query heads of 'llama-3.1-8b' "
                           "unevenly: the busiest socket holds 3 and sets the pace; as simulated 10 of the 12 "
                           "hold 3, 1 holds 2, 1 holds none (a tp dividing 32 balances them)")
    assert messages[1].startswith(f"{path}:13: parallel.decode: in the projections, tp 12 splits")
    assert not [m for m in check_warnings(path, LLAMA.replace("sn40l_node8.yaml", "sn40l_node16.yaml")
                                          .replace("{tp: 8}", "{tp: 16}")
                                          .replace("{tp: 8, attention_dp: 8}", "{tp: 16, attention_dp: 8}"))
                if "unevenly" in m]


def test_uneven_heads_under_attention_dp_are_warned_of_as_attention_and_the_cache_split_them(tmp_path, capsys):
    # with attention_dp 4 of tp 12 the projections split the heads 12 ways but attention and the
    # cache 3 ways (Ctx.head_ways, kv_share): Llama-3.1-8B's 32 heads run 11, 11 and 10 there, and
    # Llama-3.2-3B's caches are sized for 4 KV heads on the busiest socket; check spoke only of
    # the 12-way split (3 query heads; 2 KV heads "and their caches")
    path = tmp_path / "e.yaml"
    plans = LLAMA.replace("sn40l_node8.yaml", "sn40l_node16.yaml") \
        .replace("{tp: 8, attention_dp: 8}", "{tp: 12, attention_dp: 4}")   # prefill's tp 8 splits both evenly
    messages = [m for m in check_warnings(path, plans) if "unevenly" in m]
    assert messages == [
        f"{path}:13: parallel.decode: in the projections, tp 12 splits the 32 query heads of 'llama-3.1-8b' "
        "unevenly: the busiest socket holds 3 and sets their pace; as simulated 10 of the 12 hold 3, 1 holds 2, "
        "1 holds none (a tp dividing 32 balances them)",
        f"{path}:13: parallel.decode: in attention, tp 12 / attention_dp 4 = 3 ways split the 32 query heads of "
        "'llama-3.1-8b' unevenly: the busiest socket holds 11 and sets attention's pace; as simulated 2 of the 3 "
        "hold 11, 1 holds 10, and 1 of the 3 holds 4 KV heads and their caches, 2 hold 3 (a tp / attention_dp "
        "dividing 32 balances them)"]
    model = REPO / "tests" / "models" / "public_models" / "llama3_2_3b.yaml"
    messages = [m for m in check_warnings(path, plans.replace(f"{REPO}/graphs/llama3_1_8b.yaml", str(model)))
                if "unevenly" in m]
    assert messages == [
        f"{path}:13: parallel.decode: in the K and V projections, tp 12 splits the 8 KV heads of 'llama-3.2-3b' "
        "unevenly (its 24 query heads evenly): the busiest socket holds 2 and sets their pace; as simulated 4 of "
        "the 12 hold 2, 8 hold 1 (a tp dividing 8 or a multiple of 8 balances them)",
        f"{path}:13: parallel.decode: in attention and the cache, tp 12 / attention_dp 4 = 3 ways split the 8 KV "
        "heads of 'llama-3.2-3b' unevenly (its 24 query heads evenly): the busiest socket holds 4 and their "
        "caches and sets attention's pace; as simulated 1 of the 3 holds 4, 2 hold 3 (a tp / attention_dp "
        "dividing 8 or a multiple of 8 balances them)"]
    # attention_dp 3 leaves 4 ways, which split both evenly: only the projections' split is said
    messages = [m for m in check_warnings(path, plans.replace("attention_dp: 4", "attention_dp: 3")) if "unevenly" in m]
    assert len(messages) == 1 and "in the projections, tp 12 splits the 32 query heads" in messages[0]


def test_a_plan_splitting_only_the_kv_heads_unevenly_is_warned_of(tmp_path, capsys):
    # Llama-3.2-3B's 24 query heads over 12 sockets go 2 a socket, but its 8 KV groups of 3 do not:
    # a socket whose 2 heads span two groups holds both KV heads (and both caches), and every
    # socket is sized and timed as that busiest one; check said nothing (the query heads divide)
    path = tmp_path / "e.yaml"
    model = REPO / "tests" / "models" / "public_models" / "llama3_2_3b.yaml"
    uneven = LLAMA.replace("sn40l_node8.yaml", "sn40l_node16.yaml").replace("{tp: 8}", "{tp: 12}") \
        .replace("{tp: 8, attention_dp: 8}", "{tp: 12}").replace(f"{REPO}/graphs/llama3_1_8b.yaml", str(model))
    messages = [m for m in check_warnings(path, uneven) if "unevenly" in m]
    assert len(messages) == 2
    assert messages[0] == (f"{path}:12: parallel.prefill: tp 12 splits the 8 KV heads of 'llama-3.2-3b' "
                           "unevenly (its 24 query heads evenly): the busiest socket holds 2 and their caches "
                           "and sets the pace; as simulated 4 of the 12 hold 2, 8 hold 1 (a tp dividing 8 or "
                           "a multiple of 8 balances them)")
    assert messages[1].startswith(f"{path}:13: parallel.decode: tp 12 splits the 8 KV heads")
    # over 4 or 8 sockets each holds the same KV heads (16 splits the query heads, warned of as such)
    for tp in (4, 8):
        even = uneven.replace("{tp: 12}", f"{{tp: {tp}}}")
        assert not [m for m in check_warnings(path, even) if "unevenly" in m]


def test_an_slo_percentile_written_as_a_fraction_is_warned_of(tmp_path, capsys):
    # percentile: 0.9 bounds the 0.9th percentile: "SLOs hold" came out True with no word, where
    # the 90th percentile the writer most likely meant may be far over the bound
    path = tmp_path / "e.yaml"
    slo = "seed: 7\nslo: {ttft: {max_s: 2 s, percentile: %s}, tpot: {max_s: 100 ms, percentile: 90}}"
    (warning,) = check_warnings(path, LLAMA.replace("seed: 7", slo % "0.9"))
    assert warning.startswith(f"{path}:30: slo.ttft.percentile: 0.9 is the 0.9th percentile")
    assert "(for 90% of requests write 90)" in warning
    assert check_warnings(path, LLAMA.replace("seed: 7", slo % "90")) == []


def test_a_prefill_chunk_between_compiled_lengths_is_warned_of(tmp_path):
    # a chunk of 3,000 runs the 4,096-token graph: it costs what 4,096 tokens do and prefills fewer
    path = tmp_path / "e.yaml"
    colocated = LLAMA.replace("mode: disaggregated", "mode: colocated").replace("  prefill_nodes: 1\n", "")
    chunked = "seed: 7\n  prefill_chunk: %s"
    (warning,) = check_warnings(path, colocated.replace("seed: 7", chunked % "3000"))
    assert warning.startswith(f"{path}:29: serving.prefill_chunk: 3000 is not one of serving.prefill_lens: "
                              "each full chunk runs the 4096-token graph, 1096 of its rows padding")
    assert warning.endswith("a chunk of 2048 or 4096 fills its graph")
    assert check_warnings(path, colocated.replace("seed: 7", chunked % "2048")) == []
    # from the longest prompt up no chunk ends inside a prompt: each runs its prompt's own graph
    assert check_warnings(path, colocated.replace("seed: 7", chunked % "40000")) == []


def test_a_refused_prefill_chunk_is_not_also_warned_of(tmp_path, capsys):
    # a chunk between compiled lengths on disaggregated nodes, or beside prefix caching, is refused:
    # the error alone, not first a warning about its padding (two lines where one was promised)
    path = tmp_path / "e.yaml"
    chunk = "seed: 7\n  prefill_chunk: 3000"
    colocated = LLAMA.replace("mode: disaggregated", "mode: colocated").replace("  prefill_nodes: 1\n", "")
    shared = colocated.replace("  output_len:", "  prefix: {share: 1, tokens: 64}\n  output_len:") \
        .replace("seed: 7", chunk + "\n  prefix_cache: true")
    for text in (LLAMA.replace("seed: 7", chunk), shared):
        path.write_text(text)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert main(["check", str(path)]) == 2
        assert "serving.prefill_chunk: chunked prefill" in capsys.readouterr().err
        assert [str(w.message) for w in caught if issubclass(w.category, UserWarning)] == []


def check_warnings(path: Path, text: str) -> list[str]:
    """The warnings ``check`` gives for an experiment file ``text`` written at ``path`` (it passes)."""
    path.write_text(text)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(["check", str(path)]) == 0
    return [str(w.message) for w in caught if issubclass(w.category, UserWarning)]


def test_a_sweep_combination_the_hardware_refuses_is_located_at_its_axis(tmp_path, capsys):
    # each value passes alone; a full mesh of 8 with 4 links per pair needs 28 ports of 16
    path = tmp_path / "sweep.yaml"
    path.write_text(f"base: {REPO / 'experiments' / 'llama8b_node8.yaml'}\nname: links\nsweep:\n  axes:\n"
                    "    hardware.topology.kind: [ring, full_mesh]\n    hardware.topology.links_per_pair: [1, 4]\n")
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}:5: sweep.axes.hardware.topology.kind: a full_mesh of 8 sockets with 4 "
                          "link(s) per pair needs 28 P2P ports per socket"), err
    assert "<overrides>" not in err and err.count("\n") == 1


def test_a_sweep_point_leaving_sockets_idle_is_warned_of(tmp_path, capsys):
    path = tmp_path / "sweep.yaml"
    path.write_text(f"base: {REPO / 'experiments' / 'llama8b_node8.yaml'}\nname: sockets\nsweep:\n  axes:\n"
                    "    hardware.sockets: [8, 16]\n")
    with pytest.warns(UserWarning) as caught:
        assert main(["check", str(path)]) == 0
    messages = [str(w.message) for w in caught]
    assert len(messages) == 2 and all("(sweep point sockets=16); the other 8 stay idle" in m for m in messages)


def test_a_sweep_point_splitting_the_heads_unevenly_is_warned_of(tmp_path, capsys):
    # the plan of the tests above written as a sweep's axis: check (and run) of the sweep said
    # nothing, where check of the one experiment warns (a sweep expands its runs without assemble)
    base, path = tmp_path / "base.yaml", tmp_path / "sweep.yaml"
    base.write_text(LLAMA.replace("sn40l_node8.yaml", "sn40l_node16.yaml")
                    .replace("{tp: 8, attention_dp: 8}", "{tp: 12, attention_dp: 4}"))
    messages = [m for m in check_warnings(path, f"base: {base}\nname: plans\nsweep:\n  axes:\n"
                                                "    parallel.decode.attention_dp: [1, 4]\n") if "unevenly" in m]
    assert len(messages) == 3
    assert messages[0].startswith(f"{base}:13: parallel.decode (sweep point attention_dp=1): tp 12 splits the 32 "
                                  "query heads of 'llama-3.1-8b' unevenly: the busiest socket holds 3")
    assert messages[1].startswith(f"{base}:13: parallel.decode (sweep point attention_dp=4): in the projections, "
                                  "tp 12 splits")
    assert messages[2].startswith(f"{base}:13: parallel.decode (sweep point attention_dp=4): in attention, tp 12 / "
                                  "attention_dp 4 = 3 ways split the 32 query heads")


def test_describe_names_every_file_an_experiment_reads(capsys):
    assert main(["describe", str(REPO / "experiments" / "multi_model.yaml")]) == 0
    out = capsys.readouterr().out
    for name in ("llama3_1_8b.yaml", "llama3_1_70b.yaml", "llama3_1_405b.yaml", "azure_llm_2023_conv_10min.csv"):
        assert name in out and "MISSING" not in out
    assert main(["describe", str(REPO / "experiments" / "long_context_1m.yaml")]) == 0
    assert "overrides  {'max_context': 1048576}" in capsys.readouterr().out


@pytest.mark.parametrize("infeasible", ["skip", "fail"])
def test_a_sweep_point_whose_weights_do_not_fit_is_skipped_or_refused_as_the_section_says(tmp_path, capsys,
                                                                                         infeasible):
    # check refuses a model too large for a socket without simulating; a sweep that skips what does
    # not fit passes check (sweep lists the point in failures.json), one that fails is refused at it
    path = tmp_path / "sweep.yaml"
    path.write_text(f"base: {REPO / 'experiments' / 'llama8b_node8.yaml'}\nname: layers\nsweep:\n"
                    f"  infeasible: {infeasible}\n  axes:\n    model_overrides.layers: [32, 2000]\n")
    code = main(["check", str(path)])
    err = capsys.readouterr().err
    if infeasible == "skip":
        assert code == 0 and "error" not in err
    else:
        assert code == 2 and err.count("\n") == 1
        assert "the model does not fit on the decode node at tp=8" in err and "(sweep run full[layers=2000])" in err


def test_describe_resolves_a_base_files_paths_from_the_base(tmp_path, capsys):
    # they were resolved from the derived file and shown MISSING, where run and check found them
    derived = tmp_path / "derived.yaml"
    derived.write_text(f"base: {REPO / 'experiments' / 'llama8b_node8.yaml'}\nname: derived\n")
    assert main(["check", str(derived)]) == 0
    capsys.readouterr()
    assert main(["describe", str(derived)]) == 0
    out = capsys.readouterr().out
    assert f"-> {REPO / 'hw_configs' / 'sn40l_node8.yaml'}\n" in out.replace("  ->  ", " -> ")
    assert f"-> {REPO / 'graphs' / 'llama3_1_8b.yaml'}\n" in out.replace("  ->  ", " -> ") and "MISSING" not in out
    assert f"describe them with: python -m sn40l_sim describe {REPO / 'hw_configs' / 'sn40l_node8.yaml'}\n" in out
    # describe takes one file: the model got no command (only the hardware did), and describe, which
    # lists the files without checking them, says what does
    assert f"{' ' * 22}python -m sn40l_sim describe {REPO / 'graphs' / 'llama3_1_8b.yaml'}\n" in out
    assert f"  check it with: python -m sn40l_sim check {derived}" in out


def test_a_trace_of_one_request_is_counted_in_the_singular(tmp_path, capsys):
    trace = tmp_path / "one.csv"
    trace.write_text("arrival_s,prompt_len,output_len\n0.5,128,16\n")
    assert main(["check", str(trace)]) == 0
    assert "(kind: trace (1 request over 0 s))" in capsys.readouterr().out


def test_check_says_what_a_run_wrote_and_shows_a_wide_header_by_its_first_columns(tmp_path, capsys):
    # check results.json said "expected a YAML mapping at the top level, got list", and check
    # results.csv printed the trace reader's error with all 200 columns of the header
    (tmp_path / "results.json").write_text('[{"name": "full", "decode_step_s": 0.08}, {"name": "snapstream"}]')
    header = ["name", "experiment", "kv_policy", *(f"field_{i}" for i in range(200))]
    (tmp_path / "results.csv").write_text(",".join(header) + "\n" + ",".join("1" for _ in header) + "\n")
    (tmp_path / "wide.csv").write_text(",".join(header[3:]) + "\n" + ",".join("1" for _ in header[3:]) + "\n")
    assert main(["check", str(tmp_path / "results.json"), str(tmp_path / "results.csv")]) == 0
    out = capsys.readouterr().out
    assert "results.json (kind: results of run or sweep (2 points; read by compare and plot))" in out
    assert "results.csv (kind: results table of run or sweep (1 row; read by plot))" in out
    assert main(["check", str(tmp_path / "wide.csv")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "got field_0,field_1,field_2" in err and ",... (200 columns)" in err
    assert "field_199" not in err


def test_drafts_never_accepted_are_warned_of(tmp_path, capsys):
    # acceptance 0 with drafts ran without a word: every step runs the MTP module k times and
    # verifies k + 1 rows per sequence for one token, slower than plain decode (the main
    # experiment's full cache at batch 1: 12.68 tokens/s against 15.83 without drafts)
    path = tmp_path / "e.yaml"
    main_experiment = (REPO / "experiments" / "deepseek_tp16.yaml").read_text().replace("../", f"{REPO}/")
    line = next(i for i, text in enumerate(main_experiment.splitlines(), 1) if "speculative:" in text)
    (warning,) = check_warnings(path, main_experiment.replace("acceptance: 0.8}", "acceptance: 0}"))
    assert warning.startswith(f"{path}:{line}: serving.speculative.acceptance: 0 with 2 drafts: every step runs "
                              "the MTP module 2 times and verifies 3 rows per sequence for one token")
    assert check_warnings(path, main_experiment) == []
    assert check_warnings(path, main_experiment.replace("drafts: 2, acceptance: 0.8", "drafts: 0, acceptance: 0")) == []
    (warning,) = check_warnings(path, main_experiment.replace("drafts: 2, acceptance: 0.8", "drafts: 1, acceptance: 0"))
    assert "acceptance: 0 with 1 draft: every step runs the MTP module once and verifies 2 rows" in warning
    # each sweep point with acceptance 0 is warned of, and only those
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(f"base: {REPO / 'experiments' / 'deepseek_tp16.yaml'}\nname: acceptance\nsweep:\n  axes:\n"
                     "    serving.speculative.acceptance: [0, 0.8]\n")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(["check", str(sweep)]) == 0
    messages = [str(w.message) for w in caught if "speculative" in str(w.message)]
    assert messages and all(m.startswith(f"{sweep}:5: serving.speculative.acceptance: 0 with 2 drafts")
                            for m in messages)


def test_checking_a_sweep_builds_each_graph_once_whatever_the_hardware_axis(tmp_path, monkeypatch):
    """The graphs do not depend on the node: a sweep over three HBM bandwidths builds, while it is
    checked, the graphs one point builds (they were built once per point). (What a checked sweep
    still refuses, named with its run, the tests above show.)"""
    from sn40l_sim.study import step_timing
    from sn40l_sim.study.sweep.check import check_sweep
    from sn40l_sim.study.sweep.load import load_sweep
    from tests.study.sweep_helpers import write_experiment

    built = []
    real = step_timing.build_graph
    monkeypatch.setattr(step_timing, "build_graph", lambda *a, **k: built.append(a[1]) or real(*a, **k))

    def graphs_built(values: str) -> list:
        built.clear()
        path = write_experiment(tmp_path, f"axes:\n  hardware.socket.memory.hbm.bytes_per_s_per_unit: {values}\n",
                                name=f"e{len(values)}.yaml")
        assert check_sweep(load_sweep(path)) == 2 * (values.count(",") + 1)
        return list(built)

    one = graphs_built("[1.6 TB/s]")
    assert {s.phase for s in one} == {"prefill", "decode"}
    assert graphs_built("[0.8 TB/s, 1.6 TB/s, 3.2 TB/s]") == one


def test_a_window_too_short_to_hold_a_request_says_how_short(tmp_path, capsys):
    # duration_s: 0.000001 from 0.5 s was refused as holding no request "between 0.5 s and 0.5 s"
    (tmp_path / "trace.csv").write_text(TWO_REQUESTS)
    path = tmp_path / "e.yaml"
    path.write_text(LLAMA.replace(POISSON, "kind: trace\n  path: trace.csv\n  start_s: 0.5\n  duration_s: 0.000001"))
    assert main(["check", str(path)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert f"workload.duration_s: no request of {tmp_path / 'trace.csv'} arrives in the 1e-06 s from 0.5 s after its " \
           "first" in line, line


@pytest.mark.parametrize("params, field", [("{sink: 4, recent: 2, topk: 100}", "params.recent"),
                                           ("{budget: 16}", "params.budget")])   # an eighth of 16: a ring of 2
def test_a_ring_shorter_than_a_verify_steps_rows_is_refused_by_check_and_run(tmp_path, capsys, params, field):
    """DeepSeek-R1 with 2 drafts writes 3 rows per sequence a step into SnapStream's ring, and the
    step's queries read them: check said ok to a ring of 2, and run simulated it."""
    text = (REPO / "experiments" / "deepseek_tp16.yaml").read_text().replace("../", f"{REPO}/")
    path = tmp_path / "ring.yaml"
    path.write_text(text.replace("params: {budget: 32768}", f"params: {params}"))
    lines = []
    for command in (["check", str(path)], ["run", str(path), "--quiet", "--no-plot", "--out", str(tmp_path / "o")]):
        assert main(command) == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        lines.append(line)
    assert lines[0] == lines[1]
    assert f"policies[1].{field}: a snapstream ring of 2 recent tokens cannot hold a verify step's 3 rows" in lines[0]
    assert "expected recent >= 3" in lines[0]
