"""What an attention family is: the spec class every family derives from, and the registry.

A family (``mla``, ``gqa``, ...) is one module under ``models/families/``. Its spec class, a
subclass of :class:`AttentionSpec` decorated with :func:`register_family`, holds the fields a
model file writes under ``attention:`` (tagged by ``kind``) and answers every question the rest of
the simulator asks about attention, so no other module branches on the kind:

=========================  ==============================================================
``operators``, ``sizes``   operator and collective-size formulas the kernel templates name
``formula_weights``        the operator and collective-size formulas that need a weight only
                           some models of the family have, with the field that gives it
``phase_operators``        the attention formulas that model one phase only (prefill's over the
                           prompt, decode's over the cache): another phase's are refused
``default_template``       kernel template used when a model file names none
``weight_tensors``         the attention weights one layer adds to the tensor inventory
``cached_tensors``         what one layer caches per token (widths and KV heads; the KV
                           sharding, KV bytes and the SnapKV / ring-buffer kernels follow)
``socket_kv_heads``        the KV heads a socket needs for its share of the query heads
``socket_heads``           the query heads each socket holds under a split the family times
``socket_kv_split``        the KV heads each socket holds under that split
``query_head_dim``         width of one query head as the prefill QKV kernel writes it
``prefill_key_source``     where prefill's per-head keys live (for SnapKV scoring)
``prefill_kv_head_width``  elements per query head of the keys and values prefill
                           attention reads from activations (0 when it reads the cache)
``problems``               checks across fields that the schema cannot express
``reference_plans``        the parallel plans ``describe`` shows the model under
``title``                  what ``describe`` calls the family
=========================  ==============================================================

Adding a family touches two Python files (its module, and one import line in
``models/families/__init__.py`` that registers it) plus its default kernel template under
``graphs/``; ``tests/models/test_families.py`` does it with a toy family defined in the test.

Examples
--------
>>> from sn40l_sim.models.families import FAMILIES, MLAAttentionSpec
>>> sorted(FAMILIES), FAMILIES["mla"] is MLAAttentionSpec
(['gqa', 'mla'], True)
>>> from sn40l_sim.models.spec import ModelSpec
>>> ModelSpec.model_validate(dict(kind="model", name="x", layers=1, hidden=8, dense_ffn=8, vocab=8,
...     weight_dtype="bf16", attention=dict(kind="mha", heads=2)))  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelSpec
attention.kind
  unknown attention kind; expected one of gqa, mla [type=attention_kind, input_value='mha', input_type=str]
"""
from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeVar

from pydantic import ValidationError
from pydantic_core import PydanticCustomError

from sn40l_sim.ir import ParallelPlan
from sn40l_sim.schema import PositiveInt, StrictModel

if TYPE_CHECKING:
    from sn40l_sim.models.context import Ctx, Step
    from sn40l_sim.models.tensors import Tensor

#: an operator formula: the build context -> the operators (steps) it contributes to a kernel
OperatorFormula = Callable[["Ctx"], "list[Step]"]
#: a collective-size formula: the build context -> bytes (0: no collective)
SizeFormula = Callable[["Ctx"], int]


@dataclass(frozen=True)
class CachedTensor:
    """One tensor of a layer's cache: ``heads`` rows of ``width`` elements per token.

    ``scored``: decode attention's scores read it (keys; MLA's latent and RoPE key), so a policy
    that scores cached tokens against the query (H2O, page digests) reads or summarises it.
    ``valued``: the weighted sum of values reads it (values; MLA's latent). A tensor that is scored
    and not valued is a key for quantisation (KIVI's per-channel scales).
    """

    name: str
    width: int
    heads: int
    scored: bool = True
    valued: bool = True


