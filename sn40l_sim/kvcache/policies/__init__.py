"""The shipped KV-cache policies, one module each: ``full``, ``snapstream``, ``streamingllm`` and
``snapkv``. Importing this package registers them (:func:`sn40l_sim.kvcache.base.register`); a new
policy is a module here plus one import line below.
"""
from sn40l_sim.kvcache.policies.full import Full
from sn40l_sim.kvcache.policies.snapkv import SnapKV
from sn40l_sim.kvcache.policies.snapstream import SnapStream
from sn40l_sim.kvcache.policies.streamingllm import StreamingLLM

__all__ = ["Full", "SnapKV", "SnapStream", "StreamingLLM"]
