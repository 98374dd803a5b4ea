"""One results record per simulated point (docs/design.md §5), from a
:class:`~sn40l_sim.serving.point.PointResult`.

Each key is declared, with its unit and description, in :mod:`sn40l_sim.report.fields` (the
reference page is ``docs/results.md``); a key produced here but not declared there, or declared
but not produced, fails the tests.

Examples
--------
>>> policy_overhead({"mha": 900, "moe_ffn": 100, "snapkv": 25, "ring": 5}, ["snapkv", "ring"])
0.03
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sn40l_sim.engine.breakdown import decode_step_breakdown, memory_roofline_s
from sn40l_sim.ir import ParallelPlan
from sn40l_sim.kvcache.footprint import state_bytes_per_socket
from sn40l_sim.models.kv_format import kv_bit_fraction, kv_cache_layers
from sn40l_sim.models.spec import ModelSpec
from sn40l_sim.report import metrics
from sn40l_sim.report.digests import digest, model_digest
from sn40l_sim.report.fields import RESULTS
from sn40l_sim.report.prefix_fields import chunked_prefill_fields, prefix_cache_fields
from sn40l_sim.report.slo import SLO, served_slo_fields
from sn40l_sim.serving.point import PointResult

#: the fields built from the prefill step's timing: empty when a steps-only evaluation did not
#: simulate it (``validate`` and ``calibrate`` skip the prefill of a point none of their
#: measurements read it from)
PREFILL_STEP_FIELDS = ("prefill_s", "prefill_cycles", "prefill_kernel_cycles", "prefill_kernel_share",
                       "prefill_kernel_share_layer", "prefill_policy_overhead", "prefill_policy_slowdown",
                       "prefill_switch_load_s")
#: the fields, and the groups of fields, of the served run: empty in a steps-only evaluation (what
#: ``validate`` and ``calibrate`` simulate), so a reference measurement cannot name them (the prefill
#: without the policy's kernels that ``prefill_policy_slowdown`` compares with is timed by a served run)
SERVED_FIELDS = ("ttft_s", "tpot_s", "prefill_policy_slowdown", "served_prefill_policy_slowdown")
SERVED_GROUPS = ("slo", "rate_search")


def policy_overhead(kernel_cycles: dict[str, int], policy_kinds: Iterable[str]) -> float:
    """Cycles of the policy's kernels over the cycles of all other kernels."""
    extra = sum(kernel_cycles.get(kind, 0) for kind in policy_kinds)
    rest = sum(kernel_cycles.values()) - extra
    return extra / rest if rest > 0 else 0.0


def policy_slowdown(result: PointResult) -> float | None:
    """The point's prefill over the same prompt's prefill without the KV policy's kernels, less 1:
    0 for a policy that adds none, None when the prefill without them was not timed (a steps-only
    evaluation, several models on one node)."""
    if not result.policy_kernel_kinds:
        return 0.0
    bare = result.prefill_without_policy
    if result.prefill is None or bare is None:
        return None
    return result.prefill.cycles / bare.cycles - 1 if bare.cycles > 0 else None


def served_policy_slowdown(result: PointResult) -> float | None:
    """The served prompts' whole prefills with the KV policy's kernels over those without, less 1: 0
    for a policy that adds none, None without served requests or policy-free costs."""
    if not result.policy_kernel_kinds:
        return 0.0
    if result.served_prefill_cycles is None:
        return None
    with_policy, without = result.served_prefill_cycles
    return with_policy / without - 1 if without > 0 else None


def memory_table(placement: Any, reserved: dict[str, float] | None = None) -> dict[str, dict[str, int]] | None:
    """Per socket, per memory tier (the socket's tiers, fastest first): bytes by use (weights, kv,
    activations, and the runtime's ``reserved``), plus ``free`` and the tier's physical ``capacity``.

    >>> from sn40l_sim.mapper.placement import MemoryPlacement
    >>> mp = MemoryPlacement({"hbm": {"weights": 40, "kv": 10, "activations": 1}, "ddr": {}},
    ...                      {"hbm": 62, "ddr": 100}, ("hbm", "ddr"))
    >>> memory_table(mp, {"hbm": 2, "ddr": 16})["hbm"]
    {'activations': 1, 'capacity': 64, 'free': 11, 'kv': 10, 'reserved': 2, 'weights': 40}
    """
    if placement is None:
        return None
    reserved = reserved or {}
    out = {}
    for tier, uses in placement.by_tier.items():
        usable = placement.capacity[tier]
        row = {"weights": 0, "kv": 0, "activations": 0}
        row.update({use: int(n) for use, n in uses.items()})
        row["reserved"] = int(reserved.get(tier, 0))
        # the placement's capacity is what is left after the reserved memory
        row["capacity"] = int(usable) + row["reserved"]
        row["free"] = row["capacity"] - sum(v for k, v in row.items() if k != "capacity")
        out[tier] = dict(sorted(row.items()))
    return out


