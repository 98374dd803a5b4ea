"""A kernel template must run every operator of a layer once, in dataflow order
(sn40l_sim.models.dataflow), and reduce its row-parallel GEMMs' partial sums
(sn40l_sim.models.reductions): one that drops or repeats an operator, or drops the collective that
reduces, is refused where it is loaded, naming its file and kernel, instead of building a graph with
silently wrong numbers."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from sn40l_sim.commands import cli
from sn40l_sim.errors import InputError
from sn40l_sim.models.dataflow import dataflow_problem
from sn40l_sim.models.loader import load_model
from sn40l_sim.models.reductions import REDUCING, unreduced_row_parallel
from sn40l_sim.models.template import GRAPHS_DIR, template_for

REPO = Path(__file__).resolve().parents[2]

#: (what is changed in graphs/kernels_llama.yaml, by what, the words the error must contain)
BROKEN = {
    "ffn_gemms_dropped": ("operators: [ffn_norm, dense_gate_up, dense_act, dense_down, ffn_residual]",
                          "operators: [ffn_norm, ffn_residual]",
                          ["prefill.kernels.ffn.operators", "'ffn_residual' reads activation 'ffn_out'"]),
    "flash_pv_twice": ("operators: [flash_qk, flash_softmax, flash_pv]",
                       "operators: [flash_qk, flash_softmax, flash_pv, flash_pv]",
                       ["prefill.kernels.attention.operators", "'flash_pv' appears twice in dense_layer"]),
    "softmax_dropped": ("operators: [flash_qk, flash_softmax, flash_pv]", "operators: [flash_qk, flash_pv]",
                        ["prefill.kernels.attention.operators", "'flash_pv' reads activation 'probs'"]),
    "residual_dropped": ("operators: [o_proj, attn_residual]", "operators: [o_proj]",
                         ["writes activation 'attn_proj'", "no later operator of its dense layer reads"]),
}


def _broken_model(tmp_path: Path, old: str, new: str) -> Path:
    text = (GRAPHS_DIR / "kernels_llama.yaml").read_text()
    assert text.count(old) == 1, old
    (tmp_path / "kernels_llama.yaml").write_text(text.replace(old, new))
    shutil.copy(GRAPHS_DIR / "llama3_1_8b.yaml", tmp_path / "llama3_1_8b.yaml")
    return tmp_path / "llama3_1_8b.yaml"


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_template_that_drops_or_repeats_an_operator_is_refused(tmp_path: Path, case: str) -> None:
    old, new, words = BROKEN[case]
    with pytest.raises(InputError) as info:
        load_model(_broken_model(tmp_path, old, new))
    message = str(info.value)
    assert "kernels_llama.yaml" in message
    for word in words:
        assert word in message


def test_the_shipped_templates_pass_for_every_shipped_model() -> None:
    for path in sorted(GRAPHS_DIR.glob("*.yaml")):
        if not path.name.startswith("kernels_"):
            assert load_model(path).name   # the loader checks the model's template


def test_check_refuses_an_experiment_whose_template_drops_an_operator(tmp_path: Path, capsys) -> None:
    old, new, words = BROKEN["ffn_gemms_dropped"]
    _broken_model(tmp_path, old, new)
    text = (REPO / "experiments" / "llama8b_node8.yaml").read_text()
    hardware = (REPO / "hw_configs" / "sn40l_node8.yaml").as_posix()
    assert "graph_options" not in text
    text = text.replace("../hw_configs/sn40l_node8.yaml", hardware) + "graph_options: {template: kernels_llama.yaml}\n"
    text = text.replace("../graphs/llama3_1_8b.yaml", (GRAPHS_DIR / "llama3_1_8b.yaml").as_posix())
    exp = tmp_path / "exp.yaml"
    exp.write_text(text)
    # the CLI's main in this process (a traceback would be an exception here, not a line on stderr)
    status, err = cli.main(["check", str(exp)]), capsys.readouterr()
    assert status == 2, err.out + err.err
    assert "Traceback" not in err.err
    assert "kernels_llama.yaml" in err.err and words[1] in err.err


@pytest.mark.parametrize("model_file", ["deepseek_r1.yaml", "llama3_1_8b.yaml"])
def test_every_operator_left_out_of_a_shipped_template_is_refused(model_file):
    # 22 of them were accepted: operators that named no activation (an expert's gate/up GEMM, the
    # FFN's activation), reads of what an earlier layer left (a MoE layer's q_norm reading the dense
    # layer's q_a), a layer writing no cache; each gave a graph with silently wrong numbers

    model = load_model(GRAPHS_DIR / model_file)
    template = template_for(model)
    checked = 0
    for phase in ("prefill", "decode"):
        spec = getattr(template, phase)
        assert dataflow_problem(template, model, phase) is None
        for kernel_id, entry in spec.kernels.items():
            for op in entry.operators:
                kept = tuple(o for o in entry.operators if o != op)
                if not kept:
                    continue
                kernels = {**spec.kernels, kernel_id: entry.model_copy(update={"operators": kept})}
                broken = template.model_copy(update={phase: spec.model_copy(update={"kernels": kernels})})
                assert dataflow_problem(broken, model, phase) is not None, f"{phase} {kernel_id} without {op}"
                checked += 1
    assert checked > 30


@pytest.mark.parametrize("entry,words", [
    ("{size: hidden, kind: all_reduce, overlapped: true, after: dense_down}", ["got 'dense_down'"]),
    ("{size: hidden, kind: all_reduce, after: o_proj}", ["got 'o_proj' on a collective not overlapped"]),
])
def test_a_collective_after_an_operator_names_one_of_its_kernel(tmp_path: Path, entry: str, words: list[str]) -> None:
    # an overlapped collective's window is its operator's part of its kernel's stream
    # (sn40l_sim/mapper/windows.py): an operator of another kernel, or a collective not overlapped, has none
    old = "operators: [o_proj, attn_residual]\n      collectives: [{size: hidden, kind: all_reduce, overlapped: true}]"
    new = f"operators: [o_proj, attn_residual]\n      collectives: [{entry}]"
    with pytest.raises(InputError) as info:
        load_model(_broken_model(tmp_path, old, new))
    message = str(info.value)
    assert "kernels_llama.yaml" in message and "prefill.kernels.o_proj.collectives[0].after" in message
    for word in words:
        assert word in message


def test_a_kernel_whose_partial_sums_are_never_reduced_is_refused(tmp_path: Path) -> None:
    # the FFN's all-reduce deleted: the builder took the kernel as written, and Llama-3.1-8B's 32K
    # prefill on 8 sockets ran in 0.284 s instead of 0.289 s, its down projection's partial sums
    # never summed (docs/robustness.md)
    old = ("operators: [ffn_norm, dense_gate_up, dense_act, dense_down, ffn_residual]\n"
           "      collectives: [{size: hidden, kind: all_reduce, overlapped: true}]")
    with pytest.raises(InputError) as info:
        load_model(_broken_model(tmp_path, old, old.split("\n")[0]))
    message = str(info.value)
    assert "kernels_llama.yaml" in message and "prefill.kernels.ffn.collectives" in message
    assert "'dense_down' reads a row-parallel weight" in message


@pytest.mark.parametrize("kept,words", [
    # the all-reduce after o_proj deleted: the check looked only at the kernel's last row-parallel
    # GEMM, which the other all-reduce still reduced, so `check` passed and the decode step ran
    # without o_proj's reduction (Llama-3.1-8B, batch 8 on 8 sockets: 45.5 us a layer, not 45.6)
    ("        - {size: hidden, kind: all_reduce, overlapped: true, after: dense_down}",
     ["'o_proj' reads a row-parallel weight", "after 'o_proj' and before 'dense_down'", "2 groups"]),
    # both placed after the down GEMM: the FFN's norm and GEMMs would read o_proj's partial sums
    ("        - {size: hidden, kind: all_reduce, overlapped: true, after: dense_down}\n" * 2,
     ["'o_proj' reads a row-parallel weight", "after 'o_proj' and before 'dense_down'"]),
])
def test_a_fused_decoder_reduces_each_row_parallel_gemm_before_it_is_read(tmp_path: Path, kept: str,
                                                                         words: list[str]) -> None:
    old = ("        - {size: hidden, kind: all_reduce, overlapped: true, after: o_proj}\n"
           "        - {size: hidden, kind: all_reduce, overlapped: true, after: dense_down}\n")
    with pytest.raises(InputError) as info:
        load_model(_broken_model(tmp_path, old, kept.rstrip("\n") + "\n"))
    message = str(info.value)
    assert "kernels_llama.yaml" in message and "decode.kernels.decoder.collectives" in message
    for word in words:
        assert word in message


@pytest.mark.parametrize("old,new,words", [
    # two kernels of one layer: the builder refused with "kernel template gives two kernels of one
    # layer the same name", located at the experiment's line 1 (graph_options), while `check` of
    # the template passed
    ("    o_proj:\n      operators: [o_proj, attn_residual]", "    o_proj:\n      name: ffn\n      operators: [o_proj, attn_residual]",
     ["prefill.kernels.o_proj.name", "kernels 'o_proj' and 'ffn' of prefill's dense_layer are both named 'ffn'"]),
    # the head's and the tail's calls are named without a layer
    ("    sampling:\n      operators: [sample]\n      collectives: [{size: candidates, kind: all_gather}]\n\ndecode:",
     "    sampling:\n      name: embedding\n      operators: [sample]\n"
     "      collectives: [{size: candidates, kind: all_gather}]\n\ndecode:",
     ["prefill.kernels.sampling.name", "prefill's head and tail are both named 'embedding'"]),
])
def test_two_kernels_one_call_name_is_refused_in_the_template(tmp_path: Path, old: str, new: str,
                                                               words: list[str]) -> None:
    from sn40l_sim.commands.check import check_file

    _broken_model(tmp_path, old, new)
    for path in (tmp_path / "llama3_1_8b.yaml", tmp_path / "kernels_llama.yaml"):
        with pytest.raises(InputError) as info:
            check_file(path)
        message = str(info.value)
        assert "kernels_llama.yaml" in message and "expected distinct names" in message
        for word in words:
            assert word in message


@pytest.mark.parametrize("old,new,words", [
    # the decoder's all-reduce after o_proj written twice: o_proj's rows were summed over the 8 sockets
    # twice (eight times the output projection) and the decode step paid a third all-reduce a layer
    ("        - {size: hidden, kind: all_reduce, overlapped: true, after: o_proj}\n",
     "        - {size: hidden, kind: all_reduce, overlapped: true, after: o_proj}\n" * 2,
     ["decode.kernels.decoder.collectives[3]", "all_reduce of size hidden reduces no row-parallel GEMM's partial sums",
      "has 2 group(s)"]),
    # an all-reduce on the attention kernel, which reads no row-parallel weight
    ("    attention:\n      operators: [flash_qk, flash_softmax, flash_pv]\n",
     "    attention:\n      operators: [flash_qk, flash_softmax, flash_pv]\n"
     "      collectives: [{size: hidden, kind: all_reduce}]\n",
     ["prefill.kernels.attention.collectives[0]", "has no group(s) of row-parallel GEMMs and so nothing partial"]),
])
def test_a_reduction_of_nothing_partial_is_refused(tmp_path: Path, old: str, new: str, words: list[str]) -> None:
    with pytest.raises(InputError) as info:
        load_model(_broken_model(tmp_path, old, new))
    message = str(info.value)
    assert "kernels_llama.yaml" in message and "multiplies it by the TP degree" in message
    for word in words:
        assert word in message


@pytest.mark.parametrize("model_file", ["deepseek_r1.yaml", "llama3_1_8b.yaml"])
def test_every_reduction_left_out_of_a_shipped_template_is_refused_or_another_reduces(model_file):
    # each all-reduce, reduce-scatter and hidden-wide all-gather removed in turn: the kernel is
    # refused unless another of its collectives still completes its last row-parallel output
    model = load_model(GRAPHS_DIR / model_file)
    template = template_for(model)
    refused = kept = 0
    for phase in ("prefill", "decode"):
        spec = getattr(template, phase)
        assert unreduced_row_parallel(template, model, phase) is None
        for kernel_id, entry in spec.kernels.items():
            for i, coll in enumerate(entry.collectives):
                if coll.kind not in REDUCING and not (coll.kind == "all_gather" and coll.size == "hidden"):
                    continue
                left = entry.collectives[:i] + entry.collectives[i + 1:]
                kernels = {**spec.kernels, kernel_id: entry.model_copy(update={"collectives": left})}
                broken = template.model_copy(update={phase: spec.model_copy(update={"kernels": kernels})})
                problem = unreduced_row_parallel(broken, model, phase)
                others = [c for c in left if c.kind in REDUCING or (c.kind == "all_gather" and c.size == "hidden")]
                if problem is None:
                    assert others, f"{phase} {kernel_id} without collective {i}"
                    kept += 1
                else:
                    assert problem[0] == (phase, "kernels", kernel_id, "collectives")
                    refused += 1
    # refused: Llama-3.1's embedding (each phase), prefill o_proj and FFN, and the decoder's two
    # all-reduces (after o_proj and after the down projection: two groups of row-parallel GEMMs, the
    # residual add reading the first's partial sums); DeepSeek-R1's embedding (each phase), prefill
    # o_proj, either of the dense prefill o_proj_ffn's two and the MoE gather of the hidden rows,
    # decode MLA (twice: with and without the router), FFN and MoE. Kept (the other collective of the
    # kernel still runs after its one row-parallel operator, the embedding lookup, and the rule does
    # not tell which collective carries which activation of the same width): either of the MTP
    # projection's two in each phase
    assert (refused, kept) == {"llama3_1_8b.yaml": (6, 0), "deepseek_r1.yaml": (10, 4)}[model_file]


def test_check_of_a_template_alone_checks_it_with_the_models_beside_it(tmp_path: Path) -> None:
    # checked alone, a template with its FFN all-reduce deleted passed `check` (the fuzzer's find):
    # the models beside it that name it now check it, and a model beside it that is itself broken is
    # left to its own check
    from sn40l_sim.commands.check import check_file

    old = ("operators: [ffn_norm, dense_gate_up, dense_act, dense_down, ffn_residual]\n"
           "      collectives: [{size: hidden, kind: all_reduce, overlapped: true}]")
    _broken_model(tmp_path, old, old.split("\n")[0])
    with pytest.raises(InputError) as info:
        check_file(tmp_path / "kernels_llama.yaml")
    assert "kernels_llama.yaml" in info.value.file and "'dense_down' reads a row-parallel weight" in str(info.value)
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    for name in ("kernels_llama.yaml", "llama3_1_8b.yaml"):
        shutil.copy(GRAPHS_DIR / name, shipped / name)
    (shipped / "broken.yaml").write_text((GRAPHS_DIR / "llama3_1_8b.yaml").read_text().replace(
        "hidden: 4096", "hidden: -1"))
    assert check_file(shipped / "kernels_llama.yaml") == "kernels (checked with llama3_1_8b.yaml)"


def test_a_template_edited_in_the_same_process_is_read_again(tmp_path: Path) -> None:
    # the templates were cached by path alone: a notebook that edited one and loaded its model again
    # got the old template, checks and all
    from sn40l_sim.models.template import load_templates

    path = tmp_path / "kernels_llama.yaml"
    shutil.copy(GRAPHS_DIR / "kernels_llama.yaml", path)
    assert load_templates(path).flash.block_q == 8192
    path.write_text(path.read_text().replace("block_q: 8192", "block_q: 4096"))
    assert load_templates(path).flash.block_q == 4096


def test_check_of_a_template_with_a_date_for_a_name_is_one_line(tmp_path: Path, capsys) -> None:
    # the fuzzer's find: the models beside a template were read with PyYAML, which turns 2024-13-45
    # into a date and raised ValueError on the template itself
    from sn40l_sim.commands.cli import main

    path = tmp_path / "kernels_llama.yaml"
    path.write_text((GRAPHS_DIR / "kernels_llama.yaml").read_text().replace("name: llama-3.1-sn40l", "name: 2024-13-45"))
    shutil.copy(GRAPHS_DIR / "llama3_1_8b.yaml", tmp_path / "llama3_1_8b.yaml")
    (tmp_path / "not_a_mapping.yaml").write_text("- 1\n- 2\n")
    assert main(["check", str(path)]) == 0
    assert "(kind: kernels (checked with llama3_1_8b.yaml))" in capsys.readouterr().out


@pytest.mark.parametrize("model_file", ["deepseek_r1.yaml", "llama3_1_8b.yaml"])
def test_a_reduction_of_another_size_than_what_it_sums_is_refused(model_file):
    # the reduction rule looked at the collective's kind alone: DeepSeek-R1's decode MoE all-reduce
    # given the MLA latent's size (size: latent) passed, and map's step total fell by 0.14 ms, summing nothing
    # the kernel wrote. Each reducing collective is given every other size formula in turn: one of
    # another size than every activation its kernel writes from the partial GEMM on is refused,
    # unless another collective of the kernel still reduces
    from sn40l_sim.ir import ParallelPlan, Shape
    from sn40l_sim.models.context import Ctx
    from sn40l_sim.models.dataflow import PROBE_TOKENS
    from sn40l_sim.models.formulas import sizes

    model = load_model(GRAPHS_DIR / model_file)
    template = template_for(model)
    known = sizes(template.attention)
    refused = 0
    for phase in ("prefill", "decode"):
        spec = getattr(template, phase)
        shape = Shape("prefill", 1, PROBE_TOKENS) if phase == "prefill" else Shape("decode", 1, 0, kv_len=PROBE_TOKENS)
        ctx = Ctx(model, shape, ParallelPlan(tp=2), template)
        for kernel_id, entry in spec.kernels.items():
            for i, coll in enumerate(entry.collectives):
                if coll.kind not in REDUCING:
                    continue
                for other in sorted(known):
                    try:
                        differs = known[other](ctx) != known[coll.size](ctx)
                    except (AttributeError, KeyError, TypeError):   # a formula of a module the model lacks
                        continue
                    if not differs:
                        continue
                    changed = (*entry.collectives[:i], coll.model_copy(update={"size": other}), *entry.collectives[i + 1:])
                    kernels = {**spec.kernels, kernel_id: entry.model_copy(update={"collectives": changed})}
                    broken = template.model_copy(update={phase: spec.model_copy(update={"kernels": kernels})})
                    problem = unreduced_row_parallel(broken, model, phase)
                    if problem is not None:
                        # at the collective itself when another one of the kernel reduces in its place:
                        # it then sums nothing partial
                        assert problem[0] in ((phase, "kernels", kernel_id, "collectives"),
                                              (phase, "kernels", kernel_id, "collectives", i))
                        refused += 1
    assert refused >= 10
    if model_file == "deepseek_r1.yaml":
        moe = template.decode.kernels["moe_ffn"]
        latent = (moe.collectives[0].model_copy(update={"size": "latent"}),)
        kernels = {**template.decode.kernels, "moe_ffn": moe.model_copy(update={"collectives": latent})}
        broken = template.model_copy(update={"decode": template.decode.model_copy(update={"kernels": kernels})})
        assert "of the size of what it or a later operator" in unreduced_row_parallel(broken, model, "decode")[1]
