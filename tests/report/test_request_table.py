"""``run --requests FILE.csv``: one row per served request, from which every latency, served
throughput and SLO figure of ``results.json`` is recomputed here without the simulator's code (a
user auditing a run had only the summaries: no per-request output existed)."""
from __future__ import annotations

import csv
import json
import textwrap
from pathlib import Path

import numpy as np
import pytest

from sn40l_sim.commands.cli import main
from sn40l_sim.report.request_table import COLUMNS
from sn40l_sim.report.results import rounded

REPO = Path(__file__).resolve().parents[2]
TRACE = ("TIMESTAMP,ContextTokens,GeneratedTokens\n"
         "2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:46.7951690,396,1\n"
         "2023-11-16 18:15:46.8224670,879,55\n2023-11-16 18:15:46.8910170,91,16\n"
         "2023-11-16 18:15:46.9010170,300,40\n2023-11-16 18:15:46.9110170,200,30\n")


def experiment(tmp_path: Path, mode: str) -> Path:
    (tmp_path / "azure.csv").write_text(TRACE)
    path = tmp_path / "e.yaml"
    path.write_text(textwrap.dedent(f"""\
        kind: experiment
        name: requests_demo
        hardware: {REPO / 'hw_configs/sn40l_node8.yaml'}
        model: {REPO / 'graphs/llama3_1_8b.yaml'}
        parallel: {{prefill: {{tp: 8}}, decode: {{tp: 8}}}}
        policies: [{{name: full, policy: full}}, {{name: snap, policy: snapstream, prompt_fraction: {{budget: 0.5}}}}]
        shape: {{prompt_len: 512}}
        workload: {{kind: trace, path: azure.csv, cap_lengths: true}}
        slo:
          ttft: {{max_s: 30 ms, percentile: 50}}
          tpot: {{max_s: 4 ms, percentile: 90}}
        serving: {{mode: {mode}, batch: 2, batch_sizes: [2], prefill_lens: [512], max_new_tokens: 32}}
        """))
    return path


def recomputed(rows: list[dict[str, str]], slo: dict) -> dict:
    """The served figures of one point from its rows alone (numpy's default linear percentiles)."""
    def column(name: str) -> list[float]:
        return [float(r[name]) for r in rows if r[name] != ""]

    def summary(values: list[float]) -> dict:
        p50, p90, p99 = np.percentile(values, [50, 90, 99])
        return {"count": len(values), "max": max(values), "mean": float(np.mean(values)),
                "p50": float(p50), "p90": float(p90), "p99": float(p99)}

    span = max(column("last_token_s")) - min(column("arrival_s"))
    tokens = sum(int(r["tokens"]) for r in rows)
    met = [float(r["ttft_s"]) <= slo["ttft_max_s"] and (r["tpot_s"] == "" or float(r["tpot_s"]) <= slo["tpot_max_s"])
           for r in rows]
    return rounded({
        "latency": {name: summary(column(name)) for name in ("ttft_s", "tpot_s", "e2e_s", "queue_s")},
        "throughput": {"makespan_s": span, "output_tokens": tokens, "requests": len(rows),
                       "output_tokens_per_s": tokens / span, "requests_per_s": len(rows) / span},
        "attainment": sum(met) / len(rows),
        "goodput_requests_per_s": sum(met) / span,
        "goodput_tokens_per_s": sum(int(r["tokens"]) for r, m in zip(rows, met, strict=True) if m) / span,
        "ttft_at_percentile_s": float(np.percentile(column("ttft_s"), slo["ttft_percentile"])),
    })


