"""The shipped KV-cache policies, one module each: ``full``, ``snapstream``, ``streamingllm``,
``snapkv``, ``h2o`` (heavy hitters) and ``arkvale`` (DDR offload with recall). Importing this package registers them (:func:`sn40l_sim.kvcache.base.register`); a new
policy is a module here plus one import line below, or, without editing the package, a plug-in an
experiment lists under ``plugins:`` (docs/architecture.md, "Extending the simulator").
"""
from sn40l_sim.kvcache.policies.arkvale import ArkVale
from sn40l_sim.kvcache.policies.full import Full
from sn40l_sim.kvcache.policies.h2o import H2O
from sn40l_sim.kvcache.policies.snapkv import SnapKV
from sn40l_sim.kvcache.policies.snapstream import SnapStream
from sn40l_sim.kvcache.policies.streamingllm import StreamingLLM

__all__ = ["ArkVale", "Full", "H2O", "SnapKV", "SnapStream", "StreamingLLM"]
