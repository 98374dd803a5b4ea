"""What would fit, said where a point's memory does not (docs/robustness.md): the longest prompt whose
decode slot fits at a batch, what a sequence's KV takes of a socket without data-parallel attention,
and on a prefill node the longest compiled prefill length that fits and the ``memory.may_spill``
that would let the prompt run. :func:`sn40l_sim.serving.memory_fit.fit_memory` adds them to its
refusals.
"""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from sn40l_sim.errors import InfeasibleError, InputError
from sn40l_sim.ir import ParallelPlan
from sn40l_sim.kvcache.base import context_room, slot_new_tokens
from sn40l_sim.kvcache.footprint import KVFootprint, kv_bytes_by_use

if TYPE_CHECKING:
    from sn40l_sim.serving.memory_fit import MemoryFit
    from sn40l_sim.serving.point import PointSetup


def decode_prompt_hint(s: PointSetup, memory: MemoryFit, batch: int) -> str:
    """What would fit where not even the smallest compiled decode batch does: the longest prompt
    whose slot fits at ``batch`` on a decode node, found by bisection over the prompt (the slot,
    its policy state and the decode activations grow with it), or that no prompt does when the
    policy's slot does not depend on the prompt or when not even a 1-token prompt's does (the output's
    rows alone too many). Empty co-located, where the prompt's prefill
    shares the node (its compiled graph and cache would enter the search too)."""
    if s.mode != "disaggregated":
        return ""
    try:
        return _decode_prompt_hint(s, memory, batch)
    except InputError:       # a policy that refuses a shorter prompt (too short to select from)
        return ""


def _decode_prompt_hint(s: PointSetup, memory: MemoryFit, batch: int) -> str:
    def footprint(prompt: int) -> KVFootprint:
        new_tokens = slot_new_tokens(s.max_new_tokens, s.speculation.drafts, context_room(s.model, prompt))
        return s.policy.footprint(s.model, prompt, new_tokens)

    def fits(prompt: int) -> bool:
        try:
            memory.decode_fits_footprint(batch, footprint(prompt))
        except InfeasibleError:
            return False
        return True

    if footprint(1) == memory.footprint:
        return (f"; no prompt fits at batch {batch} (what a sequence keeps does not shrink with the prompt "
                "below it): more sockets, a narrower kv_dtype or a smaller KV budget would")
    if not fits(1):
        # the slot shrinks with the prompt, but what is left of it is the output's rows: blaming a
        # slot that "does not shrink" sent a 131,000-token output looking for a smaller KV budget
        return (f"; not even a 1-token prompt fits at batch {batch} with {s.max_new_tokens} generated after it: "
                "fewer new tokens (max_new_tokens), more sockets, a narrower kv_dtype or a smaller KV budget would")
    lo, hi = 1, s.prompt_len       # lo fits, hi does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return (f"; at batch {batch} prompts of up to {lo} tokens fit, with {s.max_new_tokens} generated after "
            "each")


def prefill_prompt_hint(s: PointSetup, memory: MemoryFit) -> str:
    """What would fit where one prompt does not fit a prefill node: the longest compiled prefill
    length that does (every prompt up to it runs a graph no longer), and the uses that, let spill
    (``memory.may_spill``), would let this prompt run."""
    hints = []
    # the weights are not offered: streamed from DDR they would slow every kernel of the prompt
    options = [(*s.may_spill, *extra) for extra in (("activations",), ("kv",), ("activations", "kv"))
               if not set(extra) & set(s.may_spill)]
    spill = next((option for option in options if memory.prefill_fits_with(memory.prefill_len, option)), None)
    if spill is not None:
        hints.append(f"it runs with memory.may_spill: [{', '.join(spill)}]")
    shorter = next((n for n in sorted(s.prefill_lens, reverse=True)
                    if n < memory.prefill_len and memory.prefill_fits_with(n, s.may_spill)), None)
    hints.append(f"prompts of up to {shorter} tokens fit as it is" if shorter is not None
                 else "no compiled prefill length fits as it is")
    return "; " + "; ".join(hints)


def attention_dp_hint(s: PointSetup, memory: MemoryFit) -> str:
    """Where not even the smallest compiled decode batch fits under data-parallel attention, what
    one sequence's KV takes of a socket there and under ``attention_dp: 1``, when that splits it
    over more sockets (GQA's KV heads; MLA's latent is whole on every socket either way): attention
    DP over every socket puts a sequence's whole cache on one socket while the others hold none
    (Llama-3.1-405B at 32K on 16 sockets: no batch fits at attention DP 16, four at 1)."""
    plan = s.decode_plan
    if plan.attention_dp == 1:
        return ""

    def one_sequence(p: ParallelPlan) -> int:
        return kv_bytes_by_use(s.model, p, 1, memory.footprint, include_mtp=memory.include_mtp)["kv"]

    here, split = one_sequence(plan), one_sequence(replace(plan, attention_dp=1))
    if split >= here:
        return ""
    return (f"; one sequence's KV takes {here / 2**30:.2f} GiB of a socket at attention_dp {plan.attention_dp}, "
            f"{split / 2**30:.2f} GiB with parallel.decode.attention_dp: 1 (its KV heads split over {plan.tp} sockets)")
