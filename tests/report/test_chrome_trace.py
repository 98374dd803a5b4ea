"""Chrome traces: the main experiment's trace is valid JSON in the trace-event object format, with
one process per socket of each phase's tensor-parallel group and per node, named threads, events
with ts >= 0 and dur >= 0 that nest on every thread, request ids on the serving lanes, and kernel
lanes that add up to the simulated phase; a chunked prompt drawn chunk by chunk."""
from __future__ import annotations

import json
import textwrap
from collections import defaultdict
from itertools import pairwise
from pathlib import Path
from types import SimpleNamespace as NS

import pytest

from sn40l_sim.engine.trace import TraceEvent
from sn40l_sim.hardware.loader import load_hardware
from sn40l_sim.ir import ParallelPlan
from sn40l_sim.models.loader import load_model
from sn40l_sim.report.chrome_trace import (
    SOCKET_LANES,
    _lay_out,
    _x,
    build_trace,
    phase_events,
    point_events,
    serving_events,
    write_trace,
)
from sn40l_sim.serving.loop import ServingSetup, simulate
from sn40l_sim.serving.workload import Request
from sn40l_sim.study.experiment import load_experiment
from sn40l_sim.study.runner import simulate_experiment, simulate_points

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def main_results():
    exp = load_experiment(REPO / "experiments/deepseek_tp16.yaml")
    node = load_hardware(exp.resolve(exp.spec.hardware))
    model = load_model(exp.resolve(exp.spec.model), exp.spec.model_overrides or None)
    results = []
    records = simulate_points(exp, node, model, on_result=results.append)
    assert [r.setup.name for r in results] == [r["name"] for r in records]
    return results


@pytest.fixture(scope="module")
def main_trace(main_results, tmp_path_factory):
    path = write_trace(tmp_path_factory.mktemp("trace") / "deepseek_tp16.json", main_results)
    return json.loads(path.read_text())


def process_names(trace):
    return {e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}


def test_object_format_with_per_socket_processes(main_trace, main_results):
    assert main_trace["displayTimeUnit"] == "ms" and isinstance(main_trace["traceEvents"], list)
    names = process_names(main_trace)
    for result in main_results:
        for phase, plan in (("prefill", result.setup.prefill_plan), ("decode", result.setup.decode_plan)):
            sockets = sorted(int(n.split("socket ")[1].split()[0]) for n in names.values()
                             if n.startswith(f"{result.setup.name} · {phase} · socket"))
            assert sockets == list(range(plan.tp)) and plan.tp == 16
        nodes = [n for n in names.values() if n.startswith(f"{result.setup.name} · ") and " node " in n]
        assert len(nodes) == result.setup.prefill_nodes + result.setup.decode_nodes
    assert len(set(names)) == len(names) > 32


