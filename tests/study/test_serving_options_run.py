"""Prefix caching, chunked prefill and a prefill node file of its own through ``run``: what each
adds to the records, the settings that must reproduce today's numbers, and bad inputs as one line
naming the file and the field, exit 2."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from sn40l_sim.commands.cli import main
from sn40l_sim.hardware.loader import load_hardware
from sn40l_sim.serving.kv_transfer import spare_ports
from sn40l_sim.study.assemble import assemble
from sn40l_sim.study.experiment import load_experiment

REPO = Path(__file__).resolve().parents[2]
NODE8 = REPO / "hw_configs/sn40l_node8.yaml"
NODE16 = REPO / "hw_configs/sn40l_node16.yaml"


def experiment(tmp_path, *, serving="", workload="", top="", prefill_tp=8, name="e"):
    path = tmp_path / f"{name}.yaml"
    path.write_text(textwrap.dedent(f"""\
        kind: experiment
        name: opts_demo
        hardware: {NODE8}
        model: {REPO / 'graphs/llama3_1_8b.yaml'}
        parallel: {{prefill: {{tp: {prefill_tp}}}, decode: {{tp: 8}}}}
        policies: [{{name: full, policy: full}}]
        shape: {{prompt_len: 1024}}
        workload: {{kind: poisson, rate_per_s: 40, count: 40, prompt_len: {{dist: uniform, low: 300, high: 1024}},
                    output_len: {{dist: uniform, low: 1, high: 24}}{workload}}}
        serving: {{batch: 8, batch_sizes: [8], prefill_lens: [256, 512, 1024], max_new_tokens: 24{serving}}}
        """) + top)
    return path


def run(tmp_path, path):
    out = tmp_path / f"out_{path.stem}"
    assert main(["run", str(path), "--out", str(out), "--quiet", "--no-plot"]) == 0
    return json.loads((out / "results.json").read_text())


SAME = ("ttft_s", "tpot_s", "latency", "throughput", "prefill_s", "decode_step_s", "kv_occupancy")


def test_prefix_caching_reports_hits_and_serves_every_request_once(tmp_path):
    plain = run(tmp_path, experiment(tmp_path, workload=", prefix: {share: 0.8, tokens: 256, groups: 2}",
                                     name="plain"))[0]
    (record,) = run(tmp_path, experiment(tmp_path, serving=", prefix_cache: true",
                                         workload=", prefix: {share: 0.8, tokens: 256, groups: 2}", name="cached"))
    cache = record["prefix_cache"]
    assert record["throughput"]["requests"] == 40 and cache["decode_kv_shared"] is True
    assert 0 < cache["hits"] <= cache["requests_with_prefix"] <= 40
    assert cache["prefill_tokens_saved"] > 0 and cache["kv_bytes_saved_peak"] > 0
    assert record["latency"]["ttft_s"]["mean"] < plain["latency"]["ttft_s"]["mean"]
    assert "prefix_cache" not in plain


def test_a_chunk_longer_than_every_prompt_is_the_colocated_run(tmp_path):
    whole = run(tmp_path, experiment(tmp_path, serving=", mode: colocated", name="whole"))[0]
    # the budget spans prompts: longer than all 40 prompts together (at most 40K tokens) is unchunked
    chunked = run(tmp_path, experiment(tmp_path, serving=", mode: colocated, prefill_chunk: 65536", name="chunk"))[0]
    assert {k: chunked[k] for k in SAME} == {k: whole[k] for k in SAME}
    assert chunked["chunked_prefill"] == {"chunk_tokens": 65536, "prefill_overhead_fraction": 0.0}
    small = run(tmp_path, experiment(tmp_path, serving=", mode: colocated, prefill_chunk: 256", name="small"))[0]
    assert small["chunked_prefill"]["prefill_overhead_fraction"] > 0 and small["throughput"]["requests"] == 40


def _activation_bytes(path, phase, *args):
    """The peak resident activations of one graph of the experiment at ``path``, built directly."""
    asm = assemble(load_experiment(path))
    setup = asm.setup(asm.points[0])
    timer = asm.step_timer(setup)
    return timer.prefill_activation_bytes(*args) if phase == "prefill" else timer.decode_activation_bytes(*args)


def test_a_colocated_chunked_node_holds_one_chunks_activations_not_the_prompts(tmp_path):
    whole_path = experiment(tmp_path, serving=", mode: colocated", name="whole")
    whole = run(tmp_path, whole_path)[0]["memory"]["hbm"]
    decode = _activation_bytes(whole_path, "decode", 8, 1024 + 24)
    prompt = _activation_bytes(whole_path, "prefill", 1024)
    assert whole["activations"] == max(decode, prompt) == prompt > decode
    # a 256-token chunk runs the 256-token graph; GQA's attention reads the earlier chunks' keys
    # from the cache, which the node holds whole either way
    chunk_path = experiment(tmp_path, serving=", mode: colocated, prefill_chunk: 256", name="chunk")
    chunked = run(tmp_path, chunk_path)[0]["memory"]["hbm"]
    assert chunked["activations"] == max(decode, _activation_bytes(chunk_path, "prefill", 256)) < prompt
    assert chunked["kv"] == whole["kv"]
    assert chunked["free"] == whole["free"] + whole["activations"] - chunked["activations"]


def test_a_chunk_of_an_mla_prompt_also_holds_the_earlier_chunks_keys(tmp_path):
    """MLA's prefill attention reads per-head keys and values from activations, not the cache: a
    chunk's attention over the earlier chunks holds theirs (up to the prompt's last token)."""
    path = tmp_path / "mla.yaml"
    path.write_text(textwrap.dedent(f"""\
        kind: experiment
        name: mla_chunks
        hardware: {NODE16}
        model: {REPO / 'graphs/deepseek_r1.yaml'}
        parallel: {{prefill: {{tp: 16}}, decode: {{tp: 16, attention_dp: 16}}}}
        policies: [{{name: full, policy: full}}]
        shape: {{prompt_len: 1024}}
        workload: {{kind: fixed, count: 2, output_len: 4}}
        serving: {{mode: colocated, batch: 16, batch_sizes: [16], prefill_lens: [256, 1024], max_new_tokens: 4,
                   prefill_chunk: 256}}
        """))
    chunked = run(tmp_path, path)[0]["memory"]["hbm"]["activations"]
    keys = 1023 * (128 // 16) * (192 + 128) * 2     # 1,023 earlier tokens, 128 heads over 16 sockets, BF16
    chunk = _activation_bytes(path, "prefill", 256) + keys
    assert chunked == max(chunk, _activation_bytes(path, "decode", 16, 1024 + 4)) == chunk
    assert chunk < _activation_bytes(path, "prefill", 1024)


def test_a_prefill_node_file_of_its_own(tmp_path):
    base = run(tmp_path, experiment(tmp_path, name="base"))[0]
    same = run(tmp_path, experiment(tmp_path, top=f"prefill_hardware: {NODE8}\n", name="same"))[0]
    # the same file as the decode nodes': the same numbers, and the prefill nodes named
    assert {k: same[k] for k in SAME} == {k: base[k] for k in SAME} and same["prefill_hardware"] == "SN40L-8"
    big = run(tmp_path, experiment(tmp_path, top=f"prefill_hardware: {NODE16}\n", prefill_tp=16, name="big"))[0]
    assert big["prefill_hardware"] == "SN40L-16" and big["hardware"] == "SN40L-8"
    assert big["prefill_s"] < base["prefill_s"] and big["decode_step_s"] == base["decode_step_s"]


def test_a_prefill_node_with_a_slower_host_link_sends_the_kv_at_its_speed(tmp_path):
    """The KV leaves the prefill node over its own host link: a transfer crosses both nodes' links,
    so the slower one sets its speed (the decode node's alone did)."""
    base = run(tmp_path, experiment(tmp_path, name="base"))[0]
    slow = tmp_path / "slow_link.yaml"
    slow.write_text(f"base: {NODE8}\nname: SN40L-8-slow-link\nhost_link: {{bytes_per_s: 8 GB/s, latency_s: 1 us}}\n")
    record = run(tmp_path, experiment(tmp_path, top=f"prefill_hardware: {slow}\n", name="slow"))[0]
    node = load_hardware(NODE8)
    assert node.host_link.bytes_per_s == 64e9 and record["kv_transfer_bytes"] == base["kv_transfer_bytes"] > 0
    setup = node.socket.calibrated.transfer_setup_s + node.host_link.latency_s
    assert base["kv_transfer_s"] == pytest.approx(setup + base["kv_transfer_bytes"] / 64e9, rel=1e-6)
    assert record["kv_transfer_s"] == pytest.approx(setup + base["kv_transfer_bytes"] / 8e9, rel=1e-6)


def test_a_prefill_node_with_slower_p2p_ports_sends_the_kv_at_their_speed(tmp_path):
    """Over P2P too the KV leaves the prefill node's sockets by their own ports (those their node's
    topology leaves spare): the slower socket's P2P bandwidth sets the transfer's speed (the decode
    node's alone did). Each socket moves the part of the cache it holds: Llama-3.1-8B's 8 KV heads
    over tp 8 on both nodes, an eighth (the whole cache went through one socket's ports)."""
    serving = ", kv_transfer: p2p"
    base = run(tmp_path, experiment(tmp_path, serving=serving, name="base"))[0]
    (tmp_path / "slow_socket.yaml").write_text(f"base: {REPO / 'hw_configs/sn40l.yaml'}\nname: slow-p2p\n"
                                                "p2p: {bytes_per_s_per_port: 6.25 GB/s}\n")
    slow = tmp_path / "slow_p2p.yaml"
    slow.write_text(f"base: {NODE8}\nname: SN40L-8-slow-p2p\nsocket: slow_socket.yaml\n")
    record = run(tmp_path, experiment(tmp_path, serving=serving, top=f"prefill_hardware: {slow}\n", name="slow"))[0]
    socket = load_hardware(NODE8).socket
    assert socket.p2p.bytes_per_s_per_port == 50e9 and record["kv_transfer_bytes"] == base["kv_transfer_bytes"] > 0
    setup = socket.calibrated.transfer_setup_s + socket.p2p.latency_s
    # the ports the 8-socket full mesh (7 of 16) leaves spare, on both nodes
    per_port = spare_ports(load_hardware(NODE8)) * socket.calibrated.p2p_efficiency
    assert spare_ports(load_hardware(NODE8)) == spare_ports(load_hardware(slow)) == 9
    part = base["kv_transfer_bytes"] / 8
    cycle = 1 / socket.clock_hz   # the transfer is counted in whole cycles
    assert base["kv_transfer_s"] == pytest.approx(setup + part / (per_port * 50e9), abs=cycle)
    assert record["kv_transfer_s"] == pytest.approx(setup + part / (per_port * 6.25e9), abs=cycle)
    assert record["kv_transfer_s"] > 5 * base["kv_transfer_s"]


@pytest.mark.parametrize(("kwargs", "message"), [
    (dict(serving=", prefix_cache: true"), "serving.prefix_cache: no request shares a prefix"),
    (dict(workload=", prefix: {share: 1.5, tokens: 64}"), "workload.prefix.share"),
    (dict(serving=", prefill_chunk: 256"), "serving.prefill_chunk: chunked prefill shares a co-located node"),
    (dict(serving=", mode: colocated, prefill_chunk: 0"), "serving.prefill_chunk"),
    (dict(serving=", mode: colocated", top=f"prefill_hardware: {NODE16}\n"),
     "prefill_hardware: co-located nodes prefill on their own hardware"),
    (dict(top="prefill_hardware: nope.yaml\n"), "prefill_hardware: prefill hardware file 'nope.yaml' not found"),
    (dict(top=f"prefill_hardware: {NODE8}\n", prefill_tp=16), "parallel.prefill: the prefill plan needs 16 sockets"),
])
def test_bad_serving_options_are_one_line_errors(tmp_path, capsys, kwargs, message):
    path = experiment(tmp_path, **kwargs)
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert str(path) in err and message in err


def test_a_prefill_node_of_another_clock_times_prefill_in_its_own_cycles(tmp_path):
    """A prefill node whose socket runs at half the clock: its prefill is timed and reported in its
    own cycles (prefill_s = prefill_cycles / its clock), the decode step in the decode node's, and a
    lone request's TTFT is that prefill in seconds (the serving loop counts it in the decode node's
    clock: read in that clock's cycles it would be half as long)."""
    slow = tmp_path / "slow_clock.yaml"
    slow.write_text(f"base: {NODE8}\nname: SN40L-8-half-clock\nsocket_overrides: {{clock_hz: 0.8 GHz, stated: null}}\n")
    records = {}
    for name, top in (("base", ""), ("slow", f"prefill_hardware: {slow}\n")):
        path = experiment(tmp_path, top=top, name=name)
        path.write_text(path.read_text().replace("count: 40, prompt_len: {dist: uniform, low: 300, high: 1024}",
                                                 "count: 1, prompt_len: 1024"))
        (records[name],) = run(tmp_path, path)
    base, record = records["base"], records["slow"]
    assert record["prefill_hardware"] == "SN40L-8-half-clock"
    assert record["prefill_s"] == pytest.approx(record["prefill_cycles"] / 0.8e9, rel=1e-6)
    assert base["prefill_s"] == pytest.approx(base["prefill_cycles"] / 1.6e9, rel=1e-6)
    assert record["prefill_s"] > base["prefill_s"]
    assert record["decode_step_s"] == base["decode_step_s"]
    assert record["decode_step_s"] == pytest.approx(record["decode_step_cycles"] / 1.6e9, rel=1e-6)
    for r in (base, record):
        # TTFT runs from arrival to the end of prefill (docs/architecture.md), the transfer after it
        assert r["ttft_s"] == pytest.approx(r["prefill_s"], rel=1e-6) and r["kv_transfer_s"] > 0
