"""What one cached token costs, and how the cache of one layer splits over tensor-parallel sockets.

The cache of a layer holds, per token, one row per *cached tensor*, as the model's attention family
says (:meth:`~sn40l_sim.models.families.AttentionSpec.cached_tensors`):

* MLA (DeepSeek): the ``kv_lora_rank``-wide latent and the ``qk_rope_head_dim``-wide RoPE key,
  shared by every query head (one "KV head");
* GQA (Llama): the keys and the values, ``kv_heads x head_dim`` each.

Examples
--------
>>> from sn40l_sim.models.spec import ModelSpec
>>> r1 = ModelSpec.model_validate(dict(
...     kind="model", name="r1", layers=61, hidden=7168, dense_ffn=18432, vocab=129280,
...     weight_dtype="fp8", attention=dict(kind="mla", heads=128, q_lora_rank=1536,
...     kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)))
>>> kv_width(r1), kv_bytes_per_token_layer(r1), kv_bytes_per_token(r1)
(576, 1152, 70272)
>>> [(t.name, t.width) for t in cached_tensors(r1)]
[('latent', 512), ('rope_key', 64)]
>>> kv_sharding(r1, tp=16)
KVSharding(query_heads=8, kv_heads_per_socket=1, row_shards=16, score_shards=16)
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Integral

from sn40l_sim.errors import InputError, shown
from sn40l_sim.ir import ACT_BYTES, DTYPE_BYTES, ParallelPlan, Phase
from sn40l_sim.models.families import CachedTensor
from sn40l_sim.models.kv_format import kv_cache_layers, kv_stored_bytes

# the whole-model count has one definition, in models/ (it also knows about the MTP module)
from sn40l_sim.models.params import kv_bytes_per_token
from sn40l_sim.models.spec import ModelSpec

__all__ = ["CachedTensor", "KVSharding", "cached_tensors", "kv_bytes_per_socket", "kv_bytes_per_socket_token",
           "kv_bytes_per_token", "kv_bytes_per_token_layer", "kv_dtype_bytes", "kv_heads", "kv_share", "kv_sharding", "kv_stored_bytes",
           "kv_tokens_fitting", "kv_width", "prefill_kv_bytes_per_socket", "prefill_key_activation_bytes_per_token", "query_head_dim", "row_shards",
           "state_bytes_per_socket"]


def cached_tensors(model: ModelSpec) -> tuple[CachedTensor, ...]:
    """The tensors one layer caches per token (MLA: latent + RoPE key; GQA: K + V)."""
    return model.attention.cached_tensors()


def kv_width(model: ModelSpec) -> int:
    """Elements cached per token and layer (576 for DeepSeek MLA; ``2 kv_heads head_dim`` for GQA)."""
    return model.attention.kv_width()


def kv_dtype_bytes(model: ModelSpec) -> int:
    """Bytes of one cached element of a whole-byte datatype without scales (a count of elements is
    sized with :func:`kv_stored_bytes`, which adds scales and packs ``int4``)."""
    return DTYPE_BYTES[model.kv_dtype]


def kv_bytes_per_token_layer(model: ModelSpec) -> int:
    """Bytes cached per token in one layer (scales included, rounded up).

    Examples
    --------
    Llama-3.1-70B caches keys and values of 8 heads of 128 in BF16; an FP8 cache halves it:

    >>> from sn40l_sim.models.loader import load_model
    >>> llama = load_model("graphs/llama3_1_70b.yaml")
    >>> kv_bytes_per_token_layer(llama), kv_bytes_per_token_layer(load_model("graphs/llama3_1_70b.yaml", {"kv_dtype": "fp8"}))
    (4096, 2048)
    >>> kv_bytes_per_token(llama) == llama.layers * 4096     # every layer
    True
    """
    return kv_stored_bytes(model, kv_width(model))


def kv_heads(model: ModelSpec) -> int:
    """KV heads of the whole model's cache: 1 for MLA (a shared latent), ``kv_heads`` for GQA (one
    socket's share is :attr:`KVSharding.kv_heads_per_socket`).

    Examples
    --------
    >>> from sn40l_sim.models.loader import load_model
    >>> kv_heads(load_model("graphs/deepseek_r1.yaml")), kv_heads(load_model("graphs/llama3_1_70b.yaml"))
    (1, 8)
    """
    return model.attention.cache_heads()


def query_head_dim(model: ModelSpec) -> int:
    """Width of one query head as the QKV kernel writes it (MLA: ``qk_nope + qk_rope`` = 192)."""
    return model.attention.query_head_dim()


@dataclass(frozen=True)
class KVSharding:
    """How one layer's attention cache work splits over ``tp`` sockets (busiest socket).

    ``query_heads`` and ``kv_heads_per_socket`` are the heads one socket owns (the model's totals are
    ``attention.heads`` and :func:`kv_heads`). When there are fewer KV heads than sockets (always for
    MLA), ``row_shards`` sockets share a KV head: they split its query heads, reduce their partial
    SnapKV scores among themselves, and each builds ``1/row_shards`` of the compressed cache's rows.

    ``score_shards`` are the sockets holding query heads of one KV head, which reduce its partial
    scores: ``row_shards`` when the split follows the KV groups, but also 2 where a group's query
    heads fall on two sockets of an uneven split (Llama-3.1's 8 groups over 6, 10 or 12 sockets,
    :meth:`~sn40l_sim.models.families.AttentionSpec.kv_head_sockets`), whose rows are not split
    (``row_shards`` 1: each socket holds its own replica of both groups' caches).
    """

    query_heads: int
    kv_heads_per_socket: int
    row_shards: int
    score_shards: int


def kv_sharding(model: ModelSpec, tp: int) -> KVSharding:
    """Heads per socket and sockets per KV head under tensor parallelism ``tp``.

    Examples
    --------
    Llama-3.1-70B on 16 sockets: 64 query heads, 4 a socket; 8 KV heads, each shared by 2 sockets:

    >>> from sn40l_sim.models.loader import load_model
    >>> kv_sharding(load_model("graphs/llama3_1_70b.yaml"), tp=16)
    KVSharding(query_heads=4, kv_heads_per_socket=1, row_shards=2, score_shards=2)

    Over 12 sockets a socket's 6 query heads can span two groups, and a group's fall on two sockets:

    >>> kv_sharding(load_model("graphs/llama3_1_70b.yaml"), tp=12)
    KVSharding(query_heads=6, kv_heads_per_socket=2, row_shards=1, score_shards=2)
    """
    if tp < 1:
        raise ValueError(f"tp must be >= 1, got {tp}")
    heads = model.attention.heads
    groups = kv_heads(model)
    # the family's count: a socket's query heads may span two KV groups, whose caches it then holds
    return KVSharding(query_heads=math.ceil(heads / tp),
                      kv_heads_per_socket=model.attention.socket_kv_heads(tp),
                      row_shards=row_shards(groups, tp), score_shards=model.attention.kv_head_sockets(tp))


def row_shards(groups: int, ways: int) -> int:
    """Sockets splitting the rows of a KV head they share: ``ways / groups`` when each group has
    sockets of its own; else 1, as a split not following the groups leaves no set of sockets
    owning a group (Qwen2-7B's 4 groups over 10 sockets: group 0 on sockets 0-2, the third also
    holding group 1 with two others), so each builds every row of its replicas (:class:`KVSharding`).

    >>> row_shards(8, 16), row_shards(1, 16), row_shards(4, 10), row_shards(8, 12)
    (2, 16, 1, 1)
    """
    return ways // groups if ways % groups == 0 else 1


def kv_share(model: ModelSpec, plan: ParallelPlan, batch: int) -> tuple[int, int]:
    """(sequences, KV heads) whose cache the busiest socket holds for ``batch`` sequences: the
    sequences of its attention group and the KV heads it has of each (:func:`kv_bytes_per_socket`).

    >>> from sn40l_sim.models.loader import load_model
    >>> llama = load_model("graphs/llama3_1_70b.yaml")      # 8 KV heads
    >>> [kv_share(llama, plan, 8) for plan in (ParallelPlan(16), ParallelPlan(16, 2), ParallelPlan(16, 16))]
    [(8, 1), (4, 1), (1, 8)]

    The share holds for both phases: prefill splits attention as decode does (its graph runs
    ``ceil(batch / attention_dp)`` sequences over ``tp / attention_dp`` sockets each,
    :class:`~sn40l_sim.models.context.Ctx`). Where the phases differ, in the rows of a shared KV
    head that each socket holds, :func:`kv_bytes_per_socket` decides.
    """
    dp = plan.attention_dp
    return math.ceil(batch / dp), kv_sharding(model, max(1, plan.tp // dp)).kv_heads_per_socket


def prefill_splits_rows(model: ModelSpec, plan: ParallelPlan) -> bool:
    """Whether the prefill sockets sharing a KV head each hold a share of its rows (split by
    tokens), not a replica: MLA's prefill attention reads the keys it expanded, so the latent's
    rows are only written, for the transfer (:func:`kv_bytes_per_socket`).

    >>> from sn40l_sim.models.loader import load_model
    >>> prefill_splits_rows(load_model("graphs/deepseek_r1.yaml"), ParallelPlan(16))
    True
    >>> prefill_splits_rows(load_model("graphs/llama3_1_70b.yaml"), ParallelPlan(16))   # GQA reads its cache
    False
    """
    return model.attention.prefill_key_source == "activations" and _row_shards(model, plan) > 1


def prefill_key_activation_bytes_per_token(model: ModelSpec, plan: ParallelPlan) -> int:
    """Bytes per prompt token, on one prefill socket, of the keys and values that prefill attention
    reads from activations (MLA's per-head keys and values, for the ``ceil(heads / ways)`` query
    heads the socket's attention runs, ``ways = tp / attention_dp`` as :class:`~sn40l_sim.models.context.Ctx`
    splits a sequence's heads, not the ``tp`` of the projections); 0 where it reads them from the
    cache (GQA). A chunk of a chunked prefill attends over the earlier chunks' keys too, so it holds theirs.

    >>> from sn40l_sim.models.loader import load_model
    >>> prefill_key_activation_bytes_per_token(load_model("graphs/deepseek_r1.yaml"), ParallelPlan(16))
    5120
    >>> prefill_key_activation_bytes_per_token(load_model("graphs/llama3_1_70b.yaml"), ParallelPlan(16))
    0
    """
    attention = model.attention
    return -(-attention.heads // max(1, plan.tp // plan.attention_dp)) * attention.prefill_kv_head_width() * ACT_BYTES


def _row_shards(model: ModelSpec, plan: ParallelPlan) -> int:
    """Sockets sharing a KV head within one attention group (``tp / attention_dp`` sockets)."""
    return kv_sharding(model, max(1, plan.tp // plan.attention_dp)).row_shards


def _check_sizing_args(model: ModelSpec, plan: ParallelPlan, batch: int, cache_len: int, phase: str,
                       include_mtp: bool | int = False) -> None:
    """A Python caller's bad argument as an :class:`InputError` naming it, not a wrong number
    (``tp=0`` read as one socket, ``phase="decod"`` as decode, ``include_mtp=-1`` as one layer
    fewer than none) or an ``AttributeError`` or ``TypeError`` deep inside."""
    if not isinstance(model, ModelSpec):
        raise InputError(f"model: expected a ModelSpec, such as load_model('graphs/llama3_1_8b.yaml'), got {shown(model)}")
    if not isinstance(plan, ParallelPlan):
        raise InputError(f"plan: expected a ParallelPlan, such as ParallelPlan(tp=8), got {shown(plan)}")
    if not all(isinstance(n, Integral) and not isinstance(n, bool) for n in (plan.tp, plan.attention_dp)) \
            or plan.tp < 1 or plan.attention_dp < 1 or plan.tp % plan.attention_dp:
        raise InputError(f"plan: attention_dp ({shown(plan.attention_dp)}) must divide tp ({shown(plan.tp)}), "
                         "both integers >= 1")
    if not isinstance(include_mtp, (bool, Integral)) or include_mtp < 0:
        raise InputError(f"include_mtp: expected True, False or a number of drafts >= 0, got {shown(include_mtp)}")
    for name, value in (("batch", batch), ("cache_len", cache_len)):
        if isinstance(value, bool) or not isinstance(value, Integral) or value < 0:
            raise InputError(f"{name}: expected an integer >= 0, got {shown(value)}")
    if phase not in ("prefill", "decode"):
        raise InputError(f"phase: expected 'prefill' or 'decode', got {shown(phase)}")


def kv_bytes_per_socket(model: ModelSpec, plan: ParallelPlan, batch: int, cache_len: int, *,
                        include_mtp: bool | int = False, phase: Phase = "decode") -> int:
    """KV bytes the busiest socket holds for ``batch`` sequences of ``cache_len`` cached tokens.

    The one rule that ``run`` (memory and maximum batch) and ``map`` (memory placement) use.

    Where a sequence's cache lives:

    * decode: ``attention_dp`` groups of ``tp / attention_dp`` sockets each run the attention of
      ``ceil(batch / attention_dp)`` sequences (:func:`kv_share`), split within the group by KV
      heads, each socket holding every row of the KV heads of its query heads
      (``ceil(kv_heads / ways)``, one more where they span two groups: :func:`kv_sharding`); with
      ``attention_dp = tp`` a sequence's cache is whole on one socket;
    * prefill: split in the same way (its graph splits attention as decode's does).

    Sockets that share a KV head (MLA's one latent, GQA with more sockets than KV heads) each hold
    a replica: each runs the attention of its own query heads of that KV head, which reads every
    row (the decode formulas of :mod:`sn40l_sim.models.families`), as tensor-parallel serving
    replicates KV heads when there are fewer than ranks. (MLA under tensor-parallel attention thus
    holds the whole cache on every socket in decode; data-parallel attention is what divides it.)
    The exception is a prefill whose attention reads per-head keys it expanded itself, not the
    cache (``prefill_key_source: activations``, MLA): the cache is only written for the transfer
    to the decode node, the sockets sharing a KV head writing its rows split by tokens
    (:mod:`sn40l_sim.models.families.mla`), so each holds its share of them.

    Rounding: one token's bytes over all layers (:func:`kv_bytes_per_token`, the MTP modules' layers
    with ``include_mtp``: all of them, or those a number of drafts runs) times the socket's share of the KV heads, rounded **up** to whole bytes,
    then multiplied by ``cache_len`` and by the sequences the socket holds. A prefill splitting a
    KV head's rows by tokens writes whole rows, ``ceil(sequences * cache_len / sockets)`` of them
    (the busiest socket's, as its graph does), not ``1 / sockets`` of each; a per-token share of
    one sequence (a token's average bytes on the socket) is :func:`kv_bytes_per_socket_token`.

    Raises
    ------
    InputError
        Naming the argument, for a ``model`` that is not a :class:`~sn40l_sim.models.spec.ModelSpec`,
        a ``plan`` that is not a :class:`~sn40l_sim.ir.ParallelPlan` of integers ``tp >= 1`` divided
        by its ``attention_dp``, a ``batch`` or ``cache_len`` that is not an integer >= 0, an
        ``include_mtp`` that is neither a bool nor an integer >= 0, or a ``phase`` other than
        ``"prefill"`` and ``"decode"``.

    Examples
    --------
    >>> from sn40l_sim.models.loader import load_model
    >>> r1 = load_model("graphs/deepseek_r1.yaml")
    >>> kv_bytes_per_socket(r1, ParallelPlan(16, 16), 64, 32768) == 4 * 32768 * 70272
    True
    >>> kv_bytes_per_socket(r1, ParallelPlan(16), 16, 32768, include_mtp=True) == 16 * 32768 * 71424
    True
    >>> kv_bytes_per_socket(r1, ParallelPlan(16), 1, 131072, phase="prefill") == 131072 * 70272 // 16
    True
    """
    _check_sizing_args(model, plan, batch, cache_len, phase, include_mtp)
    sequences, heads = kv_share(model, plan, batch)
    if phase == "prefill" and prefill_splits_rows(model, plan):
        # whole rows of the socket's KV heads, the prompt's tokens split over the sockets sharing them
        row = -(-kv_bytes_per_token(model, include_mtp) * heads // kv_heads(model))
        return -(-sequences * cache_len // _row_shards(model, plan)) * row
    return sequences * cache_len * _token_share(model, plan, heads, include_mtp, phase)


def state_bytes_per_socket(model: ModelSpec, plan: ParallelPlan, batch: int, state_bytes: int, *,
                           include_mtp: bool | int = False) -> int:
    """Bytes of policy state (``state_bytes`` per KV head and cache layer) the busiest socket holds
    for ``batch`` sequences: whole for each of its KV heads, as the sockets sharing a KV head agree
    on one selection (both phases: prefill's kernels all-reduce or all-gather it).

    >>> from sn40l_sim.models.loader import load_model
    >>> llama = load_model("graphs/llama3_1_70b.yaml")
    >>> state_bytes_per_socket(llama, ParallelPlan(16), 8, 100) == 8 * 1 * 80 * 100   # a KV head per socket
    True
    """
    if not state_bytes:
        return 0
    sequences, heads = kv_share(model, plan, batch)
    return sequences * heads * kv_cache_layers(model, include_mtp) * state_bytes


def prefill_kv_bytes_per_socket(model: ModelSpec, plan: ParallelPlan, batch: int, prompt_len: int, kept_rows: int, *,
                                include_mtp: bool | int = False, state_bytes: int = 0) -> int:
    """KV bytes the busiest prefill socket holds for ``batch`` prompts of ``prompt_len`` tokens whose
    policy keeps ``kept_rows`` of each (``cache_len(prompt_len, 0)``): the prompt's cache, and beside
    it, where the policy keeps fewer rows, the compressed cache its prefill kernels gather them into
    (SnapStream's ``[sink | ring | top-K]``: :mod:`~sn40l_sim.kvcache.prefill_kernels`), which waits
    there for the transfer to the decode node (docs/architecture.md, disaggregated serving). Both
    counted by :func:`kv_bytes_per_socket`'s rule; a policy keeping every row writes them in place.
    The policy's state its prefill builds for decode, ``state_bytes`` per KV head and cache layer
    (:meth:`~sn40l_sim.kvcache.base.KVPolicy.prefill_state_bytes`: H2O's scores, ArkVale's digests),
    waits there with it and goes in the same transfer (:func:`state_bytes_per_socket`).

    >>> from sn40l_sim.models.loader import load_model
    >>> r1 = load_model("graphs/deepseek_r1.yaml")
    >>> prefill_kv_bytes_per_socket(r1, ParallelPlan(16), 1, 131072, 32767) == (8192 + 2048) * 70272
    True
    >>> prefill_kv_bytes_per_socket(r1, ParallelPlan(16), 1, 131072, 131072) == 8192 * 70272
    True
    """
    kv = kv_bytes_per_socket(model, plan, batch, prompt_len, include_mtp=include_mtp, phase="prefill")
    if kept_rows < prompt_len:
        kv += kv_bytes_per_socket(model, plan, batch, kept_rows, include_mtp=include_mtp, phase="prefill")
    return kv + state_bytes_per_socket(model, plan, batch, state_bytes, include_mtp=include_mtp)


def kv_bytes_per_socket_token(model: ModelSpec, plan: ParallelPlan, *, include_mtp: bool | int = False,
                              phase: Phase = "decode") -> int:
    """Bytes one cached token of a sequence takes on the busiest socket, on average, rounded up:
    its share of the KV heads, and where a prefill splits a shared head's rows by tokens, that
    share of each row (a prompt's rows come whole, :func:`kv_bytes_per_socket`). What a prompt's
    cache takes per token, for the fraction a socket sends (the tokens free memory holds, in whole
    rows: :func:`kv_tokens_fitting`).

    >>> from sn40l_sim.models.loader import load_model
    >>> r1 = load_model("graphs/deepseek_r1.yaml")
    >>> kv_bytes_per_socket_token(r1, ParallelPlan(16), phase="prefill") * 16 == kv_bytes_per_token(r1)
    True
    """
    _check_sizing_args(model, plan, 1, 1, phase, include_mtp)
    return _token_share(model, plan, kv_share(model, plan, 1)[1], include_mtp, phase)


def kv_tokens_fitting(model: ModelSpec, plan: ParallelPlan, n_bytes: int, *, include_mtp: bool | int = False,
                      phase: Phase = "decode") -> int:
    """The most cached tokens of one sequence whose cache the busiest socket holds in ``n_bytes``, as
    :func:`kv_bytes_per_socket` counts them: where a prefill splits a shared head's rows by tokens,
    the tokens of the whole rows that fit (``ceil(tokens / sockets)`` rows a prompt), not ``n_bytes``
    over a token's average share, which counted up to ``sockets - 1`` tokens whose rows do not fit.

    >>> from sn40l_sim.models.loader import load_model
    >>> r1 = load_model("graphs/deepseek_r1.yaml")
    >>> kv_tokens_fitting(r1, ParallelPlan(16), 10 * 70272 - 1, phase="prefill")    # 9 rows of 16 tokens
    144
    >>> kv_tokens_fitting(r1, ParallelPlan(16), 10 * 70272 - 1)      # decode: every socket holds every row
    9
    """
    _check_sizing_args(model, plan, 1, 1, phase, include_mtp)
    if n_bytes <= 0:
        return 0
    heads = kv_share(model, plan, 1)[1]
    if phase == "prefill" and prefill_splits_rows(model, plan):
        row = -(-kv_bytes_per_token(model, include_mtp) * heads // kv_heads(model))
        return n_bytes // row * _row_shards(model, plan)
    return n_bytes // _token_share(model, plan, heads, include_mtp, phase)


def _token_share(model: ModelSpec, plan: ParallelPlan, heads: int, include_mtp: bool | int, phase: str) -> int:
    """A token's bytes on the socket holding ``heads`` KV heads: its share of the KV heads, and of a
    shared head's rows where the prefill sockets sharing it only write them, rounded up."""
    shards = kv_heads(model)
    if phase == "prefill" and prefill_splits_rows(model, plan):
        shards *= _row_shards(model, plan)
    return -(-kv_bytes_per_token(model, include_mtp) * heads // shards)
