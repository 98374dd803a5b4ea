"""The KV-cache policy contract and its registry.

A policy says how long each sequence's cache is over its life, how many bytes that is, which
extra kernels prefill and each decode step run (the graph builder's
:class:`~sn40l_sim.models.builder.KVPolicyHooks`), and what decode reads and writes. Policies are
looked up by name (``full``, ``snapstream``, ``streamingllm``, ``snapkv``, ``h2o``, ``arkvale``;
one module each under ``kvcache/policies/``) from experiment files. Where its bytes live per
sequence (the cache decode attention reads, the policy's own state beside it, a store in another
memory tier) is its :meth:`KVPolicy.footprint`.
"""
from __future__ import annotations

import dataclasses
import difflib
import sys
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar

from sn40l_sim.errors import InputError
from sn40l_sim.ir import FusedKernel, ParallelPlan, Shape
from sn40l_sim.kvcache.footprint import KVFootprint
from sn40l_sim.kvcache.sizing import kv_bytes_per_token
from sn40l_sim.models.spec import ModelSpec


class KVPolicy(ABC):
    """Base class of KV-cache policies. Subclasses are frozen dataclasses of their parameters."""

    name: ClassVar[str]
    #: parameters :meth:`from_params` takes besides the dataclass fields (a total ``budget``)
    other_params: ClassVar[tuple[str, ...]] = ()

    @abstractmethod
    def cache_len(self, prompt_len: int, generated: int) -> int:
        """Tokens held per layer for one sequence after prefill and ``generated`` decode steps: one
        more per step from ``cache_len(prompt_len, 0)`` until a cap, ``min(cache_len(p, 0) + g, cap)``,
        the one growth the serving model reads (:mod:`sn40l_sim.serving.decode_books`); an
        experiment refuses another at the policy's entry."""

    @abstractmethod
    def static_cache_len(self, prompt_len: int, max_new_tokens: int) -> int:
        """Slot length of the static decode graph: what decode attention reads each step and what
        memory is reserved per sequence."""

    @abstractmethod
    def prefill_kernels(self, model: ModelSpec, prompt_len: int, tp: int) -> list[FusedKernel]:
        """Extra kernels per layer that prefill runs for this policy (empty for ``full``)."""

    def context_prefill_kernels(self, model: ModelSpec, prompt_len: int, context_len: int,
                                tp: int) -> list[FusedKernel]:
        """Extra kernels per layer of the prefill of a ``prompt_len``-token prompt whose sequence
        reaches ``context_len`` tokens in decode (prompt + max_new_tokens - 1 + drafts:
        :attr:`~sn40l_sim.ir.Shape.context_len`), which the graph builder calls when the prefill
        shape carries it. By default :meth:`prefill_kernels`. A policy whose decode evicts or recalls
        by state its prefill builds (H2O's accumulated scores, ArkVale's page digests) overrides it:
        a prompt that fits the budget compresses nothing, but a context that outgrows it still needs
        that state for every prompt token."""
        return self.prefill_kernels(model, prompt_len, tp)

    def decode_kernels(self, model: ModelSpec, shape: Shape, plan: ParallelPlan) -> list[FusedKernel]:
        """Extra kernels per layer that each decode step runs for this policy, per socket shard
        (a policy that scores and evicts every step, or recalls from a store, overrides this)."""
        return []

    def budget_tokens(self) -> int | None:
        """The cache budget the policy was given, in tokens per sequence and layer (the total of its
        budget parameters: ``params: {budget: N}`` gives N), or None for a policy without one. The
        assembly step refuses a budget above the model's maximum context: no sequence could fill it.
        """
        return None

    def memory_tiers(self) -> dict[str, str]:
        """Parameter -> memory tier, for each tier the policy names (a store's); the assembly step
        checks them against the hardware. None by default."""
        return {}

    def footprint(self, model: ModelSpec, prompt_len: int, max_new_tokens: int) -> KVFootprint:
        """What one sequence keeps per layer (:class:`~sn40l_sim.kvcache.footprint.KVFootprint`):
        by default its static slot and nothing else."""
        return KVFootprint(slots=self.static_cache_len(prompt_len, max_new_tokens))

    def prefill_state_bytes(self, model: ModelSpec, prompt_len: int, max_new_tokens: int) -> int:
        """Bytes of the policy's state per KV head and cache layer that a prompt's prefill builds and
        sends to the decode node beside the cache (H2O's accumulated scores, ArkVale's page digests),
        held on a prefill node until the transfer ends: the prompt's, which decode extends for the
        tokens it generates up to what it keeps (:meth:`footprint`), the default."""
        return self.footprint(model, prompt_len, max_new_tokens).state_bytes

    # -- derived figures, not hooks: everything below follows from static_cache_len and the model.
    # The simulation never calls them (it reads static_cache_len, cache_len, footprint and the
    # kernels); tests and scripts do. register refuses a class that overrides one (DERIVED), which
    # would otherwise be silently ignored.

    def decode_read_tokens(self, prompt_len: int, generated: int, max_new_tokens: int) -> int:
        """Cache slots per layer that one decode step's attention reads for one sequence.

        SN40L decode runs a static graph: attention streams the whole static slot every step and
        masks what is padding, so this is :meth:`static_cache_len` whatever ``generated`` is.
        It is what :class:`~sn40l_sim.ir.Shape` calls ``kv_len``.
        """
        return self.static_cache_len(prompt_len, max_new_tokens)

    def decode_write_tokens(self) -> int:
        """Tokens of KV one decode step writes per layer and sequence (the new token's row)."""
        return 1

    def bytes_per_sequence(self, model: ModelSpec, prompt_len: int, max_new_tokens: int) -> int:
        """KV bytes reserved for one sequence over all layers (its static slot)."""
        return self.static_cache_len(prompt_len, max_new_tokens) * kv_bytes_per_token(model)

    def decode_read_bytes(self, model: ModelSpec, prompt_len: int, generated: int,
                          max_new_tokens: int) -> int:
        """KV bytes one decode step reads for one sequence over all layers."""
        return self.decode_read_tokens(prompt_len, generated, max_new_tokens) * kv_bytes_per_token(model)

    def decode_write_bytes(self, model: ModelSpec) -> int:
        """KV bytes one decode step writes for one sequence over all layers."""
        return self.decode_write_tokens() * kv_bytes_per_token(model)

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> KVPolicy:
        """Build the policy from an experiment file's ``params`` mapping.

        Raises
        ------
        InputError
            Naming the parameter (as ``field``) for an unknown key or a bad value.
        """
        known = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
        for key in params:
            if key not in known:
                names = known + list(cls.other_params)
                expected = ("none" if not names else names[0] if len(names) == 1
                            else f"one of {', '.join(names[:-1])} or {names[-1]}")
                raise InputError(f"unknown parameter of KV policy {cls.name!r}; expected {expected}",
                                 field=str(key))
        # a plug-in's field without a default stopped with a TypeError traceback when left out
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            if f.init and f.name not in params and f.default is f.default_factory is dataclasses.MISSING:
                raise InputError(f"required parameter of KV policy {cls.name!r} is missing (its class gives it no default)",
                                 field=f.name)
        return cls(**params)


