"""A kernel template must gather what its column-parallel GEMMs leave split before an operator reads
it whole, and switch layouts around data-parallel decode attention (sn40l_sim.models.gathers): one
that drops or misplaces such a collective is refused where it is loaded, naming its file, kernel,
operator and the collective, instead of building a graph that runs faster than it could."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from sn40l_sim.commands import cli
from sn40l_sim.errors import InputError
from sn40l_sim.models.gathers import ungathered_column_parallel
from sn40l_sim.models.loader import load_model
from sn40l_sim.models.reductions import unreduced_row_parallel
from sn40l_sim.models.template import GRAPHS_DIR, KernelTemplates, load_templates_for, template_for

REPO = Path(__file__).resolve().parents[2]
PUBLIC = Path(__file__).resolve().parent / "public_models"


def _models() -> list[Path]:
    return [p for d in (GRAPHS_DIR, PUBLIC) for p in sorted(d.glob("*.yaml")) if not p.name.startswith("kernels_")]


def _without(template: KernelTemplates, phase: str, kernel_id: str, drop) -> KernelTemplates:
    """``template`` with the collectives of ``phase``'s ``kernel_id`` for which ``drop`` holds removed."""
    spec = getattr(template, phase)
    entry = spec.kernels[kernel_id]
    left = tuple(c for c in entry.collectives if not drop(c))
    assert len(left) < len(entry.collectives), (phase, kernel_id)
    kernels = {**spec.kernels, kernel_id: entry.model_copy(update={"collectives": left})}
    return template.model_copy(update={phase: spec.model_copy(update={"kernels": kernels})})


def _with(template: KernelTemplates, phase: str, kernel_id: str, size: str, **update) -> KernelTemplates:
    """``template`` with the collective of ``size`` in ``phase``'s ``kernel_id`` changed by ``update``."""
    spec = getattr(template, phase)
    entry = spec.kernels[kernel_id]
    collectives = tuple(c.model_copy(update=update) if c.size == size else c for c in entry.collectives)
    kernels = {**spec.kernels, kernel_id: entry.model_copy(update={"collectives": collectives})}
    return template.model_copy(update={phase: spec.model_copy(update={"kernels": kernels})})


@pytest.mark.parametrize("path", _models(), ids=lambda p: p.name)
def test_every_shipped_and_public_model_gathers_what_it_splits(path: Path) -> None:
    model = load_model(path)
    for phase in ("prefill", "decode"):
        assert ungathered_column_parallel(template_for(model), model, phase) is None


#: the fuzzer's deletions (docs/robustness.md): (model, phase, kernel, dropped sizes, operator and
#: collective the message must name)
DELETIONS = {
    "mla_all_to_alls": ("deepseek_r1.yaml", "decode", "mla", {"mla_q_to_dp", "mla_o_to_tp"},
                        "'absorbed_qk'", "all_to_all"),
    "mla_router_all_to_alls": ("deepseek_r1.yaml", "decode", "mla_router", {"mla_q_to_dp", "mla_o_to_tp"},
                               "'absorbed_qk'", "all_to_all"),
    "mla_back_to_tp": ("deepseek_r1.yaml", "decode", "mla", {"mla_o_to_tp"}, "'v_unabsorb'", "all_to_all"),
    "gqa_all_to_alls": ("llama3_1_8b.yaml", "decode", "decoder", {"gqa_q_to_dp", "gqa_o_to_tp"},
                        "'kv_cache_write'", "all_to_all"),
    "gqa_back_to_tp": ("llama3_1_8b.yaml", "decode", "decoder", {"gqa_o_to_tp"}, "'o_proj'", "all_to_all"),
    "sampling_decode": ("llama3_1_8b.yaml", "decode", "sampling", {"candidates"}, "'sample'", "all_gather"),
    "sampling_prefill": ("deepseek_r1.yaml", "prefill", "sampling", {"candidates"}, "'sample'", "all_gather"),
    "prefill_latent": ("deepseek_r1.yaml", "prefill", "qkv", {"latent"}, "'q_norm'", "all_gather"),
    "decode_latent": ("deepseek_r1.yaml", "decode", "mla", {"latent"}, "'q_norm'", "all_gather"),
    "expert_intermediate": ("deepseek_r1.yaml", "prefill", "moe_ffn", {"expert_intermediate"},
                            "'expert_down'", "all_gather"),
    "mtp_hidden": ("deepseek_r1.yaml", "decode", "mtp_proj", {"hidden"}, "'mtp_proj'", "all_gather of size hidden"),
    "public_no_q_lora_latent": ("deepseek_v2_lite.yaml", "prefill", "qkv", {"latent"}, "'kv_norm'", "all_gather"),
}


