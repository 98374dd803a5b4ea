"""The files an experiment names, loaded and checked where it names them: :func:`named_file` (any
file, which must exist), :func:`experiment_model` (the model with the experiment's
``model_overrides``), :func:`read_trace_rows` (a trace workload's rows) and
:func:`load_graph_template` (``graph_options.template``). Errors are located at the experiment's
field (or in the named file, for that file's own errors); :func:`mapped_at` locates a kernel the
mapper cannot place on the named hardware's tiles at the field naming that hardware."""
from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from sn40l_sim.errors import InfeasibleError, InputError, shown
from sn40l_sim.hardware.loader import TIER_ORDER_WARNING, load_hardware
from sn40l_sim.hardware.spec import NodeSpec
from sn40l_sim.kvcache import KVPolicy
from sn40l_sim.models.loader import load_model
from sn40l_sim.models.spec import ModelSpec
from sn40l_sim.models.template import KernelTemplates, default_template_path, load_templates_for, template_for
from sn40l_sim.serving.traces import TraceRow, read_trace, trace_source
from sn40l_sim.study.experiment import Experiment
from sn40l_sim.study.points import Point, at_entry, param_source
from sn40l_sim.yamlio import not_a_file

T = TypeVar("T")


def named_file(experiment: Experiment, field: tuple[str, ...], relative: str, what: str) -> Path:
    """The file the experiment names at ``field`` (relative to the file that wrote it), which must
    exist; otherwise an error at that field of the experiment, naming the path looked for.

    >>> from sn40l_sim.study.experiment import load_experiment
    >>> exp = load_experiment("experiments/deepseek_tp16.yaml")
    >>> str(named_file(exp, ("hardware",), exp.spec.hardware, "hardware"))
    'hw_configs/sn40l_node16.yaml'
    >>> named_file(exp, ("model",), "nope.yaml", "model")
    Traceback (most recent call last):
    ...
    sn40l_sim.errors.InputError: experiments/deepseek_tp16.yaml:9: model: model file 'nope.yaml' not found (looked for experiments/nope.yaml)
    """
    path = experiment.resolve(relative, field)
    try:
        found = path.is_file()
    except OSError as exc:   # a name longer than the file system takes (pathlib raises ENAMETOOLONG)
        raise experiment.error(field, f"{what} file {shown(relative)}: {exc.strerror}") from None
    if not found:
        raise experiment.error(field, f"{what} file {shown(relative)} {not_a_file(path, relative)} (looked for {path})")
    return path


def experiment_hardware(experiment: Experiment, field: tuple[str, ...], name: str, what: str) -> NodeSpec:
    """The hardware file an experiment names; the file's warning that it lists a slower memory
    tier first is left out when the experiment's ``memory.order`` places the tiers itself (the
    way out that warning names)."""
    path = named_file(experiment, field, name, what)
    if experiment.spec.memory.order is None:
        return load_hardware(path)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=f".*{TIER_ORDER_WARNING}")
        return load_hardware(path)


def experiment_model(experiment: Experiment, field: tuple, relative: str) -> ModelSpec:
    """The model file the experiment names at ``field``, with the experiment's ``model_overrides``.

    Raises
    ------
    InputError
        The file's own error where it is; an error the overrides cause (the file alone loads) at
        ``model_overrides.<field>`` of the experiment, as a policy entry's overrides are located
        (:func:`~sn40l_sim.study.points.make_point_model`), not in the model file they changed.
    """
    path = named_file(experiment, field, relative, "model")
    overrides = experiment.spec.model_overrides or None
    try:
        return load_model(path, overrides)
    except InputError as exc:
        if not overrides:
            raise
        load_model(path)   # the file's own error, if it has one, is the one to fix first
        message = exc.message
        if exc.file is not None and Path(exc.file.removesuffix(" (overrides)")).resolve() != Path(path).resolve():
            # another file (the kernel template) does not fit the overridden model: its field is
            # not one of the overrides
            inner = ()
            message = f"the model's kernel template {exc.file} does not fit the overridden model: {message}"
        else:
            inner = tuple(exc.field.split(".")) if exc.field else ()
        file, line = experiment.doc.where(("model_overrides",) + inner)
        raise exc.located_at(message=message, file=file, field=".".join(("model_overrides",) + inner),
                             line=line) from None


