"""Validated, immutable model specs (the schema of ``graphs/<model>.yaml``).

Field names are a contract read by the graph builder and the KV policies: add, never rename. The
``attention`` section's fields are those of its family (:mod:`sn40l_sim.models.families`).
Parameter counts and KV bytes per token are computed from these fields (``models/params.py``),
never stored. A model the loader returns also carries its loaded kernel template
(:func:`sn40l_sim.models.template.template_for` hands it out), so that a model pickled to another
process (a sweep's worker) needs no template file; the template is not part of the spec's identity.
"""
from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import PrivateAttr, SerializeAsAny, WrapValidator

from sn40l_sim.models.families import AttentionSpec, validate_attention
from sn40l_sim.models.kv_format import KVDType, KVQuantSpec
from sn40l_sim.schema import Flag, Name, NonNegativeInt, PositiveInt, StrictModel

WeightDType = Literal["fp8", "bf16"]


class MoESpec(StrictModel):
    """Mixture of experts in every layer after the first ``dense_layers``."""

    routed_experts: PositiveInt
    shared_experts: NonNegativeInt
    experts_per_token: PositiveInt
    expert_ffn: PositiveInt
    groups: PositiveInt = 1
    topk_groups: PositiveInt = 1
    scoring: Literal["softmax", "sigmoid"] = "softmax"


class MTPSpec(StrictModel):
    """Multi-token-prediction modules (each one extra transformer block + a projection)."""

    modules: PositiveInt


class ModelSpec(StrictModel):
    """A decoder-only transformer."""

    kind: Literal["model"]
    name: Name
    layers: PositiveInt
    dense_layers: NonNegativeInt = 0
    hidden: PositiveInt
    #: SwiGLU width of the dense FFN layers: required when the model has one (a dense MTP block
    #: included), refused when every layer is MoE (Mixtral), where it would be ignored
    dense_ffn: PositiveInt | None = None
    vocab: PositiveInt
    #: the spec of the registered attention family that ``kind`` names (``models/families/``):
    #: a bad kind gets one error at ``attention.kind`` listing the known ones
    attention: Annotated[SerializeAsAny[AttentionSpec], WrapValidator(validate_attention)]
    moe: MoESpec | None = None
    mtp: MTPSpec | None = None
    weight_dtype: WeightDType
    #: tensors kept in BF16 even when ``weight_dtype`` is FP8 (embedding, LM head, norms, router)
    bf16_tensors: tuple[Literal["embedding", "lm_head", "router", "norms"], ...] = ()
    #: how the KV cache is stored (:mod:`sn40l_sim.models.kv_format`): element datatype, group-wise
    #: scales (required for int8 / int4), and groups of adjacent layers sharing one cache (CLA)
    kv_dtype: KVDType = "bf16"
    kv_quant: KVQuantSpec | None = None
    kv_shared_layers: PositiveInt = 1
    tie_embeddings: Flag = False
    #: tokens of context (positions) the model serves at most, from its configuration
    #: (``max_position_embeddings``); a prompt longer than this is refused. A long-context variant
    #: raises it (an experiment's ``model_overrides: {max_context: 1048576}``). None: not stated,
    #: no limit
    max_context: PositiveInt | None = None
    #: side of the square blocks that share one FP32 scale in FP8 weights (128 x 128 in DeepSeek-V3)
    fp8_block: PositiveInt = 128
    #: fused-kernel template file (resolved by the loader from the path written relative to the model
    #: file: relative to the working folder when the model file was named by a relative path, so
    #: records digest the template's contents instead, :func:`~sn40l_sim.report.digests.model_digest`);
    #: ``None`` means the default template of the attention kind
    kernels: str | None = None
    #: the loaded, checked kernel template (set by the loader; None for a model built in code)
    _kernel_templates: Any = PrivateAttr(default=None)

    def __eq__(self, other: object) -> bool:
        # the fields, not the attached template: the same file loaded or validated in code is one model
        return type(other) is type(self) and self.__dict__ == other.__dict__
