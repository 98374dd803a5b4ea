"""Experiment -> one results record per point: the library behind ``run``, ``validate``,
``calibrate`` and sweeps. Every point is checked before anything is simulated
(:mod:`~sn40l_sim.study.preflight`) and its physical invariants after
(:mod:`~sn40l_sim.study.invariants`).

``serve=False`` skips the serving simulation (requests, queues, continuous batching) and keeps what
needs no workload: memory and maximum batch, one prefill and one decode step. Calibration evaluates
hundreds of such points, and the quantities it fits do not depend on the workload.
"""
from __future__ import annotations

import sys
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from sn40l_sim.errors import InputError, shown
from sn40l_sim.hardware.spec import NodeSpec
from sn40l_sim.models.spec import ModelSpec
from sn40l_sim.report.records import build_record
from sn40l_sim.serving.point import PointResult, simulate_point
from sn40l_sim.serving.workload import Request
from sn40l_sim.study.assemble import Assembly, assemble
from sn40l_sim.study.experiment import Experiment, load_experiment
from sn40l_sim.study.experiment_rules import options_summary, record_groups
from sn40l_sim.study.invariants import NAMES, check_point
from sn40l_sim.study.multi_model_run import multi_model_records
from sn40l_sim.study.points import Point, point_of
from sn40l_sim.study.preflight import check_assembly, require_workload
from sn40l_sim.study.rate_search import search_point
from sn40l_sim.study.result_warnings import warn_kv_spilled, warn_prefill_activations_spilled, warn_shape_batch_unserved
from sn40l_sim.study.serving_section import workload_summary


def simulate_experiment(experiment: str | Path | Experiment, progress: bool = False, *, serve: bool = True,
                        hardware_overrides: dict[str, Any] | None = None,
                        on_result: Callable[[PointResult], None] | None = None) -> tuple[Experiment, list[dict]]:
    """Simulate every point of an experiment; returns (experiment, records).

    Parameters
    ----------
    experiment : str or Path or Experiment
        The experiment file, or the experiment already loaded (so a command parses it once).
    progress : bool
        Print one line per point on stderr.
    serve : bool
        Simulate the workload through the serving model (False: steps and memory only; the
        latency and served-throughput fields of the records are then empty).
    hardware_overrides : dict, optional
        Dotted hardware fields to change, as for
        :func:`sn40l_sim.hardware.loader.with_overrides` (calibration uses it).
    on_result : callable, optional
        Called with each point's :class:`~sn40l_sim.serving.point.PointResult` (traces).

    Returns
    -------
    tuple of (Experiment, list of dict)
        The experiment and one record per point (KV policy x prompt length, in file order): the
        ``results.json`` record ``run`` writes, plain JSON values, every field named with its unit
        or listed with it in docs/results.md (``decode_step_s``, ``ttft_s``, ``memory.hbm.kv`` in
        bytes). The same inputs give the same numbers (the ``speed`` group, wall time, aside).

    Raises
    ------
    InputError
        For a bad experiment, hardware or model file, or an infeasible point.
    InvariantError
        For a physical invariant a run broke (a bug in the simulator, as for ``run``'s exit status 3).

    Examples
    --------
    Llama-3.1-8B serving 48 Poisson requests, without KV compression and with SnapStream:

    >>> exp, (full, snap) = simulate_experiment("experiments/llama8b_node8.yaml")
    >>> (full["kv_policy"], full["max_batch"]), (snap["kv_policy"], snap["max_batch"])
    (('full', 64), ('snapstream', 256))
    >>> f"{snap['decode_tokens_per_s'] / full['decode_tokens_per_s']:.2f}x", full["throughput"]["requests"]
    ('4.02x', 48)
    """
    exp = experiment if isinstance(experiment, Experiment) else load_experiment(experiment)
    if exp.spec.sweep is not None:
        raise exp.error(("sweep",), "this experiment has a sweep: section; run it with "
                        "`python -m sn40l_sim run` (which delegates to the sweep) or `sweep`")
    require_workload(exp)  # the experiment's own problems first, before the files it names
    asm = assemble(exp, hardware_overrides=hardware_overrides)
    return exp, simulate_assembly(asm, progress=progress, serve=serve, on_result=on_result)


def simulate_points(exp: str | Path | Experiment, node: NodeSpec, model: ModelSpec, *, progress: bool = False,
                    serve: bool = True, on_result: Callable[[PointResult], None] | None = None) -> list[dict]:
    """One results record per point of ``exp`` (policies x prompt lengths), simulated on ``node``.

    Parameters
    ----------
    exp : str or Path or Experiment
        The experiment file, or the experiment loaded (its ``sweep`` section, if any, is ignored).
    node : NodeSpec
        The hardware (possibly with overrides).
    model : ModelSpec
        The model (with the experiment's ``model_overrides`` already applied).
    progress, serve, on_result
        As for :func:`simulate_experiment`.

    Raises
    ------
    InputError
        For a missing workload or an infeasible point, located in the experiment file.

    Examples
    --------
    >>> from sn40l_sim.hardware.loader import with_overrides
    >>> exp = load_experiment("experiments/llama8b_node8.yaml")
    >>> asm = assemble(exp)
    >>> fast = with_overrides(asm.node, {"socket.memory.hbm.bytes_per_s_per_unit": "819.2 GB/s"})
    >>> base, faster = (simulate_points(exp, n, asm.model, serve=False)[0] for n in (asm.node, fast))
    >>> base["name"], base["ttft_s"], faster["decode_step_s"] < base["decode_step_s"]
    ('full', None, True)
    """
    # a path as simulate_experiment takes one (a str was an AttributeError: no attribute 'spec')
    exp = exp if isinstance(exp, Experiment) else load_experiment(exp)
    return simulate_assembly(assemble(exp, node=node, model=model), progress=progress, serve=serve,
                             on_result=on_result)


