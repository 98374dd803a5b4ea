"""Model specs for the kvcache tests, built in Python from docs/reference.md §2 so that these tests do not
depend on the YAML loader (owned by the MODELS area); test_kv_sizing checks them against
graphs/*.yaml once the loader exists."""
from sn40l_sim.models.spec import ModelSpec


def deepseek_r1() -> ModelSpec:
    return ModelSpec.model_validate(dict(
        kind="model", name="deepseek-r1", layers=61, dense_layers=3, hidden=7168,
        dense_ffn=18432, vocab=129280, weight_dtype="fp8",
        attention=dict(kind="mla", heads=128, q_lora_rank=1536, kv_lora_rank=512,
                       qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128),
        moe=dict(routed_experts=256, shared_experts=1, experts_per_token=8, expert_ffn=2048,
                 groups=8, topk_groups=4, scoring="sigmoid"),
        mtp=dict(modules=1)))


def llama(size: str) -> ModelSpec:
    layers, hidden, heads, ffn = {"8b": (32, 4096, 32, 14336), "70b": (80, 8192, 64, 28672),
                                  "405b": (126, 16384, 128, 53248)}[size]
    return ModelSpec.model_validate(dict(
        kind="model", name=f"llama-3.1-{size}", layers=layers, hidden=hidden, dense_ffn=ffn,
        vocab=128256, weight_dtype="bf16",
        attention=dict(kind="gqa", heads=heads, kv_heads=8, head_dim=128)))
