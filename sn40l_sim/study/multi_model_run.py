"""Run an experiment's ``multi_model`` section: time each model on the node alone, give each
request a model, serve them all on one node under each scheduler policy, one record per scheduler
and model (:mod:`sn40l_sim.study.multi_model_section`, :mod:`sn40l_sim.serving.multi_model`).

Each model is a point of its own (the experiment's KV policy entry, plans and compiled sizes, the
entry's ``batch``) simulated without requests: its memory placement on one node (what it holds in the
fast tier while resident), its decode step and its prefill per compiled length. The records are
:func:`sn40l_sim.study.runner.point_record`'s for the model's point, its served figures taken from the
model's own requests in the run (:func:`sn40l_sim.report.multi_model_fields.model_log`), plus the
``multi_model`` group; the runner's invariants are checked on each, and the two tiers' bytes at every
switch by the serving model.
"""
from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from sn40l_sim.errors import InfeasibleError, InputError
from sn40l_sim.hardware.figures import cycles as to_cycles
from sn40l_sim.report.multi_model_fields import model_log, multi_model_fields
from sn40l_sim.serving.batching import compiled_size
from sn40l_sim.serving.multi_model import ModelCosts, NodeMemory, SlowTierFull, copy_bytes_per_s, simulate_models
from sn40l_sim.serving.point import PointResult, simulate_point
from sn40l_sim.serving.prefill_graphs import PrefillGraphs
from sn40l_sim.serving.setup import PrefillRun
from sn40l_sim.serving.workload import Request
from sn40l_sim.study.assemble import Assembly, assemble
from sn40l_sim.study.experiment import memory_order
from sn40l_sim.study.experiment_files import experiment_model
from sn40l_sim.study.points import Point

#: seeds the draw of each request's model, beside ``serving.seed`` (so that the workload's own
#: draws, seeded by ``serving.seed`` alone, are those of the same experiment with one model)
MODEL_DRAW_STREAM = 0x6D6D


@dataclass(frozen=True)
class TimedModel:
    """One model of the section timed on the node alone."""

    name: str
    result: PointResult
    costs: ModelCosts


def node_tiers(asm: Assembly) -> tuple[str, str]:
    """``(fast tier, slow tier)``: the first tier of the placement order and ``weights_tier`` (by
    default the order's second)."""
    exp = asm.experiment
    order = memory_order(exp, asm.node)
    slow = exp.spec.multi_model.weights_tier
    if slow is None:
        if len(order) < 2:
            raise exp.error(("memory", "order"), "several models on a node need a second memory tier to hold the "
                            f"idle models' weights; the placement order is {list(order)}")
        slow = order[1]
    elif slow not in asm.node.socket.memory:
        raise exp.error(("multi_model", "weights_tier"), f"the hardware ({asm.node.name}) has no memory tier "
                        f"{slow!r}; its tiers are {list(asm.node.socket.memory)}")
    if slow == order[0]:
        raise exp.error(("multi_model", "weights_tier"), f"{slow!r} is the fast tier the models run from; name "
                        "the slower tier that holds every model's weights")
    return order[0], slow


def model_error(exp: Any, index: int, exc: InputError) -> InputError:
    """``exc`` (located in the experiment) about model ``index`` of the section, naming it; an error
    that blames the model is located at the entry's ``model``, not at the experiment's ``model:``
    (which only ``map`` and ``check`` read)."""
    entry = exp.spec.multi_model.models[index]
    written = exp.doc.data.get("multi_model", {}).get("models", [])
    written = written[index] if isinstance(written, list) and index < len(written) else {}
    # a batch that does not fit is the entry's batch (it was located at serving.batch, which the
    # section's models do not read), or, without one, the entry's model
    at = "batch" if exc.field == "serving.batch" and isinstance(written, dict) and "batch" in written else \
        "model" if exc.field in ("model", "serving.batch") else None
    where = exp.error(("multi_model", "models", index, at), exc.message) if at else exc
    return exc.located_at(message=f"{exc.message} (model {entry.name})", file=where.file, field=where.field,
                          line=where.line)


