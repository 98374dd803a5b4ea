"""The operator formulas and collective-size formulas a kernel template may name.

The shared modules (``common``, ``moe``, ``ffn``) each export ``OPERATORS`` (name ->
``f(ctx) -> list[Step]``) and ``SIZES`` (name -> ``f(ctx) -> bytes``); an attention family adds
its own (:attr:`~sn40l_sim.models.families.AttentionSpec.operators`). A template of attention
kind ``k`` may use the shared formulas and those of family ``k``; the template loader rejects any
other name.

>>> {'hidden', 'expert_intermediate', 'latent'} <= set(sizes("mla"))
True
>>> 'gqa_qk' in operators("gqa"), 'gqa_qk' in operators("mla")
(True, False)
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sn40l_sim.models import common, ffn, moe
from sn40l_sim.models.families import FAMILIES
from sn40l_sim.models.families.base import OperatorFormula, SizeFormula

#: modules whose formulas every template may use
SHARED = (common, moe, ffn)


def operators(kind: str) -> dict[str, OperatorFormula]:
    """Operator formulas a template for attention ``kind`` may name."""
    return _merged(kind, "OPERATORS", FAMILIES[kind].operators)


def sizes(kind: str) -> dict[str, SizeFormula]:
    """Collective-size formulas a template for attention ``kind`` may name."""
    return _merged(kind, "SIZES", FAMILIES[kind].sizes)


def formula_weights(kind: str) -> dict[str, tuple[str, str]]:
    """Operator or collective-size formula -> (the weight tensor it needs that only some models
    have, the model part that holds it), for the formulas a template for attention ``kind`` may name.

    >>> formula_weights("gqa")["router_gemm"], formula_weights("mla")["expert_intermediate"]
    (('router', 'a moe section'), ('expert_gate_up', 'a moe section'))
    """
    return _merged(kind, "FORMULA_WEIGHTS", FAMILIES[kind].formula_weights)


def _merged(kind: str, table: str, family: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for source, formulas in [*((m.__name__, getattr(m, table)) for m in SHARED),
                             (f"attention family {kind!r}", family)]:
        clash = sorted(set(formulas) & set(out))
        if clash:
            raise ValueError(f"formula name(s) {', '.join(clash)} of {source} are already defined "
                             "by a shared module; formula names must be unique")
        out.update(formulas)
    return out
