"""``describe`` of an experiment file: the files it references, the datatypes of each model run
serves, the policies with their parameters, each phase's parallel plan, the shape, the memory
placement, the nodes that serve (with a multi_model section, each model by name with its share and
batch, and the schedulers), the workload, SLOs and rate search, the simulation options, and with a
sweep section its axes, values and files. Kept apart from
:mod:`sn40l_sim.commands.describe`, which dispatches on a file's kind, for that module's length.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sn40l_sim.study.experiment import Experiment, ExperimentSpec, PhasePlan, PolicyEntry
    from sn40l_sim.study.sweep.axes import Axis


def describe_experiment(path: str | Path) -> str:
    """The files an experiment references, and whether they exist, its plans, serving nodes,
    workload and SLOs; with a ``sweep:`` section, each axis with its values and the files the sweep
    points name beyond the base's."""
    from sn40l_sim.study.experiment import load_experiment
    from sn40l_sim.study.experiment_files import referenced_files
    from sn40l_sim.study.experiment_rules import options_summary
    from sn40l_sim.study.plugins import is_file_entry

    experiment = load_experiment(path)
    spec = experiment.spec
    lines = [f"experiment {spec.name} ({path})"]
    # each path with its field: a base file's paths are relative to the base (Document.resolve)
    files = [(label, rel, experiment.resolve(rel, field)) for label, rel, field in referenced_files(experiment)]
    for label, rel, target in files:
        lines.append(f"  {label:10s} {rel}  ->  {target}{'' if target.is_file() else '  (MISSING)'}")
    if spec.model_overrides:
        lines.append(f"  overrides  {spec.model_overrides} (of the model)")
    lines += _datatype_lines(experiment)
    for i, entry in enumerate(spec.plugins):
        # a file as the other paths are shown; a dotted module name as written
        shown = experiment.resolve(entry, ("plugins", i)) if is_file_entry(entry) else entry
        lines.append(f"  {'plugins' if i == 0 else '':10s} {entry}  ->  {shown}")
    policies = [_policy_text(p) for p in spec.policies]
    if len(", ".join(policies)) <= 90:
        lines.append(f"  policies   {', '.join(policies)}")
    else:   # one a line: a dozen entries with their overrides made one line of 600 characters
        lines += [f"  {'policies' if i == 0 else '':10s} {text}" for i, text in enumerate(policies)]
    lines += _plan_lines(spec, path, _tier_order(experiment), _drafts_refused(experiment))
    lines += _compiled_prompt_lines(experiment)
    lines += _serving_lines(spec)
    lines += _workload_lines(spec)
    options = options_summary(spec)   # all experts streamed, kernel looping off (docs/results.md, options)
    lines += [f"  options    {options} (as results' options give them)"] if options else []
    if spec.sweep is not None:
        swept, sweep_lines = _describe_sweep(path, spec.sweep, {target for _, _, target in files})
        lines += sweep_lines
        files += swept
    # each file the experiment reads, its trace too (describe takes one file: one command each)
    described = [target for _, _, target in files]
    commands = [f"python -m sn40l_sim describe {target}" for target in dict.fromkeys(described) if target.is_file()]
    for i, command in enumerate(commands):
        lines.append(f"  {'describe them with:' if i == 0 else '':19s} {command}")
    # describe lists the files; what run would refuse (a model override of 0 layers, say) is check's
    lines.append(f"  check it with: python -m sn40l_sim check {path}")
    return "\n".join(lines)


def _datatype_lines(experiment: Experiment) -> list[str]:
    """The weight, KV-cache and activation datatypes of each model run serves, its file's with the
    experiment's ``model_overrides``, as map gives them; a model that does not load is named, not
    raised (check says why)."""
    from sn40l_sim.commands.map import datatypes_text
    from sn40l_sim.errors import InputError
    from sn40l_sim.study.experiment_files import experiment_model

    section = experiment.spec.multi_model
    served = [(f"{m.name}: ", ("multi_model", "models", i, "model"), m.model) for i, m in enumerate(section.models)] \
        if section is not None else [("", ("model",), experiment.spec.model)]
    lines = []
    for name, field, relative in served:
        try:
            text = datatypes_text(experiment_model(experiment, field, relative))
        except InputError:
            text = "(the model does not load: check says why)"
        lines.append(f"  {'' if lines else 'datatypes':10s} {name}{text}")
    return lines


def _policy_text(entry: PolicyEntry) -> str:
    """``name (policy, key value, ...)``: the parameters, fractions of the prompt, per-prompt values
    and model overrides are what tell two entries of one policy apart."""
    def value_text(value: object) -> str:
        return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)

    parts = [entry.policy] + [f"{key} {value_text(value)}" for key, value in entry.params.items()]
    parts += [f"{key} {float(fraction):g} of the prompt" for key, fraction in entry.prompt_fraction.items()]
    parts += [f"at prompt {p.prompt_len:,}: " + " ".join(f"{k} {value_text(v)}" for k, v in p.params.items())
              for p in entry.per_prompt]
    parts += [f"{key}={value}" for key, value in entry.model_overrides.items()]
    return f"{entry.name} ({', '.join(parts)})"


