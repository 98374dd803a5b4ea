"""KV-cache policies: cache lengths, bytes and the extra prefill (and decode) kernels of each
policy, one module per policy under ``kvcache/policies/``.

Use :func:`make_policy` (registry in :data:`sn40l_sim.kvcache.base.POLICIES`); what a sequence keeps
and where is :class:`KVFootprint` (:mod:`sn40l_sim.kvcache.footprint`). The functional numpy
references of the selection rules are :mod:`sn40l_sim.reference.snapstream`,
:mod:`~sn40l_sim.reference.h2o` and :mod:`~sn40l_sim.reference.arkvale`; how the cache is stored
(FP8, INT8, INT4, shared layers) is a model option, :mod:`sn40l_sim.models.kv_format`.
"""
from sn40l_sim.kvcache.base import POLICIES, KVPolicy, register
from sn40l_sim.kvcache.factory import make_policy
from sn40l_sim.kvcache.footprint import KVFootprint, kv_bytes_by_use
from sn40l_sim.kvcache.policies import H2O, ArkVale, Full, SnapKV, SnapStream, StreamingLLM
from sn40l_sim.kvcache.sizing import kv_bytes_per_token, kv_bytes_per_token_layer, kv_width

__all__ = ["POLICIES", "KVPolicy", "KVFootprint", "register", "make_policy", "Full", "SnapStream", "StreamingLLM",
           "SnapKV", "H2O", "ArkVale", "kv_bytes_by_use", "kv_bytes_per_token", "kv_bytes_per_token_layer",
           "kv_width"]
