"""The highest rate under an SLO: bisection on a workload where attainment falls as the rate rises
(Poisson arrivals of one seed through a first-come-first-served serving loop), the probes
reported, and bad SLO or rate-search sections as one line, exit 2."""
from __future__ import annotations

import json
import textwrap
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from sn40l_sim.commands.cli import main
from sn40l_sim.report.slo import SLO, LatencyTarget, served_slo_fields
from sn40l_sim.serving.loop import ServingSetup, simulate
from sn40l_sim.serving.workload import build_requests
from sn40l_sim.study.experiment import PoissonWorkload
from sn40l_sim.study.rate_search import bisect_rate, prefill_sustained_rate, steady_state_rate

REPO = Path(__file__).resolve().parents[2]
CLOCK = 1e9
#: one prefill node of 0.2 s per prompt, one decode node of 4 slots at 50 ms per step
SETUP = ServingSetup(mode="disaggregated", prefill_nodes=1, decode_nodes=1, slots=4,
                     decode_step_cycles=50_000_000, prefill_cycles=lambda p: 200_000_000,
                     transfer_cycles=lambda p: 1_000_000, cache_tokens=lambda p, g: p + g, kv_bytes_per_token=1,
                     slot_cache_tokens=2048)


def served(rate: float):
    spec = PoissonWorkload(kind="poisson", rate_per_s=rate, count=120, output_len={"dist": "uniform", "low": 2,
                                                                                    "high": 40})
    requests = build_requests(spec, prompt_len=1024, max_new_tokens=64, slots=4, seed=3, clock_hz=CLOCK)
    return requests, simulate(requests, SETUP)


def attainment(rate: float, slo: SLO) -> dict:
    return served_slo_fields(served(rate)[1], CLOCK, slo)["slo"]


SLO_TTFT = SLO(ttft=LatencyTarget(1.0, 90), tpot=LatencyTarget(0.2, 90))


def test_every_request_of_every_probe_finishes_exactly_once():
    for rate in (0.5, 4.0, 12.0):
        requests, log = served(rate)
        assert [r.request.id for r in log.requests] == [r.id for r in requests]
        assert all(r.finish >= r.first_token >= r.request.arrival_cycle for r in log.requests)
        assert [len(r.token_cycles) for r in log.requests] == [r.output_len for r in requests]


def test_the_search_is_monotone_where_attainment_is():
    grid = [0.25 * 1.25**i for i in range(20)]
    holds = [attainment(rate, SLO_TTFT)["holds"] for rate in grid]
    # the workload's property the search relies on: once the SLOs fail, they fail at every higher rate
    assert holds[0] and not holds[-1] and holds == sorted(holds, reverse=True)
    best, bracketed, tried = bisect_rate(lambda r: attainment(r, SLO_TTFT)["holds"], grid[0], grid[-1], probes=12,
                                         tolerance=0.001)
    assert bracketed and best is not None
    # every probe at or below the answer held, every one above failed
    assert all(held == (rate <= best) for rate, held in tried)
    boundary = max(r for r, h in zip(grid, holds, strict=True) if h)
    assert boundary <= best < boundary * 1.25
    # a looser SLO never lowers the highest rate; a tighter one never raises it
    loose = SLO(ttft=LatencyTarget(3.0, 90), tpot=LatencyTarget(0.4, 90))
    tight = SLO(ttft=LatencyTarget(0.5, 90), tpot=LatencyTarget(0.1, 90))
    rates = [bisect_rate(lambda r, s=s: attainment(r, s)["holds"], grid[0], grid[-1], probes=12, tolerance=0.001)[0]
             for s in (tight, SLO_TTFT, loose)]
    assert rates[0] <= rates[1] <= rates[2] and rates[0] < rates[2]


def test_the_ends_of_the_bracket():
    assert bisect_rate(lambda r: False, 1.0, 2.0, probes=5, tolerance=0.01) == (None, True, [(1.0, False)])
    assert bisect_rate(lambda r: True, 1.0, 2.0, probes=5, tolerance=0.01) == (2.0, False, [(1.0, True), (2.0, True)])
    # the tolerance stops the bisection early: [1, 2] halves to 1/16 wide after 4 probes
    assert len(bisect_rate(lambda r: r < 1.3, 1.0, 2.0, probes=20, tolerance=0.07)[2]) == 2 + 4


