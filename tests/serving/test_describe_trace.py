"""``describe`` of a request trace: its requests, span, rate and token lengths (it refused every
trace with exit 2 and sent the user to ``check``, which prints only the count and the span)."""
from __future__ import annotations

from pathlib import Path

from sn40l_sim.commands.cli import main

REPO = Path(__file__).resolve().parents[2]


def test_a_simulator_trace_is_described_with_its_lengths(tmp_path, capsys):
    trace = tmp_path / "t.csv"
    # 5 requests over 8 s: prompts 100..500 (mean 300, median 300), outputs 10, 10, 10, 10, 60
    trace.write_text("arrival_s,prompt_len,output_len\n0,100,10\n2,200,10\n4,300,10\n6,400,10\n8,500,60\n")
    assert main(["describe", str(trace)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"trace {trace}: 5 requests over 8 s (0.625 requests/s)"
    assert lines[1] == "  source  t.csv"
    assert lines[4].split() == ["prompt", "300", "300", "496", "500"]   # p99 interpolated: 400 + 0.96 x 100
    assert lines[5].split() == ["output", "20", "10", "58", "60"]


def test_the_shipped_azure_trace_matches_its_rows(capsys):
    assert main(["describe", str(REPO / "experiments" / "traces" / "azure_llm_2023_conv_10min.csv")]) == 0
    out = capsys.readouterr().out
    assert ": 2867 requests over 600 s (4.78 requests/s)" in out   # 18:15:46.68 to 18:25:46.65
    assert "Azure Public Dataset, CC-BY 4.0" in out                 # the licence's attribution
    assert out.splitlines()[4].split()[1] == "1,147" and out.splitlines()[4].split()[-1] == "7,930"


def test_a_bad_trace_is_one_line_and_exit_2(tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"arrival_s": 0, "prompt_len": "x", "output_len": 1}\n')
    assert main(["describe", str(trace)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith(f"error: {trace}:1")


def test_an_experiment_with_a_trace_says_how_to_describe_it(capsys):
    assert main(["describe", str(REPO / "experiments" / "multi_model.yaml")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any("python -m sn40l_sim describe " in line and line.endswith("traces/azure_llm_2023_conv_10min.csv")
               for line in lines)


def test_an_azure_trace_with_a_quoted_header_keeps_its_attribution(tmp_path, capsys):
    # the csv reader serves a header written quoted (spreadsheets, pandas' QUOTE_ALL) as the Azure
    # format: its licence's attribution goes with it (here, run's note, status.json, otherData)
    trace = tmp_path / "quoted.csv"
    trace.write_text('"TIMESTAMP","ContextTokens","GeneratedTokens"\n"2023-11-16 18:15:46.5","374","44"\n')
    assert main(["describe", str(trace)]) == 0
    assert "quoted.csv: the Azure LLM inference trace (Azure Public Dataset, CC-BY 4.0" in capsys.readouterr().out
