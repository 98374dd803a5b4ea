"""Experiment files (``experiments/*.yaml``): hardware + model + KV policies + parallel plan +
workload + serving set-up (+ sweep axes), expanded into simulation points.

It validates the experiment; :mod:`sn40l_sim.study.points` expands it into simulation points and
:mod:`sn40l_sim.study.assemble` then loads the hardware, the model and the KV policy of each point
and hands them, as spec objects, to the serving model.

Sections:

``prefill_hardware``
    The prefill nodes' node file when they are other hardware than the decode nodes (``hardware``);
    disaggregated serving only. Prefill is timed and its memory placed on it, its cycles counted in
    the decode node's clock; the KV crosses the decode node's host link.
``prompt_lens``
    Prompt lengths to simulate (default: ``[shape.prompt_len]``). Each policy runs at each length.
``policies[i].prompt_fraction`` / ``policies[i].per_prompt``
    Policy parameters that depend on the prompt: ``prompt_fraction: {budget: 0.25}`` sets
    ``budget = round(0.25 * prompt_len)``; ``per_prompt: [{prompt_len: 65536, params: {...}}]``
    overrides parameters at one length.
``policies[i].model_overrides``
    Model fields for this entry's points only, over the experiment's ``model_overrides``: the KV
    format composes with any policy this way (``{kv_dtype: fp8}``, ``{kv_dtype: int4, kv_quant:
    {group: 32}}``, ``{kv_shared_layers: 2}``; :mod:`sn40l_sim.models.kv_format`).
``workload``
    ``kind: fixed`` (``count`` identical requests, or an explicit ``requests`` list),
    ``kind: poisson`` (``rate_per_s``, ``count``, length distributions) or ``kind: trace``
    (a CSV or JSONL file of ``arrival_s, prompt_len, output_len``). ``count: batch`` means as many
    requests as the decode batch has slots (times ``rounds``). Any kind may say which requests share
    a prompt prefix: ``prefix: {share: 0.6, tokens: 1024, groups: 4}`` (drawn with ``serving.seed``;
    :mod:`sn40l_sim.serving.prefix_cache`).
``serving``
    ``mode`` (disaggregated | colocated), node counts (``prefill_nodes``, ``decode_nodes``),
    ``batch`` (``max`` or a number), the compiled ``batch_sizes`` of the static decode graph and
    ``prefill_lens`` of the static prefill graph (default: powers of two, an assumption; for
    prefill closed by the model's ``max_context``), ``max_new_tokens``, ``speculative``
    (speculative decoding with the model's MTP module as the draft: ``{drafts: k, acceptance: a}``;
    each decode step verifies ``k`` drafts per sequence, the main model over ``k + 1`` rows and the
    MTP module run ``k`` times, and yields ``(1 - a^(k+1)) / (1 - a)`` tokens per sequence on
    average, the reported ``tokens_per_forward``; the serving loop draws the accepted drafts per
    sequence and step from ``seed``; a full cache's static slot holds ``max_new_tokens + k``
    tokens; the model needs an ``mtp`` section), ``kv_transfer`` and ``seed``. The former
    ``tokens_per_forward`` multiplier is refused with a message saying what to write instead.
    ``prefix_cache: true`` reuses the prefixes the workload says requests share (a held prefix is
    not prefilled again, decode nodes store it once; with a compressing policy such as SnapStream
    prefill reuse only). ``prefill_chunk`` (co-located): at most that many prompt tokens between two
    decode steps (:mod:`sn40l_sim.serving.chunked_prefill`).
``slo``
    Service-level objectives: ``ttft`` and/or ``tpot``, each ``{max_s, percentile}`` (a bound on
    that percentile of the served requests' latency). The results then carry the ``slo`` group:
    each SLO's latency at its percentile, the attainment (fraction of requests that met every SLO)
    and the goodput (requests/s that did); ``run`` prints them with TTFT/TPOT p50/p90/p99.
``rate_search``
    The highest arrival rate at which every SLO holds, by bisection between ``low_per_s`` and
    ``high_per_s`` (``probes``, ``tolerance``) on a Poisson workload's rate or a trace's arrival
    rate (:mod:`sn40l_sim.study.rate_search`); needs ``slo``.
``multi_model``
    Several models on one co-located node (``models``: name, model file, share of the requests,
    compiled ``batch``; ``schedulers``: ``on_demand``, ``batch_by_model``, ``prewarm``;
    ``quantum_s``; ``weights_tier``): every model's weights in the slow tier, the ones the node runs
    in the fast tier, a switch costing the bytes copied over the slower tier's bandwidth
    (:mod:`sn40l_sim.study.multi_model_section`, :mod:`sn40l_sim.serving.multi_model`). One record
    per scheduler and model, with the ``multi_model`` group of fields.
``report``
    ``extra_fields``: opt-in groups of results fields (``kv_policies``: where a sequence's KV lives
    per token of context, the fractions of tokens, bits and layers it keeps, a decode step's
    traffic per memory tier; ``docs/results.md``).
``memory``
    Where tensors go in the hardware's memory tiers: ``order`` (tiers to fill, first to last;
    default: the hardware file's order, fastest first) and ``may_spill`` (uses that may be placed
    outside the first tier of the order; default ``[activations]``: the serving model refuses a
    batch whose weights or KV would leave it, as in the paper's deployment). For example
    ``memory: {order: [hbm, ddr], may_spill: [activations, kv]}`` offloads KV to DDR.
``execution``
    How the compiled graphs run: ``kernel_looping`` (default on, as SN40L runs decode: consecutive
    calls of one kernel become one call with a pipelined outer loop, SambaNova arXiv 2410.23668),
    ``collective_algorithm`` (``auto``, ``ring``, ``direct`` or ``tree``) and ``idle_units``
    (``spend``, the default, or ``priced``: what the mapper does with the units a kernel's balanced
    allocation leaves idle).
``graph_options``
    Passed to the graph builder (:func:`sn40l_sim.models.builder.build_graph`):
    ``expert_loading`` (``touched``, the default: a MoE call streams the experts its rows route
    to; ``all``: a static fused kernel streaming every expert, as the SnapStream deployment),
    ``routing_skew`` and ``template``.
``sweep``
    Axes to sweep (:mod:`sn40l_sim.study.sweep.axes`); ``run`` hands such an experiment to the
    sweep.

Examples
--------
>>> import tempfile, pathlib
>>> folder = pathlib.Path(tempfile.mkdtemp())
>>> _ = (folder / "e.yaml").write_text('''
... kind: experiment
... name: demo
... hardware: hw.yaml
... model: m.yaml
... policies:
...   - {name: full, policy: full}
...   - {name: snap, policy: snapstream, params: {sink: 4}, prompt_fraction: {budget: 0.25}}
... shape: {prompt_len: 1024}
... prompt_lens: [1024, 2048]
... workload: {kind: fixed, count: batch, output_len: 16}
... serving: {max_new_tokens: 16}
... ''')
>>> exp = load_experiment(folder / "e.yaml")
>>> exp.prompt_lens, [entry.name for entry in exp.spec.policies]
((1024, 2048), ['full', 'snap'])
>>> exp.max_new_tokens, exp.spec.serving.batch, exp.prefill_node_count
(16, 'max', 1)
"""
from __future__ import annotations