def test_events_are_well_formed_and_threads_named(main_trace):
    events = main_trace["traceEvents"]
    threads = {(e["pid"], e["tid"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    rows = defaultdict(list)
    for e in events:
        assert e["ph"] in ("X", "C", "M")
        if e["ph"] == "M":
            continue
        assert isinstance(e["ts"], float) and e["ts"] >= 0
        if e["ph"] == "X":
            assert e["dur"] >= 0 and (e["pid"], e["tid"]) in threads and e["name"]
            rows[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    assert len(threads) > 100
    for key, spans in rows.items():  # complete events on one thread nest, they never cross
        stack: list[float] = []
        for start, end in sorted(spans, key=lambda s: (s[0], -s[1])):
            while stack and stack[-1] <= start + 1e-6:
                stack.pop()
            assert not stack or end <= stack[-1] + 1e-6, key
            stack.append(end)


def test_memory_rates_are_in_gb_per_s_and_kv_held_in_gib(main_trace):
    # a memory lane's rate is its bytes over its duration (us) in 10**9 bytes a second; the KV
    # counter is in 2**30 bytes, each decode step's kv_bytes at the step's end
    events = main_trace["traceEvents"]
    memory = [e for e in events if e["ph"] == "X" and "GB_per_s" in e["args"] and e["dur"] >= 1]
    assert memory
    for e in memory:
        assert e["args"]["GB_per_s"] == pytest.approx(e["args"]["bytes"] / (e["dur"] * 1e-6) / 1e9, rel=1e-3)
    steps, held = defaultdict(list), defaultdict(list)
    for e in events:
        if e["ph"] == "X" and e["name"] == "decode step":
            steps[e["pid"]].append(e["args"]["kv_bytes"])
        elif e["ph"] == "C" and e["name"] == "KV held (GiB)":
            held[e["pid"]].append(e["args"]["GiB"])
    assert steps and steps.keys() == held.keys()
    for pid, kv_bytes in steps.items():
        assert held[pid] == [round(n / 2**30, 4) for n in kv_bytes]
        assert max(held[pid]) > 0


def test_serving_lanes_carry_request_ids(main_trace, main_results):
    events = [e for e in main_trace["traceEvents"] if e["ph"] == "X"]
    names = process_names(main_trace)
    for result in main_results:
        mine = [e for e in events if names[e["pid"]].startswith(f"{result.setup.name} · ")]
        ids = sorted(r.request.id for r in result.log.requests)
        for cat in ("prefill", "kv_transfer", "sequence"):
            assert sorted(e["args"]["request"] for e in mine if e["cat"] == cat) == ids, cat
        clock = result.clock_hz
        joins = {r.request.id: round(r.join / clock * 1e6, 3) for r in result.log.requests}
        assert all(e["ts"] == joins[e["args"]["request"]] for e in mine if e["cat"] == "sequence")
        assert sum(e["cat"] == "decode_step" for e in mine) == len(result.log.steps)


def test_kernel_lanes_add_up_to_the_phase(main_trace, main_results):
    events_of = defaultdict(list)   # pid -> its complete events, in trace order (one pass, not one per socket)
    for e in main_trace["traceEvents"]:
        if e["ph"] == "X":
            events_of[e["pid"]].append(e)
    names = process_names(main_trace)
    result = main_results[0]
    for phase, timing in (("prefill", result.prefill), ("decode", result.decode)):
        per_socket = {}
        for s in range(16):
            pid = next(p for p, n in names.items() if n.startswith(f"{result.setup.name} · {phase} · socket {s}"))
            per_socket[s] = [(e["name"], e["ts"], e["dur"]) for e in events_of[pid] if e["cat"] == "kernel"]
        # tensor-parallel peers run the simulated socket's schedule
        assert all(per_socket[s] == per_socket[0] for s in per_socket)
        kernels = per_socket[0]
        assert len(kernels) == len(timing.kernels)
        span_us = max(ts + d for _, ts, d in kernels) - min(ts for _, ts, _ in kernels)
        assert span_us == pytest.approx(timing.seconds * 1e6, rel=1e-6, abs=0.01)
        hbm = [e for e in events_of[min(p for p, n in names.items()
                                        if n.startswith(f"{result.setup.name} · {phase} · socket 0"))]
               if e["cat"] == "hbm"]
        assert sum(e["args"]["bytes"] for e in hbm) == sum(k.tier_bytes["hbm"] for k in timing.kernels) > 0


def test_simulated_socket_only(main_results):
    trace = build_trace(main_results[:1], sockets="simulated")
    sockets = [n for n in process_names(trace).values() if "socket" in n]
    assert sockets == ["full · prefill · socket 0", "full · decode · socket 0"]
    with pytest.raises(ValueError):
        build_trace(main_results[:1], sockets="all")


def test_overlapping_events_get_a_second_row_and_a_phase_alone_writes(tmp_path, main_results):
    events = [TraceEvent("a", "qkv", 0, 0, 100), TraceEvent("b", "mha", 0, 50, 200),  # b starts before a ends
              TraceEvent("c", "o_proj", 0, 200, 300)]
    out = phase_events(events, clock_hz=1e6, title="t")
    rows = {e["name"]: e["tid"] for e in out if e["ph"] == "X"}
    assert rows["a"] == rows["c"] == 0 and rows["b"] != 0
    thread_names = {e["tid"]: e["args"]["name"] for e in out if e["name"] == "thread_name"}
    assert thread_names[rows["b"]] == "kernels #2"
    path = write_trace(tmp_path / "decode.json", main_results[0].decode)
    trace = json.loads(path.read_text())
    assert process_names(trace) == {1: "decode · socket 0"}
    assert sum(e["ph"] == "X" and e["cat"] == "kernel" for e in trace["traceEvents"]) == len(main_results[0].decode.kernels)


def test_a_kernel_loop_has_a_named_lane():
    # a loop's event (engine/trace.py category "loop") is drawn on a lane Perfetto names "kernel loops",
    # not the fallback "lane 6"
    events = [TraceEvent("L00.decoder", "decoder", 0, 0, 100),
              TraceEvent("loop L00.decoder..L01.decoder x2", "decoder", 0, 0, 200, category="loop")]
    out = phase_events(events, clock_hz=1e6, title="t")
    loop = next(e for e in out if e["ph"] == "X" and e["cat"] == "loop")
    thread_names = {e["tid"]: e["args"]["name"] for e in out if e["name"] == "thread_name"}
    assert thread_names[loop["tid"]] == "kernel loops"


def test_events_that_follow_each_other_share_a_row():
    # rounding a start and a length apart made an event end a nanosecond after the next began,
    # and the layout then drew back-to-back prefills and decode steps on a second row
    clock, starts = 1.6e9, [1_668_375_558, 2_530_801_106, 3_823_150_824, 4_356_120_198, 5_174_197_399]
    events = [_x(f"step {i}", "decode_step", 1, a, b - a, clock, {}) for i, (a, b) in enumerate(pairwise(starts))]
    assert all(round(e["ts"] + e["dur"], 3) == n["ts"] for e, n in pairwise(events))
    _lay_out(events, {1: "decode steps"}, 0)
    assert {e["tid"] for e in events} == {1}


def test_a_prefill_node_of_another_clock_is_drawn_at_its_own_clock(tmp_path):
    # prefill on a socket clocked at 1.2 GHz, decode at 1.6 GHz: the prefill's kernels count the
    # prefill node's cycles, and drawing them at the decode node's clock showed them 25% shorter
    # than the prefill the same trace's request lanes and results.json report

    (tmp_path / "slow.yaml").write_text(f"base: {REPO / 'hw_configs/sn40l.yaml'}\nname: slow\nclock_hz: 1.2 GHz\n"
                                        "stated: {bf16_flops: 479.232 TFLOPS}\n")
    (tmp_path / "node.yaml").write_text(f"base: {REPO / 'hw_configs/sn40l_node8.yaml'}\nname: slow-8\nsocket: slow.yaml\n")
    (tmp_path / "e.yaml").write_text(textwrap.dedent(f"""\
        kind: experiment
        name: two_clocks
        hardware: {REPO / 'hw_configs/sn40l_node8.yaml'}
        prefill_hardware: node.yaml
        model: {REPO / 'graphs/llama3_1_8b.yaml'}
        parallel: {{prefill: {{tp: 8}}, decode: {{tp: 8}}}}
        policies: [{{name: full, policy: full}}]
        shape: {{prompt_len: 512}}
        workload: {{kind: fixed, count: 2, output_len: 4}}
        serving: {{mode: disaggregated, batch: 2, batch_sizes: [2], prefill_lens: [512], max_new_tokens: 4}}
        """))
    results = []
    _, records = simulate_experiment(tmp_path / "e.yaml", on_result=results.append)
    trace = build_trace(results)
    names = process_names(trace)
    spans = defaultdict(list)
    for e in trace["traceEvents"]:
        if e["ph"] == "X" and (e["cat"] == "prefill" or (e["cat"] == "kernel" and "socket 0" in names[e["pid"]])):
            spans[e["cat"] if e["cat"] == "prefill" else names[e["pid"]]].append((e["ts"], e["ts"] + e["dur"]))
    kernels = spans["full · prefill · socket 0"]
    first_prefill = min(spans["prefill"])
    assert (min(kernels)[0], max(end for _, end in kernels)) == pytest.approx(first_prefill, abs=0.002)
    assert first_prefill[1] - first_prefill[0] == pytest.approx(records[0]["prefill_s"] * 1e6, rel=1e-6)
    decode = spans["full · decode · socket 0"]
    assert max(end for _, end in decode) - min(ts for ts, _ in decode) == pytest.approx(
        records[0]["decode_step_s"] * 1e6, rel=1e-6)


def test_a_chunked_prompt_is_drawn_chunk_by_chunk_between_the_decode_steps():
    # co-located, chunks of 50 tokens (a cycle a token, whatever came before: the drawing is tested, not the
    # cost), steps of 10: R0 prefills 0-50, 50-100; R1's
    # chunks (110-160, 170-220) take turns with R0's steps (100-110, 160-170), which one bar from
    # R1's first chunk to its last token would hide
    setup = ServingSetup(mode="colocated", prefill_nodes=0, decode_nodes=1, slots=2, decode_step_cycles=10,
                         prefill_cycles=lambda p: p, transfer_cycles=lambda p: 0, cache_tokens=lambda p, g: p + g,
                         kv_bytes_per_token=1, slot_cache_tokens=200, prefill_chunk=50,
                         prefill_chunk_cycles=lambda earlier, n: n)
    log = simulate([Request(0, 0, 100, 3), Request(1, 0, 100, 2)], setup)
    events = [e for e in serving_events(log, 1e3, title="t", first_pid=1) if e["ph"] == "X"]

    def spans(category: str) -> list[tuple[float, float]]:
        return sorted((e["ts"] / 1e3, (e["ts"] + e["dur"]) / 1e3) for e in events if e["cat"] == category)

    assert spans("prefill") == [(0, 50), (50, 100), (110, 160), (170, 220)]
    assert spans("decode_step") == [(100, 110), (160, 170), (220, 230)]
    assert all(b <= c or d <= a for a, b in spans("prefill") for c, d in spans("decode_step"))
    assert sum(b - a for a, b in spans("prefill")) == log.busy["colocated_prefill"][0]


def test_the_notebooks_tour_names_every_thread_of_a_socket_process():
    # docs/notebooks.md listed kernels, set-up, tile stream, traffic and collectives: not the
    # kernel loops a Llama decode step shows, nor the "#2" rows its looped kernels fill
    tour = " ".join((REPO / "docs" / "notebooks.md").read_text(encoding="utf-8").split())
    for _, name in SOCKET_LANES.values():
        assert f"`{name}`" in tour, name
    assert "`HBM traffic`" in tour and "`#2`" in tour


@pytest.mark.parametrize("chunk, name", [
    (None, "full · prefill · socket 0"),
    (1024, "full · prefill (the whole 8192-token prompt; served in 1024-token chunks) · socket 0")])
def test_the_prefill_detail_of_a_chunked_point_says_it_is_the_whole_prompt(chunk, name):
    # chunked_prefill.yaml at 1K chunks: the node's lane shows 69 ms chunks, the socket's the 285 ms
    # prefill of the whole prompt, drawn from the first chunk on through the decode steps
    timing = NS(events=[TraceEvent("embedding", "embedding", None, 0, 100)], kernels=[], cycles=100, byte_seconds=())
    setup = NS(name="full", mode="colocated", prefill_nodes=0, decode_nodes=1, prefill_node=None, prompt_len=8192,
               prefill_chunk=chunk, prefill_plan=ParallelPlan(1, 1), decode_plan=ParallelPlan(1, 1))
    result = NS(setup=setup, clock_hz=1.6e9, log=None, prefill=timing, decode=timing)
    names = [e["args"]["name"] for e in point_events(result) if e["ph"] == "M" and e["name"] == "process_name"]
    assert names == [name, "full · decode · socket 0"]


def _socket0_kernels(trace, title):
    pid = next(p for p, n in process_names(trace).items() if n.startswith(f"{title} · socket 0"))
    return [e for e in trace["traceEvents"] if e["ph"] == "X" and e["pid"] == pid]


@pytest.fixture(scope="module")
def looped_results(tmp_path_factory):
    # Llama-3.1-8B decodes as one kernel loop on 8 sockets: its iterations overlap the next one's
    # interval with their collectives and, at batch 256, wait for the previous one's (gate_cycles;
    # at batch 1 the weight stream outlasts that wait and hides it)
    folder = tmp_path_factory.mktemp("looped")
    (folder / "e.yaml").write_text(textwrap.dedent(f"""\
        kind: experiment
        name: looped
        hardware: {REPO / 'hw_configs/sn40l_node8.yaml'}
        model: {REPO / 'graphs/llama3_1_8b.yaml'}
        parallel: {{prefill: {{tp: 8}}, decode: {{tp: 8}}}}
        policies: [{{name: full, policy: full}}]
        shape: {{prompt_len: 1024}}
        workload: {{kind: fixed, count: 1, output_len: 4}}
        serving: {{batch: 256, batch_sizes: [256], prefill_lens: [1024], max_new_tokens: 4}}
        """))
    results = []
    _, records = simulate_experiment(folder / "e.yaml", on_result=results.append)
    return results, records


def test_the_kernels_causes_add_up_to_the_step_breakdown(main_results, looped_results):
    # the kernel events' args split each kernel's cycles by cause as results.json's
    # decode_step_breakdown_s does; before they held no gate (a stream's wait for a collective) and
    # a collective_exposed_cycles that counts a looped iteration's tail the next one also counts:
    # the trace of Llama-3.1-70B's decode with looping off showed 0.64 ms of collectives, the
    # breakdown 1.26 ms
    from sn40l_sim.engine.breakdown import step_breakdown_cycles

    looped, records = looped_results
    for result, record in ((main_results[0], None), (looped[0], records[0])):
        trace = build_trace([result], sockets="simulated")
        for phase, timing in (("prefill", result.prefill), ("decode", result.decode)):
            events = _socket0_kernels(trace, f"{result.setup.name} · {phase}")
            kernels = [e for e in events if e["cat"] == "kernel"]
            summed = defaultdict(float)
            for e in kernels:
                for cause, cycles in e["args"]["cycles_by_cause"].items():
                    summed[cause] += cycles
            expected = {c: v for c, v in step_breakdown_cycles(timing).items() if v}
            # each value is written to a thousandth of a cycle
            assert summed == pytest.approx(expected, rel=1e-9, abs=5e-3 * len(kernels)), (result.setup.name, phase)
            assert sum(summed.values()) == pytest.approx(timing.cycles, abs=5e-3 * len(kernels))
            # a kernel's stream is its memory- and compute-bound time, its gate and an iteration's fill
            streams = {(e["name"], e["ts"]): e["args"]["cycles"] for e in events if e["cat"] == "stream"}
            for e in kernels:
                a = e["args"]
                start = a["launch_cycles"] + a["barrier_cycles"] + a["config_cycles"] + (a["fill_cycles"] if not a["iteration"] else 0)
                stream = next(c for (name, ts), c in streams.items() if name == e["name"] and ts >= e["ts"]
                              and abs(ts - e["ts"] - start / result.clock_hz * 1e6) < 0.002)
                assert stream == a["memory_bound_cycles"] + a["compute_bound_cycles"] + a["gate_cycles"] + (
                    a["fill_cycles"] if a["iteration"] else 0), e["name"]
        if record is not None:   # the looped decode waits on gates: the case the old args could not add up
            assert sum(e["args"]["gate_cycles"] for e in _socket0_kernels(trace, "full · decode")
                       if e["cat"] == "kernel") > 0
            step = sum(v for v in record["decode_step_breakdown_s"].values())
            assert step == pytest.approx(record["decode_step_s"], rel=1e-8)


def test_a_collectives_bytes_are_the_graphs_and_add_up_to_the_phases_link_bytes(main_results, looped_results):
    # a collective's event carried its kind and cycles only: the bytes it moved were nowhere in the trace
    for result in (main_results[0], looped_results[0][0]):
        trace = build_trace([result], sockets="simulated")
        for phase, timing in (("prefill", result.prefill), ("decode", result.decode)):
            events = _socket0_kernels(trace, f"{result.setup.name} · {phase}")
            colls = [e for e in events if e["cat"] == "collective"]
            assert colls and sum(e["args"]["link_bytes"] for e in colls) == timing.link_bytes["p2p"]
            assert sum(e["args"]["sent_bytes"] for e in colls) == timing.link_bytes["p2p_sent"]
            assert sum(e["args"]["staged_bytes"] for e in colls) == timing.link_bytes["p2p_staged"]
            # HBM moved the kernels' bytes (its lane) and the collectives' staging (theirs): a third of
            # DeepSeek-R1's 128K prefill traffic is the staging
            hbm = sum(e["args"]["bytes"] for e in events if e["cat"] == "hbm")
            assert hbm + timing.link_bytes["p2p_staged"] == timing.tier_bytes["hbm"]
            plan = result.setup.decode_plan if phase == "decode" else result.setup.prefill_plan
            assert {e["args"]["group"] for e in colls} <= {plan.tp, plan.tp * max(1, plan.attention_dp)}
            # a collective moves some of its tensor at least (tests/engine/test_run_graph.py checks the
            # tensor's bytes against the graph's and what each algorithm sends)
            assert all(e["args"]["bytes"] > 0 and e["args"]["sent_bytes"] > 0 for e in colls)


@pytest.mark.parametrize("prompts, ran", [((100, 1000), True), ((100, 120), False)])
def test_the_prefill_detail_is_drawn_at_a_prefill_that_ran_its_graph(tmp_path, prompts, ran):
    # a trace's requests bring their own prompts: hetero_nodes.yaml's prefill node 0 first prefilled
    # 374 tokens in 67 ms, and the socket lanes drew the 8192-token graph's 455 ms of kernels from
    # there, running on long after that prefill had ended; the graph's one request was on node 1
    (tmp_path / "requests.csv").write_text("arrival_s,prompt_len,output_len\n" +
                                           "".join(f"{i * 0.5},{p},3\n" for i, p in enumerate(prompts)))
    (tmp_path / "e.yaml").write_text(textwrap.dedent(f"""\
        kind: experiment
        name: own_prompts
        hardware: {REPO / 'hw_configs/sn40l_node8.yaml'}
        model: {REPO / 'graphs/llama3_1_8b.yaml'}
        parallel: {{prefill: {{tp: 8}}, decode: {{tp: 8}}}}
        policies: [{{name: full, policy: full}}]
        shape: {{prompt_len: 1024}}
        workload: {{kind: trace, path: requests.csv}}
        serving: {{mode: disaggregated, prefill_nodes: 2, batch: 2, batch_sizes: [2], prefill_lens: [128, 1024],
                   max_new_tokens: 4}}
        """))
    results = []
    _, records = simulate_experiment(tmp_path / "e.yaml", on_result=results.append)
    trace = build_trace(results, sockets="simulated")
    names = process_names(trace)
    kernels = [(e["ts"], e["ts"] + e["dur"]) for e in trace["traceEvents"]
               if e["ph"] == "X" and e["cat"] == "kernel" and " · prefill" in names[e["pid"]]]
    prefills = {e["args"]["request"]: (e["ts"], e["ts"] + e["dur"]) for e in trace["traceEvents"]
                if e["ph"] == "X" and e["cat"] == "prefill"}
    drawn = (min(a for a, _ in kernels), max(b for _, b in kernels))
    title = next(n for n in names.values() if " · prefill" in n and "socket 0" in n)
    if ran:   # request 1's prompt runs the 1024-token graph: the detail is its prefill
        assert drawn == pytest.approx(prefills[1], abs=0.002)
        assert drawn[1] - drawn[0] == pytest.approx(records[0]["prefill_s"] * 1e6, rel=1e-6)
        assert title == f"{results[0].setup.name} · prefill · socket 0"
    else:     # no request ran it: drawn at the first prefill, and the process says so
        assert drawn[0] == pytest.approx(prefills[0][0], abs=0.002)
        assert "which no request ran" in title


def test_a_colocated_nodes_graph_switches_are_drawn_where_its_lanes_left_gaps():
    # a co-located node loads the decode graph's configurations again after a prefill (5 cycles
    # here) and the prefill's after a decode step (7): busy time (busy["graph_switch"]) that the
    # node's lanes showed as gaps between a prefill and the next decode step
    setup = ServingSetup(mode="colocated", prefill_nodes=0, decode_nodes=1, slots=2, decode_step_cycles=10,
                         prefill_cycles=lambda p: p, transfer_cycles=lambda p: 0, cache_tokens=lambda p, g: p + g,
                         kv_bytes_per_token=1, slot_cache_tokens=200, decode_switch_cycles=5,
                         prefill_switch_cycles=lambda p: 7)
    log = simulate([Request(0, 0, 100, 3), Request(1, 150, 100, 2)], setup)
    events = [e for e in serving_events(log, 1e3, title="t", first_pid=1) if e["ph"] == "X"]
    switches = [e for e in events if e["cat"] == "graph_switch"]
    assert sum(e["dur"] for e in switches) / 1e3 == log.busy["graph_switch"][0] > 0
    assert {e["name"] for e in switches} == {"load decode configurations", "load prefill configurations"}
    # the node's prefills, switches and steps follow each other without a gap while it has work
    busy = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e["cat"] in ("prefill", "graph_switch", "decode_step"))
    assert all(b <= c for (_, b), (c, _) in pairwise(busy))
    assert sum(b - a for a, b in busy) / 1e3 == sum(log.busy[k][0] for k in ("colocated_prefill", "graph_switch", "decode"))
    names = {e["tid"]: e["args"]["name"] for e in serving_events(log, 1e3, title="t", first_pid=1)
             if e["ph"] == "M" and e["name"] == "thread_name"}
    assert names[switches[0]["tid"]] == "graph switch (configuration loads)"


def test_a_loop_event_says_its_iterations_and_spans_its_kernels(looped_results):
    # a loop's iteration count was only in its name ("x32"); its args carry it, and the loop's
    # interval holds exactly that many calls of its first kernel (one per iteration)
    trace = build_trace([looped_results[0][0]], sockets="simulated")
    events = _socket0_kernels(trace, "full · decode")
    loops = [e for e in events if e["cat"] == "loop"]
    assert loops
    for loop in loops:
        first = loop["name"].split()[1].split("..")[0]
        iterations = loop["args"]["iterations"]
        assert loop["name"].endswith(f"x{iterations}") and iterations > 1
        inside = [e for e in events if e["cat"] == "kernel" and e["ts"] >= loop["ts"]
                  and e["ts"] + e["dur"] <= loop["ts"] + loop["dur"] + 1e-6]
        kinds = {e["args"]["kind"] for e in inside if e["name"] == first}
        assert len([e for e in inside if e["args"]["kind"] in kinds]) == iterations


def test_a_kernels_causes_hold_no_negative_zero():
    # idle is what the other causes leave of the kernel: float rounding can leave it -1e-13 cycles,
    # which was written as "idle": -0.0 (3,072 of 163,600 kernel events of random llama3_1_8b runs)
    from sn40l_sim.engine.phase import KernelTiming
    k = KernelTiming("L0.mla", "mla", 0, 0, 1000, overhead_cycles=0, fill_cycles=0, compute_busy_cycles=0,
                     memory_bound_cycles=1000, compute_bound_cycles=0, collective_exposed_cycles=0,
                     collective_cycles=0, tier_bytes={"hbm": 7, "ddr": 0}, weight_bytes=1, kv_bytes=5,
                     activation_bytes=1, flops=10, attention_flops=5, launch_cycles=0, barrier_cycles=0,
                     config_cycles=0, stream_end_cycle=1000)
    events = phase_events([TraceEvent("L0.mla", "mla", 0, 0, 1000)], 1.6e9, title="decode", kernels=[k])
    (causes,) = [e["args"]["cycles_by_cause"] for e in events if e["ph"] == "X"]
    assert all(v > 0 for v in causes.values()), causes
    assert sum(causes.values()) == pytest.approx(1000, abs=5e-3)


def test_a_kv_transfer_carries_the_bytes_its_time_was_reckoned_from(tmp_path):
    # H2O's accumulated scores go with its cache (results' kv_transfer_bytes, and the transfer's
    # time): the KV link's event counted the cache alone, 262,144 bytes fewer than it moved
    from sn40l_sim.commands.cli import main
    path = tmp_path / "e.yaml"
    path.write_text(textwrap.dedent(f"""\
        kind: experiment
        name: h2o_transfer
        hardware: {REPO / 'hw_configs/sn40l_node8.yaml'}
        model: {REPO / 'graphs/llama3_1_8b.yaml'}
        parallel: {{prefill: {{tp: 8}}, decode: {{tp: 8}}}}
        policies: [{{name: h2o, policy: h2o, prompt_fraction: {{budget: 0.25}}}}]
        shape: {{prompt_len: 1024}}
        workload: {{kind: fixed, count: 1, output_len: 4}}
        serving: {{batch: 1, batch_sizes: [1], prefill_lens: [1024], max_new_tokens: 4}}
        """))
    trace = tmp_path / "t.json"
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--trace", str(trace), "--quiet", "--no-plot"]) == 0
    (record,) = json.loads((tmp_path / "out" / "results.json").read_text())
    (kv,) = [e for e in json.loads(trace.read_text())["traceEvents"] if e.get("cat") == "kv_transfer"]
    assert kv["args"]["bytes"] == record["kv_transfer_bytes"] > 1024 // 4 * record["kv_bytes_per_token"]
    assert kv["dur"] == pytest.approx(record["kv_transfer_s"] * 1e6, abs=2e-3)


@pytest.mark.parametrize("source, got", [(None, "NoneType"), ("results.json", "str"),
                                         ([{"name": "full"}], "dict in a list"), ([1], "int in a list")])
def test_a_source_it_cannot_draw_is_named(tmp_path, source, got):
    """The records simulate_experiment returns, given where its PointResults go, raised an
    AttributeError ('dict' object has no attribute 'setup'), and None a TypeError, from inside."""
    from sn40l_sim.errors import InputError
    with pytest.raises(InputError, match=rf"^source: expected a PointResult \(simulate_experiment's on_result\), a "
                                         rf"list of them, a PhaseTiming or a trace dict, got {got}$"):
        write_trace(tmp_path / "t.json", source)
    assert not (tmp_path / "t.json").exists()
