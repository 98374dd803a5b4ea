"""The simulation points of an experiment: each KV policy entry at each prompt length, with its
parameters resolved, and the policy and model each point simulates (:mod:`sn40l_sim.study.assemble`
loads the rest).

Examples
--------
The SnapStream paper's Table 5 runs each policy at three prompt lengths, SnapStream's cache budget a
quarter of the prompt (``prompt_fraction: {budget: 0.25}``):

>>> from sn40l_sim.study.experiment import load_experiment
>>> [(p.name, p.params) for p in points(load_experiment("experiments/snapstream_table5.yaml"))][2:5]
[('full@32K', {}), ('snapstream@128K', {'budget': 32768}), ('snapstream@64K', {'budget': 16384})]
"""
from __future__ import annotations

import sys
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sn40l_sim.errors import InputError, shown
from sn40l_sim.kvcache import KVFootprint, KVPolicy, make_policy
from sn40l_sim.kvcache.base import context_room, slot_new_tokens
from sn40l_sim.models.loader import with_overrides as model_with_overrides
from sn40l_sim.models.spec import ModelSpec
from sn40l_sim.serving.context_limit import raise_context
from sn40l_sim.serving.decode_books import cache_bounds

if TYPE_CHECKING:
    from sn40l_sim.ir import ParallelPlan
    from sn40l_sim.models.families import AttentionSpec
    from sn40l_sim.study.experiment import Experiment


@dataclass(frozen=True)
class Point:
    """One simulation point: a KV policy (with its resolved parameters) at one prompt length.

    Attributes
    ----------
    name : str
        Unique within the experiment: the policy entry's name, plus ``@<prompt>`` when the
        experiment has several prompt lengths.
    entry : str
        The policy entry's name.
    policy : str
        Registry name of the policy (``full``, ``snapstream``, ...).
    params : dict
        Parameters for :func:`sn40l_sim.kvcache.make_policy`, keys sorted.
    prompt_len : int
        Prompt length (the prefill length and the decode graph's compiled prompt length).
    policy_index : int
        Index of the entry in ``policies`` (for error locations).
    model_overrides : dict
        The entry's own model fields (applied over the experiment's by :func:`make_point_model`).
    """

    name: str
    entry: str
    policy: str
    params: dict[str, Any]
    prompt_len: int
    policy_index: int
    model_overrides: dict[str, Any] = field(default_factory=dict)


def length_label(tokens: int) -> str:
    """``131072`` -> ``'128K'``; lengths that are not whole KiB stay as they are.

    >>> length_label(131072), length_label(1000)
    ('128K', '1000')
    """
    return f"{tokens // 1024}K" if tokens % 1024 == 0 else str(tokens)


def points(exp: Experiment) -> list[Point]:
    """Expand policies x prompt lengths into named points (policy order, then prompt order).

    Examples
    --------
    ``experiments/snapstream_table5.yaml``: two policy entries over three prompt lengths, SnapStream's
    budget a quarter of each prompt (``prompt_fraction``):

    >>> from sn40l_sim.study.experiment import load_experiment
    >>> [(p.name, p.params) for p in points(load_experiment("experiments/snapstream_table5.yaml"))]
    [('full@128K', {}), ('full@64K', {}), ('full@32K', {}), ('snapstream@128K', {'budget': 32768}), ('snapstream@64K', {'budget': 16384}), ('snapstream@32K', {'budget': 8192})]
    """
    several = len(exp.prompt_lens) > 1
    out = []
    for index, entry in enumerate(exp.spec.policies):
        overrides = {pp.prompt_len: pp.params for pp in entry.per_prompt}
        for prompt_len in exp.prompt_lens:
            params = dict(entry.params)
            params.update({k: max(1, round(f * prompt_len)) for k, f in entry.prompt_fraction.items()})
            params.update(overrides.get(prompt_len, {}))
            name = f"{entry.name}@{length_label(prompt_len)}" if several else entry.name
            out.append(Point(name, entry.name, entry.policy, dict(sorted(params.items())), prompt_len, index,
                             dict(entry.model_overrides)))
    return out