@pytest.mark.parametrize("mode", ["disaggregated", "colocated"])
def test_every_served_figure_is_recomputed_from_the_request_rows(tmp_path, capsys, mode):
    path = experiment(tmp_path, mode)
    out, table = tmp_path / "out", tmp_path / "out" / "requests.csv"
    assert main(["run", str(path), "--out", str(out), "--quiet", "--no-plot", "--requests", str(table)]) == 0
    assert f"wrote {table}\n" in capsys.readouterr().out
    assert "requests.csv" in json.loads((out / "status.json").read_text())["outputs"]
    with table.open() as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == [name for name, _ in COLUMNS]
    records = json.loads((out / "results.json").read_text())
    assert [r["name"] for r in records] == list(dict.fromkeys(r["point"] for r in rows)) == ["full", "snap"]
    for record in records:
        mine = [r for r in rows if r["point"] == record["name"]]
        assert sorted(int(r["request"]) for r in mine) == list(range(6))
        for r in mine:   # the physical order of a request's stages, and every token it asked for
            assert int(r["tokens"]) == int(r["output_len"]) == min(int(r["output_len"]) + int(r["capped_output_tokens"]), 32)
            assert float(r["arrival_s"]) <= float(r["prefill_start_s"]) < float(r["first_token_s"]) <= float(r["last_token_s"])
            # a transfer only where a prefill node hands a sequence with tokens to come to a decode node
            assert (r["transfer_start_s"] != "") == (mode == "disaggregated" and r["tokens"] != "1")
        again = recomputed(mine, record["slo"])
        assert {k: record["latency"][k] for k in again["latency"]} == again["latency"]
        assert {k: record["throughput"][k] for k in again["throughput"]} == again["throughput"]
        assert record["slo"]["attainment"] == again["attainment"]
        assert record["slo"]["ttft_at_percentile_s"] == again["ttft_at_percentile_s"]
        assert record["goodput_requests_per_s"] == again["goodput_requests_per_s"]
        assert record["goodput_tokens_per_s"] == again["goodput_tokens_per_s"]
    # a one-token request has no TPOT and no decode node: empty cells, not 0
    (single,) = [r for r in rows if r["point"] == "full" and r["tokens"] == "1"]
    assert single["tpot_s"] == "" and single["decode_node"] == ""


def test_requests_is_checked_before_the_run_and_ignored_for_a_sweep(tmp_path, capsys):
    path = experiment(tmp_path, "disaggregated")
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--requests", str(tmp_path / "r.json")]) == 2
    assert "error: --requests: expected a .csv file" in capsys.readouterr().err
    # where it would overwrite the results
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--requests", str(tmp_path / "out" / "results.csv")]) == 2
    assert "expected another file name (e.g. requests.csv)" in capsys.readouterr().err
    assert not (tmp_path / "out" / "results.json").exists()
    path.write_text(path.read_text() + "sweep: {axes: {max_new_tokens: {path: serving.max_new_tokens, values: [16]}}}\n")
    assert main(["run", str(path), "--out", str(tmp_path / "sweep"), "--quiet", "--no-plot", "--jobs", "1",
                 "--requests", str(tmp_path / "r.csv")]) == 0
    assert "note: --requests is ignored for a sweep" in capsys.readouterr().err
    assert not (tmp_path / "r.csv").exists()


