"""The process of a co-located node that prefills whole prompts (without chunks; with them,
:func:`sn40l_sim.serving.chunked_prefill.chunked_colocated_node`): when a request waits and a slot
is free it prefills it, its decode steps waiting (prefill blocks decode), else it runs decode steps,
loading the configurations the other graph took where it switches (docs/architecture.md, serving:
"A co-located node that switches graphs")."""
from __future__ import annotations

from collections.abc import Generator
from typing import Any

from sn40l_sim.serving.scheduler import Wait


def colocated_node(serving: Any, node: Any) -> Generator[Wait, None, None]:
    """The process of co-located ``node`` (``serving`` is the loop's state,
    :class:`sn40l_sim.serving.loop._Serving`). It yields the cycles to wait or the signal to wait
    for (:meth:`sn40l_sim.serving.scheduler.Scheduler.process`)."""
    while True:
        if serving.waiting and node.table.free:
            log = serving.waiting.popleft()
            log.decode_node, log.slot, log.slot_acquired = node.index, node.table.acquire(log.request.id), serving.env.now
            node.hold(log)
            # a prefix hit runs its suffix's graph over the reused tokens' keys, so it loads that
            # graph's configurations, as a later chunk loads its own: the hit is known before the
            # switch (only this node's own requests, finishing in its own steps, release the
            # prefixes it holds)
            cycles, rows = serving._prefill_graph(log, node.index)
            reused = log.request.prompt_len - rows
            yield from serving.switch_to(node, "prefill", rows, part=reused > 0, earlier=reused, hit=True)
            log.prefill_node, log.prefill_start = node.index, serving.env.now
            yield cycles
            serving._end_prefill(log, node.index, serving.busy["colocated_prefill"], cycles)
            serving._prefilled_here(node, log)
            continue
        serving._join(node)
        if node.book.stepping:
            yield from serving.switch_to(node, "decode")
            # a request that arrived during the loads waits for this step only
            yield from serving._decode_steps(node, 1 if serving.waiting and node.table.free else None)
        else:
            yield serving.arrival
