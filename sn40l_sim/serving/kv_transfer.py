"""The KV cache's trip from a prefill node to a decode node (disaggregated serving).

``host_link``: the node's host link carries the whole cache (set-up + latency + bytes / bandwidth).
``p2p``: each socket holding part of the cache moves its own part over the P2P ports its node's
own topology leaves spare (:func:`spare_ports`: a 16-socket full mesh takes 15 of a socket's 16,
leaving one to join another node; every port was counted, 16 times the one that is there), so the
busiest socket sets the time: the part it holds (:func:`socket_shares`, the parts
:func:`~sn40l_sim.kvcache.sizing.kv_bytes_per_socket` gives to the sockets of the phase's plan) over
its ports at the calibrated P2P efficiency. Data-parallel decode attention puts a sequence's whole
cache on one socket, which then receives all of it; tensor-parallel attention splits it by KV heads,
and each socket receives its heads' rows beside the others. Both kinds add the calibrated
``transfer_setup_s``. A prefill node of other hardware (``prefill_hardware``) sends over its own
links: the transfer takes the longer of the two ends and waits the longer set-up and latency.

Examples
--------
The KV of a 32K-token SnapStream cache of DeepSeek-R1 (71,424 B per token with the MTP layer) over
the 16-socket node's host link, and over P2P where a decode socket receives all of it and the
prefill sockets send a sixteenth each:

>>> from sn40l_sim.hardware.loader import load_hardware
>>> node = load_hardware("hw_configs/sn40l_node16.yaml")
>>> n = 32768 * 71424
>>> host = transfer_seconds(node, "host_link", n)
>>> host == node.socket.calibrated.transfer_setup_s + node.host_link.latency_s + n / node.host_link.bytes_per_s
True
>>> p2p, socket = node.socket.p2p, node.socket
>>> port_bytes_per_s = spare_ports(node) * p2p.bytes_per_s_per_port * socket.calibrated.p2p_efficiency
>>> transfer_seconds(node, "p2p", n, shares=(1 / 16, 1.0)) == (socket.calibrated.transfer_setup_s + p2p.latency_s
...                                                          + n / port_bytes_per_s)
True
"""
from __future__ import annotations

from sn40l_sim.errors import InputError
from sn40l_sim.hardware.spec import NodeSpec
from sn40l_sim.hardware.topology import ports_needed
from sn40l_sim.ir import ParallelPlan
from sn40l_sim.kvcache.base import KVPolicy, context_room, slot_new_tokens
from sn40l_sim.kvcache.sizing import (
    kv_bytes_per_socket,
    kv_bytes_per_socket_token,
    prefill_splits_rows,
    state_bytes_per_socket,
)
from sn40l_sim.models.params import kv_bytes_per_token
from sn40l_sim.models.spec import ModelSpec


def socket_shares(model: ModelSpec, prefill_plan: ParallelPlan, decode_plan: ParallelPlan,
                  include_mtp: bool | int = False, rows: int = 0) -> tuple[float, float]:
    """The fractions of one sequence's cache that the busiest prefill socket sends and the busiest
    decode socket receives: what each holds of it per token (:func:`kv_bytes_per_socket_token`) over
    the cache's bytes. For a cache of ``rows`` rows, where the prefill sockets split a shared KV
    head's rows by tokens (MLA), the busiest sends the whole rows it wrote, ``ceil(rows / sockets)``
    (:func:`~sn40l_sim.kvcache.sizing.kv_bytes_per_socket`), not a token's average share of each.

    >>> from sn40l_sim.models.loader import load_model
    >>> socket_shares(load_model("graphs/deepseek_r1.yaml"), ParallelPlan(16), ParallelPlan(16, 16))
    (0.0625, 1.0)
    >>> socket_shares(load_model("graphs/llama3_1_70b.yaml"), ParallelPlan(8), ParallelPlan(16))
    (0.125, 0.125)
    >>> socket_shares(load_model("graphs/deepseek_r1.yaml"), ParallelPlan(12), ParallelPlan(12, 12), rows=4096)
    (0.08349609375, 1.0)
    """
    per_token = kv_bytes_per_token(model, include_mtp=include_mtp)
    # a token's average share (a whole prompt's rows split by tokens round up to whole rows)
    send = kv_bytes_per_socket_token(model, prefill_plan, include_mtp=include_mtp, phase="prefill")
    if rows and prefill_splits_rows(model, prefill_plan):
        send = kv_bytes_per_socket(model, prefill_plan, 1, rows, include_mtp=include_mtp, phase="prefill") / rows
    receive = kv_bytes_per_socket_token(model, decode_plan, include_mtp=include_mtp)
    return send / per_token, receive / per_token


def sent_bytes(model: ModelSpec, policy: KVPolicy, prompt_len: int, max_new_tokens: int, drafts: int = 0) -> int:
    """Bytes of one request's trip: the cache ``policy`` keeps after a prompt of ``prompt_len``
    tokens and the state beside it that prefill's kernels build and decode's read (H2O's
    accumulated scores, ArkVale's page digests: :meth:`~sn40l_sim.kvcache.base.KVPolicy.prefill_state_bytes`,
    the prompt's, not that of the tokens decode adds to a slot reserved for them) of a sequence
    generating ``max_new_tokens`` with ``drafts`` drafts a step (whose MTP layers' caches go too).

    >>> from sn40l_sim.kvcache import make_policy
    >>> from sn40l_sim.models.loader import load_model
    >>> llama = load_model("graphs/llama3_1_8b.yaml")
    >>> sent_bytes(llama, make_policy("full", {}), 4096, 128) == 4096 * kv_bytes_per_token(llama)
    True
    >>> h2o = make_policy("h2o", {"budget": 1024})
    >>> sent_bytes(llama, h2o, 4096, 128) > 1024 * kv_bytes_per_token(llama)   # the scores go too
    True
    """
    rows = slot_new_tokens(max_new_tokens, drafts, context_room(model, prompt_len))
    # the state a prefill node holds for the transfer (sizing.prefill_kv_bytes_per_socket counts it)
    state = policy.prefill_state_bytes(model, prompt_len, rows)
    return (policy.cache_len(prompt_len, 0) * kv_bytes_per_token(model, include_mtp=drafts)
            + state_bytes_per_socket(model, ParallelPlan(), 1, state, include_mtp=drafts))