class AttentionSpec(StrictModel):
    """The base of every family's spec: the fields and answers all families share.

    A family overrides ``kind`` with ``Literal["<kind>"]``, adds its fields, sets the class
    variables and implements the three abstract answers (``weight_tensors``, ``cached_tensors``,
    ``query_head_dim``); the other answers have defaults.
    """

    kind: str
    #: query heads
    heads: PositiveInt

    #: operator formulas (name -> formula) the family's kernel templates may name
    operators: ClassVar[Mapping[str, OperatorFormula]] = {}
    #: collective-size formulas (name -> formula)
    sizes: ClassVar[Mapping[str, SizeFormula]] = {}
    #: operator or collective-size formula -> (weight tensor it needs that only some models of the
    #: family have, the field that gives it): a template naming it for a model without the tensor
    #: is refused by name
    formula_weights: ClassVar[Mapping[str, tuple[str, str]]] = {}
    #: operator formula -> the one phase it models ("prefill" or "decode"): decode attention attends
    #: over the cached ``kv_len`` tokens alone and prefill's over the prompt's tiles, so either in the
    #: other phase's kernels would build a graph without the attention that phase runs
    phase_operators: ClassVar[Mapping[str, str]] = {}
    #: kernel template (a file in ``graphs/``, or an absolute path) used when the model names none
    default_template: ClassVar[str]
    #: where prefill attention's per-query-head keys are when SnapKV scores the prompt:
    #: ``"activations"`` (written per head by the QKV kernel) or ``"cache"`` (read from the cache,
    #: one key per KV head)
    prefill_key_source: ClassVar[Literal["activations", "cache"]] = "cache"
    #: what ``describe`` calls the family
    title: ClassVar[str] = ""

    @abstractmethod
    def weight_tensors(self, hidden: int) -> list[Tensor]:
        """The attention weights of one layer (the projections in and out of attention)."""

    @abstractmethod
    def cached_tensors(self) -> tuple[CachedTensor, ...]:
        """The tensors one layer caches per token."""

    @abstractmethod
    def query_head_dim(self) -> int:
        """Width of one query head as the prefill QKV kernel writes it."""

    def prefill_kv_head_width(self) -> int:
        """Elements per query head and token of the key and the value that prefill attention reads
        from activations rather than the cache (written per head by the QKV kernel): 0 for a
        family whose ``prefill_key_source`` is ``"cache"``; a family whose keys are activations
        must say (chunked prefill sizes the earlier chunks' keys by it)."""
        if self.prefill_key_source == "cache":
            return 0
        raise NotImplementedError(f"{type(self).__name__} reads prefill keys from activations: "
                                  "it must give prefill_kv_head_width")

    def kv_width(self) -> int:
        """Elements cached per token and layer."""
        return sum(t.width * t.heads for t in self.cached_tensors())

    def cache_heads(self) -> int:
        """KV heads of the cache (each cached tensor has that many); tensor parallelism shards
        the cache by them (see :func:`sn40l_sim.kvcache.sizing.kv_sharding`)."""
        return self.cached_tensors()[0].heads

    def socket_kv_heads(self, ways: int) -> int:
        """KV heads of the cache the busiest socket needs when the query heads are split ``ways``
        ways (``ceil(cache_heads / ways)`` by default)."""
        return -(-self.cache_heads() // ways)

    def socket_heads(self, ways: int) -> tuple[int, ...]:
        """Query heads each of ``ways`` head-splitting sockets holds, most first (the busiest
        holds ``ceil(heads / ways)``, as every per-socket count assumes). By default as evenly as
        whole heads allow; a family whose KV heads constrain the split says which it times (what
        ``check`` reports when it warns of an uneven split)."""
        if self.heads < ways:       # each socket holds one head, replicated
            return (1,) * ways
        share, extra = divmod(self.heads, ways)
        return (share + 1,) * extra + (share,) * (ways - extra)

    def socket_kv_split(self, ways: int) -> tuple[int, ...]:
        """KV heads of the cache each of ``ways`` head-splitting sockets holds, most first (the
        busiest holds :meth:`socket_kv_heads`). By default as evenly as whole heads allow, one each
        (replicated) with fewer heads than sockets; ``check`` warns when they differ."""
        heads = self.cache_heads()
        if heads < ways:
            return (1,) * ways
        share, extra = divmod(heads, ways)
        return (share + 1,) * extra + (share,) * (ways - extra)

    def kv_head_sockets(self, ways: int) -> int:
        """Sockets holding query heads of one KV head of the cache when the query heads are split
        ``ways`` ways, at most (``ways / cache_heads`` by default, 1 when each socket has KV heads of
        its own): the sockets that reduce that head's partial scores together."""
        return max(1, ways // self.cache_heads())

    def problems(self) -> Iterator[tuple[str, str]]:
        """``(field, message)`` for each check across fields that fails (none by default)."""
        return iter(())

    def reference_plans(self) -> tuple[ParallelPlan, ParallelPlan]:
        """(prefill, decode) plans of the family's reference deployment, which ``describe``
        reports (one socket by default)."""
        return ParallelPlan(), ParallelPlan()


#: kind -> spec class of every registered family
FAMILIES: dict[str, type[AttentionSpec]] = {}

S = TypeVar("S", bound=type[AttentionSpec])


def head_groups(query_heads: int, kv_heads: int) -> tuple[tuple[int, int], ...]:
    """``(query heads, KV heads with that many)`` when a socket's ``query_heads`` are spread over
    the ``kv_heads`` it holds, largest first: one pair when they divide, else two. Decode attention
    runs one GEMM per KV head over its query heads, and a socket whose heads span two groups (an
    uneven split, docs/architecture.md "Heads that the sockets do not divide") has groups of two
    sizes; ``ceil(query_heads / kv_heads)`` rows for every KV head would count heads it does not
    hold (Llama-3.1-8B over 12 sockets: 4 rows for 3 heads).

    >>> head_groups(8, 1), head_groups(3, 2), head_groups(11, 4)
    (((8, 1),), ((2, 1), (1, 1)), ((3, 3), (2, 1)))
    """
    share, extra = divmod(query_heads, kv_heads)
    return tuple((m, n) for m, n in ((share + 1, extra), (share, kv_heads - extra)) if m and n)


def register_family(cls: S) -> S:
    """Class decorator adding an attention family to :data:`FAMILIES` under its ``kind``.

    A second class under a kind another holds is refused (a family calling itself ``gqa`` would
    silently replace Llama-3.1's for every model loaded after it); the same class registered again
    (its module imported twice) replaces itself."""
    kind = cls.model_fields["kind"].annotation
    args = getattr(kind, "__args__", ())
    if len(args) != 1 or not isinstance(args[0], str):
        raise TypeError(f"{cls.__name__}.kind must be Literal['<kind>'], got {kind!r}")
    held = FAMILIES.get(args[0])
    if held is not None and (held.__module__, held.__qualname__) != (cls.__module__, cls.__qualname__):
        raise TypeError(f"register_family: attention kind {args[0]!r} of {cls.__qualname__} ({cls.__module__}) is "
                        f"already registered by {held.__qualname__} ({held.__module__}); choose another kind")
    FAMILIES[args[0]] = cls
    return cls


def known_kinds() -> str:
    """The registered kinds, for messages."""
    return ", ".join(sorted(FAMILIES))


def validate_attention(value: Any, handler: Any) -> AttentionSpec:
    """pydantic wrap validator of ``ModelSpec.attention``: validate with the registered family
    that ``kind`` names, so errors are located inside the family's fields and an unknown kind is
    one error at ``attention.kind`` listing the known ones."""
    if isinstance(value, AttentionSpec):
        return value
    if not isinstance(value, Mapping):
        raise PydanticCustomError("attention_mapping", "expected a mapping with kind: {kinds}",
                                  {"kinds": " | ".join(sorted(FAMILIES))})
    kind = value.get("kind")
    if not isinstance(kind, str) or kind not in FAMILIES:
        error = PydanticCustomError("attention_kind", "unknown attention kind; expected one of {kinds}",
                                    {"kinds": known_kinds()})
        loc = ("kind",)
        raise ValidationError.from_exception_data(
            "attention", [{"type": error, "loc": loc, "input": kind}] if "kind" in value
            else [{"type": "missing", "loc": loc, "input": value}])
    return FAMILIES[kind].model_validate(value)
