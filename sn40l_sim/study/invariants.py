"""Physical invariants checked on every simulated point (docs/design.md §5): a violated one is a bug
in the simulator, so the run stops with an :class:`~sn40l_sim.errors.InvariantError` naming it (exit
status 3) rather than report a number that cannot be right.

The checks read only what a run produces: each phase's
:class:`~sn40l_sim.engine.phase.PhaseTiming`, the memory placements, the serving log, the requests
that went in, and the results record. They hold whatever the engine's inner workings, so a new
mechanism in the engine keeps them or breaks them visibly.

``bytes_conserved``
    Per memory tier, the bytes a step moved are its kernels' streams plus what its collectives
    staged through memory (and those add up to the staged bytes the links report); the TLN carried
    every tier's bytes; one socket sends no more than all the links carry.
``requests_served_once``
    Every request that went in comes out exactly once, with all its output tokens, in time order
    (arrival, prefill, first token, ..., last token = finish).
``memory_within_capacity``
    In each memory placement, each tier holds no more than its usable capacity; at every decode
    step the KV held is within what the node's slots reserve, and no more slots are in use than
    the node has.
``units_within_peak``
    In each step, no memory tier moves bytes faster than its achievable bandwidth, the socket
    computes no more FLOPs than its peak allows, and no resource is busy longer than the step.
``utilisation_in_unit_interval``
    Every utilisation, occupancy and share the record reports is in [0, 1], and the shares of a
    layer add up to 1.
``finite_results``
    Every number the record reports is finite: a figure that does not exist is empty (None), so a
    NaN or an infinity is a bug, which the results files would otherwise write as empty too.

Examples
--------
>>> sorted(INVARIANTS) == sorted(NAMES)
True
>>> check_bytes({"hbm": 100}, [{"hbm": 60}], {"p2p_staged": 40, "tln": 100})
>>> check_bytes({"hbm": 100}, [{"hbm": 60}], {"p2p_staged": 30, "tln": 100})
Traceback (most recent call last):
...
sn40l_sim.errors.InvariantError: invariant bytes_conserved violated: the tiers moved 40 B besides the kernels' streams, the collectives staged 30 B
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from sn40l_sim.engine.phase import PhaseTiming
from sn40l_sim.errors import InvariantError
from sn40l_sim.hardware import figures
from sn40l_sim.hardware.spec import NodeSpec
from sn40l_sim.mapper.placement import MemoryPlacement
from sn40l_sim.serving.loop import ServingLog
from sn40l_sim.serving.point import PointResult
from sn40l_sim.serving.workload import Request

#: invariant -> what it says (docs/results.md lists them under ``invariants``)
INVARIANTS: dict[str, str] = {
    "bytes_conserved": "per memory tier, bytes moved = the kernels' streams + what collectives staged; "
                       "the TLN carried every tier's bytes; a socket sends no more than the links carry",
    "requests_served_once": "every request that went in is served exactly once, with all its tokens, in time order",
    "memory_within_capacity": "each memory tier within its usable capacity; each decode step's KV within the "
                              "slots' reservation",
    "units_within_peak": "no tier faster than its achievable bandwidth, no more FLOPs than the peak allows, no "
                         "resource busy longer than the step",
    "utilisation_in_unit_interval": "every utilisation, occupancy and share in [0, 1]; a layer's shares add up to 1",
    "finite_results": "every number of the record finite (a figure that does not exist is empty, not NaN)",
}
NAMES = tuple(INVARIANTS)
#: relative slack for sums of floats (bytes and cycles are integers and compare exactly)
REL_TOL = 1e-9


def _fail(name: str, detail: str) -> InvariantError:
    return InvariantError(name, detail)


def check_bytes(tier_bytes: Mapping[str, int], kernel_tier_bytes: Iterable[Mapping[str, int]],
                link_bytes: Mapping[str, int], phase: str = "") -> None:
    """``bytes_conserved`` for one step: tier totals against the kernels' streams and the staged
    collectives, the TLN against the tiers, what one socket sent against the links."""
    where = f"{phase}: " if phase else ""
    kernels: dict[str, int] = {}
    for per_kernel in kernel_tier_bytes:
        for tier, n in per_kernel.items():
            kernels[tier] = kernels.get(tier, 0) + n
    extra = 0
    for tier in sorted(set(tier_bytes) | set(kernels)):
        moved, streamed = tier_bytes.get(tier, 0), kernels.get(tier, 0)
        if moved < streamed:
            raise _fail("bytes_conserved", f"{where}{tier} moved {moved} B, less than its kernels' streams "
                        f"({streamed} B)")
        extra += moved - streamed
    staged = link_bytes.get("p2p_staged", 0)
    if extra != staged:
        raise _fail("bytes_conserved", f"{where}the tiers moved {extra} B besides the kernels' streams, the "
                    f"collectives staged {staged} B")
    if "tln" in link_bytes and link_bytes["tln"] != sum(tier_bytes.values()):
        raise _fail("bytes_conserved", f"{where}the TLN carried {link_bytes['tln']} B but the tiers moved "
                    f"{sum(tier_bytes.values())} B")
    if link_bytes.get("p2p_sent", 0) > link_bytes.get("p2p", 0):
        raise _fail("bytes_conserved", f"{where}the socket sent {link_bytes['p2p_sent']} B over P2P, more than all "
                    f"the links carried ({link_bytes.get('p2p', 0)} B)")


def check_peaks(timing: PhaseTiming, node: NodeSpec) -> None:
    """``units_within_peak`` for one step (a :class:`~sn40l_sim.engine.phase.PhaseTiming`)."""
    socket, cycles = node.socket, int(timing.cycles)
    for name, busy in timing.resource_busy_cycles.items():
        if busy < 0 or busy > cycles:
            raise _fail("units_within_peak", f"{timing.phase}: {name} busy {busy} cycles in a step of {cycles}")
    for tier, moved in timing.tier_bytes.items():
        if tier not in socket.memory:
            raise _fail("units_within_peak", f"{timing.phase}: bytes moved on {tier!r}, which the socket does not have")
        per_cycle = figures.memory_bytes_per_s(socket, tier) * socket.memory[tier].efficiency / socket.clock_hz
        if moved > per_cycle * cycles * (1 + REL_TOL) + 1:
            raise _fail("units_within_peak", f"{timing.phase}: {tier} moved {moved} B in {cycles} cycles, above its "
                        f"achievable {per_cycle:.6g} B/cycle")
    peak = max(figures.peak_flops(socket, dtype) for dtype in socket.pcu.macs_per_lane_stage_per_cycle)
    flops = sum(k.flops for k in timing.kernels)
    if flops > peak / socket.clock_hz * cycles * (1 + REL_TOL):
        raise _fail("units_within_peak", f"{timing.phase}: {flops:.6g} FLOPs in {cycles} cycles, above the socket's "
                    f"peak of {peak / socket.clock_hz:.6g} FLOP/cycle")
    for k in timing.kernels:
        if not 0 <= k.start_cycle <= k.end_cycle <= cycles:
            raise _fail("units_within_peak", f"{timing.phase}: kernel {k.name} runs from cycle {k.start_cycle} to "
                        f"{k.end_cycle} in a step of {cycles}")


def check_memory(placements: Sequence[MemoryPlacement], log: ServingLog | None) -> None:
    """``memory_within_capacity``: every placement within each tier's usable capacity, every decode
    step's KV within the slots' reservation."""
    for placement in placements:
        for tier, uses in placement.by_tier.items():
            held, usable = sum(uses.values()), placement.capacity.get(tier, 0)
            if held > usable:
                raise _fail("memory_within_capacity", f"{tier} holds {held} B per socket, above its usable "
                            f"{usable} B ({dict(uses)})")
    if log is None:
        return
    reserved, slots = log.setup.kv_capacity_bytes, log.setup.slots
    steps = log.steps
    in_use, active = steps.column("slots_in_use"), steps.column("active")
    over = np.flatnonzero((steps.column("kv_bytes") > reserved) | (in_use > slots) | (active > in_use))
    if over.size:
        step = steps[int(over[0])]
        raise _fail("memory_within_capacity", f"decode node {step.node} at cycle {step.end}: {step.kv_bytes} B of KV "
                    f"for {step.active} active sequences in {step.slots_in_use} slots; the node reserves "
                    f"{reserved} B for {slots} slots")


def check_prefixes(log: ServingLog | None) -> None:
    """``memory_within_capacity`` for prefix caching: the prefixes a prefill node held stayed within
    the room its memory placement left, and every one was freed with its last user."""
    prefixes = getattr(log, "prefixes", None) if log is not None else None
    if prefixes is None:
        return
    capacity = prefixes.caching.capacity_tokens
    if capacity is not None and prefixes.peak_prefill_prefix_tokens > capacity:
        raise _fail("memory_within_capacity", f"a prefill node held {prefixes.peak_prefill_prefix_tokens} prefix "
                    f"tokens, above the {capacity} its free memory holds")
    if any(prefixes.held) or prefixes.holder:
        raise _fail("memory_within_capacity", "prefixes still held after every request finished")


def check_requests(log: ServingLog | None, requests: Sequence[Request]) -> None:
    """``requests_served_once``: the requests that went in come out once each, whole, in order."""
    if log is None:
        return
    given = sorted(r.id for r in requests)
    served = sorted(r.request.id for r in log.requests)
    if given != served:
        missing = sorted(set(given) - set(served))
        twice = sorted({i for i in served if served.count(i) > 1})
        raise _fail("requests_served_once", f"{len(given)} requests went in, {len(served)} came out (missing "
                    f"{missing[:5]}, served more than once {twice[:5]})")
    for r in log.requests:
        tokens, req = r.token_array(), r.request
        ordered = bool(np.all(tokens[1:] >= tokens[:-1]))
        if (len(tokens) != req.output_len or not ordered or r.prefill_start < req.arrival_cycle
                or tokens[0] != r.first_token or tokens[-1] != r.finish or r.first_token < r.prefill_start):
            raise _fail("requests_served_once", f"request {req.id}: {len(tokens)} of {req.output_len} tokens, arrival "
                        f"{req.arrival_cycle}, prefill from {r.prefill_start}, first token {r.first_token}, finish "
                        f"{r.finish}, tokens in order: {ordered}")


#: the busy roles of a co-located node (the serving loop's ``busy``), which never overlap in time
COLOCATED_ROLES = ("colocated_prefill", "graph_switch", "decode")


def _fractions(value: Any, path: str) -> Iterable[tuple[str, float]]:
    if isinstance(value, Mapping):
        for key, item in value.items():
            yield from _fractions(item, f"{path}.{key}")
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _fractions(item, f"{path}[{i}]")
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        yield path, float(value)


def check_fractions(record: Mapping[str, Any]) -> None:
    """``utilisation_in_unit_interval`` on a results record."""
    occupancy = record.get("kv_occupancy") or {}
    values = list(_fractions(record.get("utilisation"), "utilisation"))
    values += [(f"kv_occupancy.{k}", occupancy[k]) for k in ("peak_fraction", "mean_fraction") if k in occupancy]
    values += list(_fractions(record.get("prefill_kernel_share"), "prefill_kernel_share"))
    for path, value in values:
        if not (math.isfinite(value) and -REL_TOL <= value <= 1 + REL_TOL):
            raise _fail("utilisation_in_unit_interval", f"{path} is {value:g}")
    shares = record.get("prefill_kernel_share") or {}
    if shares and not math.isclose(sum(shares.values()), 1.0, rel_tol=1e-6):
        raise _fail("utilisation_in_unit_interval", f"prefill_kernel_share adds up to {sum(shares.values()):.9g}, not 1")
    # a co-located node prefills, loads configurations and decodes one after the other
    nodes = (record.get("utilisation") or {}).get("nodes") or {}
    if "colocated_prefill" in nodes:
        roles = [nodes[role] for role in COLOCATED_ROLES if role in nodes]
        for index, busy in enumerate(map(sum, zip(*roles, strict=True))):
            if busy > 1 + REL_TOL:
                raise _fail("utilisation_in_unit_interval", f"co-located node {index} is busy {busy:g} of the run "
                            f"({' + '.join(r for r in COLOCATED_ROLES if r in nodes)})")


def check_finite(value: Any, path: str = "") -> None:
    """``finite_results`` on a results record (or any part of one).

    >>> check_finite({"a": [1.0, None], "b": {"c": 2}})
    >>> check_finite({"a": {"b": float("nan")}})
    Traceback (most recent call last):
    ...
    sn40l_sim.errors.InvariantError: invariant finite_results violated: a.b is nan
    """
    if isinstance(value, Mapping):
        for key, item in value.items():
            check_finite(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            check_finite(item, f"{path}[{i}]")
    elif isinstance(value, float) and not math.isfinite(value):
        raise _fail("finite_results", f"{path} is {value}")


def check_point(result: PointResult, record: Mapping[str, Any], requests: Sequence[Request] = ()) -> tuple[str, ...]:
    """Check every invariant on one simulated point; returns their names (what the record's
    ``invariants`` field lists).

    Raises
    ------
    InvariantError
        The first invariant the point breaks, naming it and the point.
    """
    try:
        prefill_node = result.setup.prefill_node if result.setup.prefill_node is not None else result.setup.node
        for timing, node in ((result.prefill, prefill_node), (result.decode, result.setup.node)):
            if timing is None:   # a steps-only evaluation that did not simulate the prefill
                continue
            check_bytes(timing.tier_bytes, (k.tier_bytes for k in timing.kernels), timing.link_bytes, timing.phase)
            check_peaks(timing, node)
        check_requests(result.log, requests)
        check_memory([p for p in (result.memory, result.prefill_memory) if p is not None], result.log)
        check_prefixes(result.log)
        check_fractions(record)
        check_finite(record)
    except InvariantError as exc:
        exc.point = result.setup.name
        raise
    return NAMES


__all__ = ["INVARIANTS", "NAMES", "check_bytes", "check_finite", "check_fractions", "check_memory", "check_peaks",
           "check_point",
           "check_prefixes",
           "check_requests"]
