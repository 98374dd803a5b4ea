"""Prefill and decode on separate nodes of different hardware against first principles, through
``run`` on experiments/hetero_nodes.yaml (docs/validation.md, "Prefill and decode on separate nodes
against first principles", quotes the figures).

Expected, and asserted:

* the prefill queue: requests wait for the first free prefill node in arrival order, each busy
  for the prompt's prefill as the prefill node's hardware times it (``prefill_s``), so every
  request's ``queue_s`` is the first-come-first-served recursion over its arrival times; a second
  prefill node more than halves the mean queue under load;
* the KV transfer: the prompt tokens the policy keeps (all 8192; SnapStream's 4 sink + 255 of its
  256-token ring + 1788 top-K) times Llama-3.1-70B's 327,680 B a token, whatever the prefill and
  decode plans (a tp-8 prefill node re-shards onto a tp-16 decode node, bytes conserved); over
  the host link at 64 GB/s, over P2P by the busiest socket of either end (the prefill socket
  sends an eighth over its node's 9 spare ports, the data-parallel decode socket receives the
  whole cache over its node's one);
* the decode nodes: in a decode-bound run each node serves its slots at one token per step,
  each slot refilled after one transfer into the node, and a second decode node doubles the
  served tokens per second.
"""
from __future__ import annotations

import csv
import heapq
import json
from pathlib import Path

import pytest

from sn40l_sim.commands.cli import main
from sn40l_sim.hardware.loader import load_hardware
from sn40l_sim.serving.kv_transfer import spare_ports

REPO = Path(__file__).resolve().parents[2]
NODE8, NODE16 = load_hardware(REPO / "hw_configs/sn40l_node8.yaml"), load_hardware(REPO / "hw_configs/sn40l_node16.yaml")
KV_BYTES_PER_TOKEN = 80 * 8 * 128 * 2 * 2   # Llama-3.1-70B: layers x KV heads x head dim x (K, V) x BF16
PROMPT = 8192


def experiment(tmp_path: Path, workload: str, output_len: int) -> Path:
    """experiments/hetero_nodes.yaml without its sweep, its paths absolute, with ``workload``."""
    text = (REPO / "experiments/hetero_nodes.yaml").read_text().split("\nsweep:")[0] + "\n"
    text = text.replace("../hw_configs/", f"{REPO}/hw_configs/").replace("../graphs/", f"{REPO}/graphs/")
    head, rest = text.split("workload:\n", 1)
    text = head + f"workload: {workload}\nslo:" + rest.split("\nslo:", 1)[1]
    text = text.replace("max_new_tokens: 1024", f"max_new_tokens: {output_len}")
    path = tmp_path / "hetero.yaml"
    path.write_text(text)
    return path


def run(path: Path, name: str, *sets: str) -> tuple[list[dict], list[dict[str, str]]]:
    """``run PATH --set ...``'s records and its ``--requests`` rows."""
    out, rows = path.parent / name, path.parent / f"{name}.csv"
    args = ["run", str(path), "--out", str(out), "--requests", str(rows), "--no-plot", "--quiet"]
    for item in sets:
        args += ["--set", item]
    assert main(args) == 0
    with rows.open() as f:
        return json.loads((out / "results.json").read_text()), list(csv.DictReader(f))


def fcfs_queues(arrivals: list[float], service_s: float, servers: int) -> list[float]:
    """Each request's wait for the first of ``servers`` free servers, in arrival order."""
    free = [0.0] * servers
    waits = []
    for arrival in arrivals:
        start = max(arrival, heapq.heappop(free))
        heapq.heappush(free, start + service_s)
        waits.append(start - arrival)
    return waits


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    """The full-cache point under Poisson load (2 requests/s against one prefill node's 2.2), with
    one and with two prefill nodes."""
    path = experiment(tmp_path_factory.mktemp("hetero_load"),
                      "{kind: poisson, rate_per_s: 2.0, count: 400, output_len: 64}", 64)
    return {n: run(path, f"p{n}", f"serving.prefill_nodes={n}") for n in (1, 2)}


@pytest.mark.parametrize("prefill_nodes", [1, 2])
def test_the_prefill_queue_is_first_come_first_served_over_the_prefill_nodes(loaded, prefill_nodes):
    records, rows = loaded[prefill_nodes]
    record = records[0]
    rows = sorted((r for r in rows if r["point"] == record["name"]), key=lambda r: float(r["arrival_s"]))
    assert record["prefill_hardware"] == "SN40L-8" and record["prefill_nodes"] == prefill_nodes
    assert {r["prefill_node"] for r in rows} == {str(i) for i in range(prefill_nodes)}
    cycle = 1 / NODE16.socket.clock_hz
    for r in rows:   # TTFT is the wait plus one prefill on the prefill node
        assert float(r["ttft_s"]) == pytest.approx(float(r["queue_s"]) + record["prefill_s"], abs=2 * cycle)
    expected = fcfs_queues([float(r["arrival_s"]) for r in rows], record["prefill_s"], prefill_nodes)
    assert [float(r["queue_s"]) for r in rows] == pytest.approx(expected, abs=len(rows) * cycle)


