"""Test doubles for the serving tests: a step timer with fixed, known cycles, a memory placer with
a chosen free HBM, and a graph builder with no activations. The real StepTimer, place_memory and
build_graph are exercised by the CLI tests; these pin the serving logic to hand-checkable numbers.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from sn40l_sim.engine.phase import PhaseTiming
from sn40l_sim.errors import InfeasibleError
from sn40l_sim.ir import ParallelPlan
from sn40l_sim.mapper.placement import MemoryPlacement
from sn40l_sim.models.spec import ModelSpec

R1 = dict(kind="model", name="r1-test", layers=61, dense_layers=3, hidden=7168, dense_ffn=18432, vocab=129280,
          weight_dtype="fp8", attention=dict(kind="mla", heads=128, q_lora_rank=1536, kv_lora_rank=512,
                                             qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128),
          moe=dict(routed_experts=256, shared_experts=1, experts_per_token=8, expert_ffn=2048))

#: KV bytes per token of R1 above (61 layers x 576 x 2 B; no MTP module)
R1_KV_PER_TOKEN = 70272
PREFILL = ParallelPlan(tp=16)
DECODE = ParallelPlan(tp=16, attention_dp=16)


def r1_model() -> ModelSpec:
    return ModelSpec.model_validate(R1)


def timing(phase: str, cycles: int, clock_hz: float = 1.6e9, batch: int = 1, length: int = 1,
           kernel_cycles: dict | None = None) -> PhaseTiming:
    kernel_cycles = kernel_cycles or {"work": cycles}
    return PhaseTiming(phase, batch, length, length, cycles, cycles / clock_hz, kernel_cycles, dict(kernel_cycles),
                       3, dict(kernel_cycles), {"compute": cycles // 2, "hbm": cycles}, {"hbm": 0}, {}, (), ())


@dataclass
class FakeTimer:
    """Prefill: ``prefill_per_token`` cycles per prompt token; decode: ``decode_base`` +
    ``decode_per_kv`` per cached token read (batch x kv_len)."""

    prefill_per_token: int = 1000
    decode_base: int = 40_000_000
    decode_per_kv: int = 10
    calls: list = field(default_factory=list)

    def __call__(self, node, model, policy, prefill_plan, decode_plan, **options):
        self.policy = policy
        return self

    def prefill(self, prompt_len: int, memory=None) -> PhaseTiming:
        self.calls.append(("prefill", prompt_len))
        self.memory = memory
        kinds = {"mha": 700 * prompt_len, "moe_ffn": 300 * prompt_len}
        for k in self.policy.prefill_kernels(r1_model(), prompt_len, 16):
            kinds[k.kind] = 10 * prompt_len
        return timing("prefill", sum(kinds.values()), length=prompt_len, kernel_cycles=kinds)

    def decode_step(self, batch: int, kv_len: int, memory=None) -> PhaseTiming:
        self.calls.append(("decode", batch, kv_len))
        self.decode_memory = memory
        return timing("decode", self.decode_base + self.decode_per_kv * batch * kv_len, batch=batch, length=kv_len)


class FakePlacer:
    """HBM of ``weights + free`` usable bytes per socket; raises like place_memory when short."""

    def __init__(self, weights: int, free: int) -> None:
        self.weights, self.free, self.calls = weights, free, []

    def __call__(self, node, model, plan, kv_bytes: int, activation_bytes: int, order=None) -> MemoryPlacement:
        self.calls.append((plan, kv_bytes, activation_bytes))
        need = kv_bytes + activation_bytes
        if need > self.free:
            raise InfeasibleError(f"KV {kv_bytes} B + activations {activation_bytes} B exceed the free "
                                  f"{self.free} B by {need - self.free} B")
        return MemoryPlacement({"hbm": {"weights": self.weights, "kv": kv_bytes, "activations": activation_bytes},
                                "ddr": {}}, {"hbm": self.weights + self.free, "ddr": 10**12}, ("hbm", "ddr"))


class NoGraph:
    def kernels(self):
        return []


def no_graph(model, shape, plan, policy, **options):
    return NoGraph()