def simulate_assembly(asm: Assembly, *, only: list[Point | str] | None = None, progress: bool = False,
                      serve: bool = True, on_result: Callable[[PointResult], None] | None = None,
                      without_prefill: Collection[str] = ()) -> list[dict]:
    """One record per point of an assembled experiment (or of the points in ``only``, or their
    names), as
    :func:`simulate_experiment` returns them; ``progress``, ``serve`` and ``on_result`` as there.

    ``without_prefill`` names points (with ``serve=False``) whose prefill step is not simulated:
    their prefill fields are empty (:data:`~sn40l_sim.report.records.PREFILL_STEP_FIELDS`), for an
    evaluation that reads only their memory and decode step.
    """
    if without_prefill and serve:
        raise ValueError("a served point needs its prefill step: without_prefill goes with serve=False")
    if not isinstance(asm, Assembly):   # an Experiment or a path: an AttributeError deep inside otherwise
        raise InputError(f"asm: expected an Assembly (assemble(experiment)), got {type(asm).__name__}: "
                         "simulate_experiment takes an experiment or its path")
    exp = asm.experiment
    if isinstance(only, (str, Point)):   # iterated, a name was its letters: "got 'f'" for only="full"
        raise InputError(f"only: expected a list of points or their names, such as [{shown(getattr(only, 'name', only))}], "
                         f"got {shown(only)}")
    # a point or its name, as Assembly.setup takes them
    points = asm.points if only is None else [point_of(asm.points, point) for point in only]
    check_assembly(asm, points)   # everything refused before anything is simulated (as check does)
    records = []
    for point in points:
        if progress:
            print(f"simulating {point.name} ...", file=sys.stderr, flush=True)
        started = time.perf_counter()
        if exp.spec.rate_search is not None and serve:
            # every probe is a served run, so every probe's invariants are checked
            result, searched, ran = search_point(
                asm, point, on_probe=lambda probe, requests, at_rate, point=point:
                check_point(probe, point_record(at_rate, point, probe), requests))
            records.append(with_speed({**point_record(ran, point, result), **searched}, started))
            if on_result is not None:
                on_result(result)
            continue
        if exp.spec.multi_model is not None and serve:
            # several models on one node: one record per scheduler and model (study/multi_model_run.py)
            records.extend(multi_model_records(asm, point, lambda result, point=point: point_record(exp, point, result),
                                               check_point, on_result))
            continue
        setup = asm.setup(point)
        served: list[Request] = []   # what went in, for the invariant that each comes out once
        requests = asm.requests(point, serve)

        def requests_for(slots: int, requests=requests, served=served) -> list[Request]:
            made = requests(slots)
            served.extend(made)
            return made

        # a served run also times the prompt without the policy's kernels (prefill_policy_slowdown)
        options = asm.prefill_side(setup, policy_free_prefill=serve)
        if point.name in without_prefill:
            options["prefill_step"] = False
        try:
            result = simulate_point(setup, requests_for, asm.step_timer(setup), asm.memory_placer(setup.model),
                                    **options)
        except InputError as exc:
            raise asm.locate(exc, point) from None
        record = point_record(exp, point, result)
        warn_prefill_activations_spilled(exp, point, result)
        if setup.batch == "max":
            warn_kv_spilled(exp, point, result)
            warn_shape_batch_unserved(exp, point, result.batch)
        check_point(result, record, served)   # a violated invariant stops the run (InvariantError, exit 3)
        if on_result is not None:
            on_result(result)
        records.append(with_speed(record, started))
    return records


def with_speed(record: dict, started: float) -> dict:
    """``record`` with the ``speed`` group: the served run's simulated seconds over the wall
    seconds since ``started`` (:func:`time.perf_counter`), the point's whole simulation.

    >>> r = with_speed({"throughput": {"makespan_s": 90.0}}, time.perf_counter() - 0.5)
    >>> r["speed"]["simulated_s"], 150 < r["speed"]["ratio"] <= 180
    (90.0, True)
    """
    wall = time.perf_counter() - started
    simulated = (record.get("throughput") or {}).get("makespan_s")
    ratio = simulated / wall if simulated is not None and wall > 0 else None
    return {**record, "speed": {"simulated_s": simulated, "wall_s": wall, "ratio": ratio}}


def point_record(exp: Experiment, point: Point, result: PointResult) -> dict:
    """The results record of a simulated point, with the groups of fields its experiment asks for
    and the invariants the runner checks on it."""
    slo = exp.spec.slo.target() if exp.spec.slo is not None else None
    workload = workload_summary(exp.spec.workload) if exp.spec.workload is not None else None
    return build_record(result, experiment=exp.spec.name, policy_params=point.params,
                        extra_fields=record_groups(exp), policy_entry=point.entry, slo=slo, invariants=NAMES,
                        workload=workload, options=options_summary(exp.spec))