def kv_layer_fraction(model: ModelSpec, include_mtp: bool | int) -> float:
    """Layers' worth of cache over those of the same model without shared layers, the MTP layers
    the decode runs counted on both sides (as in ``kv_bytes_per_token``), so that the bytes per
    token are BF16's times ``kv_bit_fraction`` times this."""
    unshared = model.model_copy(update={"kv_shared_layers": 1})
    return kv_cache_layers(model, include_mtp) / kv_cache_layers(unshared, include_mtp)


def kv_policy_fields(result: PointResult, policy_entry: str) -> dict[str, Any]:
    """The ``kv_policies`` fields of a point: where a sequence's KV lives per token of its context,
    the fractions of tokens, bits and layers it keeps, and a decode step's traffic per tier."""
    s = result.setup
    footprint = result.footprint
    context = s.prompt_len + s.max_new_tokens
    # one whole sequence, unsharded: its slots (scales included) and the policy's state
    state = state_bytes_per_socket(s.model, ParallelPlan(), 1, footprint.state_bytes,
                                   include_mtp=result.include_mtp)
    first = footprint.slots * result.kv_bytes_per_token + state
    store = footprint.store_rows * result.kv_bytes_per_token if footprint.store_tier is not None else 0
    tiers: dict[str, int] = dict.fromkeys(s.node.socket.memory, 0)
    for kernel in result.decode.kernels:
        for tier, n in kernel.tier_bytes.items():
            tiers[tier] = tiers.get(tier, 0) + int(n)
    return {
        "policy_entry": policy_entry,
        "kv_bytes_per_context_token": first / context,
        "kv_offload_bytes_per_context_token": store / context,
        "kv_retained_token_fraction": s.policy.cache_len(s.prompt_len, s.max_new_tokens) / context,
        "kv_attended_token_fraction": min(1.0, footprint.slots / context),
        "kv_bit_fraction": kv_bit_fraction(s.model),
        "kv_layer_fraction": kv_layer_fraction(s.model, result.include_mtp),
        "decode_tier_bytes": tiers,
    }


def prefill_step_fields(result: PointResult, clock_hz: float) -> dict[str, Any]:
    """The :data:`PREFILL_STEP_FIELDS` of a point, its prefill timed at ``clock_hz`` (all None when
    the prefill step was not simulated)."""
    prefill = result.prefill
    if prefill is None:
        return dict.fromkeys(PREFILL_STEP_FIELDS)
    kernel_cycles = {k: int(v) for k, v in sorted(prefill.kernel_cycles.items())}
    return {
        "prefill_s": prefill.cycles / clock_hz,
        "prefill_cycles": int(prefill.cycles),
        "prefill_kernel_cycles": kernel_cycles,
        "prefill_kernel_share": dict(sorted(prefill.layer_shares().items())),
        "prefill_kernel_share_layer": prefill.layer,
        "prefill_policy_overhead": policy_overhead(kernel_cycles, result.policy_kernel_kinds),
        "prefill_policy_slowdown": policy_slowdown(result),
        "prefill_switch_load_s": prefill.switch_load_cycles / clock_hz,
    }


def _every_batch_fits(max_batch: int) -> str | None:
    """``max_batch_limit`` when no compiled batch failed: the largest of ``serving.batch_sizes`` fit,
    so the maximum is the list's end, not memory's (None when none was searched: ``max_batch`` 0)."""
    if max_batch <= 0:
        return None
    return (f"none: every compiled batch fits, up to the largest of serving.batch_sizes ({max_batch}); "
            "memory may hold more (add larger sizes to find its limit)")