def point_of(points: list[Point], point: Any) -> Point:
    """``point`` itself when it is a :class:`Point`, else the point of ``points`` it names: a Python
    caller's ``asm.setup("snapstream")``; anything else is an :class:`InputError` naming the points.

    >>> from sn40l_sim.study.experiment import load_experiment
    >>> every = points(load_experiment("experiments/llama8b_node8.yaml"))
    >>> point_of(every, "snapstream") is every[1]
    True
    >>> point_of(every, 0)
    Traceback (most recent call last):
    ...
    sn40l_sim.errors.InputError: point: expected one of the experiment's points or its name ('full', 'snapstream'), got 0
    """
    if isinstance(point, Point):
        return point
    named = [p for p in points if isinstance(point, str) and p.name == point]
    if not named:
        names = ", ".join(repr(p.name) for p in points)
        raise InputError(f"point: expected one of the experiment's points or its name ({names}), got {shown(point)}")
    return named[0]


def make_point_policy(exp: Experiment, point: Point) -> KVPolicy:
    """The point's :class:`~sn40l_sim.kvcache.base.KVPolicy`; a bad name or parameter is an
    :class:`InputError` located at the policy entry."""

    try:
        return make_policy(point.policy, dict(point.params))
    except InputError as exc:
        if exc.file:
            raise
        # make_policy names the field inside the entry ("policy" or "params.<name>"); a parameter
        # the point took from prompt_fraction or per_prompt is located there
        inner = tuple((exc.field or "params").split("."))
        if inner == ("policy",):
            # a policy of the user's own is unknown until a plug-in registers it: say how, or that
            # the plug-ins listed registered none of that name (a class without @register)
            hint = (f"the plug-ins listed ({', '.join(exp.spec.plugins)}) register none of that name: a policy "
                    "class needs @register and that name" if exp.spec.plugins else
                    "a policy written outside the package is loaded by listing its module under plugins:")
            exc = InputError(f"{exc.message} ({hint}, docs/architecture.md, \"Extending the simulator\")",
                             field=exc.field)
        if inner[0] == "params" and len(inner) == 2:
            inner = param_source(exp, point, inner[1])
        raise at_entry(exp, point, inner, exc) from None


def param_source(exp: Experiment, point: Point, name: str) -> tuple[Any, ...]:
    """Where in its policy entry ``point`` took parameter ``name`` from: ``per_prompt[j].params``
    for its prompt length, else ``prompt_fraction``, else ``params`` (the path inside the entry)."""
    entry = exp.spec.policies[point.policy_index]
    for j, pp in enumerate(entry.per_prompt):
        if pp.prompt_len == point.prompt_len and name in pp.params:
            return ("per_prompt", j, "params", name)
    return ("prompt_fraction", name) if name in entry.prompt_fraction else ("params", name)


def max_context_set(exp: Experiment) -> str | None:
    """The experiment field that sets the model's ``max_context`` (None: the model file's; a
    policy entry's ``model_overrides`` set only the KV format), which the messages refusing a
    longer sequence name rather than suggest ``model_overrides`` to a file that has it."""
    return "model_overrides.max_context" if "max_context" in exp.spec.model_overrides else None