@pytest.mark.parametrize("case", sorted(DELETIONS))
def test_a_dropped_gather_or_all_to_all_is_refused(case: str) -> None:
    name, phase, kernel_id, sizes, operator, collective = DELETIONS[case]
    model = load_model(GRAPHS_DIR / name if (GRAPHS_DIR / name).exists() else PUBLIC / name)
    broken = _without(template_for(model), phase, kernel_id, lambda c: c.size in sizes)
    # the reduction rule still passes: only the new rule sees it
    assert unreduced_row_parallel(broken, model, phase) is None
    field, message = ungathered_column_parallel(broken, model, phase)
    assert field == (phase, "kernels", kernel_id, "collectives")
    assert f"kernel {kernel_id!r}" in message and f"operator {operator}" in message and collective in message


@pytest.mark.parametrize("model_file", ["deepseek_r1.yaml", "llama3_1_8b.yaml"])
def test_every_gather_and_all_to_all_left_out_of_a_shipped_template_is_refused(model_file: str) -> None:
    # each all-gather and all-to-all removed in turn is refused by this rule or, for the hidden rows a
    # row-parallel GEMM's column-split form gathers, by the reduction rule
    model = load_model(GRAPHS_DIR / model_file)
    template = template_for(model)
    removed = 0
    for phase in ("prefill", "decode"):
        for kernel_id, entry in getattr(template, phase).kernels.items():
            for coll in entry.collectives:
                if coll.kind not in ("all_gather", "all_to_all"):
                    continue
                broken = _without(template, phase, kernel_id, lambda c, coll=coll: c is coll)
                assert (ungathered_column_parallel(broken, model, phase)
                        or unreduced_row_parallel(broken, model, phase)), (phase, kernel_id, coll.size)
                removed += 1
    # DeepSeek-R1: prefill MTP projection, latent, MoE (two), sampling; decode MLA and MLA with the
    # router (three each), MTP projection, sampling. Llama-3.1: sampling (each phase), two all-to-alls
    assert removed == (13 if model_file == "deepseek_r1.yaml" else 4)


def test_a_gather_placed_after_its_reader_is_refused_and_one_before_it_passes() -> None:
    model = load_model(GRAPHS_DIR / "deepseek_r1.yaml")
    template = template_for(model)
    late = _with(template, "prefill", "moe_ffn", "expert_intermediate", after="expert_down")
    field, message = ungathered_column_parallel(late, model, "prefill")
    assert field == ("prefill", "kernels", "moe_ffn", "collectives") and "'expert_down'" in message
    # placed after the routed experts' activation, it runs before the shared expert writes its own
    early = _with(template, "prefill", "moe_ffn", "expert_intermediate", after="expert_act")
    assert "operator 'shared_down' reads 'shared_act'" in ungathered_column_parallel(early, model, "prefill")[1]
    # without a shared expert (Mixtral, tests/models/public_models/kernels_gqa_moe.yaml) that place is right
    mixtral = load_model(PUBLIC / "mixtral_8x7b.yaml")
    early = _with(template_for(mixtral), "prefill", "moe_ffn", "expert_intermediate", after="expert_act")
    assert ungathered_column_parallel(early, mixtral, "prefill") is None
    late = _with(template_for(mixtral), "prefill", "moe_ffn", "expert_intermediate", after="expert_down")
    assert "operator 'expert_down'" in ungathered_column_parallel(late, mixtral, "prefill")[1]
    # the latent gathered after the query norm: q_norm read the query latent split
    late = _with(template, "prefill", "qkv", "latent", overlapped=True, after="q_norm")
    assert "operator 'q_norm'" in ungathered_column_parallel(late, model, "prefill")[1]
    # an all-to-all placed after the attention it feeds
    late = _with(template, "decode", "mla", "mla_q_to_dp", overlapped=True, after="absorbed_pv")
    late = _with(late, "decode", "mla", "mla_o_to_tp", overlapped=True, after="absorbed_pv")
    assert "operator 'absorbed_qk'" in ungathered_column_parallel(late, model, "decode")[1]