BASE = textwrap.dedent("""\
    kind: experiment
    name: demo
    hardware: hw.yaml
    model: m.yaml
    policies: [{name: full, policy: full}]
    shape: {prompt_len: 1024}
    workload: {kind: poisson, rate_per_s: 1, count: 10, output_len: 16}
    serving: {max_new_tokens: 16}
    slo:
      ttft: {max_s: 2 s, percentile: 90}
    """)


@pytest.mark.parametrize("old, new, match", [
    ("percentile: 90", "percentile: 150", "slo.ttft.percentile"),
    ("max_s: 2 s", "max_s: -2", "slo.ttft.max_s"),
    ("  ttft: {max_s: 2 s, percentile: 90}\n", "  {}\n", "state at least one SLO"),
    ("max_s: 2 s", "max_s: 2 parsecs", "slo.ttft.max_s"),
    ("slo:", "rate_search: {low_per_s: 2, high_per_s: 1}\nslo:", "low_per_s (2) must be below high_per_s (1)"),
    ("slo:\n  ttft: {max_s: 2 s, percentile: 90}\n", "rate_search: {low_per_s: 1, high_per_s: 2}\n",
     "rate_search: a rate search needs SLOs"),
    ("serving:", "report: {extra_fields: [slo]}\nserving:", "the slo fields come with the experiment's slo: section"),
    ("workload: {kind: poisson, rate_per_s: 1, count: 10, output_len: 16}",
     "workload: {kind: trace, path: t.csv, rate_scale: 0}", "workload.rate_scale"),
])
def test_bad_slo_and_search_sections_are_one_line_exit_2(tmp_path, capsys, old, new, match):
    assert old in BASE
    path = tmp_path / "e.yaml"
    path.write_text(BASE.replace(old, new))
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and str(path) in err and match in err


def test_a_finite_run_above_what_the_slots_sustain_is_told_apart():
    # 4 slots; a request holds one for its transfer and about 20 steps of 50 ms (outputs of 2 to 40)
    _, log = served(0.5)
    sustained = steady_state_rate(SimpleNamespace(log=log, clock_hz=CLOCK))
    held = [(r.finish - r.slot_acquired) / CLOCK for r in log.requests if r.slot_acquired >= 0]
    assert sustained == pytest.approx(4 / (sum(held) / len(held)))
    assert 3.0 < sustained < 5.0
    # a short run at 1.5x that rate still meets loose SLOs: the queue has not grown yet, so the
    # search must not take it (the probe's holds field requires the rate to be sustained)
    loose = SLO(ttft=LatencyTarget(60.0, 90), tpot=LatencyTarget(1.0, 90))
    spec = PoissonWorkload(kind="poisson", rate_per_s=1.5 * sustained, count=30,
                           output_len={"dist": "uniform", "low": 2, "high": 40})
    requests = build_requests(spec, prompt_len=1024, max_new_tokens=64, slots=4, seed=3, clock_hz=CLOCK)
    assert served_slo_fields(simulate(requests, SETUP), CLOCK, loose)["slo"]["holds"]


def _searched_experiment(name: str, high_per_s: int, probes: int) -> str:
    """Llama-3.1-8B on 8 sockets at batch 4, 16-token requests and a loose TTFT SLO (600 s at p90),
    its rate searched from 1 request/s up to ``high_per_s`` in ``probes`` probes."""
    return textwrap.dedent(f"""\
        kind: experiment
        name: {name}
        hardware: {REPO / 'hw_configs' / 'sn40l_node8.yaml'}
        model: {REPO / 'graphs' / 'llama3_1_8b.yaml'}
        parallel: {{prefill: {{tp: 8}}, decode: {{tp: 8, attention_dp: 8}}}}
        policies: [{{name: full, policy: full}}]
        shape: {{prompt_len: 1024}}
        workload: {{kind: poisson, rate_per_s: 1, count: 40, output_len: 16}}
        serving: {{batch: 4, max_new_tokens: 16, prefill_nodes: 4}}
        slo: {{ttft: {{max_s: 600 s, percentile: 90}}}}
        rate_search: {{low_per_s: 1, high_per_s: {high_per_s}, probes: {probes}}}
        """)