def check_policy_answers(exp: Experiment, point: Point, policy: KVPolicy, model: ModelSpec) -> None:
    """Refuse a policy whose lengths at the point are not token counts: a plug-in's
    (docs/architecture.md, "Extending the simulator") answers reach the graph builder and the
    memory sizing unchecked, where a slot of 0 was blamed on ``graph_options``, a negative one or a
    text stopped with a traceback, and a fraction was reported at line 1 as ``kv_len``.

    Raises
    ------
    InputError
        At the entry's ``policy``, naming the method, its arguments, what it returned and the
        policy's file.
    """
    prompt = point.prompt_len
    new = exp.spec.serving.max_new_tokens or exp.spec.shape.max_new_tokens or 0
    answers = [(f"static_cache_len({prompt}, {new})", policy.static_cache_len(prompt, new), 1)]
    answers += [(f"cache_len({prompt}, {g})", policy.cache_len(prompt, g), 0) for g in sorted({0, new})]
    source = getattr(sys.modules.get(type(policy).__module__), "__file__", None) or type(policy).__module__
    for call, value, least in answers:
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise at_entry(exp, point, ("policy",), InputError(
                f"KV policy {policy.name!r} ({source}): {call} returned {value!r}; expected an integer >= {least} "
                "(tokens per sequence and layer)"))
    # the other answers, used unchecked: a footprint, budget or tiers of another type stopped with a traceback
    rows = slot_new_tokens(new, exp.speculation.drafts, context_room(model, prompt))
    footprint, budget, tiers = policy.footprint(model, prompt, rows), policy.budget_tokens(), policy.memory_tiers()
    for call, value, fits, expected in (
            (f"footprint({prompt}, {rows})", footprint, isinstance(footprint, KVFootprint), "a KVFootprint (sn40l_sim.kvcache)"),
            ("budget_tokens()", budget, budget is None or (type(budget) is int and budget >= 1), "an integer >= 1 or None"),
            ("memory_tiers()", tiers, isinstance(tiers, dict) and all(type(k) is str and type(v) is str for k, v in tiers.items()),
             "a mapping of parameter name to memory tier name")):
        if not fits:
            raise at_entry(exp, point, ("policy",), InputError(
                f"KV policy {policy.name!r} ({source}): {call} returned {value!r}; expected {expected}"))
    if footprint.store_tier not in (None, *tiers.values()):   # memory_tiers' are checked against the hardware
        raise at_entry(exp, point, ("policy",), InputError(
            f"KV policy {policy.name!r} ({source}): footprint({prompt}, {rows}) keeps its store in {footprint.store_tier!r}, "
            f"which memory_tiers() ({tiers!r}) does not name; expected memory_tiers() to map the parameter choosing it to it"))
    # the serving books read a sequence's cache as min(cache_len(p, 0) + g, cap) from three calls
    # (serving/decode_books.py): any other growth (a token kept every k-th step) stopped run with
    # a traceback from inside the serving loop, after check had said ok
    try:
        cache_bounds(policy.cache_len, prompt, new)
    except ValueError:
        raise at_entry(exp, point, ("policy",), InputError(
            f"KV policy {policy.name!r} ({source}): cache_len({prompt}, g) is {policy.cache_len(prompt, 0)} at g = 0 "
            f"and {policy.cache_len(prompt, new)} at g = {new}; expected one more token per generated token until a "
            "cap, min(cache_len(p, 0) + g, cap), the one growth the serving model takes (docs/architecture.md, "
            "\"Extending the simulator\")")) from None
    # a sequence holding more rows than its footprint reserves overfilled its node's memory, which
    # the invariant check then reported as a bug in the simulator (exit status 3)
    held, reserved = policy.cache_len(prompt, rows), footprint.context_rows
    if held > reserved:
        raise at_entry(exp, point, ("policy",), InputError(
            f"KV policy {policy.name!r} ({source}): cache_len({prompt}, {rows}) returned {held}, more rows than "
            f"footprint({prompt}, {rows}) reserves ({reserved}, its slots or its store's rows); expected at most that"))


def check_budget(exp: Experiment, point: Point, policy: KVPolicy, model: ModelSpec) -> None:
    """Refuse a policy budget above the point's model's maximum context (``model`` with its
    overrides: a long-context variant raises it): a cache no sequence of the model can fill (a
    fixed ring would reserve it for every sequence; a budget that is never reached never evicts).

    Raises
    ------
    InputError
        At the entry's ``budget`` (or the largest budget parameter given, else its ``policy``).
    """
    budget, limit = policy.budget_tokens(), model.max_context
    # a prompt past the context is refused at its own field (serving/context_limit.py): a budget
    # drawn from it as a prompt_fraction is past the context only because the prompt is
    if budget is None or limit is None or budget <= limit or point.prompt_len > limit:
        return
    given = {k: v for k, v in point.params.items() if isinstance(v, int)}
    name = "budget" if "budget" in given else max(given, key=given.__getitem__, default=None)
    inner = param_source(exp, point, name) if name is not None else ("policy",)
    raise at_entry(exp, point, inner, InputError(
        f"a {policy.name} budget of {budget} tokens per sequence exceeds the maximum context of {model.name}, "
        f"{limit} tokens: no sequence can fill it ({raise_context(budget, max_context_set(exp), limit)})"))