def held_tokens(model: ModelSpec, policy: KVPolicy, prefill_plan: ParallelPlan, max_new_tokens: int, drafts: int,
                prompt_len: int) -> int:
    """Tokens of a prefill node's hold room (free tokens counted at a prompt token's bytes on its
    busiest socket, :func:`~sn40l_sim.kvcache.sizing.kv_tokens_fitting`) that a prefilled cache
    takes while it waits for its transfer: its kept rows and, in tokens' worth of bytes rounded up,
    the policy's state :func:`sent_bytes` sends with them, which each socket holds whole for its KV
    heads (ArkVale's digests take R1's prefill socket as many bytes as the prompt's rows do).

    >>> from sn40l_sim.kvcache import make_policy
    >>> from sn40l_sim.models.loader import load_model
    >>> r1, plan = load_model("graphs/deepseek_r1.yaml"), ParallelPlan(16)
    >>> held_tokens(r1, make_policy("full", {}), plan, 1024, 0, 32768)
    32768
    >>> held_tokens(r1, make_policy("arkvale", {"budget": 8192}), plan, 1024, 0, 32768)
    65536
    """
    rows = slot_new_tokens(max_new_tokens, drafts, context_room(model, prompt_len))
    state = state_bytes_per_socket(model, prefill_plan, 1, policy.prefill_state_bytes(model, prompt_len, rows),
                                   include_mtp=drafts)
    per_token = kv_bytes_per_socket_token(model, prefill_plan, include_mtp=drafts, phase="prefill")
    return policy.cache_len(prompt_len, 0) + -(-state // per_token)


def transfer_seconds(node: NodeSpec, kind: str, n_bytes: int, sender: NodeSpec | None = None, *,
                     shares: tuple[float, float] = (1.0, 1.0)) -> float:
    """Seconds to move ``n_bytes`` of KV from a prefill node (``sender``, or one of ``node``'s
    hardware) to a decode node (``node``); ``shares``: the fractions of them the busiest sending and
    receiving socket move over P2P (:func:`socket_shares`; the host link carries them all).

    >>> from sn40l_sim.hardware.loader import load_hardware, with_overrides
    >>> node = load_hardware("hw_configs/sn40l_node16.yaml")
    >>> slow = with_overrides(node, {"host_link.bytes_per_s": node.host_link.bytes_per_s / 8})
    >>> transfer_seconds(node, "host_link", 2**30, sender=slow) == transfer_seconds(slow, "host_link", 2**30)
    True
    """
    ends = (sender or node, node)
    setup = max(end.socket.calibrated.transfer_setup_s for end in ends)
    links = [_transfer_link(end, kind) for end in ends]
    latency = max(latency_s for _, latency_s in links)
    parts = shares if kind == "p2p" else (1.0, 1.0)
    return setup + latency + max(n_bytes * part / bytes_per_s for part, (bytes_per_s, _) in zip(parts, links, strict=True))


def spare_ports(node: NodeSpec) -> int:
    """The P2P ports of each of ``node``'s sockets that its own topology leaves free, to join
    another node (at most none: the node's check refuses a topology needing more than there are).

    >>> from sn40l_sim.hardware.loader import load_hardware
    >>> spare_ports(load_hardware("hw_configs/sn40l_node16.yaml")), spare_ports(load_hardware("hw_configs/sn40l_node8.yaml"))
    (1, 9)
    """
    needed = ports_needed(node.sockets, node.topology.kind, node.topology.links_per_pair)
    return max(0, node.socket.p2p.ports - needed)


def _transfer_link(end: NodeSpec, kind: str) -> tuple[float, float]:
    """(bytes per second, latency in seconds) of one end's side of a KV transfer of ``kind``: the
    node's host link, or one socket's P2P ports its node's topology leaves spare."""
    if kind == "host_link":
        if end.host_link is None:
            raise InputError(f"the hardware {end.name} has no host_link to carry the KV cache between nodes "
                             "(add one, or carry it over the P2P links: kv_transfer p2p)")
        return end.host_link.bytes_per_s, end.host_link.latency_s
    socket = end.socket
    spare = spare_ports(end)
    if spare == 0:
        needed = ports_needed(end.sockets, end.topology.kind, end.topology.links_per_pair)
        raise InputError(f"the hardware {end.name} has no P2P port to spare to join another node: its "
                         f"{end.topology.kind} of {end.sockets} sockets takes {needed} of each socket's "
                         f"socket.p2p.ports ({socket.p2p.ports}); expected at least one more port, or the KV "
                         "carried over the host link (kv_transfer host_link)")
    return spare * socket.p2p.bytes_per_s_per_port * socket.calibrated.p2p_efficiency, socket.p2p.latency_s
