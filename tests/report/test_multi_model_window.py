"""The records of the models sharing one node are over one window, the node's run: a model whose
first request came later had its makespan (and so every rate and utilisation of its record) over a
shorter window than the others', so the models' served tokens/s did not add up to the node's."""
from __future__ import annotations

import pytest

from sn40l_sim.report.metrics import node_utilisation, throughput
from sn40l_sim.report.multi_model_fields import model_log, multi_model_fields
from sn40l_sim.report.slo import SLO, LatencyTarget, served_slo_fields
from sn40l_sim.serving.multi_model import ModelCosts, NodeMemory, simulate_models
from sn40l_sim.serving.workload import Request


def test_every_model_of_a_run_has_the_nodes_makespan_and_their_rates_add_up():
    a = ModelCosts("a", 1, 10, lambda p: 5, lambda p, g: p + g, 1, 20, 600, 700)
    b = ModelCosts("b", 1, 10, lambda p: 5, lambda p, g: p + g, 1, 20, 500, 600)
    memory = NodeMemory(1000, 10_000, 10.0)
    # model a's requests arrive at 0 and 40, model b's first at 200: the node's run starts at 0
    requests = [Request(0, 0, 4, 3), Request(1, 40, 4, 5), Request(2, 200, 4, 2), Request(3, 210, 4, 4)]
    run = simulate_models(requests, [0, 0, 1, 1], [a, b], memory, "on_demand", quantum_cycles=1)
    clock = 10.0
    span_s = run.end_cycle / clock
    rates = [throughput(model_log(run, m), clock) for m in (0, 1)]
    assert [r["makespan_s"] for r in rates] == [span_s, span_s]   # b's was (end - 200) / 10
    tokens = sum(len(log.token_cycles) for log in run.requests)
    assert sum(r["output_tokens_per_s"] for r in rates) == pytest.approx(tokens / span_s)
    assert sum(r["requests_per_s"] for r in rates) == pytest.approx(len(requests) / span_s)
    # the switch fraction, the goodput and the utilisation of the same record use the same window
    fraction = multi_model_fields(run, 1, memory, "b", clock)["multi_model"]["switch_time_fraction"]
    assert fraction == pytest.approx(run.switch_cycles / run.end_cycle)
    slo = served_slo_fields(model_log(run, 1), clock, SLO(ttft=LatencyTarget(max_s=1e9, percentile=50)))
    assert slo["goodput_requests_per_s"] == pytest.approx(2 / span_s)
    assert node_utilisation(model_log(run, 1))["decode"] == [run.decode_busy[1] / run.end_cycle]


def test_a_models_graph_switches_are_in_its_log_as_a_co_located_nodes_are():
    # the node loads a graph's configurations again when it runs it after another graph (any
    # model's); the run kept only their total, so a model's trace lanes had gaps where it loaded them
    from sn40l_sim.report.chrome_trace import serving_events

    a = ModelCosts("a", 1, 10, lambda p: 5, lambda p, g: p + g, 1, 20, 600, 700, decode_switch_cycles=3,
                   prefill_switch_cycles=lambda p: 2)
    b = ModelCosts("b", 1, 10, lambda p: 5, lambda p, g: p + g, 1, 20, 500, 600, decode_switch_cycles=4)
    requests = [Request(0, 0, 4, 3), Request(1, 40, 4, 5), Request(2, 200, 4, 2), Request(3, 210, 4, 4)]
    run = simulate_models(requests, [0, 0, 1, 1], [a, b], NodeMemory(1000, 10_000, 10.0), "on_demand", quantum_cycles=1)
    logs = [model_log(run, m) for m in (0, 1)]
    loads = [(end - start, graph) for log in logs for _, start, end, graph in log.switches]
    assert sum(n for n, graph in loads if graph != "weights") == run.graph_switch_cycles > 0
    # and the waits for a model's weights to be copied in (b's: a's filled the fast tier)
    assert sum(n for n, graph in loads if graph == "weights") == run.switch_cycles > 0
    assert {graph for _, _, _, graph in logs[0].switches} >= {"prefill", "decode"}
    for log in logs:
        drawn = [e for e in serving_events(log, 10.0, title="t", first_pid=1) if e["ph"] == "X" and e["cat"] == "graph_switch"]
        assert sum(e["dur"] for e in drawn) * 10.0 / 1e6 == pytest.approx(sum(end - start for _, start, end, _ in log.switches))