from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from sn40l_sim.errors import InputError, shown, with_article
from sn40l_sim.schema import Flag, Fraction, Name, NonNegativeInt, PlainName, PositiveInt, StrictModel, validate
from sn40l_sim.serving.speculation import Speculation
from sn40l_sim.study.experiment_rules import check_experiment
from sn40l_sim.study.multi_model_section import MultiModelSection, ServedModel  # noqa: F401  (re-exported)
from sn40l_sim.study.plugins import load_plugins
from sn40l_sim.study.serving_section import (  # noqa: F401  (sections re-exported: the schema is imported from here)
    LENGTH_EXPECTED,
    POWERS_OF_TWO_BATCH,
    POWERS_OF_TWO_PREFILL,
    WORKLOAD_EXPECTED,
    ConstantLength,
    FixedWorkload,
    LengthDist,
    LognormalLength,
    PoissonWorkload,
    RequestEntry,
    ServingSection,
    SpeculativeSection,
    TraceWorkload,
    UniformLength,
    Workload,
)
from sn40l_sim.study.slo_section import LatencySLO, RateSearchSection, SLOSection  # noqa: F401  (re-exported)
from sn40l_sim.yamlio import Document, FieldPath, load_document


class PhasePlan(StrictModel):
    """Parallel plan of one phase (see :class:`sn40l_sim.ir.ParallelPlan`)."""

    tp: PositiveInt = 1
    attention_dp: PositiveInt = 1


class ParallelSection(StrictModel):
    """The parallel plans of the two phases (``parallel: {prefill: {tp: 16}, decode: ...}``)."""

    prefill: PhasePlan = PhasePlan()
    decode: PhasePlan = PhasePlan()


class PromptParams(StrictModel):
    """Policy parameters that apply at one prompt length only."""

    prompt_len: PositiveInt
    params: dict[str, Any]


