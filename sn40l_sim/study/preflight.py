"""Everything ``run`` refuses before it simulates, checked without simulating: ``check`` is ``run``
without the simulation because both call :func:`check_assembly`.

For the experiment: a workload, the static decode graph's ``max_new_tokens``, the graph options (and
the template they name), the trace file's rows, a trace window holding requests (two at least for a
rate search, which needs the window's own arrival rate; :func:`check_window` warns of one running past
the trace's end). For every point: its KV policy and
parameters, its parallel plans against the node, a prompt within the model's maximum context, a
compiled prefill graph long enough for its prompt, a link for the KV transfer, and requests no longer than the static graphs (a length
distribution's largest value counts, so a random draw cannot fail later; a trace's rows are taken
as the run takes them, windowed and capped when the workload asks). Each error is located in the experiment file at the
field that caused it, with the same message the simulation would give.

Memory: a model whose weights alone do not fit a socket under the plans; with an explicit
``serving.batch``, that batch on a decode socket, with ``batch: max`` the smallest compiled batch,
and one prompt on a prefill node, with the activations of their graphs, built but not simulated (as
``run`` places them, with its messages; a multi_model experiment's models each alone on the node
at its entry's batch, as ``run`` times them). Left to ``run``, as it needs graphs of its own (a graph per size tried made
``check`` of a 100-run sweep several times as long): the search for the largest batch of ``batch:
max``; and the timings.

Examples
--------
>>> from sn40l_sim.study.assemble import assemble
>>> from sn40l_sim.study.experiment import load_experiment
>>> check_assembly(assemble(load_experiment("experiments/llama8b_node8.yaml")))
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from sn40l_sim.engine.collective_sizes import tree_sizes
from sn40l_sim.errors import InfeasibleError, InputError
from sn40l_sim.ir import KernelGraph
from sn40l_sim.models.builder import check_graph_options
from sn40l_sim.serving.batching import compiled_size
from sn40l_sim.serving.context_limit import check_context, check_output_context
from sn40l_sim.serving.kv_transfer import transfer_seconds
from sn40l_sim.serving.memory_fit import MemoryFit, check_prompt_fits, check_weights_fit, fit_memory, located
from sn40l_sim.serving.point import PointSetup, check_plans, point_memory
from sn40l_sim.serving.traces import TraceRow, select_window, window_offset
from sn40l_sim.serving.workload import MAX_ARRIVAL_CYCLES, check_arrivals, context_message, last_arrival_s, trace_window
from sn40l_sim.study.assemble import (
    Assembly,
    assemble,
    experiment_model,
    load_graph_template,
    plan_of,
    prefill_lens,
    read_trace_rows,
)
from sn40l_sim.study.experiment import Experiment
from sn40l_sim.study.multi_model_run import model_error, node_tiers
from sn40l_sim.study.points import Point
from sn40l_sim.study.rate_search import at_rate, base_rate
from sn40l_sim.study.serving_section import ConstantLength, LognormalLength, UniformLength
from sn40l_sim.yamlio import FieldPath

#: what ``run`` says when an experiment has no workload (``map`` and ``check`` need none)
NO_WORKLOAD = "run needs a workload section (kind: fixed | poisson | trace)"


def require_workload(exp: Experiment) -> None:
    """An experiment to run must have a workload."""
    if exp.spec.workload is None:
        raise exp.error(("workload",), NO_WORKLOAD)


def check_assembly(asm: Assembly, only: Sequence[Point] | None = None) -> None:
    """Check what ``run`` checks before simulating, for every point (or those in ``only``).

    Raises
    ------
    InputError
        The first problem, located in the experiment file (an :class:`InfeasibleError` for a
        request longer than the static graphs or a prompt longer than every compiled prefill).
    """
    exp = asm.experiment
    require_workload(exp)
    exp.max_new_tokens  # noqa: B018 - raises when neither serving nor shape gives it
    _check_graph_options(exp, asm.model)
    if asm.graph_template is None:
        load_graph_template(exp, asm.model)
    rows = asm.trace_rows if asm.trace_rows is not None else read_trace_rows(exp)
    if rows:
        check_window(exp, rows)
    if rows is not None and exp.spec.rate_search is not None:
        base_rate(exp, rows)   # a window of fewer than two requests has no arrival rate to scale
    _check_last_arrival(asm, rows)
    section = exp.spec.multi_model
    if section is not None:   # the models and the tiers they live in, as time_models reads them
        node_tiers(asm)
        for i, entry in enumerate(section.models):
            sub = assemble(exp, node=asm.node, model=experiment_model(exp, ("multi_model", "models", i, "model"),
                                                                       entry.model))
            for point in asm.points if only is None else only:
                try:
                    check_point(sub, point, rows, batch=entry.batch)
                except InputError as exc:   # named as time_models names it
                    raise model_error(exp, i, exc) from None
    checked = asm.points if only is None else only
    for point in checked:
        try:
            # the experiment's own model is served only without a multi_model section
            check_point(asm, point, rows, served=section is None)
        except InfeasibleError as exc:
            # which point: another may fit (a shorter prompt, a policy that compresses the cache),
            # and "a batch of 64 does not fit" read as true of the whole experiment
            if len(checked) > 1:
                exc.message += f" (point {point.name})"
            raise


def check_window(exp: Experiment, rows: Sequence[TraceRow]) -> None:
    """Refuse a trace window (``workload.start_s``, ``workload.duration_s``) that holds no request,
    at the field that empties it: ``start_s`` past the trace's last request, or a ``duration_s``
    that falls between two arrivals; warn of a window that runs past the last request, which then
    holds fewer seconds of requests than it says (rates and counts read from it are the trace's,
    not the window's length).

    Raises
    ------
    InputError
        A window holding no request, naming the experiment's field and the trace's file.
    """
    workload = exp.spec.workload
    first = min(r.arrival_s for r in rows)
    span = max(r.arrival_s for r in rows) - first
    start, duration = workload.start_s, workload.duration_s
    trace = rows[0].file
    if window_offset(start) > window_offset(span):   # as select_window compares them
        raise _at(exp, ("workload", "start_s"), f"the window starts {start:g} s after the first request of {trace}, "
                  f"past its last ({len(rows)} requests, the last {span:g} s after the first): expected a start_s "
                  f"of at most {span:g} s", InputError)
    window = select_window(rows, start, duration)
    if not window:   # only a window between two arrivals is left
        raise _at(exp, ("workload", "duration_s"), f"no request of {trace} arrives in the {duration:g} s "
                  f"from {start:g} s after its first: expected a window holding a request (a longer "
                  "duration_s, or another start_s)", InputError)
    if duration is not None and window_offset(start + duration) > window_offset(span):
        exp.doc.warn(("workload", "duration_s"), f"the window {start:g} s to {start + duration:g} s runs past the "
                     f"last request of {trace} ({span:g} s after its first): it holds {len(window)} request(s) "
                     f"arriving over {span - start:.4g} s, not {duration:g} s")


def check_mapping(asm: Assembly) -> None:
    """What ``map`` needs of an experiment (which may have no workload): every point's KV policy
    and model (its entry's ``model_overrides``), the parallel plans against the nodes, the prompt
    within the model's maximum context (with its ``max_new_tokens``, or for an experiment with a
    workload, its requests one by one as ``run`` holds them) and on a compiled prefill graph, the graph options, and
    weights whose share fits a socket's first memory tier, as ``run`` requires.

    Raises
    ------
    InputError
        The first problem, located in the experiment file.
    """
    exp = asm.experiment
    _check_graph_options(exp, asm.model)
    spec = exp.spec
    # the decode graph map builds holds the generated tokens as run's does (a map experiment may leave
    # them out: then the one token a prefill gives). A served experiment must set them, as run says:
    # the default of 1 refused its requests at output_len, naming a max_new_tokens the file never wrote
    new_tokens = exp.max_new_tokens if spec.workload is not None else \
        spec.serving.max_new_tokens or spec.shape.max_new_tokens or 1
    # a served experiment's requests are held to the context one by one, as run holds them (its
    # decode slot stops at the context); only a map experiment's max_new_tokens must fit whole
    rows = None if spec.workload is None else asm.trace_rows if asm.trace_rows is not None else read_trace_rows(exp)
    for point in asm.points:
        model = asm.model_for(point)
        # the compiled prefill lengths as run and map read them: without them, a graph compiled for more
        # positions than the model has passed (a 1,024-token prompt of Llama-3.1-8B mapped on a
        # 262,144-token graph, 5.4 s instead of 15 ms, where run refuses the file)
        setup = PointSetup(name=point.name, node=asm.node, model=model, policy=asm.policy(point),
                           prompt_len=point.prompt_len, prefill_plan=plan_of(spec.parallel.prefill),
                           decode_plan=plan_of(spec.parallel.decode), prefill_node=asm.prefill_node,
                           max_new_tokens=new_tokens, mode=spec.serving.mode, may_spill=spec.memory.may_spill,
                           prefill_lens=prefill_lens(spec.serving, model), max_context_set=asm.max_context_set)
        try:
            check_plans(setup)
            (check_output_context if spec.workload is None else check_context)(setup)
            # a prompt no compiled prefill graph holds: map --phase prefill refuses it, as run does
            with located("prefill_lens"):
                compiled_size(point.prompt_len, setup.prefill_lens, "prompt length")
            # map places weights as run does, in the first tier: run refuses a model whose share
            # spills, and map mapped it streaming from DDR (DeepSeek-R1 on one socket, 9.9 s a step)
            prefill_place = None if asm.prefill_node is None else \
                replace(asm, node=asm.prefill_node, prefill_node=None).memory_placer(setup.model)
            check_weights_fit(setup, asm.memory_placer(setup.model), prefill_place)
        except InputError as exc:
            raise asm.locate(exc, point) from None
        if spec.workload is not None:
            _check_lengths(exp, point.prompt_len, new_tokens, rows, model.max_context, asm.max_context_set)


def _check_graph_options(exp: Experiment, model: Any) -> None:
    try:
        check_graph_options(dict(exp.spec.graph_options))
    except InputError as exc:
        option, _, rest = exc.message.partition(": ")
        if option in exp.spec.graph_options:   # the message starts with the option's name: locate it there
            raise _at(exp, ("graph_options", option), rest, type(exc)) from None
        raise _at(exp, ("graph_options",), exc.message, type(exc)) from None
    if model.moe is None:
        for option in ("expert_loading", "routing_skew"):
            if option in exp.spec.graph_options:   # it would change nothing: say so rather than ignore it
                raise _at(exp, ("graph_options", option), f"model {model.name!r} has no MoE layers, so "
                          f"{option} (which experts a MoE call streams) has nothing to act on; remove it",
                          InputError)


def check_point(asm: Assembly, point: Point, trace_rows: Sequence[Any] | None = None, served: bool = True,
                batch: int | str | None = None) -> None:
    """The checks of one point (see the module docstring); ``served`` False for a model that only
    ``map`` and ``check`` read (a multi_model experiment's ``model:``), whose weights need not fit;
    ``batch`` in place of ``serving.batch``: a multi_model entry's own, with which ``run`` times
    that model on the node alone (``multi_model_run.time_models``)."""
    exp = asm.experiment
    setup = asm.setup(point)     # makes the point's KV policy: a bad one is located at its entry
    if batch is not None:
        setup = replace(setup, batch=batch)
    try:
        check_plans(setup)
        check_context(setup)
        if setup.mode == "disaggregated":
            with located("kv_transfer"):
                transfer_seconds(setup.node, setup.kv_transfer, 0, setup.prefill_node)
        with located("prefill_lens"):
            compiled_size(point.prompt_len, setup.prefill_lens, "prompt length")
        if served:
            # an explicit batch (else, for batch: max, the smallest compiled batch: not the search for
            # the largest, a graph per size) and one prompt on a prefill node, with the activations
            # of their graphs (built, not simulated): a batch that did not fit, or a 1M-token prompt
            # whose cache or activations fit no batch, passed check and stopped run
            batch = int(setup.batch) if setup.batch != "max" else min(setup.batch_sizes)
            side = asm.prefill_side(setup)    # (a chunk's graph costs are not placed: run places the prompt's)
            timer = asm.step_timer(setup)
            _check_batch_fits(setup, batch, point_memory(setup, timer, asm.memory_placer(setup.model),
                                                         side.get("prefill_costs"), side.get("prefill_place")))
            if exp.spec.execution.collective_algorithm == "tree":
                check_tree_groups(timer.built_graphs())
    except InputError as exc:
        raise asm.locate(exc, point) from None
    _check_lengths(exp, point.prompt_len, setup.max_new_tokens, trace_rows, setup.model.max_context,
                   asm.max_context_set)


def _check_last_arrival(asm: Assembly, rows: Sequence[TraceRow] | None) -> None:
    """Refuse, as building the requests refuses it once the steps are timed, a workload whose last
    request arrives later than the serving clock counts; with a rate search, at its slowest probe
    (``low_per_s``: the later probes come faster), at that field. ``count: batch`` counts the
    decode slots, with ``batch: max`` the smallest compiled batch's: a larger one may still pass
    the clock, which ``run`` then refuses once it knows the batch."""
    exp = asm.experiment
    search = exp.spec.rate_search
    slowest = asm if search is None else at_rate(asm, search.low_per_s)
    clock_hz = asm.node.socket.clock_hz
    workload = slowest.experiment.spec.workload
    serving = exp.spec.serving
    if getattr(workload, "count", None) == "batch" and exp.spec.multi_model is None:
        # as many requests a round as decode slots: with batch: max at least the smallest compiled
        # batch's (a larger batch that fits only adds arrivals, later ones: the same draws first)
        batch = min(serving.batch_sizes) if serving.batch == "max" else int(serving.batch)
        workload = workload.model_copy(update={"count": batch * serving.decode_nodes * workload.rounds})
    last = last_arrival_s(workload, serving.seed, rows, MAX_ARRIVAL_CYCLES / clock_hz)
    if last is None:   # count: batch of several models' slots, known with their batches
        return
    try:
        check_arrivals(last, clock_hz)
    except InputError as exc:
        if search is not None:
            raise _at(exp, ("rate_search", "low_per_s"), f"at the search's low end, {exc.message}", InputError) \
                from None
        raise asm.locate(exc) from None


def check_tree_groups(graphs: Sequence[KernelGraph]) -> None:
    """Refuse ``execution.collective_algorithm: tree`` where the point's graphs (built to size their
    activations, not simulated) have a collective recursive doubling cannot run, as ``run`` refuses
    it when it times the collective (:func:`~sn40l_sim.engine.collective_sizes.tree_sizes`: a group
    that is not a power of two, or an all-to-all); a collective of one socket or no bytes costs
    nothing and is never run."""
    for graph in graphs:
        for kernel in graph.kernels():
            for coll in kernel.collectives:
                if coll.group >= 2 and coll.bytes > 0:
                    tree_sizes(coll.kind, int(coll.bytes), coll.group)


def _check_batch_fits(setup: PointSetup, batch: int, memory: MemoryFit) -> None:
    """Refuse, as ``run`` refuses them, a ``batch`` that does not fit on a decode socket (an explicit
    one, or the smallest compiled batch of ``batch: max``) or the prompt on a prefill node: their
    graphs are built (their activations) and placed; only a refused batch goes through ``run``'s
    whole sequence (:func:`fit_memory`: the weights, then the largest batch that fits, which its
    message names, with the longest prompt that would), so that a sweep of explicit batches is
    checked at the cost of a decode graph a run and a prefill graph a prompt length."""
    check_weights_fit(setup, memory.place, memory.prefill_place)
    try:
        memory.decode_fits(batch)
    except InfeasibleError:
        fit_memory(setup, memory)
        raise
    # and the prompt on a prefill node (one graph more): a 1M-token prompt whose activations may
    # not spill passed check with an explicit batch and stopped run
    check_prompt_fits(setup, memory)


def _check_lengths(exp: Experiment, prompt_len: int, max_new_tokens: int, trace_rows: Sequence[Any] | None,
                   max_context: int | None = None, max_context_set: str | None = None) -> None:
    """No request may be longer than the static graphs of the point: the prompt than the point's
    prompt length, the output than ``max_new_tokens``; nor its prompt and output together than the
    model's ``max_context`` (what building the requests refuses)."""
    workload = exp.spec.workload
    limits = {"prompt_len": (prompt_len, "the point's prompt length", "which the static decode graph is compiled "
                             "for"),
              "output_len": (max_new_tokens, "max_new_tokens", "the static decode graph's maximum generated length")}
    candidates: list[tuple[FieldPath, str, str, int]] = []   # (field, request label, length kind, value)
    if workload.kind == "fixed":
        if workload.requests is not None:
            for i, request in enumerate(workload.requests):
                for key in ("prompt_len", "output_len"):
                    value = getattr(request, key)
                    if value is not None:
                        candidates.append((("workload", "requests", i, key), f"requests[{i}]", key, value))
        else:
            for key in ("prompt_len", "output_len"):
                value = getattr(workload, key)
                if value is not None:
                    candidates.append((("workload", key), "request 0", key, value))
    elif workload.kind == "poisson":
        for key in ("prompt_len", "output_len"):
            dist = getattr(workload, key)
            largest = _largest(dist, limits[key][0])
            if largest is not None:
                field, value = largest
                candidates.append((("workload", key) + field, "a request", key, value))
    elif trace_rows is not None:
        try:   # the run's own windowing, capping and length check: the same line, naming the trace's line
            trace_window(workload, trace_rows, prompt_len=prompt_len, max_new_tokens=max_new_tokens,
                         max_context=max_context, max_context_set=max_context_set)
        except InputError as exc:
            if exc.file is not None:
                raise
            field = ("workload", "start_s") if "start_s" in exp.doc.data.get("workload", {}) else ("workload",)
            raise _at(exp, field, exc.message, type(exc)) from None
    for field, label, key, value in candidates:
        limit, name, why = limits[key]
        if value > limit:
            raise _at(exp, field, f"{label}: {key} {value} exceeds {name} {limit}, {why}", InfeasibleError)
    # a request's prompt and output together (a poisson workload's longest of each may meet)
    lengths: dict[str, dict[str, tuple[FieldPath, int]]] = {}
    if workload.kind == "poisson" or (workload.kind == "fixed" and workload.requests is None):
        lengths["a request" if workload.kind == "poisson" else "request 0"] = {}   # the defaults, at least
    for field, label, key, value in candidates:
        lengths.setdefault(label, {})[key] = (field, value)
    for label, got in lengths.items():
        prompt = got.get("prompt_len", ((), prompt_len))[1]
        field, output = got.get("output_len", (None, max_new_tokens))
        if max_context is not None and prompt + output > max_context:
            where = field or got.get("prompt_len", (("workload",), 0))[0]
            raise _at(exp, where, context_message(label, prompt, output, max_context, max_context_set),
                       InputError)


def _largest(dist: Any, limit: int) -> tuple[FieldPath, int] | None:
    """The field and value of the largest length a distribution can draw (None: no fixed bound, or
    one that defaults to the point's ``limit``)."""
    if isinstance(dist, ConstantLength):
        return (), dist.value
    if isinstance(dist, UniformLength):
        return ("high",), dist.high
    if isinstance(dist, LognormalLength) and dist.high is not None:
        return ("high",), dist.high
    if isinstance(dist, LognormalLength) and dist.low > limit:
        # the default high is the limit, and draws are clipped to at least low: every one is low
        return ("low",), dist.low
    return None


def _at(exp: Experiment, field: FieldPath, message: str, kind: type[InputError]) -> InputError:
    """An error of class ``kind`` located at ``field`` of the experiment file."""
    located_error = exp.error(field, message)
    return kind(message, file=located_error.file, field=located_error.field, line=located_error.line)


__all__ = ["NO_WORKLOAD", "check_assembly", "check_mapping", "check_point", "check_tree_groups", "check_window",
           "require_workload"]
