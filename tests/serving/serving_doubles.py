"""Test doubles for the serving tests: step costs with fixed, known cycles (the package's
:class:`~sn40l_sim.serving.fixed_costs.FixedStepCosts`) and a memory placer with a chosen free HBM.
The real step timer and place_memory are exercised by the CLI tests; these pin the serving logic to
hand-checkable numbers.
"""
from __future__ import annotations

from sn40l_sim.errors import InfeasibleError
from sn40l_sim.ir import ParallelPlan
from sn40l_sim.mapper.placement import MemoryPlacement
from sn40l_sim.models.spec import ModelSpec
from sn40l_sim.serving.fixed_costs import FixedStepCosts

R1 = dict(kind="model", name="r1-test", layers=61, dense_layers=3, hidden=7168, dense_ffn=18432, vocab=129280,
          weight_dtype="fp8", attention=dict(kind="mla", heads=128, q_lora_rank=1536, kv_lora_rank=512,
                                             qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128),
          moe=dict(routed_experts=256, shared_experts=1, experts_per_token=8, expert_ffn=2048))

#: KV bytes per token of R1 above (61 layers x 576 x 2 B; no MTP module)
R1_KV_PER_TOKEN = 70272
#: the same with the MTP module's layer, whose cache a speculative decode step's draft runs use
R1_MTP_KV_PER_TOKEN = 71424
PREFILL = ParallelPlan(tp=16)
DECODE = ParallelPlan(tp=16, attention_dp=16)


def r1_model(mtp: bool = False) -> ModelSpec:
    """R1's hyper-parameters; with ``mtp`` its multi-token-prediction module (a speculative draft)."""
    return ModelSpec.model_validate({**R1, "mtp": dict(modules=1)} if mtp else R1)


def fixed_costs(policy) -> FixedStepCosts:
    """Step costs a point's numbers can be checked against by hand: prefill 700 (``mha``) + 300
    (``moe_ffn``) cycles per prompt token, plus 10 per token for each kernel kind the KV policy
    adds; decode 40M cycles + 10 per cached token read (batch x kv_len)."""
    rates = {"mha": 700, "moe_ffn": 300}
    rates.update({k.kind: 10 for k in policy.prefill_kernels(r1_model(), 131072, 16)})
    return FixedStepCosts(prefill_cycles_per_token=rates, decode_base_cycles=40_000_000,
                          decode_cycles_per_cached_token=10)


class FakePlacer:
    """HBM of ``weights + free`` usable bytes per socket; raises like place_memory when short."""

    def __init__(self, weights: int, free: int) -> None:
        self.weights, self.free, self.calls = weights, free, []

    def __call__(self, plan, kv_bytes: int, activation_bytes: int) -> MemoryPlacement:
        self.calls.append((plan, kv_bytes, activation_bytes))
        need = kv_bytes + activation_bytes
        if need > self.free:
            raise InfeasibleError(f"KV {kv_bytes} B + activations {activation_bytes} B exceed the free "
                                  f"{self.free} B by {need - self.free} B")
        return MemoryPlacement({"hbm": {"weights": self.weights, "kv": kv_bytes, "activations": activation_bytes},
                                "ddr": {}}, {"hbm": self.weights + self.free, "ddr": 10**12}, ("hbm", "ddr"))
