"""A KV transfer between a prefill and a decode node (sn40l_sim/serving/kv_transfer.py): the slower
end's set-up, latency and rate set it, and the host link carries the whole cache whatever the
sockets' shares."""
from __future__ import annotations

from pathlib import Path

import pytest

from sn40l_sim.hardware.loader import load_hardware, with_overrides
from sn40l_sim.ir import ParallelPlan
from sn40l_sim.kvcache.sizing import kv_bytes_per_token
from sn40l_sim.models.loader import load_model
from sn40l_sim.serving.kv_transfer import socket_shares, transfer_seconds

NODE = load_hardware(Path(__file__).resolve().parents[2] / "hw_configs" / "sn40l_node16.yaml")
GIB = 2**30
#: the shipped node's host link: 64 GB/s, 1 us; its sockets' calibrated DMA set-up
HOST_BYTES_PER_S, HOST_LATENCY_S = 64e9, 1e-6
SETUP_S = NODE.socket.calibrated.transfer_setup_s


def test_the_shipped_host_link_as_read():
    assert (NODE.host_link.bytes_per_s, NODE.host_link.latency_s) == (HOST_BYTES_PER_S, HOST_LATENCY_S)
    assert transfer_seconds(NODE, "host_link", GIB) == pytest.approx(SETUP_S + HOST_LATENCY_S + GIB / HOST_BYTES_PER_S)


@pytest.mark.parametrize("slow_end", ["sender", "receiver"])
def test_the_slower_ends_setup_and_latency_set_the_transfer(slow_end):
    slow = with_overrides(NODE, {"socket.calibrated.transfer_setup_s": 2e-6, "host_link.latency_s": 5e-6})
    sender, receiver = (slow, NODE) if slow_end == "sender" else (NODE, slow)
    assert transfer_seconds(receiver, "host_link", GIB, sender=sender) == \
        pytest.approx(2e-6 + 5e-6 + GIB / HOST_BYTES_PER_S)


def test_the_host_link_carries_the_whole_cache_whatever_the_sockets_shares():
    # shares are what the busiest socket moves over its own P2P ports; the host link moves it all
    whole = transfer_seconds(NODE, "host_link", GIB)
    assert transfer_seconds(NODE, "host_link", GIB, shares=(0.25, 0.5)) == whole
    p2p = transfer_seconds(NODE, "p2p", GIB)
    assert transfer_seconds(NODE, "p2p", GIB, shares=(0.25, 0.5)) < p2p


def test_a_socket_share_is_a_tokens_average_not_a_whole_row():
    # a prompt's latent rows split by tokens over R1's 12 prefill sockets come whole (ceil(tokens /
    # 12) rows on the busiest, kvcache/sizing.py), but the fraction of the cache a socket sends is
    # a token's average share, 1/12 of a row rounded up, not the whole row one token would give
    r1 = load_model(Path(__file__).resolve().parents[2] / "graphs" / "deepseek_r1.yaml")
    send, receive = socket_shares(r1, ParallelPlan(12), ParallelPlan(12, 12))
    assert send == -(-kv_bytes_per_token(r1) // 12) / kv_bytes_per_token(r1) and receive == 1.0


def test_a_prompts_share_counts_the_whole_rows_only_where_the_prefill_splits_rows():
    # R1's 4,096-token prompt over 12 prefill sockets: the busiest sends ceil(4096 / 12) = 342 whole
    # rows, not 4096 / 12 = 341.3 (about 0.2% more); a GQA prefill holds whole KV heads, every row
    repo = Path(__file__).resolve().parents[2]
    r1 = load_model(repo / "graphs" / "deepseek_r1.yaml")
    assert socket_shares(r1, ParallelPlan(12), ParallelPlan(12, 12), rows=4096) == (342 / 4096, 1.0)
    llama = load_model(repo / "graphs" / "llama3_1_70b.yaml")
    assert socket_shares(llama, ParallelPlan(12), ParallelPlan(16), rows=4097) == socket_shares(
        llama, ParallelPlan(12), ParallelPlan(16))


@pytest.mark.parametrize(("policy", "params", "prompt_len", "state_op"), [
    ("arkvale", {"budget": 8192}, 32768, "write_digests"),
    ("arkvale", {"budget": 8192}, 6000, "write_digests"),     # a prompt within the buffer, a context past it
    ("h2o", {"budget": 8192}, 32768, "write_scores"),
    ("h2o", {"budget": 8192}, 6000, "write_scores"),
])
def test_the_state_sent_is_the_state_prefill_builds(policy, params, prompt_len, state_op):
    # ArkVale's transfer sent the digests of every page of the slot reserved for the output too, pages
    # whose tokens decode had yet to generate (and digests: update_digest), and H2O, for a prompt
    # within its budget, the scores of the budget's slots, not of the prompt's rows its kernel scores
    from sn40l_sim.kvcache import make_policy
    from sn40l_sim.serving.kv_transfer import sent_bytes
    llama = load_model(Path(__file__).resolve().parents[2] / "graphs" / "llama3_1_8b.yaml")
    kv = make_policy(policy, params)
    new_tokens = 4096
    (kernel,) = kv.context_prefill_kernels(llama, prompt_len, prompt_len + new_tokens - 1, tp=1)
    written = sum(op.kv_write_bytes for op in kernel.operators if op.name == state_op)
    sent_state = sent_bytes(llama, kv, prompt_len, new_tokens) - kv.cache_len(prompt_len, 0) * kv_bytes_per_token(llama)
    assert written > 0 and sent_state == llama.layers * written
