"""Chunked prefill on a co-located node: prefill split into chunks that take turns with decode steps.

Without chunking a co-located node prefills every waiting prompt (while it has free slots) before
its next decode step, so a long prompt stalls every sequence decoding on the node for its whole
prefill: the TPOT interference that shows in the percentiles. With ``serving.prefill_chunk: C``
the node prefills at most ``C`` prompt tokens between two decode steps (Sarathi-Serve's chunked
prefill, OSDI 2024), continuing the same prompt, first come first served, at the next turn. SN40L
runs one static graph at a time, so a chunk and a decode step run one after the other rather than
fused into one batch: a decode step waits for at most ``C`` tokens of prefill.

A chunk of prompt tokens ``[start, end)`` costs ``prefill(end)`` cycles when it starts the prompt,
else ``max(prefill(end - start), prefill(end) - prefill(start))``: the graph compiled for the chunk's
length, or what the prompt costs beyond the tokens already prefilled, whichever is larger (the
second keeps the attention over the earlier chunks' keys). The chunks of a prompt therefore cost at
least its unchunked prefill: the price of the lower interference. The budget spans prompts (a turn
finishes one prompt and starts the next), so a chunk at least as long as all the prompts that ever
wait at once gives exactly the unchunked schedule; one as long as a single prompt may still split
the second of two waiting prompts. Every turn switches graphs twice, so each chunk and each decode
step after one first loads the configurations the other graph took (the loop's ``switch_to``).

Examples
--------
>>> chunk_cycles(lambda p: p * p, 0, 4), chunk_cycles(lambda p: p * p, 4, 8), chunk_cycles(lambda p: 100 + p, 4, 8)
(16, 48, 104)
"""
from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

from sn40l_sim.serving.scheduler import Wait


def chunk_cycles(prefill_cycles: Callable[[int], int], start: int, end: int) -> int:
    """Cycles of prefilling prompt tokens ``[start, end)`` after ``start`` tokens were prefilled."""
    if start == 0:
        return prefill_cycles(end)
    return max(prefill_cycles(end - start), prefill_cycles(end) - prefill_cycles(start))


def chunked_colocated_node(serving: Any, node: Any, chunk: int) -> Generator[Wait, None, None]:
    """The process of one co-located node with chunked prefill (``serving`` is the loop's
    state, :class:`sn40l_sim.serving.loop._Serving`; ``node`` its decode node). It yields the
    cycles to wait or the signal to wait for (:meth:`sn40l_sim.serving.scheduler.Scheduler.process`)."""
    env, setup = serving.env, serving.setup
    log, done = None, 0          # the prompt being prefilled and its tokens prefilled so far
    while True:
        budget = chunk
        while budget > 0:
            if log is None:
                if not (serving.waiting and node.table.free):
                    break
                log, done = serving.waiting.popleft(), 0
                log.decode_node, log.slot, log.slot_acquired = node.index, node.table.acquire(log.request.id), env.now
                log.prefill_node = node.index
                node.hold(log)
            end = min(log.request.prompt_len, done + budget)
            yield from serving.switch_to(node, "prefill", log.request.prompt_len)
            if done == 0:   # after the graph switch, as an unchunked prefill starts
                log.prefill_start = env.now
            cycles = chunk_cycles(setup.prefill_cycles, done, end)
            yield cycles
            log.prefill_chunks.append((env.now - cycles, env.now))
            serving.busy["colocated_prefill"][node.index] += cycles
            budget -= end - done
            done = end
            if done == log.request.prompt_len:
                log.first_token = env.now
                log.add_token(env.now)
                serving._prefilled_here(node, log)
                log = None
        serving._join(node)
        if node.book.stepping:
            # with prefill still to do, one step and then the next chunk; else a run of steps until
            # something else is due (an arrival: the book's own limit), as without chunks
            yield from serving.switch_to(node, "decode")
            pending = log is not None or bool(serving.waiting and node.table.free)
            yield from serving._decode_steps(node, 1 if pending else None)
        elif log is None and not (serving.waiting and node.table.free):
            yield serving.arrival
