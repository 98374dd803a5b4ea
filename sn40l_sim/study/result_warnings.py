"""Warnings about what a simulated point did with its memory and batch, told against the experiment
file's lines: its KV or one prompt's activations left the first memory tier, or ``shape.batch`` was
not the batch served (:mod:`sn40l_sim.study.runner` gives each point's result to them).
"""
from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sn40l_sim.study.experiment import Experiment
    from sn40l_sim.study.points import Point


def warn_kv_spilled(exp: Experiment, point: Point, result: Any) -> None:
    """Warn when ``batch: max`` chose a batch whose KV left the first tier (``memory.may_spill``
    lists kv): it is the largest batch that fits, and every decode step reads that KV from the
    slower tier, so the step and the tokens per second can be far from a smaller batch's."""
    memory = result.memory
    spilled = {tier: uses.get("kv", 0) for tier, uses in memory.by_tier.items()
               if tier != memory.first_tier and uses.get("kv", 0)}
    if not spilled:
        return
    first = memory.first_tier.upper()
    where_kv = " and ".join(f"{n / 2**30:.1f} GiB in {tier.upper()}" for tier, n in spilled.items())
    smaller = (f"the largest compiled batch whose KV stays in {first} is {result.kv_first_tier_batch} "
               f"(serving.batch: {result.kv_first_tier_batch} runs it)" if result.kv_first_tier_batch is not None
               else f"no compiled batch keeps its KV in {first}")
    file, line = exp.doc.where(("serving", "batch"))
    at = f"{file}:{line}: " if line is not None else f"{file}: "
    warnings.warn(f"{at}serving.batch (point {point.name}): max chose batch {result.batch}, whose KV puts {where_kv} "
                  f"per socket (memory.may_spill lists kv), read from there at every decode step "
                  f"({result.decode.seconds * 1e3:.1f} ms a step); {smaller}", stacklevel=2)


def warn_prefill_activations_spilled(exp: Experiment, point: Point, result: Any) -> None:
    """Warn when one prompt's activations left a prefill node's first tier (a co-located node's,
    beside its decode batch's KV) by ``memory.may_spill``'s default, not by a ``may_spill`` the
    experiment wrote (``experiments/long_context_1m.yaml``): every prefill kernel then streams them
    at the slower tier's pace, and the TTFT can be several times longer (Llama-3.1-405B at 128K on
    16 sockets: 66.9 s, 20.4 s with room in HBM; docs/validation.md, "Prefill across models,
    lengths and sockets")."""
    colocated = result.prefill_memory is None
    memory = result.memory if colocated else result.prefill_memory
    if result.prefill is None or ("memory", "may_spill") in exp.doc.origins:
        return
    spilled = {tier: uses.get("activations", 0) for tier, uses in memory.by_tier.items()
               if tier != memory.first_tier and uses.get("activations", 0)}
    if not spilled:
        return
    total = memory.total("activations")
    node, fewer = ("co-located node", f"a smaller serving.batch (it runs {result.batch}) or a serving.prefill_chunk needs "
                   "fewer") if colocated else ("prefill node", "more prefill sockets or a shorter compiled prompt "
                                               "need fewer per socket")
    where = " and ".join(f"{n / 2**30:.2f} GiB in {tier.upper()}" for tier, n in spilled.items())
    file, line = exp.doc.where(("shape", "prompt_len"))
    at = f"{file}:{line}: " if line is not None else f"{file}: "
    warnings.warn(f"{at}shape.prompt_len (point {point.name}): one prompt's prefill puts {where} of its "
                  f"{total / 2**30:.2f} GiB of activations per socket (memory.may_spill lists activations by "
                  f"default), where the {node}'s weights and KV leave {memory.first_tier.upper()} too little "
                  f"room; every kernel streams them from there (prefill {result.prefill.seconds:.3f} s); {fewer}",
                  stacklevel=2)


def warn_shape_batch_unserved(exp: Experiment, point: Point, served_batch: int) -> None:
    """Warn when the experiment writes ``shape.batch`` but no ``serving.batch``, and ``max`` (the
    default) served another batch: ``shape.batch`` is the batch of ``map``'s graph, so an experiment
    meaning "one sequence at a time" with ``shape: {batch: 1}`` was timed at the largest batch that
    fits, without a word (Llama-3.1-70B, 16 sockets, 512-token prompts: 2048 sequences a step)."""
    shape_batch = exp.spec.shape.batch
    if ("shape", "batch") not in exp.doc.origins or ("serving", "batch") in exp.doc.origins \
            or served_batch == shape_batch:
        return
    file, line = exp.doc.where(("shape", "batch"))
    at = f"{file}:{line}: " if line is not None else f"{file}: "
    warnings.warn(f"{at}shape.batch (point {point.name}): {shape_batch} is the batch of map's graph; run serves "
                  f"serving.batch, which is max when not given and chose {served_batch} here "
                  f"(write serving.batch: {shape_batch} to serve {shape_batch} at a time)", stacklevel=2)