def test_a_second_prefill_node_more_than_halves_the_queue_under_load(loaded):
    mean = {n: sum(float(r["queue_s"]) for r in rows) / len(rows) for n, (_, rows) in loaded.items()}
    assert mean[1] > 0.5 and mean[2] < mean[1] / 2
    # the decode side is the same node either way
    assert loaded[1][0][0]["decode_step_s"] == loaded[2][0][0]["decode_step_s"]


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    return experiment(tmp_path_factory.mktemp("hetero_one"), "{kind: fixed, count: 1, output_len: 16}", 16)


@pytest.mark.filterwarnings("ignore:.*the other 4 stay idle")   # the tp-4 prefill node, on purpose
def test_the_kv_sent_is_the_kept_prompt_conserved_across_the_plans(single):
    kept = {"full": PROMPT, "snapstream": 4 + (256 - 1) + (2048 - 4 - 256)}
    base, rows = run(single, "base")
    # a tp-4 prefill node, and tp-16 decode attention in place of data-parallel: the same bytes
    other, _ = run(single, "replanned", "parallel.prefill.tp=4", "parallel.decode.attention_dp=1")
    setup = NODE16.socket.calibrated.transfer_setup_s + NODE16.host_link.latency_s
    assert NODE8.host_link == NODE16.host_link and NODE16.host_link.bytes_per_s == 64e9
    for record, replanned in zip(base, other, strict=True):
        n_bytes = kept[record["name"]] * KV_BYTES_PER_TOKEN
        assert record["kv_transfer_bytes"] == replanned["kv_transfer_bytes"] == n_bytes
        assert record["kv_transfer_s"] == pytest.approx(setup + n_bytes / 64e9, rel=1e-6)
        assert replanned["prefill_s"] > record["prefill_s"]   # half the prefill sockets
        (row,) = [r for r in rows if r["point"] == record["name"]]
        took = float(row["transfer_end_s"]) - float(row["transfer_start_s"])
        assert took == pytest.approx(record["kv_transfer_s"], abs=2 / NODE16.socket.clock_hz)
    assert base[0]["kv_transfer_bytes"] == 2_684_354_560   # 2.68 GB, as docs/validation.md quotes


def test_over_p2p_the_busiest_socket_of_either_end_sets_the_transfer(single):
    """The tp-8 prefill sockets each send an eighth over the 9 ports the 8-socket mesh leaves;
    the data-parallel decode socket takes the whole cache through the one the 16-socket mesh
    leaves: the receiving end is slower."""
    (record, _), _ = run(single, "p2p", "serving.kv_transfer=p2p")
    socket = NODE16.socket
    port = socket.p2p.bytes_per_s_per_port * socket.calibrated.p2p_efficiency
    assert (spare_ports(NODE8), spare_ports(NODE16)) == (9, 1)
    n_bytes = PROMPT * KV_BYTES_PER_TOKEN
    send, receive = n_bytes / 8 / (9 * port), n_bytes / (1 * port)
    expected = socket.calibrated.transfer_setup_s + socket.p2p.latency_s + max(send, receive)
    assert record["kv_transfer_s"] == pytest.approx(expected, abs=1 / socket.clock_hz)
    assert receive > 50 * send


def test_a_second_decode_node_doubles_the_decode_bound_throughput(single):
    """Eight slots a node, 256-token answers, prompts arriving at 50/s and sixteen prefill nodes:
    the decode nodes bind. A slot holds a request for 255 steps after its transfer into the node
    (one at a time), so a node serves 8 x 256 tokens every 255 steps plus one transfer."""
    path = single.parent / "decode_bound.yaml"
    path.write_text(single.read_text().replace("{kind: fixed, count: 1, output_len: 16}",
                                               "{kind: poisson, rate_per_s: 50.0, count: 400, output_len: 256}")
                    .replace("max_new_tokens: 16", "max_new_tokens: 256").replace("batch: max", "batch: 8"))
    served = {}
    for nodes in (1, 2):
        records, _ = run(path, f"d{nodes}", "serving.prefill_nodes=16", f"serving.decode_nodes={nodes}",
                         "policies=[{name: full, policy: full}]")
        (record,) = records
        served[nodes] = record["throughput"]["output_tokens_per_s"]
        step, transfer = record["decode_step_s"], record["kv_transfer_s"]
        capacity = nodes * 8 * 256 / (255 * step + transfer)
        assert served[nodes] == pytest.approx(capacity, rel=0.05)
        assert served[nodes] < capacity * 1.01
    assert served[2] / served[1] == pytest.approx(2, rel=0.05)
