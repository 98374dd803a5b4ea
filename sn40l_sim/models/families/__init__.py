"""Attention families as plug-ins: ``mla`` (DeepSeek) and ``gqa`` (Llama).

Each family is one module holding its attention spec, its operator and collective-size formulas
and the answers the rest of the simulator asks of attention (see :mod:`.base`). Importing this
package registers the built-in families; a new one is a module here plus one import line below.
"""
from sn40l_sim.models.families.base import (
    FAMILIES,
    AttentionSpec,
    CachedTensor,
    head_groups,
    known_kinds,
    register_family,
    validate_attention,
)
from sn40l_sim.models.families.gqa import GQAAttentionSpec
from sn40l_sim.models.families.mla import MLAAttentionSpec

__all__ = ["FAMILIES", "AttentionSpec", "CachedTensor", "GQAAttentionSpec", "MLAAttentionSpec",
           "head_groups", "known_kinds", "register_family", "validate_attention"]