def slot_new_tokens(max_new_tokens: int, drafts: int, room: int | None = None) -> int:
    """Rows a sequence's static decode slot holds after its prompt: the rows its decode steps write
    for ``max_new_tokens`` generated tokens and, with ``drafts`` speculative drafts per step, the
    last step's drafts; at most ``room``, the positions the model's maximum context leaves after the
    prompt (:func:`context_room`).

    Prefill gives the first token; each decode step writes the K and V of the token it is fed (the
    previous step's output) and gives the next, so ``max_new_tokens`` tokens take
    ``max_new_tokens - 1`` decode steps and rows: the last token is returned, never fed back, and
    has no row. A verify step writes ``1 + drafts`` rows per sequence (docs/architecture.md,
    speculative decoding); the next step overwrites the rejected ones, but the last step's drafts
    land after its own token, so a slot that grows with the output needs room for them
    (:mod:`sn40l_sim.serving.speculation`). No request goes past the maximum context (each is held
    to it with its own output as the requests are built), and a serving engine drafts no position
    beyond it, so a slot longer than the context would be reserved and never filled. This is the
    one statement of that rule: pass it as the ``max_new_tokens`` of
    :meth:`KVPolicy.static_cache_len` and :meth:`KVPolicy.footprint`, and ``prompt_len`` plus it
    is the context a decode :class:`~sn40l_sim.ir.Shape` carries (``context_len``).

    Examples
    --------
    >>> slot_new_tokens(1024, 0), slot_new_tokens(1024, 2), slot_new_tokens(1024, 2, room=1024)
    (1023, 1025, 1024)
    >>> slot_new_tokens(1, 0)   # the prefill's token alone: no decode step, no row
    0
    >>> slot_new_tokens(1, 2)   # a decode step of this shape is still mapped (map's default
    ...                         # max_new_tokens is 1), and its drafts land in these rows
    2
    >>> slot_new_tokens(5000, 0, room=1024)   # held to 1,024 tokens by the context
    1023
    """
    # a request is held to the context with its own output, so at most ``room`` tokens are generated
    generated = max_new_tokens if room is None else min(max_new_tokens, max(room, 1))
    rows = max(generated - 1, 0) + drafts
    return rows if room is None else min(rows, max(room, 1))


def context_room(model: object, prompt_len: int) -> int | None:
    """Positions the model's maximum context (``max_context``) leaves after a prompt of
    ``prompt_len`` tokens; None for a model that states no maximum."""
    limit = getattr(model, "max_context", None)
    return None if limit is None else limit - prompt_len


POLICIES: dict[str, type[KVPolicy]] = {}
#: KVPolicy's derived figures: no part of the simulation calls them, so a policy overriding one
#: would change nothing it reports (register refuses it)
DERIVED = ("decode_read_tokens", "decode_write_tokens", "bytes_per_sequence", "decode_read_bytes",
           "decode_write_bytes")