def test_the_search_takes_no_rate_above_what_the_decode_slots_sustain(tmp_path):
    # Llama-3.1-8B on 8 sockets at batch 4, loose SLOs that a short run meets far above what 4
    # slots of 16-token requests sustain: the answer stays at or under the sustained rate
    text = _searched_experiment("sustain", 100000, 12)
    path = tmp_path / "e.yaml"
    path.write_text(text)
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet", "--no-plot"]) == 0
    (record,) = json.loads((tmp_path / "out" / "results.json").read_text())
    probes = record["rate_probes"]
    assert all(not p["holds"] for p in probes if p["rate_per_s"] > p["steady_state_rate_per_s"])
    best = next(p for p in probes if p["rate_per_s"] == record["max_rate_per_s"])
    assert best["rate_per_s"] <= best["steady_state_rate_per_s"]
    # without the sustained-rate rule the short run's loose SLO would have held far higher
    assert any(p["rate_per_s"] > p["steady_state_rate_per_s"] and p["attainment"] >= 0.9 for p in probes)
    # the record's served figures are the answer's probe's run (results.md), not the workload's rate
    assert record["goodput_requests_per_s"] == best["goodput_requests_per_s"]
    assert record["slo"]["attainment"] == best["attainment"]


def test_a_probe_that_met_the_slos_above_the_sustained_rate_says_why_it_fails():
    # max_rate.yaml's full cache at 0.988 requests/s: every request met the SLOs in a finite run,
    # above the 0.921 requests/s its 64 slots sustain; the line read "attainment 100.0%, ... SLOs fail"
    from sn40l_sim.commands.run import probe_lines
    record = {"name": "full", "max_rate_per_s": 0.8652, "max_rate_bracketed": True, "rate_probes": [
        {"rate_per_s": 0.8652, "holds": True, "attainment": 1.0, "goodput_requests_per_s": 0.605,
         "steady_state_rate_per_s": 0.9214},
        {"rate_per_s": 0.9883, "holds": False, "attainment": 1.0, "goodput_requests_per_s": 0.6707,
         "steady_state_rate_per_s": 0.9214},
        {"rate_per_s": 2.219, "holds": False, "attainment": 0.32, "goodput_requests_per_s": 0.2279,
         "steady_state_rate_per_s": None}]}
    assert probe_lines([record])[1:] == [
        "  probe 0.8652 requests/s: attainment 100.0%, goodput 0.605 requests/s, SLOs hold",
        "  probe 0.9883 requests/s: attainment 100.0%, goodput 0.6707 requests/s, SLOs fail "
        "(above the 0.9214 requests/s the decode slots sustain)",
        "  probe 2.219 requests/s: attainment 32.0%, goodput 0.2279 requests/s, SLOs fail"]


def test_the_prefilling_nodes_bound_the_sustained_rate():
    # one prefill node at 0.2 s a prompt serves at most 5 requests/s, whatever the decode slots
    requests, log = served(8.0)
    assert prefill_sustained_rate(SimpleNamespace(log=log, clock_hz=CLOCK)) == pytest.approx(5.0)
    two = simulate(requests, replace(SETUP, prefill_nodes=2))
    assert prefill_sustained_rate(SimpleNamespace(log=two, clock_hz=CLOCK)) == pytest.approx(10.0)
    # co-located, a node also runs the decode steps: a request costs its 0.2 s of prefill and its
    # output_len - 1 tokens' share of 50 ms steps of 4 slots (the fewest steps its tokens take)
    colocated = simulate(requests, replace(SETUP, mode="colocated", prefill_nodes=0))
    per_request_s = 0.2 + sum(r.output_len - 1 for r in requests) * 0.05 / 4 / len(requests)
    assert prefill_sustained_rate(SimpleNamespace(log=colocated, clock_hz=CLOCK)) == pytest.approx(1 / per_request_s)


