"""What :func:`sn40l_sim.models.builder.build_graph` checks of its model, shape and plan before
building: each wrong one an :class:`~sn40l_sim.errors.InputError` naming it, also for a Python
caller who passes a path for the model or a number for the plan (an ``AttributeError`` deep in
the builder otherwise)."""
from __future__ import annotations

from numbers import Integral
from typing import Any

from sn40l_sim.errors import InputError, shown
from sn40l_sim.ir import ParallelPlan, Shape
from sn40l_sim.models.spec import ModelSpec

#: the most speculative drafts a verify step checks (serving.speculative.drafts declares the same range)
MAX_DRAFTS = 15


def _whole(value: Any) -> bool:
    return isinstance(value, Integral) and not isinstance(value, bool)


def check_graph_inputs(model: Any, shape: Any, plan: Any) -> None:
    """Refuse what no graph can be built for.

    >>> from sn40l_sim.models.loader import load_model
    >>> check_graph_inputs(load_model("graphs/llama3_1_8b.yaml"), Shape("decode", 8, 0, 1024), 8)
    Traceback (most recent call last):
    ...
    sn40l_sim.errors.InputError: plan: expected a ParallelPlan, such as ParallelPlan(tp=8), got 8
    """
    if not isinstance(model, ModelSpec):
        raise InputError(f"model: expected a ModelSpec, such as load_model('graphs/llama3_1_8b.yaml'), got {shown(model)}")
    if not isinstance(shape, Shape):
        raise InputError(f"shape: expected a Shape, such as Shape('decode', batch=8, prompt_len=0, kv_len=1024), "
                         f"got {shown(shape)}")
    if not isinstance(plan, ParallelPlan):
        raise InputError(f"plan: expected a ParallelPlan, such as ParallelPlan(tp=8), got {shown(plan)}")
    if not (_whole(plan.tp) and _whole(plan.attention_dp)) or plan.tp < 1 or plan.attention_dp < 1 \
            or plan.tp % plan.attention_dp:
        raise InputError(f"parallel plan: attention_dp ({plan.attention_dp}) must divide tp ({plan.tp}), "
                         "both >= 1")
    if shape.phase not in ("prefill", "decode"):
        raise InputError(f"shape: phase must be 'prefill' or 'decode', got {shape.phase!r}")
    for name in ("batch", "prompt_len", "kv_len", "drafts"):
        if not _whole(getattr(shape, name)):
            raise InputError(f"shape: {name} must be an integer, got {shown(getattr(shape, name))}")
    if shape.batch < 1:
        raise InputError(f"shape: batch must be >= 1, got {shape.batch}")
    if shape.phase == "prefill" and shape.prompt_len < 1:
        raise InputError(f"shape: prefill needs prompt_len >= 1, got {shape.prompt_len}")
    if shape.kv_len < 0:
        raise InputError(f"shape: kv_len must be >= 0 (cached tokens attention reads), got {shape.kv_len}")
    if shape.phase == "decode" and shape.kv_len < 1:
        raise InputError(f"shape: decode needs kv_len >= 1 (tokens each sequence attends to), got {shape.kv_len}")
    drafts = shape.drafts
    if not 0 <= drafts <= MAX_DRAFTS:
        raise InputError(f"shape: drafts must be from 0 to {MAX_DRAFTS} (each runs the MTP module once), "
                         f"got {drafts}")
    if drafts and model.mtp is None:
        raise InputError(f"shape: drafts={drafts}, but model {model.name!r} has no mtp section: speculative "
                         "decoding drafts with the model's multi-token-prediction module")