class PolicyEntry(StrictModel):
    """One KV policy to simulate, with its parameters (see ``sn40l_sim/kvcache``)."""

    name: Name
    policy: str
    params: dict[str, Any] = Field(default_factory=dict)
    #: parameter -> fraction of the prompt length (rounded to an integer), e.g. ``budget: 0.25``
    prompt_fraction: dict[str, Fraction] = Field(default_factory=dict)
    per_prompt: tuple[PromptParams, ...] = ()
    #: model fields for this entry only (the KV format: kv_dtype, kv_quant, kv_shared_layers)
    model_overrides: dict[str, Any] = Field(default_factory=dict)


class ShapeSection(StrictModel):
    """The shape for ``map`` and for single-step studies."""

    batch: PositiveInt = 1
    prompt_len: PositiveInt
    max_new_tokens: NonNegativeInt = 0


Use = Literal["weights", "kv", "activations"]


class MemorySection(StrictModel):
    """Placement of weights, KV and activations in the memory tiers (see the module docstring)."""

    #: tiers of the hardware to fill, first to last (None: the hardware file's order)
    order: tuple[str, ...] | None = None
    #: uses that may be placed outside the first tier of the order
    may_spill: tuple[Use, ...] = ("activations",)


class ExecutionSection(StrictModel):
    """How the compiled graphs run (deployment options, not hardware numbers)."""

    #: consecutive calls of the same kernel run as one call with a pipelined outer loop (SambaNova
    #: kernel looping, arXiv 2410.23668, deployed in production): on, as SN40L runs decode
    kernel_looping: Flag = True
    #: the collective algorithm (``auto``: the fastest of ring, direct and tree for each call)
    collective_algorithm: Literal["auto", "ring", "direct", "tree"] = "auto"
    #: what the mapper does with the units a kernel's balanced allocation leaves idle: ``spend``
    #: them on every stage they shorten (the default, the calibration's), or give them only where
    #: they pay for their configuration, ``priced`` (docs/validation.md, "Predictions")
    idle_units: Literal["spend", "priced"] = "spend"


class ReportSection(StrictModel):
    """What the records carry beyond the fields every record has."""

    #: opt-in groups of results fields (docs/results.md), e.g. ``kv_policies``
    extra_fields: tuple[str, ...] = ()


class ExperimentSpec(StrictModel):
    """The validated experiment file; unknown keys are errors."""

    kind: Literal["experiment"]
    #: also the output folder's name (``out/<name>``)
    name: PlainName
    hardware: str
    #: the prefill nodes' hardware when it differs from ``hardware`` (the decode nodes'; disaggregated)
    prefill_hardware: str | None = None
    model: str
    model_overrides: dict[str, Any] = Field(default_factory=dict)
    #: Python modules imported before the policies are looked up (a ``.py`` file relative to this
    #: file, or a dotted module name): KV policies written outside the package (study/plugins.py)
    plugins: tuple[str, ...] = ()
    parallel: ParallelSection = ParallelSection()
    policies: tuple[PolicyEntry, ...]
    shape: ShapeSection
    prompt_lens: tuple[PositiveInt, ...] | None = None
    workload: Workload | None = None
    serving: ServingSection = ServingSection()
    #: service-level objectives: attainment and goodput in the results (study/slo_section.py)
    slo: SLOSection | None = None
    #: search for the highest arrival rate under the SLOs (study/rate_search.py)
    rate_search: RateSearchSection | None = None
    #: several models served by one node under scheduler policies (study/multi_model_section.py)
    multi_model: MultiModelSection | None = None
    memory: MemorySection = MemorySection()
    execution: ExecutionSection = ExecutionSection()
    report: ReportSection = ReportSection()
    #: options passed through to the graph builder (``build_graph(**graph_options)``)
    graph_options: dict[str, Any] = Field(default_factory=dict)
    #: sweep axes, checked by :mod:`sn40l_sim.study.sweep.load`
    sweep: dict[str, Any] | None = None


@dataclass
class Experiment:
    """A loaded experiment: the validated spec plus the document (for error locations)."""

    spec: ExperimentSpec
    doc: Document

    @property
    def path(self) -> Path:
        return self.doc.path

    def resolve(self, relative: str, at: FieldPath = ()) -> Path:
        """A path written in the experiment at field ``at``, relative to the file that wrote it."""
        return self.doc.resolve(relative, at)

    def error(self, field_path: FieldPath, message: str) -> InputError:
        """An :class:`InputError` located at ``field_path`` of this file."""
        return self.doc.error(field_path, message)

    @property
    def prompt_lens(self) -> tuple[int, ...]:
        """The prompt lengths to simulate, in file order."""
        return self.spec.prompt_lens or (self.spec.shape.prompt_len,)

    @property
    def max_new_tokens(self) -> int:
        """The static decode graph's maximum generated length (serving, else shape)."""
        value = self.spec.serving.max_new_tokens or self.spec.shape.max_new_tokens
        if not value:
            raise self.error(("serving", "max_new_tokens"), "required: the static decode graph's maximum "
                             "number of generated tokens (or set shape.max_new_tokens)")
        return value

    @property
    def speculation(self) -> Speculation:
        """The speculation of ``serving.speculative`` (no drafts when the section is absent)."""
        section = self.spec.serving.speculative
        return section.speculation() if section is not None else Speculation()

    @property
    def prefill_node_count(self) -> int:
        """Prefill-only nodes: 0 when co-located, else ``serving.prefill_nodes`` (default 1)."""
        serving = self.spec.serving
        if serving.mode == "colocated":
            return 0
        return 1 if serving.prefill_nodes is None else serving.prefill_nodes