def time_models(asm: Assembly, point: Point) -> list[TimedModel]:
    """Each model of the section timed on the node alone at ``point`` (its KV policy and prompt)."""
    exp = asm.experiment
    fast, slow = node_tiers(asm)
    timed = []
    for i, entry in enumerate(exp.spec.multi_model.models):
        at = ("multi_model", "models", i, "model")
        model = experiment_model(exp, at, entry.model)
        sub = assemble(exp, node=asm.node, model=model)
        setup = replace(sub.setup(point), batch=entry.batch, name=f"{point.name}/{entry.name}")
        timer, place = sub.step_timer(setup), sub.memory_placer(setup.model)
        try:
            result = simulate_point(setup, lambda slots: [], timer, place)
        except InputError as exc:
            raise model_error(exp, i, sub.locate(exc)) from None
        sockets = setup.decode_plan.sockets
        memory = result.memory

        def prefill_for(prompt_len: int, timer=timer, memory=memory, setup=setup) -> int:
            size = compiled_size(prompt_len, setup.prefill_lens, "prompt length")
            return int(timer.prefill(size, memory=memory).cycles)

        def prefill_switch(prompt_len: int, timer=timer, memory=memory, setup=setup) -> int:
            size = compiled_size(prompt_len, setup.prefill_lens, "prompt length")
            return int(timer.prefill(size, memory=memory).switch_load_cycles)

        # the reload of one prefill right after another of this model, as a co-located node's
        graphs = PrefillGraphs(setup, asm.node.socket.clock_hz, timer, lambda n, e=0, memory=memory: memory)

        def prefill_pair(before: int, prompt_len: int, graphs=graphs) -> int:
            return graphs.pair_switch(PrefillRun(before), PrefillRun(prompt_len))

        costs = ModelCosts(entry.name, result.batch, int(result.decode.cycles), prefill_for, setup.policy.cache_len,
                           result.kv_bytes_per_token, result.footprint.context_rows,
                           weight_bytes=int(memory.total("weights")) * sockets,
                           fast_bytes=int(sum(memory.by_tier[fast].values())) * sockets,
                           slow_bytes=int(sum(memory.by_tier[slow].values())) * sockets,
                           decode_switch_cycles=int(result.decode.switch_load_cycles),
                           prefill_switch_cycles=prefill_switch, prefill_pair_switch_cycles=prefill_pair)
        timed.append(TimedModel(entry.name, result, costs))
    return timed


def node_memory(asm: Assembly, timed: Sequence[TimedModel]) -> NodeMemory:
    """The node's fast and slow tiers (usable bytes) and its copy bandwidth over the sockets the
    models run on; every model's weights must fit in the slow tier.

    The models share the experiment's decode plan, and each model's bytes are counted over that
    plan's sockets (:func:`time_models`): a plan that leaves sockets idle puts every model on the
    same sockets, so the idle sockets' tiers neither hold a model nor copy one in."""
    fast, slow = node_tiers(asm)
    socket = asm.node.socket
    capacity = timed[0].result.memory.capacity
    sockets = timed[0].result.setup.decode_plan.sockets
    memory = NodeMemory(int(capacity[fast]) * sockets, int(capacity[slow]) * sockets,
                        copy_bytes_per_s(socket, slow, fast) * sockets / socket.clock_hz)
    weights = sum(t.costs.weight_bytes for t in timed)
    stores = sum(t.costs.slow_bytes for t in timed)
    if weights + stores > memory.slow_bytes:
        exp = asm.experiment
        file, line = exp.doc.where(("multi_model", "models"))
        kept = f" and the KV they keep there ({stores / 2**30:.1f} GiB)" if stores else ""
        raise InfeasibleError(f"the models' weights ({weights / 2**30:.1f} GiB){kept} do not fit in the node's "
                              f"usable {slow.upper()} ({memory.slow_bytes / 2**30:.1f} GiB)", file=file,
                              field="multi_model.models", line=line)
    return memory


def slow_tier_error(asm: Assembly, timed: Sequence[TimedModel], scheduler: str, full: SlowTierFull
                    ) -> InfeasibleError:
    """``full`` as one line located at ``multi_model.models``: the weights fit the slow tier, but not
    with the KV an eviction writes back (:func:`node_memory` checked the weights alone)."""
    exp = asm.experiment
    _, slow = node_tiers(asm)
    weights = sum(t.costs.weight_bytes + t.costs.slow_bytes for t in timed)
    kept = " with the KV they keep there" if any(t.costs.slow_bytes for t in timed) else ""
    file, line = exp.doc.where(("multi_model", "models"))
    return InfeasibleError(
        f"under scheduler {scheduler}, evicting {full.model} at {full.cycle / asm.node.socket.clock_hz:.1f} s writes "
        f"its sequences' KV back to {slow.upper()}: the models' weights{kept} ({weights / 2**30:.1f} GiB) and the KV written "
        f"back would take {full.held_bytes / 2**30:.1f} GiB of the node's usable {slow.upper()} "
        f"({full.capacity_bytes / 2**30:.1f} GiB), {(full.held_bytes - full.capacity_bytes) / 2**30:.3g} GiB over; give "
        "it more room or the models fewer slots (batch)",
        file=file, field="multi_model.models", line=line)