def test_a_replicated_vocabulary_needs_no_sampling_gather() -> None:
    # the rule follows the sharding table: logits over the whole vocabulary are not split
    model = load_model(GRAPHS_DIR / "llama3_1_8b.yaml")
    template = template_for(model)
    whole = template.model_copy(update={"sharding": {**template.sharding, "lm_head": "replicated"}})
    for phase in ("prefill", "decode"):
        assert ungathered_column_parallel(_without(whole, phase, "sampling", lambda c: True), model, phase) is None


def test_check_refuses_a_template_without_its_all_to_alls_in_one_line(tmp_path: Path, capsys) -> None:
    text = (GRAPHS_DIR / "kernels_llama.yaml").read_text()
    for line in ("        - {size: gqa_q_to_dp, kind: all_to_all}     # only with attention_dp > 1\n",
                 "        - {size: gqa_o_to_tp, kind: all_to_all}\n"):
        assert text.count(line) == 1, line
        text = text.replace(line, "")
    (tmp_path / "kernels_llama.yaml").write_text(text)
    shutil.copy(GRAPHS_DIR / "llama3_1_8b.yaml", tmp_path / "llama3_1_8b.yaml")
    with pytest.raises(InputError):
        load_model(tmp_path / "llama3_1_8b.yaml")
    exp = (REPO / "experiments" / "llama8b_node8.yaml").read_text()
    assert "graph_options" not in exp
    exp = exp.replace("../hw_configs/sn40l_node8.yaml", (REPO / "hw_configs" / "sn40l_node8.yaml").as_posix())
    exp = exp.replace("../graphs/llama3_1_8b.yaml", (GRAPHS_DIR / "llama3_1_8b.yaml").as_posix())
    (tmp_path / "exp.yaml").write_text(exp + "graph_options: {template: kernels_llama.yaml}\n")
    status, err = cli.main(["check", str(tmp_path / "exp.yaml")]), capsys.readouterr()
    assert status == 2, err.out + err.err
    assert "Traceback" not in err.err and len(err.err.strip().splitlines()) == 1, err.err
    assert "kernels_llama.yaml" in err.err and "kernel 'decoder'" in err.err
    assert "operator 'kv_cache_write'" in err.err and "all_to_all" in err.err


def _reduce_scattered(tmp_path: Path, old: str, new: str) -> KernelTemplates:
    """Llama-3.1's template with ``old`` replaced by ``new``, checked against Llama-3.1-8B."""
    text = (GRAPHS_DIR / "kernels_llama.yaml").read_text()
    assert text.count(old) == 1, old
    path = tmp_path / "kernels_llama.yaml"
    path.write_text(text.replace(old, new))
    return load_templates_for(path, load_model(GRAPHS_DIR / "llama3_1_8b.yaml"))


PREFILL_FFN = ("      operators: [ffn_norm, dense_gate_up, dense_act, dense_down, ffn_residual]\n"
               "      collectives: [{size: hidden, kind: all_reduce, overlapped: true}]\n")
DECODE_DOWN = "        - {size: hidden, kind: all_reduce, overlapped: true, after: dense_down}\n"


@pytest.mark.parametrize("old, new, words", [
    # a reduce-scatter leaves each socket its share of the reduced rows: with no all-gather anywhere,
    # the FFN's (or the next layer's) column-parallel GEMM read that share as every row, and the
    # prefill ran 10% faster than the all-reduce's (57.4 -> 51.8 ms, Llama-3.1-8B 4K on 8 sockets)
    (PREFILL_FFN, PREFILL_FFN.replace("all_reduce", "reduce_scatter"), "kernel 'qkv': operator 'q_proj' reads 'xn'"),
    (DECODE_DOWN, DECODE_DOWN.replace("all_reduce", "reduce_scatter"), "kernel 'decoder': operator 'q_proj' reads 'xn'"),
    ("      collectives: [{size: hidden, kind: all_reduce, overlapped: true}]\n    ffn:",
     "      collectives: [{size: hidden, kind: reduce_scatter, overlapped: true}]\n    ffn:",
     "kernel 'ffn': operator 'dense_gate_up' reads 'hn'"),
])
def test_a_reduce_scatter_without_an_all_gather_is_refused(tmp_path: Path, old: str, new: str, words: str) -> None:
    with pytest.raises(InputError) as err:
        _reduce_scattered(tmp_path, old, new)
    assert words in str(err.value) and "which a reduce_scatter left split" in str(err.value), err.value


