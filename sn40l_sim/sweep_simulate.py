"""Simulate the points of an already loaded experiment on a given node and model.

:func:`sn40l_sim.runner.simulate_experiment` loads the hardware and the model from the experiment's
paths and simulates its points; a sweep needs the same loop on a node it has modified
(:func:`~sn40l_sim.hardware.loader.with_overrides`) and on an experiment it has built in memory,
and traces need the :class:`~sn40l_sim.engine.serving_point.PointResult` objects, which the runner
does not keep. :func:`simulate_points` is that loop. When :mod:`sn40l_sim.runner` provides a
public ``simulate_points(exp, node, model, *, progress=False, serve=True, on_result=None)`` it is
used instead, so that there is one copy of the loop; until then the body below mirrors the
runner's, built from the same public pieces (``PointSetup``, ``simulate_point``,
``build_requests``, ``build_record``).
"""
from __future__ import annotations

import sys
from typing import Any, Callable

from sn40l_sim.errors import InputError


def _relocate(exp: Any, exc: InputError) -> InputError:
    """An error from the simulation that names no file belongs to the experiment file."""
    if exc.file is not None:
        return exc
    path = tuple(exc.field.split(".")) if exc.field else ()
    file, line = exp.doc.where(path)
    return exc.__class__(exc.message, file=file, field=exc.field, line=line)


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
        Called with each point's :class:`~sn40l_sim.engine.serving_point.PointResult` (traces).

    Raises
    ------
    InputError
        For a missing workload or an infeasible point, located in the experiment file.

    Examples
    --------
    >>> from sn40l_sim.experiment import load_experiment
    >>> from sn40l_sim.hardware.loader import load_hardware, with_overrides
    >>> from sn40l_sim.models.loader import load_model
    >>> exp = load_experiment("experiments/deepseek_tp16.yaml")
    >>> node = load_hardware(exp.resolve(exp.spec.hardware))
    >>> model = load_model(exp.resolve(exp.spec.model))
    >>> fast = with_overrides(node, {"socket.hbm.bytes_per_s_per_unit": "819.2 GB/s"})
    >>> base, faster = (simulate_points(exp, n, model, serve=False)[0] for n in (node, fast))
    >>> base["name"], base["ttft_s"], faster["decode_step_s"] < base["decode_step_s"]
    ('full', None, True)
    """
    from sn40l_sim import runner

    hook = getattr(runner, "simulate_points", None)
    if hook is not None:
        return hook(exp, node, model, progress=progress, serve=serve, on_result=on_result)
    return _simulate_points(exp, node, model, progress, serve, on_result)


def _simulate_points(exp: Any, node: Any, model: Any, progress: bool, serve: bool,
                     on_result: Callable[[Any], None] | None) -> list[dict]:
    from sn40l_sim.engine.serving_point import PointSetup, simulate_point
    from sn40l_sim.engine.workload import build_requests
    from sn40l_sim.experiment import make_point_policy, points
    from sn40l_sim.models.kernels import ParallelPlan
    from sn40l_sim.report.records import build_record

    spec = exp.spec
    if spec.workload is None:
        raise exp.error(("workload",), "run needs a workload section (kind: fixed | poisson | trace)")
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
            kv_transfer=serving.kv_transfer, graph_options=dict(spec.graph_options))

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