def assign_models(requests: Sequence[Request], shares: Sequence[float], seed: int) -> list[int]:
    """The model each request asks for (by request id): a seeded draw from ``shares``.

    >>> reqs = [Request(i, 0, 1, 1) for i in range(1000)]
    >>> picks = assign_models(reqs, [0.6, 0.3, 0.1], seed=0)
    >>> picks == assign_models(reqs, [0.6, 0.3, 0.1], seed=0), [round(picks.count(m) / 1000, 1) for m in range(3)]
    (True, [0.6, 0.3, 0.1])
    """
    rng = np.random.default_rng([seed, MODEL_DRAW_STREAM])
    p = np.asarray(shares, dtype=float)
    drawn = rng.choice(len(shares), size=len(requests), p=p / p.sum())
    by_id = [0] * len(requests)
    for r, m in zip(sorted(requests, key=lambda r: r.id), drawn, strict=True):
        by_id[r.id] = int(m)
    return by_id


def warn_unrequested(exp: Any, model_of: Sequence[int], n_requests: int) -> None:
    """Warn, naming the entry's line, of each model no request drew: it has no record (nothing was
    served to report), so without a word its column would just be missing from the table while its
    weights still take the slow tier and count in every copy figure."""
    drawn = set(model_of)
    for i, entry in enumerate(exp.spec.multi_model.models):
        if i not in drawn:
            file, line = exp.doc.where(("multi_model", "models", i))
            where = f"{file}:{line}: " if line is not None else f"{file}: "
            warnings.warn(f"{where}multi_model.models[{i}] ({entry.name}): no request of the workload's "
                          f"{n_requests} drew this model (share {entry.share:g}), so it has no record; its "
                          "weights still sit in the slow tier (raise its share or serve more requests)",
                          stacklevel=2)


def multi_model_records(asm: Assembly, point: Point, record: Callable[[PointResult], dict[str, Any]],
                        check: Callable[[PointResult, dict[str, Any], list[Request]], Any],
                        on_result: Callable[[PointResult], None] | None = None) -> list[dict[str, Any]]:
    """One record per scheduler and model at ``point``. ``record`` makes a point's record, ``check``
    checks the invariants on it (the runner's); ``on_result`` is called with each record's result
    (the model's steps and its own requests in the run), as the runner calls it for a point, so
    ``run --trace`` draws every scheduler and model."""
    exp = asm.experiment
    section = exp.spec.multi_model
    timed = time_models(asm, point)
    memory = node_memory(asm, timed)
    requests = asm.requests(point)(sum(t.costs.slots for t in timed))
    model_of = assign_models(requests, [entry.share for entry in section.models], exp.spec.serving.seed)
    warn_unrequested(exp, model_of, len(requests))
    clock_hz = asm.node.socket.clock_hz
    quantum = to_cycles(section.quantum_s, asm.node.socket)
    settings = {"models": ", ".join(f"{t.name}={t.result.setup.model.name} (share {entry.share:g}, batch "
                                    f"{t.result.batch})" for t, entry in zip(timed, section.models, strict=True)),
                "quantum_s": section.quantum_s, "slow_tier": node_tiers(asm)[1]}
    records = []
    for scheduler in section.schedulers:
        try:
            run = simulate_models(requests, model_of, [t.costs for t in timed], memory, scheduler,
                                  quantum_cycles=quantum)
        except SlowTierFull as full:
            raise slow_tier_error(asm, timed, scheduler, full) from None
        for m, t in enumerate(timed):
            log = model_log(run, m)
            if not log.requests:
                continue   # no request drew this model: nothing served to report
            name = f"{point.name}/{scheduler}/{t.name}"
            result = replace(t.result, setup=replace(t.result.setup, name=name), log=log)
            rec = {**record(result), **multi_model_fields(run, m, memory, t.name, clock_hz)}
            rec["multi_model"].update(settings)
            check(result, rec, [log.request for log in log.requests])
            if on_result is not None:
                on_result(result)
            records.append(rec)
    return records
