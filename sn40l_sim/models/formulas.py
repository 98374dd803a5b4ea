"""The registry of operator formulas and collective-size formulas that templates name.

Each family module exports ``OPERATORS`` (name -> ``f(ctx) -> list[Step]``) and ``SIZES``
(name -> ``f(ctx) -> bytes``); a template may use any of them, and the template loader rejects a
name that is in neither.

>>> {'hidden', 'expert_intermediate', 'latent'} <= set(SIZES)
True
"""
from __future__ import annotations

from sn40l_sim.models import common, ffn, gqa, mla, moe

OPERATORS = {}
SIZES = {}
for _family in (common, mla, gqa, moe, ffn):
    assert not set(_family.OPERATORS) & set(OPERATORS), "operator formula names must be unique"
    OPERATORS.update(_family.OPERATORS)
    SIZES.update(_family.SIZES)
