"""How a model's KV cache is stored: the element datatype, group-wise scales, mixed precision for
salient tokens, and layers sharing one cache.

These are model options (``graphs/<model>.yaml``, or an experiment's ``model_overrides``, also per
KV-policy entry), so they compose with any KV policy: a policy decides *which* tokens a cache holds,
the format decides *how many bytes* each holds and what reading and writing them costs.

``kv_dtype``
    ``bf16`` (the SnapStream deployment), ``fp8`` (one scale per tensor unless ``kv_quant`` gives
    groups), ``int8`` or ``int4`` (need ``kv_quant``).
``kv_quant``
    Group-wise scales (:class:`KVQuantSpec`): one scale (and, asymmetric, one zero point) per
    ``group`` elements. KIVI (Liu et al. 2024) quantises keys *per channel* (a group runs along
    ``group`` tokens of one channel, because key outliers sit in a few channels) and values *per
    token* (a group runs along ``group`` channels of one token's row); either way a cached element
    carries ``scale bits x (1 + zero point) / group`` bits of scales. ``salient`` keeps a fraction of
    the tokens at a wider datatype, as ZipCache (He et al. 2024) keeps its salient tokens.
``kv_shared_layers``
    Cross-layer attention (CLA, Brandon et al. 2024): groups of this many adjacent layers share one
    KV cache, so the cache holds ``ceil(layers / kv_shared_layers)`` layers' worth; every layer still
    attends over it, so attention reads and FLOPs do not change. Simplification, not modelled: only
    the first layer of a group needs K and V projections and writes the cache, but the graph gives
    every layer both (their weights, about 2% of Llama-3.1-8B's at two layers a group, and the
    cache writes, twice what the cache holds then, are counted). A KV policy's own kernels (prefill
    selection, decode eviction or recall) run once per group, after its first layer
    (:func:`sn40l_sim.models.builder.writes_cache`): the group's one cache is compressed, evicted
    from or recalled into once.

What the simulator charges (the formulas in :mod:`sn40l_sim.models.context`):

* capacity and traffic: ``kv_element_bits`` per cached element, scales included
  (:func:`kv_stored_bytes`, rounded up once per count of elements);
* reading a quantised cache: one multiply-add per element read to widen it to BF16 (the SN40L PCU
  computes in BF16: docs/reference.md §1), an elementwise operator ``<gemm>.kv_dequant`` in the
  attention kernel, as FP8 weights get ``<gemm>.dequant``;
* writing one: one SIMD pass per element written (``<op>.kv_quantise``: scale, round, pack).

Not charged: KIVI's residual of fewer than ``group`` tokens kept in full precision while a
per-channel key group fills (at most ``group`` tokens per sequence and layer), and ZipCache's
per-token precision flag (one bit per token); both are below 0.5% of a 32K-token cache.

Examples
--------
>>> from sn40l_sim.models.spec import ModelSpec
>>> llama = ModelSpec.model_validate(dict(kind="model", name="l", layers=80, hidden=8192, dense_ffn=28672,
...     vocab=128256, weight_dtype="bf16", attention=dict(kind="gqa", heads=64, kv_heads=8, head_dim=128)))
>>> kv_element_bits(llama), kv_cache_layers(llama)
(Fraction(16, 1), 80)
>>> kivi = llama.model_copy(update={"kv_dtype": "int4", "kv_quant": KVQuantSpec(group=32)})
>>> kv_element_bits(kivi)            # 4 bits + (16-bit scale + 16-bit zero point) / 32
Fraction(5, 1)
>>> kv_stored_bytes(kivi, 1000)
625
>>> cla = llama.model_copy(update={"kv_shared_layers": 2})
>>> kv_cache_layers(cla), kv_cache_layers(cla, include_mtp=True)
(40, 40)
"""
from __future__ import annotations

import math
from collections.abc import Iterator
from fractions import Fraction
from typing import TYPE_CHECKING, Literal

from sn40l_sim.ir import DTYPE_BITS, DTYPE_BYTES
from sn40l_sim.schema import Flag, PositiveInt, Range, StrictModel, ranged

if TYPE_CHECKING:
    from sn40l_sim.models.spec import ModelSpec

#: datatypes a KV cache may be stored in
KVDType = Literal["bf16", "fp8", "int8", "int4"]
#: integer formats, which cannot be stored without scales
INTEGER_KV = ("int8", "int4")
#: the share of a sequence's tokens kept wider (all of them would be no mixed precision at all)
SalientFraction = ranged(Range("salient token fraction", 0, 1, "0", "1", low_open=True, high_open=True))


class SalientSpec(StrictModel):
    """Mixed precision (ZipCache): ``fraction`` of a sequence's tokens, the salient ones, are kept
    at ``dtype`` (with the group scales when ``dtype`` is an integer format), the rest at the
    model's ``kv_dtype``."""

    fraction: SalientFraction
    dtype: Literal["bf16", "fp8", "int8"]


class KVQuantSpec(StrictModel):
    """Group-wise scales of a quantised KV cache (see the module docstring)."""

    #: elements sharing one scale (and zero point)
    group: PositiveInt
    #: how keys are grouped: ``per_channel`` (KIVI: along tokens of one channel) or ``per_token``
    key_scales: Literal["per_channel", "per_token"] = "per_channel"
    #: how values (and caches that serve as both, such as MLA's latent) are grouped
    value_scales: Literal["per_token", "per_channel"] = "per_token"
    scale_dtype: Literal["fp16", "bf16", "fp32"] = "fp16"
    #: asymmetric quantisation: a zero point (of the scale's datatype) beside each scale
    zero_point: Flag = True
    salient: SalientSpec | None = None


