"""A functional numpy reference of quantised KV caches: group-wise integer quantisation (KIVI's
per-channel keys and per-token values), FP8 E4M3 with one scale per tensor, mixed precision for
salient tokens (ZipCache), and the bits they store.

The simulator sizes a cache with :func:`sn40l_sim.models.kv_format.kv_element_bits`; the tests
check it against :func:`stored_bits`, which counts what these functions actually keep.

Integer quantisation is asymmetric: per group ``scale = (max - min) / (2**bits - 1)``, codes
``round((x - min) / scale)`` in ``[0, 2**bits - 1]``, and ``x' = code * scale + min``; so
``|x - x'| <= scale / 2`` (scales kept exact; :func:`quantise_int` can round them to a storage
datatype as well). A group whose values are all equal stores them exactly.

Examples
--------
>>> x = np.array([[0.0, 1.0, 2.0, 3.0], [1.0, 1.0, 1.0, 1.0]])
>>> quantise_int(x, bits=2, group=4, axis=1).tolist()        # 4 levels: exact
[[0.0, 1.0, 2.0, 3.0], [1.0, 1.0, 1.0, 1.0]]
>>> float(fp8_e4m3(np.array([0.1]))[0])                      # 3 mantissa bits
0.1015625
>>> stored_bits(bits=4, group=32, scale_bits=16, zero_point=True)
5.0
"""
from __future__ import annotations

import numpy as np

#: the largest finite E4M3 value
E4M3_MAX = 448.0


def _grouped(x: np.ndarray, group: int, axis: int) -> np.ndarray:
    """``x`` with ``axis`` split into ``[n / group, group]`` (the group axis last)."""
    x = np.moveaxis(x, axis, -1)
    if x.shape[-1] % group:
        raise ValueError(f"group {group} does not divide the axis of length {x.shape[-1]}")
    return x.reshape(*x.shape[:-1], x.shape[-1] // group, group)


def quantise_int(x: np.ndarray, *, bits: int, group: int, axis: int, scale_dtype: type | None = None) -> np.ndarray:
    """``x`` quantised to ``bits``-bit integers in groups of ``group`` along ``axis`` and back.

    ``scale_dtype`` (e.g. ``np.float16``) rounds each scale and minimum as stored; ``None`` keeps
    them exact.
    """
    g = _grouped(np.asarray(x, dtype=np.float64), group, axis)
    lo, hi = g.min(axis=-1, keepdims=True), g.max(axis=-1, keepdims=True)
    scale = (hi - lo) / (2**bits - 1)
    if scale_dtype is not None:
        scale, lo = scale.astype(scale_dtype).astype(np.float64), lo.astype(scale_dtype).astype(np.float64)
    safe = np.where(scale > 0, scale, 1.0)
    codes = np.clip(np.round((g - lo) / safe), 0, 2**bits - 1)
    out = np.where(scale > 0, codes * scale + lo, lo)
    out = out.reshape(*out.shape[:-2], -1)
    return np.moveaxis(out, -1, axis)


def fp8_e4m3(x: np.ndarray) -> np.ndarray:
    """``x`` rounded to the nearest FP8 E4M3 value (3 mantissa bits, exponent bias 7, subnormals
    below ``2**-6``, saturating at 448), ties to even."""
    x = np.asarray(x, dtype=np.float64)
    mag = np.minimum(np.abs(x), E4M3_MAX)
    exponent = np.floor(np.log2(np.where(mag > 0, mag, 1.0)))
    exponent = np.maximum(exponent, -6)        # subnormals share the smallest exponent's spacing
    step = 2.0 ** (exponent - 3)
    return np.sign(x) * np.minimum(np.round(mag / step) * step, E4M3_MAX)


def quantise_fp8(x: np.ndarray) -> np.ndarray:
    """``x`` stored as E4M3 with one scale for the tensor (its largest magnitude maps to 448)."""
    amax = float(np.abs(x).max())
    scale = amax / E4M3_MAX if amax > 0 else 1.0
    return fp8_e4m3(np.asarray(x) / scale) * scale


def kivi(keys: np.ndarray, values: np.ndarray, *, bits: int, group: int) -> tuple[np.ndarray, np.ndarray]:
    """KIVI: keys ``[T, d]`` quantised per channel (groups of ``group`` tokens), values ``[T, d]``
    per token (groups of ``group`` channels)."""
    return (quantise_int(keys, bits=bits, group=group, axis=0),
            quantise_int(values, bits=bits, group=group, axis=1))


def mixed_precision(values: np.ndarray, saliency: np.ndarray, *, fraction: float, low_bits: int,
                    high_bits: int, group: int) -> tuple[np.ndarray, np.ndarray]:
    """ZipCache-style: the ``round(fraction * T)`` most salient tokens of ``values [T, d]`` at
    ``high_bits``, the rest at ``low_bits``, both per token in groups of ``group`` channels.
    Returns (the dequantised values, the salient mask)."""
    count = int(round(fraction * values.shape[0]))
    salient = np.zeros(values.shape[0], dtype=bool)
    salient[np.argsort(-saliency, kind="stable")[:count]] = True
    out = quantise_int(values, bits=low_bits, group=group, axis=1)
    if count:
        out[salient] = quantise_int(values[salient], bits=high_bits, group=group, axis=1)
    return out, salient


def stored_bits(*, bits: int, group: int | None, scale_bits: int = 16, zero_point: bool = True,
                salient_fraction: float = 0.0, salient_bits: int | None = None) -> float:
    """Bits per element a cache stores: the codes, one scale (and zero point) per ``group``
    elements, and the salient tokens' wider codes (integer salient tokens carry scales too; a
    BF16 one does not)."""
    def per_element(b: int) -> float:
        if group is None or b >= 16:
            return float(b)
        return b + scale_bits * (2 if zero_point else 1) / group

    low = per_element(bits)
    if not salient_fraction:
        return low
    return salient_fraction * per_element(salient_bits) + (1 - salient_fraction) * low


def attend(query: np.ndarray, keys: np.ndarray, values: np.ndarray, scale: float | None = None) -> np.ndarray:
    """Softmax attention of one query ``[d]`` over ``keys [T, d]`` and ``values [T, dv]``."""
    scale = 1.0 / np.sqrt(query.shape[0]) if scale is None else scale
    logits = keys @ query * scale
    w = np.exp(logits - logits.max())
    return w @ values / w.sum()
