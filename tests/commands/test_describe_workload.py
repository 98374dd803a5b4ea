"""``describe`` of an experiment says what a serving study sets: the requests served (as results'
``workload`` line gives them), the SLOs and the rate search. It listed files, plans and nodes, and
a trace's window, its rate scale, a Poisson rate or the SLOs could only be read in the YAML."""
from __future__ import annotations

from pathlib import Path

from sn40l_sim.commands.describe import describe_experiment

REPO = Path(__file__).resolve().parents[2]


def _lines(text: str, label: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip().startswith(label)]


def test_a_trace_window_and_the_slos_are_described(tmp_path):
    text = (REPO / "experiments" / "azure_conv.yaml").read_text()
    text = text.replace("  path: traces/", "  start_s: 60\n  duration_s: 120\n  rate_scale: 2.5\n  path: traces/")
    text = text.replace("tpot: {max_s: 100 ms, percentile: 90}", "tpot: {max_s: 50 ms, percentile: 99}")
    path = tmp_path / "azure.yaml"
    path.write_text(text.replace("../", f"{REPO}/").replace("traces/", f"{REPO}/experiments/traces/")
                    + "rate_search: {low_per_s: 1, high_per_s: 20, probes: 4}\n")
    out = describe_experiment(path)
    assert _lines(out, "workload") == [f"workload   trace, path={REPO}/experiments/traces/azure_llm_2023_conv_10min.csv, "
                                       "start_s=60.0, duration_s=120.0, rate_scale=2.5"]
    assert _lines(out, "slo") == ["slo        TTFT p90 <= 2 s, TPOT p99 <= 0.05 s"]
    assert _lines(out, "rate search") == ["rate search 1 to 20 requests/s, 4 probes, tolerance 0.02"]


def test_a_poisson_workload_without_slos_is_described():
    out = describe_experiment(REPO / "experiments" / "llama8b_node8.yaml")
    assert _lines(out, "workload") == ['workload   poisson, rate_per_s=4.0, count=48, '
                                       'output_len={"dist":"uniform","low":64,"high":512}']
    assert _lines(out, "slo") == [] and _lines(out, "rate search") == []
