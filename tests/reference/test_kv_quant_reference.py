"""The quantised-KV numpy reference (sn40l_sim/reference/kv_quant.py): the error bound of group-wise
integer quantisation, exactness when the values are representable (then attention over the
quantised cache equals full attention exactly), FP8 E4M3 rounding, ZipCache's mixed precision, and
the bits stored per element against the simulator's rule (models/kv_format.py)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sn40l_sim.models.kv_format import KVQuantSpec, kv_element_bits
from sn40l_sim.models.spec import ModelSpec
from sn40l_sim.reference.kv_quant import (
    attend,
    fp8_e4m3,
    kivi,
    mixed_precision,
    quantise_fp8,
    quantise_int,
    stored_bits,
)


@settings(max_examples=80, deadline=None)
@given(bits=st.sampled_from([2, 4, 8]), group=st.sampled_from([1, 2, 4, 8]), rows=st.integers(1, 6),
       groups=st.integers(1, 4), axis=st.sampled_from([0, 1]), seed=st.integers(0, 2**31 - 1))
def test_integer_error_is_at_most_half_a_step_of_its_group(bits, group, rows, groups, axis, seed):
    rng = np.random.default_rng(seed)
    shape = (groups * group, rows) if axis == 0 else (rows, groups * group)
    x = rng.normal(size=shape) * rng.uniform(0.1, 10)
    out = quantise_int(x, bits=bits, group=group, axis=axis)
    g = np.moveaxis(x, axis, -1).reshape(*np.moveaxis(x, axis, -1).shape[:-1], groups, group)
    step = (g.max(axis=-1) - g.min(axis=-1)) / (2**bits - 1)
    err = np.abs(np.moveaxis(out - x, axis, -1).reshape(g.shape))
    assert np.all(err <= step[..., None] / 2 + 1e-12)


def test_more_bits_give_a_smaller_attention_error():
    rng = np.random.default_rng(0)
    keys, values, query = rng.normal(size=(64, 16)), rng.normal(size=(64, 16)), rng.normal(size=16)
    exact = attend(query, keys, values)
    errors = [np.abs(attend(query, *kivi(keys, values, bits=b, group=16)) - exact).max() for b in (2, 4, 8)]
    assert errors[0] > errors[1] > errors[2] > 0


@settings(max_examples=40, deadline=None)
@given(bits=st.sampled_from([2, 4, 8]), seed=st.integers(0, 2**31 - 1))
def test_representable_values_round_trip_and_attention_is_exact(bits, seed):
    rng = np.random.default_rng(seed)
    levels = 2**bits - 1
    # per-channel key groups of 8 tokens, per-token value groups of 8 channels, each spanning its
    # group's whole grid: min and max present, every value on the grid
    def on_grid(shape, axis):
        codes = rng.integers(0, levels + 1, size=shape)
        codes = np.moveaxis(codes, axis, -1)
        codes[..., 0::8], codes[..., 1::8] = 0, levels
        return np.moveaxis(codes, -1, axis) * 0.5 - 1.0
    keys, values, query = on_grid((16, 8), 0), on_grid((16, 8), 1), rng.normal(size=8)
    qk, qv = kivi(keys, values, bits=bits, group=8)
    np.testing.assert_array_equal(qk, keys)
    np.testing.assert_array_equal(qv, values)
    np.testing.assert_array_equal(attend(query, qk, qv), attend(query, keys, values))


def test_fp8_e4m3_grid():
    assert fp8_e4m3(np.array([1.0, 1.0625, 1.125, 448.0, 1e6, -3.0, 2.0**-9])).tolist() == \
        [1.0, 1.0, 1.125, 448.0, 448.0, -3.0, 2.0**-9]     # ties to even; saturates; subnormal 2^-9
    x = np.random.default_rng(0).uniform(2.0**-6, 448, size=1000)
    assert np.all(np.abs(fp8_e4m3(x) - x) <= x * 2.0**-4)          # half a step of a 3-bit mantissa
    t = np.random.default_rng(1).normal(size=100)
    assert np.abs(quantise_fp8(t) - t).max() <= np.abs(t).max() * 2.0**-4


def test_mixed_precision_keeps_the_salient_tokens_closer():
    rng = np.random.default_rng(2)
    values, saliency = rng.normal(size=(40, 16)), rng.uniform(size=40)
    out, salient = mixed_precision(values, saliency, fraction=0.25, low_bits=2, high_bits=8, group=16)
    assert salient.sum() == 10 and set(np.flatnonzero(salient)) == set(np.argsort(-saliency)[:10])
    err = np.abs(out - values).max(axis=1)
    assert err[salient].max() < err[~salient].min()


R1 = dict(kind="model", name="r1", layers=4, hidden=64, dense_ffn=128, vocab=100, weight_dtype="bf16",
          attention=dict(kind="mla", heads=4, q_lora_rank=32, kv_lora_rank=512, qk_nope_head_dim=16,
                         qk_rope_head_dim=64, v_head_dim=16))


@pytest.mark.parametrize("dtype, quant, bits", [
    ("bf16", None, 16), ("fp8", None, 8), ("int8", dict(group=32), 8), ("int4", dict(group=32), 4),
    ("int4", dict(group=64, zero_point=False), 4), ("int4", dict(group=32, scale_dtype="fp32"), 4),
    ("fp8", dict(group=128), 8),
    ("int4", dict(group=32, salient=dict(fraction=0.1, dtype="int8")), 4),
    ("int4", dict(group=32, salient=dict(fraction=0.2, dtype="bf16")), 4),
])
def test_simulator_bits_per_element_are_what_the_reference_stores(dtype, quant, bits):
    spec = KVQuantSpec(**quant) if quant else None
    model = ModelSpec.model_validate(R1).model_copy(update={"kv_dtype": dtype, "kv_quant": spec})
    scale_bits = {"fp16": 16, "bf16": 16, "fp32": 32}[spec.scale_dtype] if spec else 16
    salient = spec.salient if spec else None
    salient_bits = {"int8": 8, "fp8": 8, "bf16": 16}[salient.dtype] if salient else None
    want = stored_bits(bits=bits, group=spec.group if spec else None, scale_bits=scale_bits,
                       zero_point=spec.zero_point if spec else True,
                       salient_fraction=salient.fraction if salient else 0.0, salient_bits=salient_bits)
    assert float(kv_element_bits(model)) == pytest.approx(want, rel=1e-12)
