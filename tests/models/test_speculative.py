"""Speculative decoding in the graph: a verify step of k drafts runs the main model over k + 1 rows
per sequence and the MTP module k times, one run after the other."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sn40l_sim.errors import InputError
from sn40l_sim.ir import ParallelPlan, Shape
from sn40l_sim.kvcache.sizing import kv_bytes_per_socket
from sn40l_sim.models.builder import build_graph
from sn40l_sim.models.context import Ctx
from sn40l_sim.models.formulas import operators
from sn40l_sim.models.routing import expected_distinct_experts
from sn40l_sim.models.template import load_templates_for, template_for

ROOT = Path(__file__).resolve().parents[2]

DECODE16 = ParallelPlan(tp=16, attention_dp=16)
KV = 32768


def step(model, drafts, batch=16, plan=DECODE16, **kw):
    return build_graph(model, Shape("decode", batch, 0, KV, drafts=drafts), plan, **kw)


def main_kernels(graph):
    return [k for k in graph.kernels() if not k.name.startswith("MTP")]


def draft_runs(graph):
    runs: dict[str, list] = {}
    for k in graph.kernels():
        if k.name.startswith("MTP"):
            runs.setdefault(k.name.split(".")[0], []).append(k)
    return runs


def decode_ops(model, plan, drafts):
    """Every operator of a decode step's main-model kernels, for the formulas of any family (a model
    without an MTP module cannot build a verify graph, but its formulas take the rows all the same)."""
    template = template_for(model)
    ctx = Ctx(model, Shape("decode", 16, 0, KV, drafts=drafts), plan, template, expert_loading="all")
    formulas = operators(template.attention)
    out = []
    for name, entry in template.decode.kernels.items():
        if not name.startswith("mtp"):
            out += [(name, s.op) for f in entry.operators for s in formulas[f](ctx)]
    return out


@pytest.mark.parametrize("drafts", [1, 2, 3])
def test_every_gemm_of_the_verify_step_has_k_plus_1_times_the_rows_and_flops(r1, llama8b, drafts):
    # the built graph (DeepSeek), and every decode formula of both families
    plain = [(k.name, op) for k in main_kernels(step(r1, 0, expert_loading="all")) for op in k.operators]
    verify = [(k.name, op) for k in main_kernels(step(r1, drafts, expert_loading="all")) for op in k.operators]
    cases = [(plain, verify)] + [(decode_ops(m, p, 0), decode_ops(m, p, drafts))
                                 for m, p in ((r1, DECODE16), (llama8b, ParallelPlan(8, 8)))]
    for plain, verify in cases:
        gemms = 0
        for (name, a), (_, b) in zip(plain, verify, strict=True):
            if a.kind == "gemm":
                gemms += 1
                assert (b.m, b.flops) == ((drafts + 1) * a.m, (drafts + 1) * a.flops), (name, a.name)
                assert (b.n, b.k, b.count) == (a.n, a.k, a.count), (name, a.name)
                # "all": the weights a GEMM streams do not depend on its rows
                assert b.weight_bytes == a.weight_bytes, (name, a.name)
        assert gemms >= 8


def test_attention_reads_each_cache_once_for_all_its_query_rows(r1, llama8b):
    for model, plan in ((r1, DECODE16), (llama8b, ParallelPlan(8, 8))):
        plain, verify = decode_ops(model, plan, 0), decode_ops(model, plan, 2)
        read = lambda ops: sum(op.kv_read_bytes for _, op in ops)  # noqa: E731
        written = lambda ops: sum(op.kv_write_bytes for _, op in ops)  # noqa: E731
        assert read(verify) == read(plain) > 0
        assert written(verify) == 3 * written(plain) > 0
        softmax = [op.elements for _, op in verify if op.kind == "softmax"]
        assert softmax == [3 * op.elements for _, op in plain if op.kind == "softmax"] != []
    graph_read = [sum(op.kv_read_bytes for k in main_kernels(step(r1, d)) for op in k.operators) for d in (0, 2)]
    assert graph_read[0] == graph_read[1]


def test_the_draft_runs_k_times_one_after_the_other(r1):
    assert draft_runs(step(r1, 0)) == {}
    graph = step(r1, 3)
    runs = draft_runs(graph)
    assert list(runs) == ["MTP0", "MTP1", "MTP2"]
    names = [k.name for k in graph.kernels()]
    assert names.index("sampling") < names.index("MTP0.mtp_proj")
    for run in runs.values():
        assert [k.kind for k in run] == ["mtp_proj", "mla", "ffn", "lm_head", "sampling"]
        assert all(k.layer == r1.layers for k in run)  # DeepSeek's one MTP module, run recursively
    # each run is the same computation over the batch's rows, one row per sequence
    signatures = [[k.signature() for k in run] for run in runs.values()]
    assert signatures[0] == signatures[1] == signatures[2]
    plain_ffn = next(k for k in step(r1, 0).kernels() if k.name == "L03.ffn")
    assert runs["MTP1"][2].signature() == plain_ffn.signature()
    # a chain: each run starts after the previous one
    edges = graph.graph.edges
    assert ("MTP0.sampling", "MTP1.mtp_proj") in edges and ("MTP1.sampling", "MTP2.mtp_proj") in edges


def test_each_draft_run_streams_the_mtp_weights_again(r1):
    weights = [sum(k.weight_bytes for k in step(r1, d, expert_loading="all").kernels()) for d in range(4)]
    per_run = weights[1] - weights[0]
    assert per_run > 0
    assert weights[2] - weights[1] == weights[3] - weights[2] == per_run


def test_the_verify_steps_collectives_carry_k_plus_1_rows(r1):
    plain = next(k for k in step(r1, 0).kernels() if k.name == "L03.mla")
    verify = next(k for k in step(r1, 2).kernels() if k.name == "L03.mla")
    assert [c.bytes * 3 for c in plain.collectives] == [c.bytes for c in verify.collectives]


def test_drafts_need_an_mtp_module(r1, llama8b):
    with pytest.raises(InputError, match="has no mtp section"):
        step(llama8b, 1, plan=ParallelPlan(8, 8))
    with pytest.raises(InputError, match="has no mtp section"):
        build_graph(llama8b, Shape("prefill", 1, 1024, drafts=2), ParallelPlan(8))
    with pytest.raises(InputError, match="drafts must be from 0 to 15"):
        step(r1, -1)
    with pytest.raises(InputError, match="serving.speculative"):
        step(r1, 0, include_mtp=True)


def test_a_prefill_before_drafting_runs_the_mtp_module_once_over_the_prompt(r1):
    """Its cache, which the drafts read, is filled for the prompt's positions: the prefill writes
    the MTP layer's rows (what a prefill socket holds with include_mtp), once whatever the drafts."""
    plain = build_graph(r1, Shape("prefill", 1, 4096), ParallelPlan(16))
    names = {d: [k.name for k in build_graph(r1, Shape("prefill", 1, 4096, drafts=d), ParallelPlan(16)).kernels()]
             for d in (1, 3)}
    mtp = ["MTP0.mtp_proj", "MTP0.qkv", "MTP0.mha", "MTP0.o_proj", "MTP0.router", "MTP0.moe_ffn",
           "MTP0.lm_head", "MTP0.sampling"]
    assert names[1] == names[3] == [k.name for k in plain.kernels()] + mtp
    graph = build_graph(r1, Shape("prefill", 1, 4096, drafts=2), ParallelPlan(16))
    written = sum(op.kv_write_bytes for k in graph.kernels() for op in k.operators)
    assert written == kv_bytes_per_socket(r1, ParallelPlan(16), 1, 4096, include_mtp=True, phase="prefill")
    # the MTP block over the prompt costs what a main MoE layer does
    flops = {k.name: k.flops for k in graph.kernels()}
    assert flops["MTP0.mha"] == flops["L03.mha"] and flops["MTP0.moe_ffn"] == flops["L03.moe_ffn"]


