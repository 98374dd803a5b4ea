"""The weight tensors of a model, how tensor parallelism splits them, and what a shard weighs.

One inventory serves both the parameter/byte counts (:mod:`sn40l_sim.models.params`) and the
graph builder (every GEMM takes its per-socket shape and weight bytes from here), so the bytes a
graph reads and the bytes the memory placement stores cannot drift apart.

A linear weight is described as the GEMM ``[tokens, rows] @ [rows, cols]``: ``rows`` are the input
features (the GEMM's K), ``cols`` the output features (its N). Tensor parallelism splits a tensor by
one of three rules, written in the kernel template's ``sharding:`` table:

``column``
    output features split: each socket holds ``ceil(cols / granule / tp) * granule`` columns
    (``granule`` keeps attention heads whole; when there are fewer heads than sockets, a head is
    replicated on several sockets), or as many granules as ``socket_granules`` says where the
    family places heads otherwise (GQA's K and V projections follow the query heads' groups).
``row``
    input features split the same way (the partial products are summed by an all-reduce).
``replicated``
    every socket holds the whole tensor.

FP8 tensors carry one FP32 scale per ``fp8_block x fp8_block`` block; a shard holds the scale
blocks its slice overlaps, counted as if the slice starts on a block boundary.

Examples
--------
>>> t = Tensor("q_b", rows=1536, cols=128 * 192, col_granule=192)
>>> t.shard_dims("column", tp=16)
(1536, 1536)
>>> Tensor("o_proj", rows=128 * 128, cols=7168, row_granule=128).shard_dims("row", tp=16)
(1024, 7168)
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from sn40l_sim.ir import DTYPE_BYTES

if TYPE_CHECKING:
    from sn40l_sim.models.spec import ModelSpec

ShardRule = Literal["column", "row", "replicated"]
#: which layers hold a tensor: every transformer layer, dense-FFN layers, MoE layers, once per
#: model, or once per multi-token-prediction module
Where = Literal["layer", "dense", "moe", "model", "mtp"]
#: dtype group, matching ``ModelSpec.bf16_tensors`` (``linear`` follows ``weight_dtype``)
Group = Literal["linear", "embedding", "lm_head", "router", "norms"]


@dataclass(frozen=True)
class Tensor:
    """One weight tensor (``copies`` of it per holder, e.g. one per routed expert)."""

    name: str
    rows: int
    cols: int = 1
    copies: int = 1
    where: Where = "layer"
    group: Group = "linear"
    col_granule: int = 1
    row_granule: int = 1
    #: a vector (norm weight, bias): never block-scaled
    vector: bool = False
    #: fixed element size overriding the dtype rules (DeepSeek keeps the router bias in FP32)
    element_bytes: int | None = None
    #: column granules (heads) the busiest socket holds of a split over ``tp`` sockets, where the family
    #: places them otherwise than ``ceil(granules / tp)``: GQA's K and V projections follow the
    #: query heads, whose groups a socket may span (``GQAAttentionSpec.socket_kv_heads``)
    socket_granules: Callable[[int], int] | None = None

    @property
    def params(self) -> int:
        """Parameters of all copies."""
        return self.rows * self.cols * self.copies

    def shard_dims(self, rule: ShardRule, tp: int) -> tuple[int, int]:
        """``(rows, cols)`` one socket holds under ``rule`` (the busiest socket if uneven)."""
        if rule == "column":
            if self.socket_granules is not None:
                return self.rows, self.socket_granules(tp) * self.col_granule
            return self.rows, _split(self.cols, self.col_granule, tp)
        if rule == "row":
            return _split(self.rows, self.row_granule, tp), self.cols
        return self.rows, self.cols

    def element_size(self, model: ModelSpec) -> int:
        """Bytes per element under the model's dtype choices."""
        if self.element_bytes is not None:
            return self.element_bytes
        if model.weight_dtype == "bf16" or self.group in model.bf16_tensors:
            return DTYPE_BYTES["bf16"]
        return DTYPE_BYTES[model.weight_dtype]

    def is_fp8(self, model: ModelSpec) -> bool:
        """True when the tensor is stored in FP8 (and so block-scaled unless a vector)."""
        return self.element_bytes is None and self.element_size(model) == DTYPE_BYTES["fp8"]

    def shard_bytes(self, model: ModelSpec, rule: ShardRule, tp: int) -> int:
        """Bytes one socket stores (and a GEMM streams) for all copies: elements plus FP8 scales."""
        rows, cols = self.shard_dims(rule, tp)
        total = rows * cols * self.element_size(model)
        if self.is_fp8(model) and not self.vector:
            block = model.fp8_block
            total += math.ceil(rows / block) * math.ceil(cols / block) * DTYPE_BYTES["fp32"]
        return total * self.copies

    def shard_elements(self, rule: ShardRule, tp: int) -> int:
        """Elements one socket holds for all copies."""
        rows, cols = self.shard_dims(rule, tp)
        return rows * cols * self.copies


