"""The rules of an experiment file that span fields (a policy name used twice, a rate search
without SLOs, a workload's low above its high), and the groups of results fields its records carry.

:func:`check_experiment` runs on every experiment :mod:`sn40l_sim.study.experiment` loads; the
field-by-field rules are the schema's (the section models and their declared ranges).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from sn40l_sim.report.fields import RESULTS
from sn40l_sim.study.multi_model_section import check_multi_model
from sn40l_sim.study.serving_section import FixedWorkload, LognormalLength, UniformLength
from sn40l_sim.yamlio import FieldPath

if TYPE_CHECKING:
    from sn40l_sim.study.experiment import Experiment, ExperimentSpec


#: the model fields a policy entry's ``model_overrides`` may set: the KV format (sn40l_sim/models/kv_format.py)
ENTRY_MODEL_FIELDS = frozenset({"kv_dtype", "kv_quant", "kv_shared_layers"})


def check_experiment(exp: Experiment) -> None:
    """Cross-field rules pydantic cannot express field by field (every experiment passes them when
    it is loaded).

    Raises
    ------
    InputError
        For the first rule broken, located at the field in the experiment's document.
    """
    spec = exp.spec
    if not spec.policies:
        raise exp.error(("policies",), "expected at least one policy")
    if len(set(exp.prompt_lens)) != len(exp.prompt_lens):
        raise exp.error(("prompt_lens",), f"prompt lengths repeat: {list(exp.prompt_lens)}")
    seen: dict[str, int] = {}
    for i, entry in enumerate(spec.policies):
        if entry.name in seen:
            raise exp.error(("policies", i, "name"), f"duplicate policy name {entry.name!r} "
                            f"(also policies[{seen[entry.name]}])")
        seen[entry.name] = i
        # an entry's rows compare KV policies and formats on the experiment's model: another model
        # field (layers, hidden size, ...) would make its row a different model beside the others
        for key in sorted(set(entry.model_overrides) - ENTRY_MODEL_FIELDS):
            raise exp.error(("policies", i, "model_overrides", key), f"a policy entry overrides the KV format "
                            f"only ({', '.join(sorted(ENTRY_MODEL_FIELDS))}); {key} goes in the experiment's "
                            "model_overrides, which every entry's points share")
        # prompt_fraction replaces params at every length, a later per_prompt entry an earlier one:
        # the value given first would be dropped without a word
        for key in sorted(set(entry.params) & set(entry.prompt_fraction)):
            raise exp.error(("policies", i, "params", key), f"{key} is also set by prompt_fraction.{key}, which "
                            "replaces it at every prompt length: give it once")
        for j, pp in enumerate(entry.per_prompt):
            if pp.prompt_len not in exp.prompt_lens:
                raise exp.error(("policies", i, "per_prompt", j, "prompt_len"),
                                f"{pp.prompt_len} is not one of the experiment's prompt lengths {list(exp.prompt_lens)}")
            if pp.prompt_len in [earlier.prompt_len for earlier in entry.per_prompt[:j]]:
                raise exp.error(("policies", i, "per_prompt", j, "prompt_len"), f"prompt length {pp.prompt_len} "
                                "has an earlier per_prompt entry: give its parameters in one entry")
    for phase in ("prefill", "decode"):
        plan = getattr(spec.parallel, phase)
        if plan.tp % plan.attention_dp:
            raise exp.error(("parallel", phase, "attention_dp"), f"attention_dp ({plan.attention_dp}) must "
                            f"divide tp ({plan.tp}): attention shards the batch over the tensor-parallel sockets")
        # a prefill graph runs one prompt, so a batch split leaves all but one group idle and runs the
        # whole prompt's attention unsplit on one; the prefill templates carry no all-to-alls between
        # the two layouts either (sn40l_sim/models/gathers.py checks decode's), so its cost is not modelled
        if phase == "prefill" and plan.attention_dp > 1:
            raise exp.error(("parallel", phase, "attention_dp"), f"attention_dp ({plan.attention_dp}) splits a "
                            "batch of sequences, and prefill runs one prompt at a time: leave it at 1 for prefill "
                            "(decode's attention_dp splits the decode batch)")
    for i, group in enumerate(spec.report.extra_fields):
        if group in AUTOMATIC_GROUPS:
            raise exp.error(("report", "extra_fields", i), f"the {group} fields come with {AUTOMATIC_GROUPS[group]}; "
                            "leave them out of extra_fields")
        if group not in RESULTS.groups:
            raise exp.error(("report", "extra_fields", i), f"unknown group of results fields {group!r}; "
                            f"expected one of {', '.join(RESULTS.groups)}")
    order = spec.memory.order
    if order is not None:
        if not order:
            raise exp.error(("memory", "order"), "expected at least one memory tier (or leave order out)")
        for i, tier in enumerate(order):
            if tier in order[:i]:
                raise exp.error(("memory", "order", i), f"tier {tier!r} is listed twice")
    serving = spec.serving
    if serving.mode == "colocated" and serving.prefill_nodes:
        raise exp.error(("serving", "prefill_nodes"), "co-located nodes prefill themselves: leave "
                        "prefill_nodes out (or 0) when mode is colocated")
    if serving.mode == "disaggregated" and serving.prefill_nodes == 0:
        raise exp.error(("serving", "prefill_nodes"), "disaggregated serving needs at least 1 prefill node")
    for key in ("batch_sizes", "prefill_lens"):
        values = getattr(serving, key)
        if not values:
            raise exp.error(("serving", key), "expected at least one compiled size")
        repeated = next((v for i, v in enumerate(values) if v in values[:i]), None)
        if repeated is not None:
            # one graph per compiled size: a size listed twice is most likely a typo for another
            raise exp.error(("serving", key), f"{repeated} is listed twice: each compiled size once")
    _check_workload(exp)
    if spec.rate_search is not None:
        if spec.slo is None:
            raise exp.error(("rate_search",), "a rate search needs SLOs to hold: add an slo: section")
        if spec.workload is None or spec.workload.kind not in ("poisson", "trace"):
            raise exp.error(("rate_search",), "a rate search varies the arrival rate of a poisson or trace workload")
    check_multi_model(exp)
    if serving.prefix_cache and (spec.workload is None or getattr(spec.workload, "prefix", None) is None):
        raise exp.error(("serving", "prefix_cache"), "no request shares a prefix: say which do with "
                        "workload.prefix: {share: 0.5, tokens: 2048, groups: 4}")
    if spec.prefill_hardware is not None and serving.mode != "disaggregated":
        raise exp.error(("prefill_hardware",), "co-located nodes prefill on their own hardware: a prefill node "
                        "file needs mode: disaggregated")
    if serving.prefill_chunk is not None and serving.mode != "colocated":
        raise exp.error(("serving", "prefill_chunk"), "chunked prefill shares a co-located node's turns with "
                        "decode: set mode: colocated (prefill nodes of disaggregated serving do not decode)")
    if serving.prefill_chunk is not None and (serving.prefix_cache or spec.multi_model is not None):
        raise exp.error(("serving", "prefill_chunk"), "chunked prefill with prefix caching or several models is "
                        "not supported; remove one of them")
    if serving.prefix_cache and spec.multi_model is not None:
        raise exp.error(("serving", "prefix_cache"), "prefix caching with several models on a node is not "
                        "supported; remove serving.prefix_cache or multi_model")
    # warnings last: a file refused by a rule above gets its one-line error alone, not a warning
    # about a value (a chunk's padding) that the error then refuses
    _warn_fraction_percentiles(exp)
    _warn_padded_chunk(exp)
    _warn_unsent_cache(exp)


#: groups of results fields an experiment gets from a section rather than from report.extra_fields
AUTOMATIC_GROUPS = {"slo": "the experiment's slo: section", "trace": "a trace workload",
                    "rate_search": "the experiment's rate_search: section",
                    "speed": "every point the runner simulates (study/runner.py, with_speed)",
                    "multi_model": "the experiment's multi_model: section",
                    "prefix_cache": "serving.prefix_cache: true",
                    "chunked_prefill": "serving.prefill_chunk",
                    "prefill_hardware": "the experiment's prefill_hardware"}


def record_groups(exp: Experiment) -> tuple[str, ...]:
    """The groups of results fields the records of ``exp`` carry: ``report.extra_fields``, ``slo``
    with an ``slo`` section and ``trace`` with a trace workload."""
    spec = exp.spec
    automatic = (("slo",) if spec.slo is not None else ()) + \
        (("trace",) if spec.workload is not None and spec.workload.kind == "trace" else ()) + \
        (("prefix_cache",) if spec.serving.prefix_cache else ()) + \
        (("chunked_prefill",) if spec.serving.prefill_chunk is not None else ()) + \
        (("prefill_hardware",) if spec.prefill_hardware is not None else ())
    # rate_search's fields are added by the search itself (study/rate_search.py), next to these
    return tuple(spec.report.extra_fields) + automatic


def _check_workload(exp: Experiment) -> None:
    workload = exp.spec.workload
    at: FieldPath = ("workload",)
    if isinstance(workload, FixedWorkload):
        # a requests list gives each request's own arrival: the shorthand's keys would be dropped unsaid
        shorthand = [k for k in ("count", "prompt_len", "output_len") if getattr(workload, k) is not None] + \
            [k for k in ("rounds", "arrival_s", "interval_s") if k in workload.model_fields_set]
        if workload.requests is not None and shorthand:
            raise exp.error(at + (shorthand[0],), "give either a 'requests' list or count/output_len (with rounds, "
                            "arrival_s, interval_s), not both")
        if workload.requests is None and (workload.count is None or workload.output_len is None):
            missing = "count" if workload.count is None else "output_len"
            raise exp.error(at + (missing,), "required for a fixed workload without a 'requests' list")
        if workload.requests is not None and not workload.requests:
            raise exp.error(at + ("requests",), "expected at least one request")
    if getattr(workload, "rounds", 1) != 1 and workload.count != "batch":
        raise exp.error(at + ("rounds",), f"rounds repeats count: batch (the decode slots); with count: "
                        f"{workload.count} it would change nothing: write the number of requests in count")
    for key in ("prompt_len", "output_len"):
        dist = getattr(workload, key, None)
        if isinstance(dist, UniformLength) and dist.low > dist.high:
            raise exp.error(at + (key, "low"), f"low ({dist.low}) must not exceed high ({dist.high})")
        if isinstance(dist, LognormalLength) and dist.high is not None and dist.low > dist.high:
            raise exp.error(at + (key, "low"), f"low ({dist.low}) must not exceed high ({dist.high})")


def _warn_fraction_percentiles(exp: Experiment) -> None:
    """Warn of an SLO percentile below 1, most likely a fraction meant as a percentage: ``percentile:
    0.9`` bounds the 0.9th percentile, so the SLO holds when about 1% of requests meet it, and the
    results say it holds where the 90th percentile may be far over the bound."""
    slo = exp.spec.slo
    for name in ("ttft", "tpot"):
        target = getattr(slo, name, None) if slo is not None else None
        if target is not None and target.percentile < 1:
            exp.doc.warn(("slo", name, "percentile"), f"{target.percentile:g} is the {target.percentile:g}th "
                         f"percentile, met when {target.percentile:g}% of requests are within the bound; "
                         f"percentiles are out of 100 (for {100 * target.percentile:g}% of requests write "
                         f"{100 * target.percentile:g})")


def _warn_padded_chunk(exp: Experiment) -> None:
    """Warn of a ``serving.prefill_chunk`` that is not a compiled prefill length: each full chunk
    runs the static graph of the next compiled length up (serving/chunked_prefill.py), so it pays
    for the padded rows, and a chunk of 3,000 among powers of two costs as much as 4,096 tokens
    while prefilling fewer of them between two decode steps."""
    serving = exp.spec.serving
    chunk, lens = serving.prefill_chunk, sorted(serving.prefill_lens)
    # only a chunk that ends inside a prompt runs a graph of its own length (prompts are at most
    # shape.prompt_len; past it every chunk is a whole prompt, or a prompt's rest, in its own graph)
    if chunk is None or chunk in lens or chunk >= min(exp.spec.shape.prompt_len, lens[-1]):
        return
    compiled = next(n for n in lens if n > chunk)
    below = [n for n in lens if n < chunk]
    fits = f"{below[-1]} or {compiled}" if below else f"{compiled}"
    exp.doc.warn(("serving", "prefill_chunk"), f"{chunk} is not one of serving.prefill_lens: each full chunk runs "
                 f"the {compiled}-token graph, {compiled - chunk} of its rows padding; a chunk of {fits} fills its graph")


def _warn_unsent_cache(exp: Experiment) -> None:
    """Warn of a ``serving.kv_transfer`` written for co-located nodes, which prefill into their own
    cache: no cache crosses a link, so the link named changes nothing (a co-located
    ``prefill_nodes`` is refused; this one is left as a warning, since a sweep over the mode shares
    the section with its disaggregated points)."""
    serving = exp.doc.data.get("serving")
    if exp.spec.serving.mode == "colocated" and isinstance(serving, dict) and "kv_transfer" in serving:
        exp.doc.warn(("serving", "kv_transfer"), f"{exp.spec.serving.kv_transfer}: co-located nodes prefill into their "
                     "own cache, so no cache is sent and the link has no effect (it applies to mode: disaggregated)")


def options_summary(spec: ExperimentSpec) -> str:
    """The experiment's ``graph_options``, ``execution`` and ``memory`` settings that differ from their
    defaults, as ``section.key=value`` (the results' ``options``; empty when all are defaults).

    >>> from types import SimpleNamespace
    >>> from sn40l_sim.study.experiment import ExecutionSection, MemorySection
    >>> spec = SimpleNamespace(graph_options={"expert_loading": "all"}, memory=MemorySection(),
    ...                        execution=ExecutionSection(kernel_looping=False))
    >>> options_summary(spec)
    'graph_options.expert_loading=all, execution.kernel_looping=False'
    """
    settings = [("graph_options", dict(spec.graph_options)),
                ("execution", spec.execution.model_dump(exclude_defaults=True, mode="json")),
                ("memory", spec.memory.model_dump(exclude_defaults=True, mode="json"))]
    return ", ".join(f"{section}.{key}={','.join(map(str, value)) if isinstance(value, list) else value}"
                     for section, values in settings for key, value in sorted(values.items()))