def _tier_order(experiment: Experiment) -> str:
    """The tiers run fills when ``memory.order`` names none: the hardware file's, in the order it
    lists them (a file listing a slower tier first is warned of, as check and run warn)."""
    from sn40l_sim.errors import InputError
    from sn40l_sim.study.experiment_files import experiment_hardware

    order = experiment.spec.memory.order
    if order:
        return ", ".join(order)
    try:
        node = experiment_hardware(experiment, ("hardware",), experiment.spec.hardware, "hardware")
    except InputError:
        return "the hardware file's tiers, in the order it lists them"
    return f"{', '.join(node.socket.memory)} (the hardware file's order)"


def _plan_lines(spec: ExperimentSpec, path: str | Path, order: str, drafts_refused: str = "") -> list[str]:
    """The parallel plan of each phase, the shape and the memory placement, as the spec gives them
    (docs/architecture.md); the bytes each socket holds need the graph, which ``map`` builds."""
    def phase(plan: PhasePlan) -> str:
        return f"TP{plan.tp}" + (f", attention DP{plan.attention_dp}" if plan.attention_dp > 1 else "")

    prompts = spec.prompt_lens or (spec.shape.prompt_len,)
    shape = spec.shape
    new_tokens = spec.serving.max_new_tokens or shape.max_new_tokens   # as run and map read it: serving's first
    memory = spec.memory
    return [f"  plan       prefill {phase(spec.parallel.prefill)}; decode {phase(spec.parallel.decode)}",
            f"  shape      prompt {', '.join(f'{n:,}' for n in prompts)} tokens, batch {shape.batch}"
            + (f", up to {new_tokens:,} new tokens" if new_tokens else "")
            + ("; serving batch per model (below)" if spec.multi_model else f"; serving batch {spec.serving.batch}")
            + (f" (the largest of serving.batch_sizes {', '.join(f'{n:,}' for n in spec.serving.batch_sizes)} whose KV "
               "fits)" if spec.serving.batch == "max" and "batch_sizes" in spec.serving.model_fields_set else ""),
            *_drafts_line(spec.serving.speculative, drafts_refused),
            f"  memory     placed in {order}; may spill: {', '.join(memory.may_spill) or 'nothing'}",
            f"             bytes per socket: python -m sn40l_sim map {path} --phase decode"]


def _compiled_prompt_lines(experiment: Experiment) -> list[str]:
    """The prefill graph each prompt runs when it is longer than the prompt (results'
    ``prefill_len_compiled``): the smallest compiled prompt length that holds it, the model's context
    closing the default lengths (study/serving_section.py, prefill_lens). None for several models
    (each has its context), chunked prefill (each chunk runs its own), or a model or prompt check refuses."""
    from sn40l_sim.errors import InputError
    from sn40l_sim.serving.batching import compiled_size
    from sn40l_sim.study.experiment_files import experiment_model
    from sn40l_sim.study.serving_section import prefill_lens

    spec = experiment.spec
    if spec.multi_model is not None or spec.serving.prefill_chunk is not None:
        return []
    try:
        lens = prefill_lens(spec.serving, experiment_model(experiment, ("model",), spec.model))
        padded = [(n, compiled_size(n, lens, "prompt length")) for n in experiment.prompt_lens]
    except InputError:
        return []
    padded = [(n, size) for n, size in padded if size != n]
    return [f"  {'prefill' if i == 0 else '':10s} a prompt of {n:,} tokens runs the graph compiled for {size:,} "
            "(the smallest compiled prompt length that holds it)" for i, (n, size) in enumerate(padded)]


def _serving_lines(spec: ExperimentSpec) -> list[str]:
    """Which nodes serve and, with several models on a node, each model by its name (the name the
    results give it) with its share of the requests and its batch, and the schedulers."""
    serving, section = spec.serving, spec.multi_model
    if section is not None:
        # each by the name its records carry, tied to its file's line above ("model i")
        models = [f"{m.name} (model {i}, share {m.share:g} of the requests, batch {m.batch})"
                  for i, m in enumerate(section.models)]
        tier = section.weights_tier or "the placement order's second tier"
        return [f"  {'serves' if i == 0 else '':10s} {text}" for i, text in enumerate(models)] + \
            [f"             on one co-located node; every model's weights in {tier}",
             f"  schedulers {', '.join(section.schedulers)} (quantum {section.quantum_s:g} s)"]
    settings = serving.node_settings()   # a prefill chunk, prefix caching
    if serving.mode == "colocated":
        return [f"  serving    co-located: {serving.decode_nodes} node(s) that prefill and decode{settings}"]
    prefill_hw = "the prefill hw above" if spec.prefill_hardware else "the hardware above"
    return [f"  serving    disaggregated: {serving.prefill_nodes or 1} prefill node(s) on {prefill_hw}, "
            f"{serving.decode_nodes} decode node(s) on the hardware; the KV crosses "
            + ("the host links" if serving.kv_transfer == "host_link" else "the P2P links") + settings]


