"""The model's maximum context against a point's prompt and output: what ``run`` (through
:func:`~sn40l_sim.serving.point.simulate_point`), ``check`` and ``map`` refuse before simulating.

A model file states the context its positions were trained for (``max_context``; None: not stated)
and a long-context variant raises it through an experiment's ``model_overrides``
(README.md, "Million-token prompts"). Errors name the :class:`~sn40l_sim.serving.point.PointSetup` field they are
about; the study layer turns those into the experiment's field paths.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from sn40l_sim.errors import InputError

if TYPE_CHECKING:
    from sn40l_sim.serving.point import PointSetup


def check_context(s: PointSetup) -> None:
    """The prompt must fit in the model's maximum context (``max_context``, when the model states
    one) and leave a position for a generated token, and so must the prefill graph it runs on; a
    long-context variant raises the maximum through ``model_overrides``. Each request's prompt and
    output together are checked as the requests are built
    (:func:`~sn40l_sim.serving.workload.build_requests`), as a serving engine checks a request's
    prompt plus its ``max_tokens``; :func:`check_output_context` checks a point without requests
    (``map``).

    Raises
    ------
    InputError
        Naming the :class:`PointSetup` field ``prompt_len``, or ``prefill_lens`` for a prompt whose
        compiled prefill length is beyond the maximum context.
    """
    limit = getattr(s.model, "max_context", None)
    if limit is None:
        return
    if s.prompt_len > limit:
        raise InputError(f"a prompt of {s.prompt_len} tokens exceeds the maximum context of {s.model.name}, "
                         f"{limit} tokens ({raise_context(s.prompt_len + 1, s.max_context_set, limit)})",
                         field="prompt_len")
    if s.prompt_len == limit:   # not "generate at most 0": no output length would do
        raise InputError(f"a prompt of {s.prompt_len} tokens fills the maximum context of {s.model.name}, "
                         f"{limit} tokens, leaving no position for a generated token "
                         f"({raise_context(s.prompt_len + 1, s.max_context_set, limit)})",
                         field="prompt_len")
    # each request is held to the context with its own output (build_requests), so the static slot
    # stops at it (kvcache.base.slot_new_tokens); but an output bound of the whole context or more is no bound
    # (max_new_tokens: 2147483647 was refused as "no compiled batch fits" at shape.prompt_len)
    if s.max_new_tokens >= limit:
        raise InputError(f"{s.max_new_tokens} new tokens leave no position for the prompt in the maximum context of "
                         f"{s.model.name}, {limit} tokens: generate at most {limit - s.prompt_len} after a prompt of "
                         f"{s.prompt_len} tokens ({raise_context(s.prompt_len + s.max_new_tokens, s.max_context_set, limit)})",
                         field="max_new_tokens")
    # the prompt's graph compiled for more positions than the model has would be timed and sized as
    # such: a 4096-token prompt on a 1,000,000-token graph took 62 s of prefill instead of 0.06 s
    compiled = min((n for n in s.prefill_lens if n >= s.prompt_len), default=None)
    if compiled is not None and compiled > limit:
        raise InputError(f"a prompt of {s.prompt_len} tokens runs on the compiled prefill length {compiled}, beyond "
                         f"the maximum context of {s.model.name}, {limit} tokens (compile lengths up to {limit})",
                         field="prefill_lens")


def check_output_context(s: PointSetup) -> None:
    """:func:`check_context`, and the point's prompt with ``max_new_tokens`` generated after it
    within the maximum context (the last token's position is ``prompt + max_new_tokens - 1``,
    whatever the KV policy keeps): for a point whose graphs are built without requests (``map``).

    Raises
    ------
    InputError
        Naming the :class:`PointSetup` field ``prompt_len`` or ``max_new_tokens``.
    """
    check_context(s)
    limit = getattr(s.model, "max_context", None)
    if limit is not None and s.prompt_len + s.max_new_tokens > limit:
        raise InputError(f"a prompt of {s.prompt_len} tokens and {s.max_new_tokens} new ones make "
                         f"{s.prompt_len + s.max_new_tokens}, beyond the maximum context of {s.model.name}, "
                         f"{limit} tokens: generate at most {limit - s.prompt_len} after such a prompt "
                         f"({raise_context(s.prompt_len + s.max_new_tokens, s.max_context_set, limit)})",
                         field="max_new_tokens")


def raise_context(needed: int, set_at: str | None = None, limit: int | None = None) -> str:
    """How a maximum context of ``needed`` tokens is had, for the messages refusing a longer
    sequence: a long-context variant through ``model_overrides`` when the model file's maximum
    holds; when the experiment's own field ``set_at`` already sets it (to ``limit``), what it sets
    and what it would take instead (suggesting ``model_overrides`` to an experiment that has it
    says nothing).

    >>> raise_context(1048577)
    'a long-context variant raises the maximum: model_overrides: {max_context: N}'
    >>> raise_context(1048577, "model_overrides.max_context", 1048576)
    'model_overrides.max_context sets the maximum to 1048576; this needs at least 1048577'
    """
    if set_at is None:
        return "a long-context variant raises the maximum: model_overrides: {max_context: N}"
    return f"{set_at} sets the maximum to {limit}; this needs at least {needed}"