def _split(size: int, granule: int, tp: int) -> int:
    units = size // granule
    return -(-units // tp) * granule


#: the tensors :func:`inventory` lists only for a model with the option that holds them (an untied
#: output head, dense layers, MoE layers, DeepSeek's router bias, shared experts, an MTP module): a
#: template shared by models may shard them for the models that have them
OPTIONAL_TENSORS = frozenset({"lm_head", "dense_gate_up", "dense_down", "router", "router_bias", "expert_gate_up", "expert_down", "shared_gate_up",
                              "shared_down", "mtp_enorm", "mtp_hnorm", "mtp_proj", "mtp_final_norm"})


def inventory(model: ModelSpec) -> tuple[Tensor, ...]:
    """Every weight tensor of ``model``, named as the kernel templates' ``sharding`` tables.

    The MTP module's tensors (``where="mtp"``) are its own: its embedding and output head are the
    main model's (DeepSeek-V3 ``model.py`` shares them), and its transformer block is listed once
    more by :func:`holders` with the ``layer``/``moe`` tensors.

    Examples
    --------
    >>> from sn40l_sim.models.spec import ModelSpec
    >>> m = ModelSpec.model_validate(dict(kind="model", name="tiny", layers=2, hidden=64,
    ...     dense_ffn=128, vocab=1000, weight_dtype="bf16",
    ...     attention=dict(kind="gqa", heads=4, kv_heads=2, head_dim=16)))
    >>> [t.name for t in inventory(m)]  # doctest: +NORMALIZE_WHITESPACE
    ['embedding', 'final_norm', 'lm_head', 'attn_norm', 'ffn_norm', 'q_proj', 'k_proj', 'v_proj',
     'o_proj', 'dense_gate_up', 'dense_down']
    """
    h = model.hidden
    out = [Tensor("embedding", rows=model.vocab, cols=h, where="model", group="embedding")]
    out.append(Tensor("final_norm", rows=h, where="model", group="norms", vector=True))
    if not model.tie_embeddings:
        out.append(Tensor("lm_head", rows=h, cols=model.vocab, where="model", group="lm_head"))
    out += [Tensor("attn_norm", rows=h, group="norms", vector=True),
            Tensor("ffn_norm", rows=h, group="norms", vector=True)]
    out += model.attention.weight_tensors(h)
    if model.dense_ffn is not None:   # every model with a dense layer has it (models/loader.py)
        out += [Tensor("dense_gate_up", rows=h, cols=2 * model.dense_ffn, where="dense", col_granule=2),
                Tensor("dense_down", rows=model.dense_ffn, cols=h, where="dense")]
    moe = model.moe
    if moe is not None:
        out.append(Tensor("router", rows=h, cols=moe.routed_experts, where="moe", group="router"))
        if moe.scoring == "sigmoid":
            # DeepSeek-V3's aux-loss-free balancing bias (e_score_correction_bias), FP32 in the checkpoint
            out.append(Tensor("router_bias", rows=moe.routed_experts, where="moe", group="router",
                              vector=True, element_bytes=DTYPE_BYTES["fp32"]))
        out += [Tensor("expert_gate_up", rows=h, cols=2 * moe.expert_ffn, copies=moe.routed_experts,
                       where="moe", col_granule=2),
                Tensor("expert_down", rows=moe.expert_ffn, cols=h, copies=moe.routed_experts, where="moe")]
        if moe.shared_experts:
            ffn = moe.shared_experts * moe.expert_ffn
            out += [Tensor("shared_gate_up", rows=h, cols=2 * ffn, where="moe", col_granule=2),
                    Tensor("shared_down", rows=ffn, cols=h, where="moe")]
    if model.mtp is not None:
        # DeepSeek-V3 MTP: RMSNorm of the hidden state and of the next token's embedding,
        # a [2h -> h] projection (eh_proj), a transformer block, and the shared head's RMSNorm
        out += [Tensor("mtp_enorm", rows=h, where="mtp", group="norms", vector=True),
                Tensor("mtp_hnorm", rows=h, where="mtp", group="norms", vector=True),
                Tensor("mtp_proj", rows=2 * h, cols=h, where="mtp"),
                Tensor("mtp_final_norm", rows=h, where="mtp", group="norms", vector=True)]
    return tuple(out)


def holders(model: ModelSpec, tensor: Tensor, include_mtp: bool) -> int:
    """How many times ``tensor`` appears in the model (layers holding it, MTP blocks included).

    >>> from sn40l_sim.models.spec import ModelSpec
    >>> m = ModelSpec.model_validate(dict(kind="model", name="tiny", layers=4, dense_layers=1,
    ...     hidden=64, dense_ffn=128, vocab=1000, weight_dtype="bf16", mtp=dict(modules=1),
    ...     attention=dict(kind="gqa", heads=4, kv_heads=2, head_dim=16),
    ...     moe=dict(routed_experts=8, shared_experts=1, experts_per_token=2, expert_ffn=32)))
    >>> t = {t.name: t for t in inventory(m)}
    >>> [holders(m, t[n], True) for n in ("embedding", "q_proj", "dense_down", "router", "mtp_proj")]
    [1, 5, 1, 4, 1]
    """
    mtp = model.mtp.modules if (include_mtp and model.mtp is not None) else 0
    moe_layers = model.layers - dense_layer_count(model)
    # an MTP module's block is an MoE block when the model has experts, a dense block otherwise
    mtp_moe, mtp_dense = (mtp, 0) if model.moe is not None else (0, mtp)
    return {"model": 1, "layer": model.layers + mtp, "dense": dense_layer_count(model) + mtp_dense,
            "moe": moe_layers + mtp_moe, "mtp": mtp}[tensor.where]


def dense_layer_count(model: ModelSpec) -> int:
    """Layers with a dense FFN: all of them without an ``moe`` section, else ``dense_layers``."""
    return model.layers if model.moe is None else model.dense_layers


def dense_ffn_needed(model: ModelSpec) -> bool:
    """True when some block of the model has a dense FFN: a dense layer, or an MTP module's block
    in a model without experts."""
    return dense_layer_count(model) > 0 or (model.mtp is not None and model.moe is None)