def _workload_lines(spec: ExperimentSpec) -> list[str]:
    """The requests served, as results' ``workload`` gives them, the SLOs they are held to and the
    rate search: what a serving study sets, which describe did not show."""
    from sn40l_sim.study.serving_section import workload_summary

    slo, search = spec.slo, spec.rate_search
    bounds = [f"{what} p{bound.percentile:g} <= {float(bound.max_s):g} s" for what, bound in
              (("TTFT", slo.ttft), ("TPOT", slo.tpot)) if bound is not None] if slo is not None else []
    return [f"  workload   {workload_summary(spec.workload) if spec.workload else 'none: the steps alone'}"] + \
        ([f"  slo        {', '.join(bounds)}"] if bounds else []) + \
        ([f"  rate search {search.low_per_s:g} to {search.high_per_s:g} requests/s, {search.probes} probes, "
          f"tolerance {search.tolerance:g}"] if search is not None else [])


def _drafts_line(section: Any, refused: str = "") -> list[str]:
    """The speculation ``serving.speculative`` sets (none without drafts): what a decode step computes
    and the tokens it yields on average (docs/architecture.md, speculative decoding); ``refused`` is
    why check and run refuse them (:func:`_drafts_refused`)."""
    if section is None or not section.drafts:
        return []
    spec = section.speculation()
    if refused:
        return [f"  drafts     {spec.drafts} per decode step (serving.speculative), but {refused}"]
    return [f"  drafts     {spec.drafts} per decode step by the model's MTP module, each accepted with probability "
            f"{spec.acceptance:g}: {spec.tokens_per_step:.4g} tokens per step on average (serving.speculative)"]


def _drafts_refused(experiment: Experiment) -> str:
    """Why check and run refuse the experiment's speculative drafts (empty if they do not): a model
    without an MTP module has nothing to draft them with, and describe quoted tokens per step for
    drafts no run makes (:func:`~sn40l_sim.study.experiment_files.check_drafts_have_mtp`)."""
    from sn40l_sim.errors import InputError
    from sn40l_sim.study.experiment_files import experiment_model

    section, spec = experiment.spec.serving.speculative, experiment.spec
    if section is None or not section.drafts or spec.multi_model is not None:
        return ""
    try:
        model = experiment_model(experiment, ("model",), spec.model)
    except InputError:
        return ""   # the datatypes line says the model does not load
    if model.mtp is not None:
        return ""
    return f"model {model.name!r} has no mtp section to draft them with: check and run refuse them"


def _describe_sweep(path: str | Path, section: object, base_files: set[Path]) -> tuple[list, list[str]]:
    """``(files the sweep names beyond base_files, lines)``: the axes with their values, the section's
    settings and those files; a section that does not load is named, not raised (check says why)."""
    from sn40l_sim.errors import InputError
    from sn40l_sim.study.sweep.load import load_sweep
    from sn40l_sim.study.sweep.outline import section_options, shown_values, sweep_outline

    try:
        sweep = load_sweep(path)
    except InputError:
        axes = section.get("axes") if isinstance(section, dict) else None
        names = ", ".join(map(str, axes)) if isinstance(axes, dict) else "its axes"
        return [], [f"  sweep      over {names} (the lines above are its base; the section does not load: "
                    "check says why)"]
    outline = sweep_outline(sweep)
    invalid = f"; {outline.invalid} point(s) whose experiment does not validate" if outline.invalid else ""
    lines = [f"  sweep      {sweep.mode} over {len(sweep.axes)} axis(es): {len(sweep.points)} sweep point(s), "
             f"{outline.runs} run(s){invalid} (the lines above are its base)"]
    width = max(len(_axis_name(axis)) for axis in sweep.axes)
    lines += [f"    {_axis_name(axis):{width}s}  {shown_values(axis)}" for axis in sweep.axes]
    lines += [f"    {said}" for said in section_options(sweep)]
    swept = [(label, rel, target) for label, rel, target in outline.files if target not in base_files]
    for label, rel, target in swept:
        lines.append(f"  {label:10s} {rel}  ->  {target}{'' if target.is_file() else '  (MISSING)'}  (a sweep point's)")
    return swept, lines


def _axis_name(axis: Axis) -> str:
    """An axis's name, with the field it sets when it is named apart from it."""
    dotted = ".".join(axis.path)
    return axis.name if axis.name == dotted else f"{axis.name} ({dotted})"
