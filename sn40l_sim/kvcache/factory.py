"""``make_policy``: a KV policy from its registry name and an experiment file's parameters.

Examples
--------
>>> make_policy("snapstream", {"budget": 32768}).static_cache_len(131072, 0)
32768
>>> make_policy("snapstream", {"sink": -1})
Traceback (most recent call last):
...
sn40l_sim.errors.InputError: params.sink: KV policy 'snapstream': expected an integer >= 0, got -1
>>> make_policy("h2", {})
Traceback (most recent call last):
...
sn40l_sim.errors.InputError: policy: unknown KV policy 'h2'; expected one of arkvale, full, h2o, snapkv, snapstream, streamingllm
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sn40l_sim.errors import InputError, shown
from sn40l_sim.kvcache import policies as _policies  # noqa: F401  (registers the shipped policies)
from sn40l_sim.kvcache.base import POLICIES, KVPolicy


def make_policy(name: str, params: Mapping[str, Any] | None = None) -> KVPolicy:
    """Build the registered policy ``name`` with ``params``.

    Parameters
    ----------
    name : str
        A key of :data:`sn40l_sim.kvcache.base.POLICIES`.
    params : mapping, optional
        The policy's parameters (see each policy class); unknown keys are errors.

    Raises
    ------
    InputError
        Unknown policy name, unknown parameter, or a parameter of the wrong type or range; the
        error's field is ``policy`` or ``params.<parameter>``, inside the policy entry (the
        experiment loader adds the entry's place in its file).

    Examples
    --------
    An experiment's ``{policy: snapstream, params: {budget: 4096}}``: a total budget split into sink,
    recent ring and top-K, a 4,096-token slot whatever the prompt:

    >>> snap = make_policy("snapstream", {"budget": 4096})
    >>> snap
    SnapStream(sink=4, recent=512, topk=3580, observation_window=512, pool_kernel=7)
    >>> snap.static_cache_len(prompt_len=131072, max_new_tokens=1024), make_policy("full").static_cache_len(131072, 1024)
    (4096, 132096)
    >>> make_policy("snapstream", {"budjet": 4096})
    Traceback (most recent call last):
    ...
    sn40l_sim.errors.InputError: params.budjet: unknown parameter of KV policy 'snapstream'; expected one of sink, recent, topk, observation_window, pool_kernel or budget
    """
    if not isinstance(name, str) or name not in POLICIES:
        raise InputError(f"unknown KV policy {shown(name)}; expected one of {', '.join(sorted(POLICIES))}",
                         field="policy")
    params = {} if params is None else params
    if not isinstance(params, Mapping):
        raise InputError(f"expected a mapping of parameters, got {shown(params)}", field="params")
    try:
        return POLICIES[name].from_params(params)
    except InputError as exc:
        raise InputError(exc.message, field=f"params.{exc.field}" if exc.field else "params") from None
