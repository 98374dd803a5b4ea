"""A trace served end to end through ``run``: the published Azure format, capping reported (never
silent), SLO fields and rows, and a length above the compiled graphs as one line naming the trace
file and line, exit 2."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

from sn40l_sim.commands.cli import main
from sn40l_sim.report.fields import RESULTS

REPO = Path(__file__).resolve().parents[2]
TRACE = ("TIMESTAMP,ContextTokens,GeneratedTokens\n"
         "2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:46.9951690,396,9\n"
         "2023-11-16 18:15:47.2224670,879,55\n2023-11-16 18:15:51.3910170,91,16\n")


def experiment(tmp_path, workload_extra=""):
    (tmp_path / "azure.csv").write_text(TRACE)
    path = tmp_path / "e.yaml"
    path.write_text(textwrap.dedent(f"""\
        kind: experiment
        name: trace_demo
        hardware: {REPO / 'hw_configs/sn40l_node8.yaml'}
        model: {REPO / 'graphs/llama3_1_8b.yaml'}
        parallel: {{prefill: {{tp: 8}}, decode: {{tp: 8}}}}
        policies: [{{name: full, policy: full}}]
        shape: {{prompt_len: 512}}
        workload: {{kind: trace, path: azure.csv{workload_extra}}}
        slo:
          ttft: {{max_s: 1 s, percentile: 90}}
          tpot: {{max_s: 20 ms, percentile: 90}}
        serving: {{batch: 4, batch_sizes: [4], prefill_lens: [512], max_new_tokens: 32}}
        """))
    return path


def test_a_length_above_the_graphs_names_the_trace_line(tmp_path, capsys):
    path = experiment(tmp_path)
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    # the first request past the graphs: line 2's 44 output tokens against max_new_tokens 32
    assert f"{tmp_path / 'azure.csv'}:2: output_len 44 exceeds max_new_tokens 32" in err and "cap_lengths" in err


def test_capped_trace_is_served_once_per_request_and_reported(tmp_path, capsys):
    path = experiment(tmp_path, ", cap_lengths: true")
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet", "--no-plot"]) == 0
    out = capsys.readouterr().out
    (record,) = json.loads((tmp_path / "out" / "results.json").read_text())
    assert record["throughput"]["requests"] == 4
    assert record["trace_capped"] == {"requests": 2, "prompts": 1, "outputs": 2, "prompt_tokens": 879 - 512,
                                      "output_tokens": (44 - 32) + (55 - 32)}
    assert "note: full: 2 trace requests capped to the compiled graphs" in out
    for label in ("TTFT p50 (s)", "TPOT p90 (ms)", "goodput requests/s (met every SLO)", "SLO attainment"):
        assert label in out
    assert 0 <= record["slo"]["attainment"] <= 1 and record["goodput_requests_per_s"] <= \
        record["throughput"]["requests_per_s"]


def test_the_trace_and_its_attribution_are_kept_with_the_results(tmp_path, capsys):
    # CC-BY 4.0 asks for the Azure trace's attribution beside what is made from it: the results of
    # a run from it used to name neither the trace nor its source
    path = experiment(tmp_path, ", cap_lengths: true")
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet", "--no-plot"]) == 0
    status = json.loads((tmp_path / "out" / "status.json").read_text())
    assert status["trace"].startswith("azure.csv: the Azure LLM inference trace (Azure Public Dataset, CC-BY 4.0")
    assert '"Splitwise: Efficient generative LLM inference using phase splitting", ISCA 2024' in status["trace"]
    assert f"note: requests from {status['trace']}\n" in capsys.readouterr().out
    # the simulator's own format: the file's name alone; a workload that is not a trace: nothing
    (tmp_path / "mine.csv").write_text("arrival_s,prompt_len,output_len\n0,100,8\n0.5,200,4\n")
    path.write_text(path.read_text().replace("path: azure.csv, cap_lengths: true", "path: mine.csv"))
    assert main(["run", str(path), "--out", str(tmp_path / "mine"), "--quiet", "--no-plot"]) == 0
    assert json.loads((tmp_path / "mine" / "status.json").read_text())["trace"] == "mine.csv"
    assert "note: requests from mine.csv\n" in capsys.readouterr().out
    path.write_text(path.read_text().replace("{kind: trace, path: mine.csv}",
                                             "{kind: poisson, rate_per_s: 10, count: 4, output_len: 8}"))
    assert main(["run", str(path), "--out", str(tmp_path / "poisson"), "--quiet", "--no-plot"]) == 0
    assert "trace" not in json.loads((tmp_path / "poisson" / "status.json").read_text())
    assert "requests from" not in capsys.readouterr().out


def test_a_chrome_trace_of_a_trace_run_carries_the_attribution(tmp_path, capsys):
    # --trace writes every request's arrival and lengths, a copy of the Azure trace, possibly outside
    # the output folder whose status.json holds the attribution: the file itself lacked it
    path = experiment(tmp_path, ", cap_lengths: true")
    chrome = tmp_path / "elsewhere" / "serve.json"
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet", "--no-plot", "--trace", str(chrome)]) == 0
    status = json.loads((tmp_path / "out" / "status.json").read_text())
    other = json.loads(chrome.read_text())["otherData"]
    assert other["workload_source"] == status["trace"]
    assert other["workload_source"].startswith("azure.csv: the Azure LLM inference trace (Azure Public Dataset, CC-BY")
    # a workload that is not a trace has no source to name
    path.write_text(path.read_text().replace("{kind: trace, path: azure.csv, cap_lengths: true}",
                                             "{kind: poisson, rate_per_s: 10, count: 4, output_len: 8}"))
    assert main(["run", str(path), "--out", str(tmp_path / "poisson"), "--quiet", "--no-plot", "--trace",
                 str(chrome)]) == 0
    assert "workload_source" not in json.loads(chrome.read_text())["otherData"]


def test_a_sweep_over_a_trace_keeps_its_attribution_too(tmp_path, capsys):
    path = experiment(tmp_path, ", cap_lengths: true")
    path.write_text(path.read_text() + "sweep: {axes: {max_new_tokens: {path: serving.max_new_tokens, values: [16, 32]}}}\n")
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet", "--no-plot", "--jobs", "1"]) == 0
    status = json.loads((tmp_path / "out" / "status.json").read_text())
    assert status["trace"].startswith("azure.csv: the Azure LLM inference trace (Azure Public Dataset, CC-BY 4.0")
    assert f"note: requests from {status['trace']}\n" in capsys.readouterr().out


def test_a_sweep_names_the_trace_its_points_served_not_the_files(tmp_path, capsys):
    # `run azure_conv.yaml --set workload.path=<the hour's trace>` printed and kept the 10-minute
    # trace the file names as the requests' source; an axis over the trace was not followed either
    path = experiment(tmp_path, ", cap_lengths: true")
    (tmp_path / "mine.csv").write_text("arrival_s,prompt_len,output_len\n0,100,8\n0.5,200,4\n")
    path.write_text(path.read_text() + "sweep: {axes: {max_new_tokens: {path: serving.max_new_tokens, values: [16, 32]}}}\n")
    assert main(["run", str(path), "--out", str(tmp_path / "set"), "--quiet", "--no-plot", "--jobs", "1",
                 "--set", f"workload.path={tmp_path / 'mine.csv'}"]) == 0
    out = capsys.readouterr().out
    assert json.loads((tmp_path / "set" / "status.json").read_text())["trace"] == "mine.csv"
    assert "note: requests from mine.csv\n" in out and "azure.csv" not in out
    path.write_text(path.read_text().replace("max_new_tokens: {path: serving.max_new_tokens, values: [16, 32]}",
                                             "trace: {path: workload.path, values: [azure.csv, mine.csv]}"))
    assert main(["run", str(path), "--out", str(tmp_path / "axis"), "--quiet", "--no-plot", "--jobs", "1"]) == 0
    out = capsys.readouterr().out
    trace = json.loads((tmp_path / "axis" / "status.json").read_text())["trace"]
    assert trace.startswith("azure.csv: the Azure LLM inference trace") and trace.endswith("; mine.csv")
    assert "note: requests from mine.csv\n" in out and "note: requests from azure.csv: the Azure" in out


def test_the_prompt_prefill_and_transfer_figures_of_a_trace_are_those_of_its_longest_prompt(tmp_path, capsys):
    # results.md said "prompt length of the point's requests" and "per request": a trace's requests
    # (here 91 to 512 tokens once capped) each have their own; the figures are for prefill_len
    path = experiment(tmp_path, ", cap_lengths: true")
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet", "--no-plot"]) == 0
    (record,) = json.loads((tmp_path / "out" / "results.json").read_text())
    assert record["prefill_len"] == 512 and record["kv_transfer_bytes"] == 512 * record["kv_bytes_per_token"]
    for name in ("prefill_len", "prefill_s", "kv_transfer_bytes"):
        assert "trace" in RESULTS[name].description, name



def test_prefill_len_of_a_trace_is_its_graphs_not_its_longest_prompt(tmp_path, capsys):
    # results.md said "the longest prompt the point serves": a window of one 91-token prompt, none
    # capped, reports prefill_len 512 (the shipped Azure trace's longest prompt is 7,930 against 8,192)
    path = experiment(tmp_path, ", start_s: 1")
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet", "--no-plot"]) == 0
    (record,) = json.loads((tmp_path / "out" / "results.json").read_text())
    assert record["throughput"]["requests"] == 1 and record["trace_capped"]["requests"] == 0
    assert record["prefill_len"] == 512
    assert "not the trace's longest" in RESULTS["prefill_len"].description

def test_compare_names_the_workload_two_runs_served(tmp_path, capsys):
    # the same model, hardware and policy serving the trace three times as fast is another point:
    # its record says which requests it served, and compare's heading names the change
    path = experiment(tmp_path, ", cap_lengths: true")
    base, fast = tmp_path / "base", tmp_path / "fast"
    assert main(["run", str(path), "--out", str(base), "--quiet", "--no-plot"]) == 0
    assert main(["run", str(path), "--out", str(fast), "--quiet", "--no-plot", "--set", "workload.rate_scale=3"]) == 0
    (record,) = json.loads((base / "results.json").read_text())
    assert record["workload"] == "trace, path=azure.csv, cap_lengths=True"
    capsys.readouterr()
    assert main(["compare", str(base), str(fast), "--changed"]) == 0
    out = capsys.readouterr().out
    assert ("full: workload trace, path=azure.csv, cap_lengths=True -> "
            "trace, path=azure.csv, rate_scale=3.0, cap_lengths=True") in out
    assert "the same model, hardware and policy" not in out


def test_arrivals_later_than_the_serving_clock_counts_are_refused_by_check_and_run(tmp_path, capsys):
    # the trace's 4.7 s at rate_scale 1e-6 arrive over 4.7e6 s, within the clock; a trace of 1e6 s,
    # or a Poisson rate of 1e-6 over 20,000 requests, arrived past the 64-bit cycles the serving
    # loop counts in: run stopped with an OverflowError traceback after the steps were timed, and
    # check said ok
    path = experiment(tmp_path, ", cap_lengths: true, rate_scale: 1e-6")
    (tmp_path / "azure.csv").write_text(TRACE + "2023-11-27 18:15:51.3910170,91,16\n")   # 11 days on
    for command in (["check", str(path)], ["run", str(path), "--out", str(tmp_path / "out"), "--quiet"]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err
        assert f"{path}:8: workload: the last request arrives 9.5e+11 s after the serve starts" in err
    poisson = path.read_text().replace("{kind: trace, path: azure.csv, cap_lengths: true, rate_scale: 1e-6}",
                                       "{kind: poisson, rate_per_s: 1e-6, count: 20000, output_len: 8}")
    path.write_text(poisson)
    assert main(["check", str(path)]) == 2
    assert "the last request arrives 1.99e+10 s after the serve starts" in capsys.readouterr().err
    # a rate search's slowest probe, its low end, arrives that late at a rate it may pass: refused there
    path.write_text(poisson.replace("rate_per_s: 1e-6, count: 20000", "rate_per_s: 1, count: 2000")
                    + "rate_search: {low_per_s: 1e-6, high_per_s: 10}\n")
    assert main(["check", str(path)]) == 2
    assert ":13: rate_search.low_per_s: at the search's low end, the last request arrives 2.02e+09 s" in \
        capsys.readouterr().err


def test_a_count_of_batch_arriving_later_than_the_serving_clock_is_refused_by_check_as_by_run(tmp_path, capsys):
    # count: batch makes as many requests a round as decode slots (4 here): check left their last
    # arrival to run, which refused it once the steps were timed, while check said ok
    path = experiment(tmp_path)
    fixed = "{kind: fixed, count: batch, rounds: 300, interval_s: 1e6, output_len: 8}"
    path.write_text(path.read_text().replace("{kind: trace, path: azure.csv}", fixed))
    for command in (["check", str(path)], ["run", str(path), "--out", str(tmp_path / "out"), "--quiet"]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err
        assert f"{path}:8: workload: the last request arrives 1.2e+09 s after the serve starts" in err
    # 4 x 100 requests arrive within the clock's 7.2e8 s: both accept it
    path.write_text(path.read_text().replace("rounds: 300", "rounds: 100"))
    assert main(["check", str(path)]) == 0
    # with batch: max, at least the smallest compiled batch's slots arrive: 8 x 100 arriving 1e6 s apart pass it
    path.write_text(path.read_text().replace("batch: 4, batch_sizes: [4]", "batch: max, batch_sizes: [8, 16]"))
    assert main(["check", str(path)]) == 2
    assert "the last request arrives 7.99e+08 s after the serve starts" in capsys.readouterr().err
