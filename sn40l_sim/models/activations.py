"""Activation traffic of a graph's kernels, derived from the activations their operators name
(:mod:`sn40l_sim.models.builder`): :func:`with_activations`.

Inside a fused kernel an activation produced and consumed there stays on chip; an activation a
kernel reads that it did not produce is ``act_in_bytes`` of its first reader, and one it produces
is ``act_out_bytes`` of its last writer when a later kernel reads it or nothing in the kernel
consumes it. Further reads of an input (``Step.rereads``: FlashAttention's K/V tiles, once per
query tile) add to ``act_in_bytes`` and to ``act_reread_bytes``: they cost traffic, not resident
memory (:attr:`~sn40l_sim.ir.FusedKernel.resident_activation_bytes`). Each operator also names
the operators of its kernel whose outputs it reads (:attr:`~sn40l_sim.ir.Operator.producers`), the
kernel's dataflow graph.
"""
from __future__ import annotations

from dataclasses import replace

from sn40l_sim.frozen import copied
from sn40l_sim.ir import FusedKernel, Operator
from sn40l_sim.models.context import Step


def with_activations(parts: list) -> list[FusedKernel]:
    """Set act_in / act_out bytes from the named activations and name each kernel instance.

    A kernel's outputs leave it when a later kernel reads them before one writes them again (or
    nothing in the kernel reads them after it writes them). One pass from the last kernel back
    answers that for every kernel; identical layers (the same built steps, the same answers) then
    share one computation of their operators.
    """
    flows = {id(per_op): [s for steps in per_op for s in steps] for _, _, per_op, _ in parts}
    first: dict[int, dict[str, bool]] = {key: _first_use(steps) for key, steps in flows.items()}
    # for each kernel, the names a later kernel reads before any kernel writes them again
    read_later: list[dict[str, bool]] = [{}] * len(parts)
    later: dict[str, bool] = {}
    for i in range(len(parts) - 1, -1, -1):
        read_later[i] = later
        uses = first[id(parts[i][2])]
        if uses:
            later = {**later, **uses}
    produced = {key: {n for s in steps for n, _ in s.writes} for key, steps in flows.items()}
    done: dict[tuple[int, frozenset[str]], tuple[Operator, ...]] = {}
    out = []
    for i, (node, layer, per_op, kernel) in enumerate(parts):
        steps = flows[id(per_op)]
        if not steps:  # a policy's kernel: its own byte counts stand
            out.append(copied(kernel, name=node, layer=layer))
            continue
        key = (id(per_op), frozenset(n for n in produced[id(per_op)] if read_later[i].get(n, False)))
        if key not in done:
            done[key] = _operators_with_activations(steps, key[1])
        out.append(copied(kernel, name=node, layer=layer, operators=done[key]))
    return out


def _first_use(steps: list[Step]) -> dict[str, bool]:
    """Name -> whether a kernel's steps first read it (True) or first write it (False); a step
    that does both reads first."""
    out: dict[str, bool] = {}
    for s in steps:
        for name, _ in s.reads:
            out.setdefault(name, True)
        for name, _ in s.writes:
            out.setdefault(name, False)
    return out


def _operators_with_activations(steps: list[Step], read_later: frozenset[str]) -> tuple[Operator, ...]:
    """The kernel's operators with their activation bytes: what they read that no earlier step of
    the kernel wrote, and the last write of each name a later kernel reads (``read_later``) or no
    later step of this kernel reads."""
    produced: set[str] = set()
    seen_in: set[str] = set()
    act_in = [0] * len(steps)
    reread = [0] * len(steps)
    # the steps whose outputs each step reads on chip: the latest writer of each name it reads, and
    # the conversions just before it (a GEMM's FP8 weights widened, a cache's elements widened or
    # narrowed: :mod:`sn40l_sim.models.context`), which name no activation and serve the next
    # operator that does, reading only memory themselves; and a cache read waits for the kernel's
    # latest cache write before it (decode attends to the rows this step writes)
    writer: dict[str, int] = {}
    sources: list[list[int]] = []
    pending: list[int] = []
    cache_writer = -1
    for j, s in enumerate(steps):
        if not (s.reads or s.writes or s.rereads):
            sources.append([])
            pending.append(j)
            continue
        reads_cache = s.op.kv_read_bytes or s.op.kv_offload_read_bytes
        sources.append(sorted({writer[name] for name, _ in s.reads if name in writer} | set(pending)
                              | ({cache_writer} if reads_cache and cache_writer >= 0 else set())))
        pending = []
        writer.update((n, j) for n, _ in s.writes)
        if s.op.kv_write_bytes or s.op.kv_offload_write_bytes:
            cache_writer = j
        for name, size in s.reads:
            if name not in produced and name not in seen_in:
                seen_in.add(name)
                act_in[j] += size
        # streamed again from memory: traffic, not a second resident copy
        for name, size in s.rereads:
            if name not in produced:
                act_in[j] += size
                reread[j] += size
        produced.update(n for n, _ in s.writes)
    # the step that writes each name last, and the last step that reads it (one pass, not one per name)
    last_write: dict[str, int] = {}
    last_read: dict[str, int] = {}
    for j, s in enumerate(steps):
        for n, _ in s.writes:
            last_write[n] = j
        for n, _ in s.reads:
            last_read[n] = j
    act_out = [0] * len(steps)
    for name in produced:
        last = last_write[name]
        read_after = last_read.get(name, -1) > last
        if name in read_later or not read_after:
            act_out[last] += dict(steps[last].writes)[name]
    ops = _unique([_with_bytes(s.op, a, b, r) for s, a, b, r in zip(steps, act_in, act_out, reread, strict=True)])
    return tuple(copied(op, producers=tuple(ops[i].name for i in got)) for op, got in zip(ops, sources, strict=True))


def _with_bytes(op: Operator, act_in: int, act_out: int, reread: int) -> Operator:
    """``op`` with the activation bytes added (``op`` itself when there are none)."""
    if not (act_in or act_out or reread):
        return op
    return copied(op, act_in_bytes=op.act_in_bytes + act_in, act_out_bytes=op.act_out_bytes + act_out,
                  act_reread_bytes=op.act_reread_bytes + reread)


def _unique(ops: list[Operator]) -> list[Operator]:
    seen: dict[str, int] = {}
    out = []
    for op in ops:
        seen[op.name] = seen.get(op.name, 0) + 1
        out.append(op if seen[op.name] == 1 else replace(op, name=f"{op.name}#{seen[op.name]}"))
    return out