def test_a_reduce_scatter_gathered_before_the_next_gemm_passes(tmp_path: Path) -> None:
    # sequence parallelism's layout: the reduced rows stay split through the residual add and the
    # norm (row-local) and are gathered in the same kernel or a later one
    gathered = PREFILL_FFN.replace("all_reduce", "reduce_scatter").replace(
        "overlapped: true}]", "overlapped: true}, {size: hidden, kind: all_gather}]")
    _reduce_scattered(tmp_path, PREFILL_FFN, gathered)


@pytest.mark.parametrize("line", ["        - {size: gqa_q_to_dp, kind: all_to_all}     # only with attention_dp > 1\n",
                                  "        - {size: gqa_o_to_tp, kind: all_to_all}\n"])
def test_an_all_to_all_written_twice_is_refused(tmp_path: Path, line: str) -> None:
    # the second moves rows already in the layout their readers need: Llama-3.1-8B's decode step at
    # batch 64 with 4K caches on 8 sockets (attention_dp 8) moved 14.7 MB more over the links, 0.2% slower
    with pytest.raises(InputError) as err:
        _reduce_scattered(tmp_path, line, line * 2)
    assert "kernel 'decoder'" in str(err.value) and "switches no layout" in str(err.value), err.value


@pytest.mark.parametrize("op, read", [("o_proj", "attn_o"), ("dense_down", "ffn_act")])
def test_a_fused_decoder_all_reduce_swapped_for_an_all_gather_is_refused(tmp_path: Path, op: str, read: str) -> None:
    # an all-gather of the hidden rows completes the column-split form, whose GEMM reads its input
    # whole; the decoder's other all-reduce made either GEMM pass as reduced, gathering partial sums
    # unsummed: half the bytes (Llama-3.1-8B, batch 64, 4K caches, 8 sockets: 477 -> 360 MB over the
    # links a step, 4.031 -> 4.027 ms)
    line = f"        - {{size: hidden, kind: all_reduce, overlapped: true, after: {op}}}\n"
    with pytest.raises(InputError) as err:
        _reduce_scattered(tmp_path, line, line.replace("all_reduce", "all_gather"))
    assert f"operator {op!r} reads {read!r} whole" in str(err.value), err.value


DEEPSEEK_O_PROJ = ("      # P2P starts after the first output tile and runs under the rest of the GEMM\n"
                   "      collectives: [{size: hidden, kind: all_reduce, overlapped: true}]\n")


@pytest.mark.parametrize("router, passes", [("", False), ("\n      collectives: [{size: hidden, kind: all_gather}]", True)])
def test_the_moe_kernels_output_gather_does_not_gather_its_input_too(tmp_path: Path, router: str, passes: bool) -> None:
    # DeepSeek-R1's prefill output projection reduce-scattered: the MoE kernel's all-gather of the hidden
    # rows completes its column-split down GEMM and runs after it, so the gate/up GEMMs before it read
    # the socket's share of the rows as every row (16% fewer prefill collective bytes) unless another
    # kernel gathers them (the router, docs/validation.md's sequence-parallel layout)
    text = (GRAPHS_DIR / "kernels_deepseek.yaml").read_text()
    router_ops = "      operators: [ffn_norm, router_gemm, router_score, router_topk]\n"
    assert text.count(DEEPSEEK_O_PROJ) == 1 and text.count(router_ops) == 1
    text = text.replace(DEEPSEEK_O_PROJ, DEEPSEEK_O_PROJ.replace("all_reduce", "reduce_scatter"))
    text = text.replace(router_ops, router_ops.rstrip("\n") + router + "\n")
    path = tmp_path / "kernels_deepseek.yaml"
    path.write_text(text)
    model = load_model(GRAPHS_DIR / "deepseek_r1.yaml")
    if passes:
        load_templates_for(path, model)
        return
    with pytest.raises(InputError) as err:
        load_templates_for(path, model)
    assert "kernel 'moe_ffn': operator 'expert_gate_up'" in str(err.value), err.value