def test_a_prefill_writes_the_caches_of_the_mtp_modules_the_drafts_run(r1):
    """With more MTP modules than drafts, only the modules the drafts run fill a cache: what the
    prefill writes is what the sizing rule reserves for that number of drafts."""
    three = r1.model_copy(update={"mtp": r1.mtp.model_copy(update={"modules": 3})})
    for drafts in (1, 2, 3, 4):
        graph = build_graph(three, Shape("prefill", 1, 4096, drafts=drafts), ParallelPlan(16))
        written = sum(op.kv_write_bytes for k in graph.kernels() for op in k.operators)
        assert written == kv_bytes_per_socket(three, ParallelPlan(16), 1, 4096, include_mtp=drafts, phase="prefill")
        assert written == kv_bytes_per_socket(r1, ParallelPlan(16), 1, 4096, phase="prefill") * (61 + min(drafts, 3)) // 61


def test_the_verify_step_streams_the_experts_its_rows_touch(r1):
    ffn = next(k for k in step(r1, 2).kernels() if k.name == "L03.ffn")
    draft_ffn = next(k for k in step(r1, 2).kernels() if k.name == "MTP0.ffn")
    assert dict(ffn.notes)["experts_loaded"] == pytest.approx(expected_distinct_experts(256, 8, 16 * 3), abs=1e-3)
    assert dict(draft_ffn.notes)["experts_loaded"] == pytest.approx(expected_distinct_experts(256, 8, 16), abs=1e-3)


def test_a_template_without_the_mtp_run_in_prefill_is_refused_for_a_drafting_prefill(r1, tmp_path):
    # it was built as a bare transformer block, the MTP projection and head missing; a template
    # loads (and a prefill without drafts builds) without them

    data = yaml.safe_load((ROOT / "graphs" / "kernels_deepseek.yaml").read_text())
    for key in ("mtp_head", "mtp_tail"):
        del data["prefill"]["blocks"][key]
    for key in ("mtp_proj", "mtp_lm_head"):
        del data["prefill"]["kernels"][key]
    path = tmp_path / "kernels.yaml"
    path.write_text(yaml.safe_dump(data))
    assert build_graph(r1, Shape("prefill", 1, 1024), ParallelPlan(16), template=path).kernels()
    with pytest.raises(InputError, match="prefill blocks have no mtp_head / mtp_tail"):
        build_graph(r1, Shape("prefill", 1, 1024, drafts=2), ParallelPlan(16), template=path)


def test_a_template_without_the_mtp_run_in_decode_loads_and_is_refused_for_a_drafting_step(r1, tmp_path):
    # the template check ran a decode MTP run whatever the blocks, so such a template was refused
    # where it loads ('ffn_residual' writing 'x' no later operator reads), though undrafted steps
    # build without the MTP run

    data = yaml.safe_load((ROOT / "graphs" / "kernels_deepseek.yaml").read_text())
    for phase in ("prefill", "decode"):
        for key in ("mtp_head", "mtp_tail"):
            del data[phase]["blocks"][key]
        for key in ("mtp_proj", "mtp_lm_head"):
            del data[phase]["kernels"][key]
    path = tmp_path / "kernels.yaml"
    path.write_text(yaml.safe_dump(data))
    assert load_templates_for(path, r1)
    assert build_graph(r1, Shape("decode", 16, 0, kv_len=KV), DECODE16, template=path).kernels()
    with pytest.raises(InputError, match="decode blocks have no mtp_head / mtp_tail"):
        build_graph(r1, Shape("decode", 16, 0, kv_len=KV, drafts=2), DECODE16, template=path)