#: the largest token count a parameter takes (the schema's largest count)
MAX_TOKENS = 2**31 - 1


#: the prefix of the generated module names of plug-in files (study/plugins.py), which name no file
PLUGIN_MODULES = "sn40l_sim_plugin_"


def _class_file(cls: type) -> str:
    """``Class (its file)``: a plug-in file's module has a generated name, so its file is shown."""
    return f"{cls.__qualname__} ({getattr(sys.modules.get(cls.__module__), '__file__', None) or cls.__module__})"


def register(cls: type[KVPolicy]) -> type[KVPolicy]:
    """Class decorator adding a policy to :data:`POLICIES` under ``cls.name``.

    The contract a plug-in (``plugins:`` of an experiment, docs/architecture.md, "Extending the
    simulator") must keep is checked here, at import, rather than at the first point that builds the
    policy: a :class:`KVPolicy` subclass, a dataclass (``from_params`` reads its fields), a ``name``
    of its own, none of the derived figures (:data:`DERIVED`) overridden. A second class under a name already taken (a plug-in calling itself
    ``snapstream``) is refused: it would replace the shipped policy for every later experiment of the
    process, whose results would carry the old name. The same class registered again (its module
    imported a second time) replaces itself.

    Raises
    ------
    TypeError
        For a class that breaks the contract, or a name another class holds.
    """
    if not (isinstance(cls, type) and issubclass(cls, KVPolicy)):
        raise TypeError(f"register: {cls!r} is not a subclass of sn40l_sim.kvcache.KVPolicy")
    where = _class_file(cls)
    name = cls.__dict__.get("name")
    if not isinstance(name, str) or not name.strip() or name != name.strip():
        raise TypeError(f"register: {where} must set its own class attribute name (a non-empty text without "
                        f"surrounding spaces, the experiment's policy: value), got {name!r}")
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"register: {where} must be a dataclass of its parameters (@dataclass(frozen=True) "
                        "under @register): KVPolicy.from_params builds it from its fields")
    # a hook misspelt (decode_kernel for decode_kernels) is a method nothing calls: a required one
    # stopped the first run with a traceback, an optional one was silently ignored
    hooks = [m for m in vars(KVPolicy) if not m.startswith("_") and callable(getattr(KVPolicy, m))]
    misspelt = {m: close[0] for m, v in vars(cls).items() if callable(v) and m not in hooks
                and (close := difflib.get_close_matches(m.lower(), hooks, n=1, cutoff=0.8))}
    missing = sorted(getattr(cls, "__abstractmethods__", ()))
    if misspelt or missing:
        said = "; ".join([f"{m} is not a KVPolicy method (did you mean {h}?)" for m, h in misspelt.items()]
                         + [f"it does not define {', '.join(missing)}"] * bool(missing))
        raise TypeError(f"register: {where}: {said}; the methods a policy defines are "
                        f"{', '.join(m for m in hooks if m not in DERIVED and m != 'from_params')} (kvcache/base.py)")
    overridden = [m for m in DERIVED if getattr(cls, m) is not getattr(KVPolicy, m)]
    if overridden:
        raise TypeError(f"register: {where} overrides {', '.join(overridden)}, which the simulation never calls "
                        "(derived from static_cache_len, for tests and scripts): decode attention reads the static "
                        "slot, static_cache_len; other bytes a policy reads or writes go in the kernels it adds "
                        "(prefill_kernels, decode_kernels) and what it keeps in footprint")
    held = POLICIES.get(name)
    if held is not None and (held.__module__, held.__qualname__) != (cls.__module__, cls.__qualname__):
        raise TypeError(f"register: KV policy name {name!r} of {where} is already registered by "
                        f"{_class_file(held) if held.__module__.startswith(PLUGIN_MODULES) else f'{held.__qualname__} ({held.__module__})'}; "
                        "choose another name")
    POLICIES[name] = cls
    return cls


def check_int(policy: str, param: str, value: Any, minimum: int) -> None:
    """Raise :class:`InputError` naming ``param`` unless ``value`` is an integer >= ``minimum``.

    Examples
    --------
    >>> check_int("snapstream", "sink", 4, 0)
    >>> check_int("snapstream", "sink", -1, 0)
    Traceback (most recent call last):
    ...
    sn40l_sim.errors.InputError: sink: KV policy 'snapstream': expected an integer >= 0, got -1
    """
    # bool is an int subclass, and a YAML "yes" must not pass for a token count
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"KV policy {policy!r}: expected an integer >= {minimum}, got {value!r}",
                         field=param)
    if value < minimum:
        raise InputError(f"KV policy {policy!r}: expected an integer >= {minimum}, got {value}",
                         field=param)
    if value > MAX_TOKENS:
        raise InputError(f"KV policy {policy!r}: expected at most {MAX_TOKENS} tokens (2**31 - 1), got {value}",
                         field=param)