def check_given_specs(node: object, model: object) -> None:
    """Refuse a ``node`` or ``model`` given to :func:`~sn40l_sim.study.assemble.assemble` (or
    ``simulate_points``) that is not a :class:`NodeSpec` or :class:`ModelSpec`: ``node.socket``, say,
    given for the node was an AttributeError from deep inside."""
    for name, value, kind, example in (("node", node, NodeSpec, "load_hardware(path)"),
                                       ("model", model, ModelSpec, "load_model(path)")):
        if value is not None and not isinstance(value, kind):
            raise InputError(f"{name}: expected a {kind.__name__} ({example}) or None, got {type(value).__name__}")


def read_trace_rows(experiment: Experiment) -> tuple[TraceRow, ...] | None:
    """The rows of the experiment's trace workload (None for any other workload).

    Raises
    ------
    InputError
        For a trace file that cannot be read or has a bad row, naming the file and the line.
    """
    workload = experiment.spec.workload
    if workload is None or workload.kind != "trace":
        return None
    return tuple(read_trace(named_file(experiment, ("workload", "path"), workload.path, "trace")))


def load_graph_template(experiment: Experiment, model: ModelSpec) -> KernelTemplates | None:
    """The kernel template ``graph_options.template`` names, relative to the experiment file,
    checked against ``model`` (None when it names none; the graph builder reports a value that
    is not a path)."""
    path = experiment.spec.graph_options.get("template")
    if not isinstance(path, str) or not path:
        return None
    return load_templates_for(named_file(experiment, ("graph_options", "template"), path, "kernel template"), model)


def referenced_files(experiment: Experiment) -> list[tuple[str, str, tuple]]:
    """``(label, path as written, field)`` of every file an experiment names: its hardware, prefill
    hardware, model (and a multi-model section's models), trace and graph template; paths resolve
    with ``experiment.resolve(path, field)`` (a base file's paths are relative to the base)."""
    spec = experiment.spec
    files = [("hardware", spec.hardware, ("hardware",)), ("prefill hw", spec.prefill_hardware, ("prefill_hardware",)),
             ("model", spec.model, ("model",))]
    if spec.multi_model is not None:   # the models it serves beside the top-level one
        files += [(f"model {i}", entry.model, ("multi_model", "models", i, "model"))
                  for i, entry in enumerate(spec.multi_model.models)]
    workload = spec.workload
    if workload is not None and workload.kind == "trace":
        files.append(("trace", workload.path, ("workload", "path")))
    if isinstance(spec.graph_options.get("template"), str):
        files.append(("template", spec.graph_options["template"], ("graph_options", "template")))
    return [(label, rel, field) for label, rel, field in files if rel is not None]


def workload_source(experiment: Experiment) -> str | None:
    """The experiment's trace file and, for the Azure LLM inference trace, its attribution
    (:func:`~sn40l_sim.serving.traces.trace_source`); None for a workload that is not a trace."""
    workload = experiment.spec.workload
    if workload is None or workload.kind != "trace":
        return None
    return trace_source(named_file(experiment, ("workload", "path"), workload.path, "trace"))


def mapped_at(hardware_field: str, map_it: Callable[[], T]) -> T:
    """``map_it()``; a kernel the mapper cannot place on the tiles (its message names the socket's
    fields), which names no file or field, is located at ``hardware_field`` (``hardware`` or
    ``prefill_hardware``), the experiment field that names the hardware file.

    >>> def too_big():
    ...     raise InfeasibleError("kernel 'k': no tiling fits a tile of 1 PCUs")
    >>> mapped_at("hardware", too_big)
    Traceback (most recent call last):
    ...
    sn40l_sim.errors.InfeasibleError: hardware: kernel 'k': no tiling fits a tile of 1 PCUs
    """
    try:
        return map_it()
    except InfeasibleError as exc:
        if exc.file is not None or exc.field is not None:
            raise
        raise InfeasibleError(exc.message, field=hardware_field) from None


