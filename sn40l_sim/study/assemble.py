"""The one assembly step: an experiment (plus hardware overrides) -> the node, the model, and for
each point its KV policy, its serving set-up, its step costs and its memory placer.

``run``, ``sweep``, ``map``, ``validate`` and ``calibrate`` all come through here, so the way an
experiment becomes spec objects is written once. This is also where the lower layers meet: the
serving model (:mod:`sn40l_sim.serving`) is handed the graph builder (:mod:`sn40l_sim.models`),
the mapper and memory placer (:mod:`sn40l_sim.mapper`) already bound to this experiment, and the
errors it raises in its own words (the :class:`~sn40l_sim.serving.point.PointSetup` field they are
about) are located here in the experiment file.

An :class:`Assembly` holds everything its points read: the node, the model (which carries its
kernel template), and, when the experiment names them, the trace's rows and the graph options'
kernel template (:func:`read_trace_rows`, :func:`load_graph_template`: read when first needed unless
given, as a sweep's plan gives them, so that an assembly pickled to a worker needs no file).

Examples
--------
>>> from sn40l_sim.study.experiment import load_experiment
>>> asm = assemble(load_experiment("experiments/deepseek_tp16.yaml"))
>>> asm.node.sockets, asm.model.name, [p.name for p in asm.points]
(16, 'deepseek-r1', ['full', 'snapstream'])
>>> setup = asm.setup(asm.points[1])
>>> setup.policy, setup.prompt_len, setup.decode_plan, len(asm.requests(asm.points[1])(16))   # a request a slot
(SnapStream(sink=4, recent=4096, topk=28668, observation_window=4096, pool_kernel=7), 131072, ParallelPlan(tp=16, attention_dp=16), 16)
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from sn40l_sim.engine.run_graph import EngineOptions
from sn40l_sim.errors import InputError
from sn40l_sim.hardware.loader import with_overrides
from sn40l_sim.hardware.spec import NodeSpec
from sn40l_sim.kvcache import make_policy
from sn40l_sim.kvcache.base import KVPolicy, context_room, slot_new_tokens
from sn40l_sim.models.spec import ModelSpec
from sn40l_sim.models.template import KernelTemplates
from sn40l_sim.serving.memory_fit import MemoryPlacer
from sn40l_sim.serving.point import PointSetup
from sn40l_sim.serving.step_costs import StepTimer
from sn40l_sim.serving.traces import TraceRow
from sn40l_sim.serving.workload import Request, build_requests
from sn40l_sim.study.experiment import Experiment, load_experiment, memory_order
from sn40l_sim.study.experiment_files import (
    check_drafts_have_mtp,
    check_given_specs,
    check_ring_holds_drafts,
    check_template_drafts,
    experiment_hardware,
    experiment_model,
    load_graph_template,
    read_trace_rows,
)
from sn40l_sim.study.points import (
    Point,
    at_entry,
    check_budget,
    check_policy_answers,
    make_point_model,
    make_point_policy,
    max_context_set,
    point_of,
    points,
    warn_idle_sockets,
    warn_uneven_heads,
    warn_unfilled_slots,
    warn_window_past_prompt,
)
from sn40l_sim.study.step_timing import memory_placer, plan_of, prefill_lens, step_timer  # imported from here too

#: the lower layers' word for what was wrong (a :class:`PointSetup` field, or the engine's
#: collective ``group`` and ``collective_algorithm``) -> the experiment field it comes from, for error locations (a tuple: the
#: first of them the file has, since the field named must be one the user can find)
SETUP_FIELDS = {
    "prompt_len": ("prompt_lens", "shape.prompt_len"),
    "batch": "serving.batch", "batch_sizes": "serving.batch_sizes",
    "max_new_tokens": ("serving.max_new_tokens", "shape.max_new_tokens"),
    "prefill_lens": "serving.prefill_lens",
    "kv_transfer": "serving.kv_transfer",
    "requests": "workload",
    "graph_options": "graph_options",
    "prefill_plan": "parallel.prefill",
    "decode_plan": "parallel.decode",
    "group": "parallel", "collective_algorithm": "execution.collective_algorithm",
    "speculation": "serving.speculative",
    "model": ("model_overrides", "model"),
    "policy": "policies",   # a policy's kernels; locate names the point's entry when given the point
}


@dataclass(frozen=True)
class Assembly:
    """An experiment with its hardware and model loaded: everything a point needs.

    Attributes
    ----------
    experiment : Experiment
        The validated experiment (its document locates errors).
    node : NodeSpec
        The hardware, with any overrides applied.
    model : ModelSpec
        The model, with the experiment's ``model_overrides`` applied (a point's own, from its
        policy entry, come on top: :meth:`model_for`).
    trace_rows : tuple of TraceRow, optional
        The rows of a trace workload, already read (else read from the file when first needed).
    graph_template : KernelTemplates, optional
        The template ``graph_options.template`` names, already loaded (else loaded by the graph
        builder from its path).
    prefill_node : NodeSpec, optional
        The prefill nodes' hardware when it is not :attr:`node` (the experiment's ``prefill_hardware``).
    """

    experiment: Experiment
    node: NodeSpec
    model: ModelSpec
    trace_rows: tuple[TraceRow, ...] | None = None
    graph_template: KernelTemplates | None = None
    #: graphs built for the points, by what builds them: the graphs do not depend on the node, so
    #: an assembly replaced with other hardware (``validate``, ``calibrate``) shares this store
    graphs: dict = field(default_factory=dict, compare=False, repr=False)
    #: the prefill nodes' hardware when the experiment names a file of its own (prefill_hardware)
    prefill_node: NodeSpec | None = None

    @cached_property
    def points(self) -> list[Point]:
        """The experiment's points (KV policies x prompt lengths)."""
        return points(self.experiment)

    @cached_property
    def _entry_models(self) -> dict[int, ModelSpec]:
        return {}

    def model_for(self, point: Point | str) -> ModelSpec:
        """The model of ``point``: :attr:`model` with its policy entry's ``model_overrides`` (the
        KV format), built once per entry; a bad override is an error at the entry's field. ``point``
        may be named, as for :meth:`setup` and :meth:`policy` and :meth:`requests`."""
        point = point_of(self.points, point)
        if not point.model_overrides:
            return self.model
        if point.policy_index not in self._entry_models:
            self._entry_models[point.policy_index] = make_point_model(self.experiment, point, self.model)
        return self._entry_models[point.policy_index]

    @property
    def max_context_set(self) -> str | None:
        """The experiment field that sets the model's ``max_context`` (:func:`max_context_set`)."""
        return max_context_set(self.experiment)

    def policy(self, point: Point | str) -> KVPolicy:
        """The point's KV policy; a bad one (a parameter, or a memory tier the hardware does not
        have) is an error at its policy entry."""
        point = point_of(self.points, point)
        policy = make_point_policy(self.experiment, point)
        check_policy_answers(self.experiment, point, policy, self.model_for(point))
        tiers = self.node.socket.memory
        for param, tier in policy.memory_tiers().items():
            if tier not in tiers:
                raise self.experiment.error(("policies", point.policy_index, "params", param),
                                            f"the hardware ({self.node.name}) has no memory tier {tier!r}; its "
                                            f"tiers are {list(tiers)} (point {point.name})")
        check_budget(self.experiment, point, policy, self.model_for(point))
        check_ring_holds_drafts(self.experiment, point, policy)
        warn_unfilled_slots(self.experiment, point, policy)
        warn_window_past_prompt(self.experiment, point, policy)
        return policy

    def setup(self, point: Point | str, policy: KVPolicy | None = None) -> PointSetup:
        """The serving set-up of ``point`` (one of :attr:`points`, or its name: ``asm.setup("full")``),
        with ``policy`` instead of the point's own KV policy when given: a :class:`PointSetup`,
        everything the serving model reads (node, model, policy, plans, compiled batches and prompt
        lengths, speculation). A bad policy parameter or model override is an :class:`InputError` at
        the point's policy entry; a name no point has, one naming the points."""
        point = point_of(self.points, point)
        spec = self.experiment.spec
        serving = spec.serving
        model = self.model_for(point)
        return PointSetup(
            name=point.name, node=self.node, model=model, policy=policy or self.policy(point),
            prompt_len=point.prompt_len, prefill_plan=plan_of(spec.parallel.prefill),
            decode_plan=plan_of(spec.parallel.decode), mode=serving.mode,
            prefill_nodes=self.experiment.prefill_node_count, decode_nodes=serving.decode_nodes,
            batch=serving.batch, batch_sizes=serving.batch_sizes, prefill_lens=prefill_lens(serving, model),
            max_new_tokens=self.experiment.max_new_tokens, speculation=self.experiment.speculation,
            seed=serving.seed, kv_transfer=serving.kv_transfer, graph_options=dict(spec.graph_options),
            may_spill=spec.memory.may_spill, prefix_cache=serving.prefix_cache,
            prefill_chunk=serving.prefill_chunk, prefill_node=self.prefill_node,
            max_context_set=self.max_context_set)

    def step_timer(self, setup: PointSetup, hardware_field: str = "hardware") -> StepTimer:
        """The step costs of a point: its graphs built, mapped and simulated, as ``run`` times them.

        Parameters
        ----------
        setup : PointSetup
            The point's set-up (:meth:`setup`).
        hardware_field : str
            The field naming :attr:`node`'s file (a kernel no tile holds is reported there).

        Returns
        -------
        StepTimer
            Its :meth:`~sn40l_sim.serving.step_costs.StepTimer.prefill` and
            :meth:`~sn40l_sim.serving.step_costs.StepTimer.decode_step` return a
            :class:`~sn40l_sim.engine.phase.PhaseTiming` (``cycles``, ``seconds``), memoised per
            shape in the timer and kept in the disk cache. A record's ``decode_step_s`` is
            ``decode_step(record["batch"], record["kv_len"], drafts=setup.speculation.drafts)``.

        Examples
        --------
        One decode step and one prefill of Llama-3.1-8B on an 8-socket node, the step by cause:

        >>> from sn40l_sim.engine.breakdown import decode_step_breakdown
        >>> from sn40l_sim.study.experiment import load_experiment
        >>> asm = assemble(load_experiment("experiments/llama8b_node8.yaml"))
        >>> timer = asm.step_timer(asm.setup(asm.points[0]))      # the "full" policy
        >>> step = timer.decode_step(64, 33280)    # 64 sequences, each reading 33,280 cached tokens
        >>> f"{step.seconds * 1e3:.1f} ms", step.cycles == round(step.seconds * asm.node.socket.clock_hz)
        ('24.1 ms', True)
        >>> by_cause = decode_step_breakdown(step)                 # seconds per cause, summing to the step
        >>> max(by_cause, key=by_cause.get), abs(sum(by_cause.values()) - step.seconds) < 1e-12
        ('kv_reads', True)

        ``timer.prefill(32768)`` times one 32K-token prompt the same way (0.298 s)."""
        if not isinstance(setup, PointSetup):   # a Point, say: an AttributeError deep inside otherwise
            raise InputError(f"setup: expected a PointSetup, such as asm.setup(asm.points[0]), got {type(setup).__name__}")
        options = setup.graph_options
        if self.graph_template is not None:
            options = {**options, "template": self.graph_template}
        execution = self.experiment.spec.execution
        engine = EngineOptions(kernel_looping=execution.kernel_looping,
                               collective_algorithm=execution.collective_algorithm)
        context_len = setup.prompt_len + slot_new_tokens(setup.max_new_tokens, setup.speculation.drafts,
                                                         context_room(setup.model, setup.prompt_len))
        # everything the graph builder is bound to (a template is one object per assembly)
        builds = (setup.model.model_dump_json(), repr(setup.policy), setup.prefill_plan, setup.decode_plan,
                  repr(sorted((k, v if isinstance(v, (str, int, float, bool)) else id(v)) for k, v in options.items())),
                  context_len)
        return step_timer(self.node, setup.model, setup.policy, setup.prefill_plan, setup.decode_plan, options,
                          execution.idle_units, hardware_field, engine=engine, context_len=context_len,
                          graphs=self.graphs.setdefault(builds, {}), prefill_drafts=setup.speculation.drafts)

    def prefill_side(self, setup: PointSetup, *, policy_free_prefill: bool = False) -> dict[str, Any]:
        """``simulate_point``'s prefill step costs and memory placer when the prefill nodes are
        hardware of their own, and with chunked prefill or prefix caching the costs of a chunk's
        or a prefix hit's suffix graph (on the prefill nodes' hardware): the same step costs with
        no KV policy's kernels, which select from the whole prompt once, after its last chunk or
        the suffix; without either and with ``policy_free_prefill``, the same costs as
        ``policy_free_prefill``, which only time the prompt without the policy's kernels (what they
        add to its prefill: ``prefill_policy_slowdown``, a served run's figure); an empty dict
        otherwise."""
        options: dict[str, Any] = {}
        side, field = (replace(self, node=self.prefill_node, prefill_node=None), "prefill_hardware") \
            if self.prefill_node is not None else (self, "hardware")
        if self.prefill_node is not None:
            options.update(prefill_costs=side.step_timer(setup, field), prefill_place=side.memory_placer(setup.model))
        if setup.prefill_chunk is not None or setup.prefix_cache:
            options["policy_free_costs"] = side.step_timer(replace(setup, policy=make_policy("full", {})), field)
        elif policy_free_prefill:
            options["policy_free_prefill"] = side.step_timer(replace(setup, policy=make_policy("full", {})), field)
        return options

    def memory_placer(self, model: ModelSpec | None = None) -> MemoryPlacer:
        """The memory placer of this node and ``model`` (default: the experiment's), in the
        experiment's tier order."""
        return memory_placer(self.node, model or self.model, memory_order(self.experiment, self.node))

    def requests(self, point: Point | str, serve: bool = True) -> Callable[[int], list[Request]]:
        """``slots -> requests`` of the workload at ``point`` (none when ``serve`` is False)."""
        point = point_of(self.points, point)
        spec = self.experiment.spec
        workload = spec.workload
        if workload is None:
            raise self.experiment.error(("workload",), "run needs a workload section (kind: fixed | poisson | trace)")
        max_new_tokens = self.experiment.max_new_tokens
        clock_hz = self.node.socket.clock_hz

        def requests_for(slots: int) -> list[Request]:
            if not serve:
                return []
            rows = self.trace_rows
            if rows is None and workload.kind == "trace":
                rows = read_trace_rows(self.experiment)
            return build_requests(workload, prompt_len=point.prompt_len, max_new_tokens=max_new_tokens,
                                  slots=slots, seed=spec.serving.seed, clock_hz=clock_hz, trace_rows=rows,
                                  max_context=self.model_for(point).max_context,
                                  max_context_set=self.max_context_set)

        return requests_for

    def locate(self, exc: InputError, point: Point | None = None) -> InputError:
        """An error from the simulation naming no file, located in the experiment file: a
        :class:`PointSetup` field becomes its experiment field (``policy``: ``point``'s entry)."""
        if exc.file is not None:
            return exc
        if exc.field == "policy" and point is not None:
            return at_entry(self.experiment, point, ("policy",), exc)
        field = SETUP_FIELDS.get(exc.field or "", exc.field)
        if isinstance(field, tuple):
            field = next((f for f in field if self._written(f)), field[-1])
        path = tuple(field.split(".")) if field else ()
        file, line = self.experiment.doc.where(path)
        return exc.located_at(file=file, field=field, line=line)

    def _written(self, field: str) -> bool:
        """Whether the experiment file (or its base) writes ``field`` (a dotted path)."""
        data: Any = self.experiment.doc.data
        for part in field.split("."):
            if not isinstance(data, dict) or part not in data:
                return False
            data = data[part]
        return True