def test_the_inter_token_gaps_are_recomputed_from_the_rows_and_the_trace(tmp_path, capsys):
    # the module's docstring sends a user to run --trace for latency.itl_s: a request's decode tokens
    # come at its node's step ends, and under speculative decoding each accepted draft a gap of 0
    # after the token before it, which the rows' token counts give (tokens - 1 - steps)
    path = tmp_path / "e.yaml"
    path.write_text(textwrap.dedent(f"""\
        kind: experiment
        name: gaps
        hardware: {REPO / 'hw_configs/sn40l_node16.yaml'}
        model: {REPO / 'graphs/deepseek_r1.yaml'}
        parallel: {{prefill: {{tp: 16}}, decode: {{tp: 16, attention_dp: 16}}}}
        policies: [{{name: full, policy: full}}]
        shape: {{prompt_len: 1024}}
        workload: {{kind: poisson, rate_per_s: 40, count: 5, output_len: {{dist: uniform, low: 8, high: 40}}}}
        serving: {{mode: disaggregated, prefill_nodes: 2, batch: 2, batch_sizes: [2], prefill_lens: [1024],
                   max_new_tokens: 40, speculative: {{drafts: 2, acceptance: 0.7}}, seed: 3}}
        """))
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out), "--quiet", "--no-plot", "--requests", str(tmp_path / "r.csv"),
                 "--trace", str(tmp_path / "t.json")]) == 0
    capsys.readouterr()
    with (tmp_path / "r.csv").open() as f:
        rows = list(csv.DictReader(f))
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    nodes = {e["pid"]: int(e["args"]["name"].rsplit(" ", 1)[1]) for e in events
             if e["ph"] == "M" and e["name"] == "process_name" and " · decode node " in e["args"]["name"]}
    ends: dict[int, list[float]] = {node: [] for node in nodes.values()}
    for e in events:
        if e["ph"] == "X" and e["cat"] == "decode_step":
            ends[nodes[e["pid"]]].append(round(e["ts"] + e["dur"], 3))
    gaps, zeros = [], 0
    for r in rows:
        if int(r["tokens"]) < 2:
            continue
        join, last = float(r["join_s"]) * 1e6, float(r["last_token_s"]) * 1e6
        # the steps after it joined (the one ending as it joins, to the trace's nanosecond, is not one)
        steps = sorted(t for t in ends[int(r["decode_node"])] if join + 0.001 < t <= last + 0.001)
        gaps += list(np.diff([float(r["first_token_s"]) * 1e6, *steps]) / 1e6)
        zeros += int(r["tokens"]) - 1 - len(steps)
    assert zeros > 0   # drafts were accepted
    gaps += [0.0] * zeros
    p50, p90, p99 = np.percentile(gaps, [50, 90, 99])
    itl = json.loads((out / "results.json").read_text())[0]["latency"]["itl_s"]
    assert itl["count"] == len(gaps)
    for key, value in (("mean", float(np.mean(gaps))), ("max", max(gaps)), ("p50", p50), ("p90", p90), ("p99", p99)):
        assert itl[key] == pytest.approx(value, abs=2e-9), key   # the trace's times are to the nanosecond


def test_request_ids_follow_arrivals_not_the_trace_files_rows(tmp_path, capsys):
    # the simulator's trace format takes its rows in any order; the request column was described as
    # "a trace's rows in file order", where the ids follow arrival (build_requests sorts by it)
    (tmp_path / "unsorted.csv").write_text("arrival_s,prompt_len,output_len\n0.5,100,2\n0.1,200,3\n0.3,300,4\n")
    path = experiment(tmp_path, "disaggregated")
    path.write_text(path.read_text().replace("path: azure.csv, cap_lengths: true", "path: unsorted.csv"))
    table = tmp_path / "requests.csv"
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet", "--no-plot", "--requests", str(table)]) == 0
    with table.open() as f:
        rows = [r for r in csv.DictReader(f) if r["point"] == "full"]
    assert [(r["request"], r["prompt_len"]) for r in rows] == [("0", "200"), ("1", "300"), ("2", "100")]
    assert "arrival order" in dict(COLUMNS)["request"] and "file order" not in dict(COLUMNS)["request"]


@pytest.mark.parametrize("results, got", [(None, "NoneType"), ([{"name": "full"}], "dict in a list"),
                                          ({"name": "full"}, "dict")])
def test_write_requests_names_results_that_are_not_point_results(tmp_path, results, got):
    """simulate_experiment's records given where their PointResults go raised an AttributeError
    ('dict' object has no attribute 'log'), and None a TypeError, from inside."""
    from sn40l_sim.errors import InputError
    from sn40l_sim.report.request_table import write_requests
    with pytest.raises(InputError, match=rf"^results: expected a list of PointResults \(simulate_experiment's "
                                         rf"on_result\), got {got}$"):
        write_requests(tmp_path / "requests.csv", results)
    assert not (tmp_path / "requests.csv").exists()
