"""Parameter counts, weight bytes and KV-cache bytes, all derived from a :class:`ModelSpec`.

Conventions, chosen to match how the published figures are counted:

* ``total_params`` excludes the MTP module by default: DeepSeek's "671B" is the main model, and
  the Hugging Face checkpoint's 685B adds the MTP module (about 11.6B of its own weights, 13.5B
  with the copies of the embedding and LM head the checkpoint stores for it, quoted as "14B").
  ``include_mtp=True`` adds its own weights (the shared embedding and head are counted once).
* ``active_params`` counts what one token's forward pass reads: one embedding row, every
  attention and norm weight, the dense FFN or the router + shared expert + ``k`` routed experts,
  and the LM head (the whole embedding table when the head is tied to it). (Counting the whole embedding table instead adds 0.93B to DeepSeek-R1.)
* ``weight_bytes`` is what must be stored: FP8 elements plus one FP32 scale per 128x128 block,
  BF16 for the tensors in ``bf16_tensors``, the FP32 router bias. It includes the MTP module
  when the model has one (``include_mtp=None``), because serving with MTP needs its weights.
* KV bytes per token count the main model's layers; an MTP module caches one more layer's worth
  when it runs (``include_mtp=True``).

Examples
--------
>>> from sn40l_sim.models.loader import load_model
>>> from sn40l_sim.models.template import GRAPHS_DIR
>>> r1 = load_model(GRAPHS_DIR / "deepseek_r1.yaml")
>>> total_params(r1), active_params(r1)
(671026419200, 36625625600)
>>> kv_bytes_per_token(r1), kv_bytes(r1, 131072)
(70272, 9210691584)
"""
from __future__ import annotations

from sn40l_sim.errors import InputError
from sn40l_sim.ir import DTYPE_BYTES, ParallelPlan
from sn40l_sim.models.kv_format import kv_cache_layers, kv_stored_bytes
from sn40l_sim.models.routing import expected_distinct_experts
from sn40l_sim.models.spec import ModelSpec
from sn40l_sim.models.template import template_for
from sn40l_sim.models.tensors import holders, inventory

__all__ = ["total_params", "active_params", "mtp_params", "kv_bytes_per_token", "kv_bytes",
           "weight_bytes", "weight_bytes_per_socket", "replicated_tensors", "weight_bytes_by_group",
           "expected_distinct_experts"]


def total_params(model: ModelSpec, include_mtp: bool = False) -> int:
    """All parameters (MTP module's own weights only with ``include_mtp``).

    Examples
    --------
    The shipped Llama-3.1 files give the parameter counts their names round:

    >>> from sn40l_sim.models.loader import load_model
    >>> [round(total_params(load_model(f"graphs/llama3_1_{size}.yaml")) / 1e9, 2) for size in ("8b", "70b", "405b")]
    [8.03, 70.55, 405.85]
    """
    return sum(t.params * holders(model, t, include_mtp) for t in inventory(model))


def mtp_params(model: ModelSpec, with_shared_copies: bool = False) -> int:
    """Parameters of the MTP module(s): their own weights, plus, with ``with_shared_copies``, the
    embedding and LM head the DeepSeek checkpoint stores again for each module.

    >>> from sn40l_sim.models.loader import load_model
    >>> from sn40l_sim.models.template import GRAPHS_DIR
    >>> r1 = load_model(GRAPHS_DIR / "deepseek_r1.yaml")
    >>> mtp_params(r1), mtp_params(r1, with_shared_copies=True)
    (11610068224, 13463426304)
    """
    if model.mtp is None:
        return 0
    own = total_params(model, include_mtp=True) - total_params(model)
    if not with_shared_copies:
        return own
    shared = sum(t.params for t in inventory(model) if t.name in ("embedding", "lm_head"))
    return own + shared * model.mtp.modules


def active_params(model: ModelSpec, include_mtp: bool = False) -> int:
    """Parameters one token reads in a forward pass (see the module notes)."""
    total = 0
    for t in inventory(model):
        n = holders(model, t, include_mtp)
        if t.name == "embedding":
            # one row, unless the LM head is the embedding itself (tied), which reads all of it
            total += t.params if model.tie_embeddings else model.hidden
            continue
        if t.name in ("expert_gate_up", "expert_down"):
            total += t.rows * t.cols * model.moe.experts_per_token * n
            continue
        total += t.params * n
    return total


