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

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sn40l_sim.errors import InputError
from sn40l_sim.kvcache import KVPolicy, make_policy
from sn40l_sim.models.loader import with_overrides as model_with_overrides
from sn40l_sim.models.spec import ModelSpec

if TYPE_CHECKING:
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
    """Expand policies x prompt lengths into named points (policy order, then prompt order)."""
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


def make_point_policy(exp: Experiment, point: Point) -> KVPolicy:
    """The point's :class:`~sn40l_sim.kvcache.base.KVPolicy`; a bad name or parameter is an
    :class:`InputError` located at the policy entry."""

    try:
        return make_policy(point.policy, dict(point.params))
    except InputError as exc:
        if exc.file:
            raise
        # make_policy names the field inside the entry ("policy" or "params.<name>")
        inner = tuple((exc.field or "params").split("."))
        at = ("policies", point.policy_index) + inner
        file, line = exp.doc.where(at)
        raise exc.__class__(f"{exc.message} (point {point.name})", file=file,
                            field=f"policies[{point.policy_index}].{'.'.join(inner)}", line=line) from None


def make_point_model(exp: Experiment, point: Point, model: ModelSpec) -> ModelSpec:
    """``model`` (the experiment's, its ``model_overrides`` applied) with the point's entry's own
    ``model_overrides``; a bad one is an :class:`InputError` located at the entry's field."""
    try:
        return model_with_overrides(model, point.model_overrides)
    except InputError as exc:
        inner = tuple((exc.field or "").split(".")) if exc.field else ()
        at = ("policies", point.policy_index, "model_overrides") + inner
        file, line = exp.doc.where(at)
        raise exc.__class__(f"{exc.message} (point {point.name})", file=file,
                            field=f"policies[{point.policy_index}].model_overrides" + "".join(f".{p}" for p in inner),
                            line=line) from None