def build_record(result: PointResult, *, experiment: str, policy_params: dict[str, Any],
                 extra_fields: Iterable[str] = (), policy_entry: str | None = None,
                 slo: SLO | None = None, invariants: Sequence[str] = (), workload: str | None = None,
                 options: str | None = None) -> dict[str, Any]:
    """The results record of one point (plain JSON types; seconds, bytes, fractions), with the
    opt-in field groups ``extra_fields`` asks for (``kv_policies``, with ``policy_entry`` naming the
    point's policy entry, by default the point's name; ``slo``, against the SLOs ``slo``; ``trace``,
    what capping a trace's lengths cut). A group's fields are empty for a steps-only evaluation.
    ``workload`` describes the served requests in one line (kept only when they were served),
    ``options`` the simulation's settings that are not their defaults.
    ``invariants`` names the physical invariants the caller checks on it
    (:mod:`sn40l_sim.study.invariants`)."""
    s, clock = result.setup, result.clock_hz
    log = result.log
    served = log is not None  # False for a steps-only evaluation: no latency or served figures
    latencies = metrics.latencies(log, clock) if served else None
    step_s = result.decode.cycles / clock
    raw = result.batch / step_s
    roofline_s = memory_roofline_s(result.decode, s.node.socket)
    reserved = {tier: spec.reserved_bytes for tier, spec in s.node.socket.memory.items()}
    # prefill nodes of other hardware: their own clock and reserved memory
    prefill_node = s.prefill_node if s.prefill_node is not None else s.node
    prefill_clock = prefill_node.socket.clock_hz
    prefill_reserved = {tier: spec.reserved_bytes for tier, spec in prefill_node.socket.memory.items()}
    record = {
        "experiment": experiment,
        "name": s.name,
        "model": s.model.name,
        "hardware": s.node.name,
        "hardware_digest": digest(s.node),
        "model_digest": model_digest(s.model),
        "kv_policy": s.policy.name,
        "kv_policy_params": dict(sorted(policy_params.items())),
        "prefill_len": s.prompt_len,
        "prefill_len_compiled": result.prefill_len_compiled,
        "kv_len": result.static_cache_len,
        "max_new_tokens": s.max_new_tokens,
        "batch": result.batch,
        "max_batch": result.max_batch,
        "max_batch_limit": result.next_failure or _every_batch_fits(result.max_batch),
        "mode": s.mode,
        "workload": workload if served else None,
        "prefill_nodes": s.prefill_nodes if s.mode == "disaggregated" else 0,
        "decode_nodes": s.decode_nodes,
        "kv_transfer": s.kv_transfer if s.mode == "disaggregated" else None,
        "seed": s.seed,
        "options": options or None,
        "sockets": s.node.sockets,
        "parallel": {phase: {"attention_dp": plan.attention_dp, "tp": plan.tp}
                     for phase, plan in (("decode", s.decode_plan), ("prefill", s.prefill_plan))},
        "ttft_s": latencies["ttft_s"]["mean"] if served else None,
        "tpot_s": latencies["tpot_s"]["mean"] if served else None,
        "latency": latencies,
        **prefill_step_fields(result, prefill_clock),
        "served_prefill_policy_slowdown": served_policy_slowdown(result),
        "decode_step_s": step_s,
        "decode_step_cycles": int(result.decode.cycles),
        "decode_kernel_cycles": {k: int(v) for k, v in sorted(result.decode.kernel_cycles.items())},
        "decode_step_breakdown_s": dict(sorted(decode_step_breakdown(result.decode).items())),
        "decode_switch_load_s": result.decode.switch_load_cycles / clock,
        "decode_roofline_s": roofline_s,
        "decode_roofline_fraction": roofline_s / step_s,
        "decode_tokens_per_s": raw,
        "speculative_drafts": s.speculation.drafts,
        # no drafts, nothing accepted: a sweep over drafts may keep one acceptance for every value
        "draft_acceptance": s.speculation.acceptance if s.speculation.drafts else 0.0,
        "tokens_per_forward": s.speculation.tokens_per_step,
        "decode_tokens_per_s_reported": raw * s.speculation.tokens_per_step,
        "kv_bytes_per_token": result.kv_bytes_per_token,
        "kv_transfer_bytes": result.transfer_bytes,
        "kv_transfer_s": result.transfer_cycles / clock,
        "memory": memory_table(result.memory, reserved),
        "memory_prefill_node": memory_table(result.prefill_memory, prefill_reserved),
        "throughput": metrics.throughput(log, clock) if served else None,
        "utilisation": {
            "nodes": metrics.node_utilisation(log) if served else None,
            "prefill_step": metrics.resource_utilisation(result.prefill) if result.prefill is not None else None,
            "decode_step": metrics.resource_utilisation(result.decode),
        },
        "kv_occupancy": metrics.kv_occupancy(log, clock) if served else None,
        "invariants": list(invariants),
    }
    for group in extra_fields:
        if group not in RESULTS.groups:
            raise ValueError(f"unknown results field group {group!r}; known: {', '.join(RESULTS.groups)}")
    if "kv_policies" in extra_fields:
        record.update(kv_policy_fields(result, policy_entry or s.name))
    if "slo" in extra_fields:
        if slo is None:
            raise ValueError("the slo group of results fields needs the SLOs (slo=)")
        record.update(served_slo_fields(log, clock, slo) if served else
                      dict.fromkeys(("slo", "goodput_requests_per_s", "goodput_tokens_per_s")))
    if "trace" in extra_fields:
        record["trace_capped"] = metrics.capped_lengths(log) if served else None
    if "prefix_cache" in extra_fields:
        record.update(prefix_cache_fields(log, clock) if served else {"prefix_cache": None})
    if "prefill_hardware" in extra_fields:
        record["prefill_hardware"] = prefill_node.name
        record["prefill_hardware_digest"] = digest(prefill_node)
    if "chunked_prefill" in extra_fields:
        record.update(chunked_prefill_fields(log, s.prefill_chunk) if served else {"chunked_prefill": None})
    return record
