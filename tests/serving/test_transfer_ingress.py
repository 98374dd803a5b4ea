"""A KV transfer holds both ends of its path: the prefill node's link and the decode node's
(sn40l_sim/serving/loop.py), so several prefill nodes sending to one decode node take turns at its
end instead of each getting the whole link."""
from __future__ import annotations

import pytest

from sn40l_sim.serving.loop import ServingSetup, simulate
from sn40l_sim.serving.workload import Request


def setup(prefill_nodes: int, decode_nodes: int) -> ServingSetup:
    return ServingSetup(mode="disaggregated", prefill_nodes=prefill_nodes, decode_nodes=decode_nodes, slots=64,
                        decode_step_cycles=10, prefill_cycles=lambda p: 20, transfer_cycles=lambda p: 50,
                        cache_tokens=lambda p, g: p + g, kv_bytes_per_token=1, slot_cache_tokens=1000)


def overlapping(log, decode_node: int) -> int:
    """The most transfers into ``decode_node`` at one time."""
    spans = sorted((r.transfer_start, r.transfer_end) for r in log.requests if r.decode_node == decode_node)
    return max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)


@pytest.mark.parametrize("decode_nodes", [1, 2])
def test_transfers_into_one_decode_node_take_turns(decode_nodes):
    requests = [Request(i, 0, 100, 3) for i in range(32)]
    log = simulate(requests, setup(prefill_nodes=8, decode_nodes=decode_nodes))
    for node in range(decode_nodes):
        assert overlapping(log, node) == 1
    # 32 transfers of 50 cycles through the decode nodes' ends, one at a time on each
    assert max(r.transfer_end for r in log.requests) >= 20 + 32 * 50 // decode_nodes