def kv_bytes_per_token(model: ModelSpec, include_mtp: bool | int = False) -> int:
    """KV-cache bytes per token over all layers.

    The width per token and layer is the attention family's
    (:meth:`~sn40l_sim.models.families.AttentionSpec.kv_width`): MLA caches the latent and the
    RoPE key (``kv_lora_rank + qk_rope_head_dim``); GQA caches K and V (``2 * kv_heads * head_dim``).
    Each element takes the stored bits of the model's KV format, scales included, and layers that
    share a cache count once (:mod:`sn40l_sim.models.kv_format`); the total is rounded up to bytes.

    >>> from sn40l_sim.models.loader import load_model
    >>> from sn40l_sim.models.template import GRAPHS_DIR
    >>> kv_bytes_per_token(load_model(GRAPHS_DIR / "llama3_1_8b.yaml"))
    131072
    """
    return kv_stored_bytes(model, kv_cache_layers(model, include_mtp) * model.attention.kv_width())


def kv_bytes(model: ModelSpec, tokens: int, include_mtp: bool | int = False) -> int:
    """KV-cache bytes of ``tokens`` cached tokens of one sequence."""
    if tokens < 0:
        raise InputError(f"tokens must be >= 0, got {tokens}")
    return tokens * kv_bytes_per_token(model, include_mtp)


def _mtp(model: ModelSpec, include_mtp: bool | None) -> bool:
    return model.mtp is not None if include_mtp is None else include_mtp


def weight_bytes(model: ModelSpec, include_mtp: bool | None = None) -> int:
    """Bytes of all weights, unsharded (FP8 block scales and BF16 tensors counted as stored).

    >>> from sn40l_sim.models.loader import load_model
    >>> from sn40l_sim.models.template import GRAPHS_DIR
    >>> round(weight_bytes(load_model(GRAPHS_DIR / "deepseek_r1.yaml"), include_mtp=False) / 1e9, 1)
    673.2
    """
    mtp = _mtp(model, include_mtp)
    return sum(t.shard_bytes(model, "replicated", 1) * holders(model, t, mtp) for t in inventory(model))


def weight_bytes_by_group(model: ModelSpec, include_mtp: bool | None = None) -> dict[str, int]:
    """Unsharded weight bytes split into ``fp8`` elements, ``fp8_scales`` and ``bf16`` / ``fp32``.

    Examples
    --------
    DeepSeek-R1 without its MTP module, in GB: FP8 weights with one FP32 scale per 128x128 block,
    the tensors the file keeps in BF16 (``bf16_tensors``: embedding, LM head, router, norms) and
    the FP32 router bias (59 KB):

    >>> from sn40l_sim.models.loader import load_model
    >>> groups = weight_bytes_by_group(load_model("graphs/deepseek_r1.yaml"), include_mtp=False)
    >>> {group: round(n / 1e9, 2) for group, n in groups.items()}
    {'fp8': 669.07, 'fp8_scales': 0.16, 'bf16': 3.92, 'fp32': 0.0}
    """
    out = {"fp8": 0, "fp8_scales": 0, "bf16": 0, "fp32": 0}
    mtp = _mtp(model, include_mtp)
    for t in inventory(model):
        n = holders(model, t, mtp)
        stored = t.shard_bytes(model, "replicated", 1) * n
        if t.is_fp8(model):
            out["fp8"] += t.params * n
            out["fp8_scales"] += stored - t.params * n
        else:
            out["fp32" if t.element_size(model) == DTYPE_BYTES["fp32"] else "bf16"] += stored
    return out


def weight_bytes_per_socket(model: ModelSpec, plan: ParallelPlan, include_mtp: bool | None = None) -> int:
    """Weight bytes one socket holds under ``plan``: ``1 / tp`` of each sharded tensor (the busiest
    socket's share when uneven, attention heads kept whole) and every replicated tensor in full.
    The sharding rules are the model's kernel template's (:func:`replicated_tensors` lists the
    replicated ones). Attention data parallelism does not change weight placement.

    >>> from sn40l_sim.models.loader import load_model
    >>> from sn40l_sim.models.template import GRAPHS_DIR
    >>> r1 = load_model(GRAPHS_DIR / "deepseek_r1.yaml")
    >>> round(weight_bytes_per_socket(r1, ParallelPlan(tp=16, attention_dp=16)) / 2**30, 2)
    40.05
    """
    rules = template_for(model).sharding
    mtp = _mtp(model, include_mtp)
    return sum(t.shard_bytes(model, rules[t.name], plan.tp) * holders(model, t, mtp) for t in inventory(model))


def replicated_tensors(model: ModelSpec) -> list[str]:
    """Names of the tensors every socket holds whole under the model's template."""
    rules = template_for(model).sharding
    return [t.name for t in inventory(model) if rules[t.name] == "replicated"]