def warn_unfilled_slots(exp: Experiment, point: Point, policy: KVPolicy) -> None:
    """Warn when the policy's static slot is longer than a sequence of the point can fill (a
    ring's budget above prompt + output): the decode graph reserves and reads slots that stay
    empty, so the policy costs more than keeping the whole cache would."""
    # a map experiment may leave the output length out (0): its graphs then hold the prompt; a
    # speculative step also writes its drafts' rows after the last token, which run reserves
    # (serving/point.py) and the whole cache would hold too
    drafts = exp.speculation.drafts
    new_tokens = slot_new_tokens(exp.spec.serving.max_new_tokens or exp.spec.shape.max_new_tokens, drafts)
    need = point.prompt_len + new_tokens
    slots = policy.static_cache_len(point.prompt_len, new_tokens)
    if slots > need:
        file, line = exp.doc.where(("policies", point.policy_index))
        where = f"{file}:{line}: " if line is not None else f"{file}: "
        with_drafts = f" (with its {drafts} drafts' rows)" if drafts else ""
        warnings.warn(f"{where}policies[{point.policy_index}] (point {point.name}): a {policy.name} cache of {slots} "
                      f"slots per sequence, where a prompt and its output but the last token{with_drafts} take at most "
                      f"{need}: the static graph reserves and reads slots no sequence fills "
                      f"({_fewer_slots_hint(policy)})", stacklevel=2)


def _fewer_slots_hint(policy: KVPolicy) -> str:
    """What would reserve fewer slots: a smaller budget, or, for a policy without one (``full``),
    no padding (a full cache padded past its sequence was told to try "full")."""
    if policy.budget_tokens() is not None:
        return "a budget of at most that, or full, costs less"
    if getattr(policy, "pad_to", 1) > 1:
        return "pad_to: 1 costs less"
    return "fewer slots cost less"


def warn_window_past_prompt(exp: Experiment, point: Point, policy: KVPolicy) -> None:
    """Warn when a policy's ``observation_window`` given in the experiment is longer than the
    point's prompt: only the prompt's queries exist to score the cache, so the selection runs
    with the window clamped to the prompt (sn40l_sim/kvcache/prefill_kernels.py) and the number
    written is not the one simulated."""
    window = getattr(policy, "observation_window", None)
    if "observation_window" not in point.params or window is None or window <= point.prompt_len:
        return
    inner = param_source(exp, point, "observation_window")
    file, line = exp.doc.where(("policies", point.policy_index) + inner)
    where = f"{file}:{line}: " if line is not None else f"{file}: "
    path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in inner)
    warnings.warn(f"{where}policies[{point.policy_index}]{path} (point {point.name}): a {policy.name} observation "
                  f"window of {window} queries, longer than the prompt of {point.prompt_len} tokens, whose queries are all "
                  f"a window can hold: it is simulated as {point.prompt_len} (write at most that)", stacklevel=2)


def warn_idle_sockets(exp: Experiment, phase: str, plan_sockets: int, node_sockets: int, node_name: str) -> None:
    """Warn when a phase's plan uses fewer of the node's sockets than it has: the others stay idle,
    so a sweep over the node's sockets with a fixed plan reads as "no gain from more sockets"."""
    if plan_sockets < node_sockets:
        file, line = exp.doc.where(("parallel", phase))
        where = f"{file}:{line}: " if line is not None else f"{file}: "
        warnings.warn(f"{where}parallel.{phase}: the plan uses {plan_sockets} of the {node_sockets} sockets of "
                      f"{node_name}; the other {node_sockets - plan_sockets} stay idle (raise tp to {node_sockets} "
                      "to use them; attention_dp divides tp, so it cannot)", stacklevel=2)


def warn_uneven_heads(exp: Experiment, phase: str, plan: ParallelPlan, attention: AttentionSpec,
                      model_name: str, sweep_point: str | None = None) -> None:
    """Warn when tensor parallelism splits the query heads unevenly: the busiest socket holds
    ``ceil(heads / tp)`` of them and sets attention's pace (and holds the most of each head-split
    weight), so the sockets holding fewer idle for part of it. The counts are the split the
    simulator times (the family's ``socket_heads``: Llama-3.1's 64 heads over 9 sockets go in
    runs of 8, one per KV group, leaving a socket none), not an even one. (With fewer heads than
    sockets each socket holds one, replicated: none idles.)

    With ``attention_dp > 1`` the projections split the heads ``tp`` ways but attention and the
    cache split each sequence's ``tp / attention_dp`` ways (``Ctx.head_ways``; docs/architecture.md
    "Heads that the sockets do not divide"), so each split is warned of apart, saying which it is:
    Llama-3.1-8B's 32 heads at tp 12 and attention_dp 4 go 3 a socket in the projections but 11,
    11 and 10 in attention. A sweep names the ``sweep_point`` whose plan or model it is."""
    file, line = exp.doc.where(("parallel", phase))
    field = f"parallel.{phase}" + (f" (sweep point {sweep_point})" if sweep_point is not None else "")
    where = f"{file}:{line}: {field}: " if line is not None else f"{file}: {field}: "
    tp, dp = plan.tp, plan.attention_dp
    if dp == 1:
        message = _uneven(attention, tp, f"tp {tp} splits", f"tp {tp} splits", "the pace", "a tp", model_name)
    else:
        message = _uneven(attention, tp, f"in the projections, tp {tp} splits",
                          f"in the K and V projections, tp {tp} splits", "their pace", "a tp", model_name,
                          caches=False)
    if message:
        warnings.warn(where + message, stacklevel=2)
    ways = f"tp {tp} / attention_dp {dp} = {tp // dp} ways split"
    if dp > 1 and (message := _uneven(attention, tp // dp, f"in attention, {ways}", f"in attention and the cache, {ways}",
                                      "attention's pace", "a tp / attention_dp", model_name, kv_too=True)):
        warnings.warn(where + message, stacklevel=2)