def check_drafts_have_mtp(experiment: Experiment, model: ModelSpec) -> None:
    """Refuse speculative drafts (``serving.speculative.drafts``) for a model without an MTP module
    to draft them, and warn of drafts never accepted (:func:`warn_drafts_never_accepted`);
    :func:`assemble` and a sweep's runs (which assemble their own) both ask."""
    if experiment.speculation.drafts and model.mtp is None:
        raise experiment.error(("serving", "speculative", "drafts"), f"model {model.name!r} has no mtp section: "
                               "speculative decoding drafts with the model's multi-token-prediction module "
                               "(leave serving.speculative out, or set drafts: 0)")
    warn_drafts_never_accepted(experiment)


def check_ring_holds_drafts(experiment: Experiment, point: Point, policy: KVPolicy) -> None:
    """Refuse a ring of recent tokens (a policy's ``recent``: SnapStream's, StreamingLLM's, H2O's,
    ArkVale's buffer's) shorter than a verify step's rows: with ``k`` speculative drafts a step writes
    ``k + 1`` rows per sequence into the ring and its queries attend to them (docs/architecture.md,
    speculative decoding), so a ring of ``k`` slots or fewer overwrites rows the same step reads."""
    drafts, recent = experiment.speculation.drafts, getattr(policy, "recent", None)
    if not drafts or not isinstance(recent, int) or recent > drafts:
        return
    given = [name for name in ("recent", "budget") if name in point.params]
    inner = param_source(experiment, point, given[0]) if given else ("policy",)
    raise at_entry(experiment, point, inner, InputError(
        f"a {policy.name} ring of {recent} recent tokens cannot hold a verify step's {drafts + 1} rows per sequence "
        f"(serving.speculative.drafts {drafts} + the token fed back); expected recent >= {drafts + 1}"))


def warn_drafts_never_accepted(experiment: Experiment) -> None:
    """Warn of drafts whose acceptance is 0: every step still verifies ``drafts + 1`` rows per
    sequence and runs the MTP module ``drafts`` times (the step is timed with them), for the one
    token plain decoding gives, so it serves fewer tokens/s than no drafts (docs/architecture.md,
    "Speculative decoding: the numbers")."""
    spec = experiment.speculation
    if not spec.drafts or spec.acceptance > 0:
        return
    drafts, runs = ("1 draft", "once") if spec.drafts == 1 else (f"{spec.drafts} drafts", f"{spec.drafts} times")
    experiment.doc.warn(("serving", "speculative", "acceptance"), f"0 with {drafts}: every step runs the MTP module "
                        f"{runs} and verifies {spec.drafts + 1} rows per sequence for one token, slower than no drafts "
                        "(set drafts: 0, or the acceptance the draft reaches)")


def check_template_drafts(experiment: Experiment, model: ModelSpec, graph_template: KernelTemplates | None) -> None:
    """Drafts need the template's MTP blocks in both phases (the prefill fills the MTP layer's
    cache): refused at ``graph_options.template`` when the experiment names the template, else at
    ``serving.speculative.drafts`` naming the model's template, not at a ``graph_options`` the
    experiment may not have (the graph builder's own check locates it there)."""
    if not experiment.speculation.drafts:
        return
    template = graph_template or template_for(model)
    lacking = [phase for phase in ("prefill", "decode")
               if not (getattr(template, phase).blocks.mtp_head or getattr(template, phase).blocks.mtp_tail)]
    if not lacking:
        return
    named = graph_template is not None
    source = "this kernel template" if named else \
        f"the kernel template {str(model.kernels or default_template_path(model))!r} of model {model.name!r}"
    raise experiment.error(("graph_options", "template") if named else ("serving", "speculative", "drafts"),
                           f"{source} has no mtp_head / mtp_tail blocks in {' and '.join(lacking)}, but the drafts "
                           "run the model's MTP module: add them, as graphs/kernels_deepseek.yaml does, or leave "
                           "serving.speculative out")