def assemble(experiment: Experiment | str | Path, *, hardware_overrides: dict[str, Any] | None = None,
             node: NodeSpec | None = None, model: ModelSpec | None = None) -> Assembly:
    """Load the experiment's hardware (with ``hardware_overrides``) and model, unless given.

    Parameters
    ----------
    experiment : Experiment or str or Path
        A loaded experiment (:func:`~sn40l_sim.study.experiment.load_experiment`), or its file.
    hardware_overrides : dict, optional
        Dotted hardware fields to change, validated as the file is
        (:func:`~sn40l_sim.hardware.loader.with_overrides`), also on a given ``node``.
    node : NodeSpec, optional
        The hardware to use instead of the experiment's ``hardware`` file.
    model : ModelSpec, optional
        The model to use instead of the experiment's (``model_overrides`` are then not applied:
        :func:`~sn40l_sim.models.loader.with_overrides` changes a loaded model's fields).

    Returns
    -------
    Assembly
        Frozen: its :attr:`~Assembly.points`, :meth:`~Assembly.setup` and :meth:`~Assembly.step_timer`
        (single steps); :func:`sn40l_sim.study.runner.simulate_assembly` simulates its points.

    Raises
    ------
    InputError
        For a missing workload, a bad hardware or model file (naming the experiment field that
        led to it when the file is missing), a ``memory.order`` naming a tier the hardware lacks, or
        speculative drafts for a model without an MTP module to draft them.

    Examples
    --------
    >>> from sn40l_sim.study.experiment import load_experiment
    >>> exp = load_experiment("experiments/llama8b_node8.yaml")
    >>> asm = assemble(exp, hardware_overrides={"socket.memory.hbm.bytes_per_s_per_unit": "819.2 GB/s"})
    >>> asm.node.name, asm.model.name, [point.name for point in asm.points]
    ('SN40L-8 (socket.memory.hbm.bytes_per_s_per_unit 819.2 GB/s)', 'llama-3.1-8b', ['full', 'snapstream'])
    >>> assemble(exp, hardware_overrides={"socket.memory.hbm.bandwidth": "1 TB/s"})
    Traceback (most recent call last):
    ...
    sn40l_sim.errors.InputError: <overrides>: socket.memory.hbm.bandwidth: unknown key (expected one of bytes_per_s_per_unit, capacity_bytes_per_unit, efficiency, latency_s, reserved_bytes, units_per_die)
    """
    if not isinstance(experiment, Experiment):   # a path, as simulate_experiment takes
        experiment = load_experiment(experiment)
    spec = experiment.spec
    check_given_specs(node, model)
    if node is None:
        node = experiment_hardware(experiment, ("hardware",), spec.hardware, "hardware")
    if hardware_overrides:
        node = with_overrides(node, hardware_overrides)
    memory_order(experiment, node)   # the tiers the experiment names must be the hardware's
    if model is None:
        model = experiment_model(experiment, ("model",), spec.model)
    check_drafts_have_mtp(experiment, model)
    prefill_node = None
    if spec.prefill_hardware is not None:
        prefill_node = experiment_hardware(experiment, ("prefill_hardware",), spec.prefill_hardware, "prefill hardware")
        if hardware_overrides:
            prefill_node = with_overrides(prefill_node, hardware_overrides)
        memory_order(experiment, prefill_node)
    for phase, phase_node in (("prefill", prefill_node or node), ("decode", node)):
        warn_idle_sockets(experiment, phase, plan_of(getattr(spec.parallel, phase)).sockets, phase_node.sockets,
                          phase_node.name)
        warn_uneven_heads(experiment, phase, plan_of(getattr(spec.parallel, phase)), model.attention,
                          model.name)
    graph_template = load_graph_template(experiment, model)
    check_template_drafts(experiment, model, graph_template)
    return Assembly(experiment, node, model, graph_template=graph_template, prefill_node=prefill_node)