def _uneven(attention: AttentionSpec, ways: int, query_lead: str, kv_lead: str, pace: str, advice: str,
            model_name: str, caches: bool = True, kv_too: bool = False) -> str | None:
    """What :func:`warn_uneven_heads` says of a split of the heads ``ways`` ways (None when even):
    of the query heads when they split unevenly (and, ``kv_too``, of the KV heads with them), else
    of the KV heads when those do; ``query_lead`` and ``kv_lead`` say which split it is."""
    heads, kv_heads = attention.heads, attention.cache_heads()
    kv_split = attention.socket_kv_split(ways)
    if heads <= ways or heads % ways == 0:
        # the query heads divide, but a socket whose heads span two KV groups holds both KV heads
        # and their caches, and every socket is sized as that one (docs/architecture.md "Heads that
        # the sockets do not divide": Llama-3.2-3B's 24 heads in 8 groups over 12 sockets)
        if kv_split[0] == kv_split[-1]:
            return None
        return (f"{kv_lead} the {kv_heads} KV heads of {model_name!r} unevenly (its {heads} query heads evenly): "
                f"the busiest socket holds {kv_split[0]}{' and their caches' if caches else ''} and sets {pace}; "
                f"as simulated {_counts(kv_split)} ({advice} dividing {kv_heads} or a multiple of {kv_heads} "
                "balances them)")
    split = attention.socket_heads(ways)
    kv = f", and {_counts(kv_split, ' KV heads and their caches')}" if kv_too and kv_split[0] != kv_split[-1] else ""
    return (f"{query_lead} the {heads} query heads of {model_name!r} unevenly: the busiest socket holds "
            f"{split[0]} and sets {pace}; as simulated {_counts(split)}{kv} ({advice} dividing {heads} balances "
            "them)")


def _counts(split: tuple[int, ...], what: str = "") -> str:
    """``"10 of the 12 hold 3, 1 holds 2, 1 holds none"`` for a per-socket split, most first
    (``what``, as ``" KV heads"``, follows the first count)."""
    most = split[0]

    def hold(n: int) -> str:
        return "hold" if split.count(n) > 1 else "holds"
    others = "".join(f", {split.count(n)} {hold(n)} {n or 'none'}" for n in sorted(set(split) - {most}, reverse=True))
    return f"{split.count(most)} of the {len(split)} {hold(most)} {most}{what}{others}"


def at_entry(exp: Experiment, point: Point, inner: tuple[Any, ...], exc: InputError) -> InputError:
    """``exc`` located at ``inner`` of the point's policy entry, naming the point."""
    file, line = exp.doc.where(("policies", point.policy_index) + inner)
    path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in inner)
    return exc.located_at(message=f"{exc.message} (point {point.name})", file=file,
                          field=f"policies[{point.policy_index}]{path}", line=line)


def make_point_model(exp: Experiment, point: Point, model: ModelSpec) -> ModelSpec:
    """``model`` (the experiment's, its ``model_overrides`` applied) with the point's entry's own
    ``model_overrides``; a bad one is an :class:`InputError` located at the entry's field."""
    try:
        return model_with_overrides(model, point.model_overrides)
    except InputError as exc:
        inner = tuple((exc.field or "").split(".")) if exc.field else ()
        at = ("policies", point.policy_index, "model_overrides") + inner
        file, line = exp.doc.where(at)
        raise exc.located_at(message=f"{exc.message} (point {point.name})", file=file,
                             field=f"policies[{point.policy_index}].model_overrides" + "".join(f".{p}" for p in inner),
                             line=line) from None