def _scale_bits(model: ModelSpec, dtype: str) -> Fraction:
    """Bits of scales per element stored at ``dtype``."""
    quant = model.kv_quant
    if quant is None or dtype == "bf16":
        return Fraction(0)
    per_group = DTYPE_BITS[quant.scale_dtype] * (2 if quant.zero_point else 1)
    return Fraction(per_group, quant.group)


def kv_element_bits(model: ModelSpec) -> Fraction:
    """Bits one cached element takes on average, scales and mixed precision included."""
    low = DTYPE_BITS[model.kv_dtype] + _scale_bits(model, model.kv_dtype)
    salient = model.kv_quant.salient if model.kv_quant is not None else None
    if salient is None:
        return Fraction(low)
    high = DTYPE_BITS[salient.dtype] + _scale_bits(model, salient.dtype)
    share = Fraction(salient.fraction).limit_denominator(10**6)
    return share * high + (1 - share) * low


def kv_bit_fraction(model: ModelSpec) -> float:
    """:func:`kv_element_bits` over BF16's 16 bits (1 for a BF16 cache)."""
    return float(kv_element_bits(model) / DTYPE_BITS["bf16"])


def kv_stored_bytes(model: ModelSpec, elements: int) -> int:
    """Bytes of ``elements`` cached elements as stored (scales included), rounded up."""
    return stored_bytes(elements, kv_element_bits(model))


def stored_bytes(elements: int, element_bits: Fraction) -> int:
    """Bytes of ``elements`` elements of ``element_bits`` bits each (:func:`kv_element_bits`),
    rounded up.

    >>> stored_bytes(1000, Fraction(9, 2)), stored_bytes(3, Fraction(5))
    (563, 2)
    """
    if type(elements) is int:
        # the same exact ceiling in integers (the graph builder asks for every cache read and write)
        return -(-elements * element_bits.numerator // (element_bits.denominator * 8))
    return math.ceil(elements * element_bits / 8)


def kv_quantised(model: ModelSpec) -> bool:
    """Whether the cache is stored narrower than BF16 (reads widen it, writes narrow it)."""
    return model.kv_dtype != "bf16"


def kv_op_dtype(model: ModelSpec) -> str:
    """The datatype a SIMD operator converting the cache works on (a packed ``int4`` cache is
    unpacked in bytes)."""
    return model.kv_dtype if model.kv_dtype in DTYPE_BYTES else "int8"


def kv_cache_layers(model: ModelSpec, include_mtp: bool | int = False) -> int:
    """Layers' worth of cache one token takes: ``ceil(layers / kv_shared_layers)``, plus the MTP
    modules' own layers (an MTP block shares with no other layer): every module's with
    ``include_mtp=True``; given a number of drafts, the modules those drafts run, draft ``d``
    running module ``d mod modules`` (:mod:`sn40l_sim.models.builder`), so ``min(drafts, modules)``:
    a module no draft runs keeps no cache.

    >>> from sn40l_sim.models.spec import ModelSpec
    >>> m = ModelSpec.model_validate(dict(kind="model", name="m", layers=4, hidden=64, dense_ffn=128,
    ...     vocab=100, weight_dtype="bf16", mtp=dict(modules=3),
    ...     attention=dict(kind="gqa", heads=4, kv_heads=2, head_dim=16)))
    >>> [kv_cache_layers(m, n) for n in (False, 1, 2, 5, True)]
    [4, 5, 6, 7, 7]
    """
    layers = math.ceil(model.layers / model.kv_shared_layers)
    if model.mtp is None or not include_mtp:
        return layers
    return layers + (model.mtp.modules if include_mtp is True else min(int(include_mtp), model.mtp.modules))


def kv_problems(model: ModelSpec) -> Iterator[tuple[tuple[str, ...], str]]:
    """``(field path, message)`` for each inconsistency of the KV format (the loader raises the
    first one, located in the model file)."""
    quant, dtype = model.kv_quant, model.kv_dtype
    if dtype in INTEGER_KV and quant is None:
        yield ("kv_quant",), (f"kv_dtype {dtype} stores integers, which need scales: add kv_quant: "
                              "{group: N} (e.g. 32, as KIVI)")
    if quant is None:
        pass
    elif dtype == "bf16":
        yield ("kv_quant",), "kv_dtype bf16 is not quantised: remove kv_quant or choose fp8, int8 or int4"
    else:
        for tensor in model.attention.cached_tensors():
            per_token = (quant.value_scales if tensor.valued or not tensor.scored else quant.key_scales) == "per_token"
            if per_token and tensor.width % quant.group:
                yield ("kv_quant", "group"), (
                    f"group {quant.group} must divide the head width {tensor.width} of the cached "
                    f"{tensor.name!r} (per-token scales group the channels of one head's row)")
                break
        if quant.salient is not None and DTYPE_BITS[quant.salient.dtype] <= DTYPE_BITS[dtype]:
            yield ("kv_quant", "salient", "dtype"), (
                f"salient tokens must be kept wider than kv_dtype {dtype}, got {quant.salient.dtype}")
    if model.kv_shared_layers > model.layers:
        yield ("kv_shared_layers",), (f"kv_shared_layers ({model.kv_shared_layers}) must be <= layers "
                                      f"({model.layers})")