def memory_order(exp: Experiment, node: Any) -> tuple[str, ...]:
    """The experiment's placement order checked against the hardware's memory tiers (default:
    the hardware's order).

    Raises
    ------
    InputError
        At ``memory.order`` when it names a tier the hardware does not have.
    """
    tiers = tuple(node.socket.memory)
    order = exp.spec.memory.order
    if order is None:
        return tiers
    for i, tier in enumerate(order):
        if tier not in tiers:
            raise exp.error(("memory", "order", i), f"the hardware ({node.name}) has no memory tier {tier!r}; "
                            f"its tiers are {list(tiers)}")
    return order


def load_experiment(path: str | Path) -> Experiment:
    """Load and validate an experiment file (hardware and model files are loaded by the caller).

    Parameters
    ----------
    path : str or Path
        A ``kind: experiment`` YAML file (``experiments/``); the files it names are relative to it.

    Returns
    -------
    Experiment
        The validated spec (:attr:`Experiment.spec`, an :class:`ExperimentSpec`) and its document,
        which locates later errors. :func:`sn40l_sim.study.assemble.assemble` loads its hardware and
        model; :func:`sn40l_sim.study.runner.simulate_experiment` simulates it;
        :func:`sn40l_sim.study.sweep.base.experiment_with_sets` loads it with ``run --set`` values.

    Raises
    ------
    InputError
        For the first bad field, naming the file, the field path and the line.

    Examples
    --------
    >>> exp = load_experiment("experiments/llama8b_node8.yaml")
    >>> exp.spec.name, [entry.name for entry in exp.spec.policies], exp.prompt_lens, exp.max_new_tokens
    ('llama8b_node8', ['full', 'snapstream'], (32768,), 512)
    >>> load_experiment("experiments/no_such_file.yaml")
    Traceback (most recent call last):
    ...
    sn40l_sim.errors.InputError: experiments/no_such_file.yaml: file not found
    """
    if not isinstance(path, (str, PathLike)):   # from Python: a TypeError deep in pathlib otherwise
        raise InputError(f"experiment: expected the path of a kind: experiment file, got {shown(path)}")
    doc = load_document(path)
    return experiment_from_document(doc)


#: what the experiment's tagged unions expect, for the message when a tag is missing or unknown
_TAGS = {"dist": LENGTH_EXPECTED, "kind": WORKLOAD_EXPECTED}


def experiment_from_document(doc: Document) -> Experiment:
    """Validate and check an experiment already loaded as a document (sweeps build them in memory).

    Raises
    ------
    InputError
        For any bad field or cross-field inconsistency, located in the document.
    """
    kind = doc.data.get("kind") if isinstance(doc.data, dict) else None
    if isinstance(kind, str) and kind != "experiment" and kind in _OTHER_KINDS:
        # another of the project's files given where an experiment is expected: say so, not the
        # twenty fields an experiment has and it lacks
        origin, _ = doc.where(("kind",))
        if origin != str(doc.path):
            # its kind comes through base: (perhaps several files down): name the file given
            raise InputError(f"this is {with_article(kind)} file through its base: ({origin} says kind: {kind}); this command "
                             "takes an experiment file (kind: experiment, as in experiments/)", file=doc.path,
                             field="base")
        raise doc.error(("kind",), f"this is {with_article(kind)} file ({_OTHER_KINDS[kind]}); this command takes an experiment "
                                   f"file (kind: experiment, as in experiments/); `python -m sn40l_sim describe "
                                   f"{doc.path}` shows what it holds")
    exp = Experiment(validate(ExperimentSpec, doc, tag_hints=_TAGS), doc)
    # before the checks: they look the policies up by name, and a plug-in registers its own
    load_plugins(doc, exp.spec.plugins)
    check_experiment(exp)
    return exp


#: the other kinds of the project's files, and where they are used
_OTHER_KINDS = {"socket": "hardware, named by a node file", "node": "hardware, named by an experiment's hardware:",
                "model": "a model, named by an experiment's model:",
                "kernels": "a kernel template, named by a model file",
                "reference": "measurements, read by validate and calibrate"}
