"""The kv_policies field kv_layer_fraction counts the MTP layers a speculative decode caches on both
sides, so that a record's KV bytes per token are BF16's times its bit fraction times its layer
fraction with drafts on as with them off (DeepSeek-R1 with CLA: 32 of 62 layers, not 31 of 61)."""
from __future__ import annotations

import pytest

from sn40l_sim.models.kv_format import KVQuantSpec
from sn40l_sim.models.params import kv_bytes_per_token
from sn40l_sim.models.spec import ModelSpec
from sn40l_sim.report.records import kv_layer_fraction


def model(**kv: object) -> ModelSpec:
    base = ModelSpec.model_validate(dict(kind="model", name="m", layers=61, hidden=256, dense_ffn=512, vocab=1000,
                                         weight_dtype="bf16", mtp=dict(modules=1),
                                         attention=dict(kind="gqa", heads=8, kv_heads=2, head_dim=64)))
    return base.model_copy(update=kv)


@pytest.mark.parametrize("drafts", [False, 1, 2, True])
@pytest.mark.parametrize("fmt", [{}, {"kv_shared_layers": 2},
                                 {"kv_shared_layers": 3, "kv_dtype": "int4", "kv_quant": KVQuantSpec(group=32)}])
def test_bytes_per_token_are_bf16_times_bit_and_layer_fractions(fmt, drafts):
    m, full = model(**fmt), model()
    bits = {"bf16": 16, "int4": 5}[m.kv_dtype]
    expected = kv_bytes_per_token(full, include_mtp=drafts) * bits / 16 * kv_layer_fraction(m, drafts)
    assert kv_bytes_per_token(m, include_mtp=drafts) == pytest.approx(expected, rel=1e-9)


def test_cla_pairs_with_one_mtp_layer():
    cla = model(kv_shared_layers=2)
    assert kv_layer_fraction(cla, False) == 31 / 61
    assert kv_layer_fraction(cla, 1) == 32 / 62 == kv_layer_fraction(cla, 2)
    assert kv_layer_fraction(model(), 1) == 1.0