def test_the_search_takes_no_rate_above_what_the_prefill_node_sustains(tmp_path):
    # Llama-3.1-8B on 8 sockets: one prefill node prefills a 4K prompt in about 57 ms (17.4
    # requests/s); 300 requests at 1.7 times that still met a 5 s TTFT SLO at p90, and the search
    # answered 29.3 requests/s, a rate at which the prompts' queue grows without bound
    text = textwrap.dedent(f"""\
        kind: experiment
        name: prefill_bound
        hardware: {REPO / 'hw_configs' / 'sn40l_node8.yaml'}
        model: {REPO / 'graphs' / 'llama3_1_8b.yaml'}
        parallel: {{prefill: {{tp: 8}}, decode: {{tp: 8, attention_dp: 8}}}}
        policies: [{{name: full, policy: full}}]
        shape: {{prompt_len: 4096}}
        workload: {{kind: poisson, rate_per_s: 1, count: 300, output_len: 32}}
        serving: {{batch: 512, max_new_tokens: 32, prefill_nodes: 1, seed: 3}}
        slo: {{ttft: {{max_s: 5 s, percentile: 90}}}}
        rate_search: {{low_per_s: 1, high_per_s: 64, probes: 10, tolerance: 0.01}}
        """)
    path = tmp_path / "e.yaml"
    path.write_text(text)
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet", "--no-plot"]) == 0
    (record,) = json.loads((tmp_path / "out" / "results.json").read_text())
    probes = record["rate_probes"]
    prefill_s = record["prefill_s"]
    assert all(p["prefill_rate_per_s"] == pytest.approx(1 / prefill_s) for p in probes)
    assert record["max_rate_per_s"] <= 1 / prefill_s
    assert all(not p["holds"] for p in probes if p["rate_per_s"] > p["prefill_rate_per_s"])
    # the decode slots are far from the limit, and above the prefill node's speed a finite run met the SLO
    assert all(p["steady_state_rate_per_s"] > 2 / prefill_s for p in probes if p["rate_per_s"] < 1 / prefill_s)
    assert any(p["rate_per_s"] > 1.3 / prefill_s and p["attainment"] >= 0.9 for p in probes)


@pytest.mark.parametrize("workload", ["poisson", "trace"])
def test_the_record_s_workload_line_is_the_rate_its_figures_were_served_at(tmp_path, workload):
    # the record's figures are the answer's probe's run, but its workload line showed the
    # experiment's own rate (max_rate.yaml: "poisson, rate_per_s=1.0" beside 0.865 requests/s found)
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_len,output_len\n" + "".join(f"{i * 0.5},1000,16\n" for i in range(40)))
    given = "{kind: poisson, rate_per_s: 1, count: 40, output_len: 16}" if workload == "poisson" \
        else f"{{kind: trace, path: {trace}}}"
    text = textwrap.dedent(f"""\
        kind: experiment
        name: workload_line
        hardware: {REPO / 'hw_configs' / 'sn40l_node8.yaml'}
        model: {REPO / 'graphs' / 'llama3_1_8b.yaml'}
        parallel: {{prefill: {{tp: 8}}, decode: {{tp: 8, attention_dp: 8}}}}
        policies: [{{name: full, policy: full}}]
        shape: {{prompt_len: 1024}}
        workload: {given}
        serving: {{batch: 4, max_new_tokens: 16, prefill_nodes: 4}}
        slo: {{ttft: {{max_s: 600 s, percentile: 90}}}}
        rate_search: {{low_per_s: 1, high_per_s: 1000, probes: 6}}
        """)
    path = tmp_path / "e.yaml"
    path.write_text(text)
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet", "--no-plot"]) == 0
    (record,) = json.loads((tmp_path / "out" / "results.json").read_text())
    rate = record["max_rate_per_s"]
    assert rate is not None and rate != 1.0 and record["max_rate_bracketed"]
    if workload == "poisson":
        assert record["workload"] == f"poisson, rate_per_s={rate}, count=40, output_len=" \
            '{"dist":"constant","value":16}'
    else:   # 40 requests over 19.5 s: 2.05 requests/s at rate_scale 1
        assert record["workload"] == f"trace, path={trace}, rate_scale={rate / (40 / 19.5)}"


def test_two_searches_of_other_settings_are_named_so_in_compare(tmp_path, capsys):
    # max_rate.yaml with probes 7 and 3 was headed by the workload's rate alone ("workload poisson,
    # rate_per_s=0.988... -> poisson, rate_per_s=0.25..."), as if the arrival rate had been changed
    # by hand: the record did not keep the search's settings
    for probes in (2, 4):
        path = tmp_path / f"e{probes}.yaml"
        path.write_text(_searched_experiment("search_settings", 1000, probes))
        assert main(["run", str(path), "--out", str(tmp_path / f"out{probes}"), "--quiet", "--no-plot"]) == 0
    (record,) = json.loads((tmp_path / "out2" / "results.json").read_text())
    assert record["rate_search"] == "low_per_s=1, high_per_s=1000, probes=2, tolerance=0.02"
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "out2"), str(tmp_path / "out4")]) == 0
    (heading,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("full: ")]
    assert "rate_search low_per_s=1, high_per_s=1000, probes=2, tolerance=0.02 -> " \
           "low_per_s=1, high_per_s=1000, probes=4, tolerance=0.02" in heading
