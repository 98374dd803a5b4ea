"""Which FLOPs of a kernel the time breakdown calls attention (engine/phase.py, ``attention_flags``):
an attention GEMM cut into shapes counts whole, whichever shape carries its traffic."""
from __future__ import annotations

from pathlib import Path

from sn40l_sim.engine.phase import operator_sums
from sn40l_sim.ir import ParallelPlan, Shape
from sn40l_sim.kvcache import make_policy
from sn40l_sim.models.builder import build_graph
from sn40l_sim.models.loader import load_model

GRAPHS = Path(__file__).resolve().parents[2] / "graphs"


def _attention_share(ops) -> float:
    sums = operator_sums(ops)
    return sums[4] / sums[3]


def test_every_shape_of_an_attention_gemm_is_attention():
    llama = load_model(GRAPHS / "llama3_1_8b.yaml").model_copy(update={"layers": 1})
    # Llama-3.1-8B over 12 sockets: the KV heads with one query head fewer get a second scores and
    # weighted-sum GEMM (gqa_pv#2, which reads no cache of its own and sits beside no softmax)
    (decoder,) = [k for k in build_graph(llama, Shape("decode", 2, 0, 1000), ParallelPlan(12)).kernels()
                  if k.name.endswith("decoder")]
    attention = sum(op.flops for op in decoder.operators if op.name.split("#")[0] in ("gqa_qk", "gqa_pv"))
    assert operator_sums(decoder.operators)[4] == attention
    # H2O's prompt scoring, one GEMM per tile shape of a prompt that is not a multiple of the tile:
    # the second and third shapes were other compute (40% of its FLOPs at 32700 tokens)
    (kernel,) = make_policy("h2o", {"heavy": 1024, "recent": 1024}).prefill_kernels(llama, 32700, 8)
    assert [op.name for op in kernel.operators if op.kind == "gemm"] == ["h2o_scores", "h2o_scores#2", "h2o_scores#3"]
    assert _attention_share(kernel.operators) == 1.0
