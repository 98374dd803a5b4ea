"""Experiment file -> one results record per point: the library behind ``run``, ``validate``,
``calibrate`` and sweeps.

``serve=False`` skips the serving simulation (requests, queues, continuous batching) and keeps what
needs no workload: memory and maximum batch, one prefill and one decode step. Calibration evaluates
hundreds of such points, and the quantities it fits do not depend on the workload.
"""
from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sn40l_sim.errors import InputError


def _relocate(exp, exc: InputError) -> InputError:
    """An error from the simulation that names no file belongs to the experiment file."""
    if exc.file is not None:
        return exc
    path = tuple(exc.field.split(".")) if exc.field else ()
    file, line = exp.doc.where(path)
    return exc.__class__(exc.message, file=file, field=exc.field, line=line)


def _require_workload(exp: Any) -> None:
    if exp.spec.workload is None:
        raise exp.error(("workload",), "run needs a workload section (kind: fixed | poisson | trace)")


def simulate_experiment(path: str | Path, progress: bool = False, *, serve: bool = True,
                        hardware_overrides: dict[str, Any] | None = None,
                        on_result: Callable[[Any], None] | None = None) -> tuple[object, list[dict]]:
    """Load the experiment at ``path`` and simulate its points; returns (experiment, records).

    Parameters
    ----------
    path : str or Path
        The experiment file.
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

    Raises
    ------
    InputError
        For a bad experiment, hardware or model file, or an infeasible point.
    """
    from sn40l_sim.hardware.loader import load_hardware
    from sn40l_sim.models.loader import load_model
    from sn40l_sim.study.experiment import load_experiment

    exp = load_experiment(path)
    spec = exp.spec
    if spec.sweep is not None:
        raise exp.error(("sweep",), "this experiment has a sweep: section; run it with "
                        "`python -m sn40l_sim run` (which delegates to the sweep) or `sweep`")
    _require_workload(exp)  # the experiment's own problems first, before the files it names
    node = load_hardware(exp.resolve(spec.hardware))
    if hardware_overrides:
        from sn40l_sim.hardware.loader import with_overrides
        node = with_overrides(node, hardware_overrides)
    model = load_model(exp.resolve(spec.model), spec.model_overrides or None)
    return exp, simulate_points(exp, node, model, progress=progress, serve=serve, on_result=on_result)


def simulate_points(exp: Any, node: Any, model: Any, *, progress: bool = False, serve: bool = True,
                    on_result: Callable[[Any], None] | None = None) -> list[dict]:
    """One results record per point of ``exp`` (policies x prompt lengths), simulated on ``node``.

    Parameters
    ----------
    exp : Experiment
        A loaded experiment (its ``sweep`` section, if any, is ignored).
    node : NodeSpec
        The hardware (possibly with overrides).
    model : ModelSpec
        The model (with the experiment's ``model_overrides`` already applied).
    progress : bool
        Print the name of each point on stderr as it starts.
    serve : bool
        Serve the workload (False: memory, maximum batch, one prefill and one decode step only;
        the latency and served-throughput fields are then empty).
    on_result : callable, optional
        Called with each point's :class:`~sn40l_sim.serving.point.PointResult` (traces).

    Raises
    ------
    InputError
        For a missing workload or an infeasible point, located in the experiment file.

    Examples
    --------
    >>> from sn40l_sim.study.experiment import load_experiment
    >>> from sn40l_sim.hardware.loader import load_hardware, with_overrides
    >>> from sn40l_sim.models.loader import load_model
    >>> exp = load_experiment("experiments/deepseek_tp16.yaml")
    >>> node = load_hardware(exp.resolve(exp.spec.hardware))
    >>> model = load_model(exp.resolve(exp.spec.model))
    >>> fast = with_overrides(node, {"socket.memory.hbm.bytes_per_s_per_unit": "819.2 GB/s"})
    >>> base, faster = (simulate_points(exp, n, model, serve=False)[0] for n in (node, fast))
    >>> base["name"], base["ttft_s"], faster["decode_step_s"] < base["decode_step_s"]
    ('full', None, True)
    """
    from sn40l_sim.ir import ParallelPlan
    from sn40l_sim.report.records import build_record
    from sn40l_sim.serving.point import PointSetup, simulate_point
    from sn40l_sim.serving.workload import build_requests
    from sn40l_sim.study.experiment import make_point_policy, memory_order, points

    spec = exp.spec
    _require_workload(exp)
    order = memory_order(exp, node)
    serving = spec.serving
    max_new_tokens = exp.max_new_tokens
    trace_path = exp.resolve(spec.workload.path) if spec.workload.kind == "trace" else None
    records = []
    for point in points(exp):
        if progress:
            print(f"simulating {point.name} ...", file=sys.stderr, flush=True)
        policy = make_point_policy(exp, point)
        setup = PointSetup(
            name=point.name, node=node, model=model, policy=policy, prompt_len=point.prompt_len,
            prefill_plan=ParallelPlan(spec.parallel.prefill.tp, spec.parallel.prefill.attention_dp),
            decode_plan=ParallelPlan(spec.parallel.decode.tp, spec.parallel.decode.attention_dp),
            mode=serving.mode, prefill_nodes=exp.prefill_node_count, decode_nodes=serving.decode_nodes,
            batch=serving.batch, batch_sizes=serving.batch_sizes, prefill_lens=serving.prefill_lens,
            max_new_tokens=max_new_tokens, tokens_per_forward=serving.tokens_per_forward,
            kv_transfer=serving.kv_transfer, graph_options=dict(spec.graph_options),
            memory_order=order, may_spill=spec.memory.may_spill)

        def requests_for(slots: int, prompt_len: int = point.prompt_len):
            if not serve:
                return []
            return build_requests(spec.workload, prompt_len=prompt_len, max_new_tokens=max_new_tokens,
                                  slots=slots, seed=serving.seed, clock_hz=node.socket.clock_hz,
                                  trace_path=trace_path)

        try:
            result = simulate_point(setup, requests_for)
        except InputError as exc:
            raise _relocate(exp, exc) from None
        if on_result is not None:
            on_result(result)
        records.append(build_record(result, experiment=spec.name, policy_params=point.params))
    return records
