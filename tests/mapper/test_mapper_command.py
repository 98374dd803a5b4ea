"""The ``map`` command on the DeepSeek TP16 experiment, and its bad inputs."""
from __future__ import annotations

import re

import pytest
from conftest import ROOT, deepseek_graph
from mapper_checks import CALL_RESOURCES

from sn40l_sim.commands.cli import main
from sn40l_sim.mapper import confined

EXPERIMENT = str(ROOT / "experiments" / "map_deepseek_tp16.yaml")


def _rows(out: str) -> list[list[str]]:
    lines = out.splitlines()
    rules = [i for i, line in enumerate(lines) if line and set(line) == {"-"}]
    return [line.split() for line in lines[rules[0] + 1:rules[1]]]


def test_decode_map_names_a_bound_for_every_kernel(capsys):
    from sn40l_sim.mapper.graph import clear_memo

    clear_memo()
    assert main(["map", EXPERIMENT, "--phase", "decode"]) == 0
    out = capsys.readouterr().out
    rows = _rows(out)
    names = [r[0] for r in rows]
    assert "*.mla" in names and "*.ffn" in names and "lm_head" in names
    bounds = CALL_RESOURCES | {"hbm", "ddr"}    # the node's memory tiers
    for row in rows:
        assert any(cell in bounds for cell in row), row
    counts = sum(int(r[1][1:]) if r[1].startswith("x") else 1 for r in rows)
    total = re.search(r"^total\s+(\d+) kernels, (\d+) cycles", out, re.M)
    # the experiment verifies two MTP drafts per step: two draft runs after the main model
    assert int(total.group(1)) == counts == len(deepseek_graph("decode", drafts=2).kernels())
    # the full cache's static slot: the prompt and the two drafts written after the last token
    assert "cache 131074 tokens" in out and "2 speculative drafts per sequence verified" in out


def test_map_says_which_configurations_stay_loaded(capsys, tmp_path, monkeypatch):
    # DeepSeek-R1's MLA kernel on every PCU of the four tiles (the decoder not confined to fewer
    # tiles, mapper/confined.py, which may keep it loaded on one tile): no layer kernel stays loaded
    # beside it; only the second draft's one-tile kernels find what the first draft's loaded (the
    # first draft's MLA and FFN take units on other tiles, or fit beside them)
    monkeypatch.setattr(confined, "_confined", lambda *args: [])
    assert main(["map", EXPERIMENT, "--phase", "decode"]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("configurations kept"))
    kept = line.split(": ", 1)[1].split(";")[0].split(", ")
    assert kept and all(name.startswith("MTP1.") and not name.endswith((".mla", ".ffn")) for name in kept), line
    # Llama-3.1-8B at batch 1 on 16 sockets: its four kernels fit side by side and none reloads
    exp = tmp_path / "llama.yaml"
    exp.write_text(f"""kind: experiment
name: llama
hardware: {ROOT / "hw_configs" / "sn40l_node16.yaml"}
model: {ROOT / "graphs" / "llama3_1_8b.yaml"}
parallel: {{prefill: {{tp: 16}}, decode: {{tp: 16}}}}
policies: [{{name: full, policy: full}}]
shape: {{prompt_len: 1024, batch: 1, max_new_tokens: 1024}}
""")
    assert main(["map", str(exp), "--phase", "decode"]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("configurations kept"))
    assert "embedding" in line and "lm_head" in line and "sampling" in line
    assert "0 of 35 calls load theirs (after another graph took the units, 4 more load theirs: " in line


def test_snapstream_decode_reads_a_shorter_cache(capsys):
    assert main(["map", EXPERIMENT, "--phase", "decode", "--policy", "snapstream"]) == 0
    snap = capsys.readouterr().out
    assert main(["map", EXPERIMENT, "--phase", "decode", "--policy", "full"]) == 0
    full = capsys.readouterr().out
    assert "cache 32768 tokens" in snap

    def total(out):
        return int(re.search(r"kernels, (\d+) cycles", out).group(1))

    assert total(snap) < total(full)


def test_the_policy_asked_for_is_mapped_when_prompt_lens_leaves_out_the_shapes_prompt(capsys, tmp_path):
    # prompt_lens without shape.prompt_len: map fell back to the experiment's first point, the full
    # cache's, while its header said snapstream
    exp = tmp_path / "lens.yaml"
    exp.write_text(f"base: {EXPERIMENT}\nprompt_lens: [65536]\n")
    assert main(["map", str(exp), "--phase", "decode", "--policy", "snapstream"]) == 0
    out = capsys.readouterr().out
    assert "policy snapstream" in out and "cache 32768 tokens" in out


def test_prefill_map_with_plot(tmp_path, capsys):
    png = tmp_path / "placement.png"
    assert main(["map", EXPERIMENT, "--phase", "prefill", "--policy", "snapstream", "--plot", str(png),
                 "--plot-kernels", "L03.moe_ffn,L03.snapkv"]) == 0
    out = capsys.readouterr().out
    assert png.stat().st_size > 20000
    assert "*.snapkv" in out and "*.mha" in out


def test_a_kernel_named_twice_in_plot_kernels_is_drawn_once():
    from sn40l_sim.commands.map import _kernel_names

    assert _kernel_names("L03.mha, L03.moe_ffn,L03.mha,") == ["L03.mha", "L03.moe_ffn"]


@pytest.mark.parametrize("extra,message", [
    (["--policy", "nope"], "--policy 'nope' is not a policy of the experiment"),
    (["--plot", "x.png", "--plot-kernels", "L99.nothing"], "no kernel named ['L99.nothing']"),
    (["--batch", "0"], "--batch must be a positive integer"),
    # the kernels to draw mean nothing without a file to draw them in: refused, not ignored
    (["--plot-kernels", "L03.moe_ffn"], "--plot-kernels: draws nothing without --plot FILE.png"),
    # matplotlib picks the format by the suffix: one it cannot write is refused before mapping
    (["--plot", "x.txt"], "--plot: expected a .png, .svg or .pdf file, got 'x.txt'"),
    # no name at all: a ValueError traceback from matplotlib (",") or the default two drawn ("")
    (["--plot", "x.png", "--plot-kernels", ","], "--plot-kernels: expected kernel names separated by commas, got ','"),
    (["--plot", "x.png", "--plot-kernels", ""], "--plot-kernels: expected kernel names separated by commas, got ''"),
])
def test_bad_arguments_exit_2_with_one_line(capsys, tmp_path, extra, message):
    extra = [str(tmp_path / e) if e.endswith((".png", ".txt")) else e for e in extra]
    assert main(["map", EXPERIMENT, "--phase", "decode"] + extra) == 2
    out, err = capsys.readouterr()
    err = err.strip()
    assert len(err.splitlines()) == 1 and message in err
    assert "kernel" not in out   # refused before the graph is mapped: no table printed first


def test_a_batch_that_does_not_fit_names_the_option_and_the_experiment(capsys):
    assert main(["map", EXPERIMENT, "--phase", "decode", "--batch", "100000000"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--batch" in err and EXPERIMENT in err and "does not fit" in err


def test_missing_hardware_file_exits_2(tmp_path, capsys):
    bad = tmp_path / "e.yaml"
    bad.write_text((ROOT / "experiments" / "map_deepseek_tp16.yaml").read_text()
                   .replace("../hw_configs/sn40l_node16.yaml", "nowhere.yaml")
                   .replace("../graphs/", str(ROOT / "graphs") + "/"))
    assert main(["map", str(bad), "--phase", "decode"]) == 2
    err = capsys.readouterr().err
    assert "nowhere.yaml" in err and "not found" in err


def test_map_reads_the_output_length_where_run_does(capsys):
    # llama8b_node8 gives max_new_tokens under serving: only; the decode cache is prompt + 512 - 1 as
    # run's (the last token is never fed back)
    assert main(["map", str(ROOT / "experiments" / "llama8b_node8.yaml"), "--phase", "decode", "--batch", "64"]) == 0
    assert "cache 33279 tokens per sequence" in capsys.readouterr().out


def _two_clock_experiment(tmp_path, prefill_tp: int = 8):
    """Llama-3.1-8B prefilled on an 8-socket node of 1.2 GHz sockets, decoded on SN40L-8."""
    (tmp_path / "slow.yaml").write_text(f"base: {ROOT / 'hw_configs/sn40l.yaml'}\nname: slow\nclock_hz: 1.2 GHz\n"
                                        "stated: {bf16_flops: 479.232 TFLOPS}\n")
    (tmp_path / "node.yaml").write_text(f"base: {ROOT / 'hw_configs/sn40l_node8.yaml'}\nname: slow-8\nsocket: slow.yaml\n")
    exp = tmp_path / "two.yaml"
    exp.write_text(f"""kind: experiment
name: two_clocks
hardware: {ROOT / "hw_configs" / "sn40l_node16.yaml"}
prefill_hardware: node.yaml
model: {ROOT / "graphs" / "llama3_1_8b.yaml"}
parallel: {{prefill: {{tp: {prefill_tp}}}, decode: {{tp: 16}}}}
policies: [{{name: full, policy: full}}]
shape: {{prompt_len: 512, batch: 1}}
""")
    return str(exp)


def test_prefill_maps_onto_the_prefill_hardware(capsys, tmp_path):
    # the prefill of an experiment with prefill_hardware runs on that node in run; map used to map
    # it onto the decode node (SN40L-16 at 1.6 GHz), a floor of another machine's prefill
    exp = _two_clock_experiment(tmp_path)
    assert main(["map", exp, "--phase", "prefill"]) == 0
    out = capsys.readouterr().out
    assert "on slow-8 (8 x slow), prefill" in out and "clock 1.2 GHz" in out
    assert main(["map", exp, "--phase", "decode"]) == 0
    out = capsys.readouterr().out
    assert "on SN40L-16 (16 x SN40L), decode" in out and "clock 1.6 GHz" in out


def test_a_prefill_plan_larger_than_the_prefill_node_is_refused(capsys, tmp_path):
    exp = _two_clock_experiment(tmp_path, prefill_tp=16)
    assert main(["map", exp, "--phase", "prefill"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and "parallel.prefill" in err


def test_an_unknown_plot_kernel_is_answered_with_every_kernel_family(capsys, tmp_path):
    # the hint listed the first four names (embedding, L00.mla, L00.ffn, L01.mla): the MoE layers'
    # and the MTP module's kernels, the ones worth drawing, were nowhere in it
    assert main(["map", EXPERIMENT, "--phase", "decode", "--plot", str(tmp_path / "x.png"),
                 "--plot-kernels", "L03.moe"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("its kernels are embedding, L00-L60.mla, L00-L60.ffn, lm_head, sampling, "
                        "MTP0-MTP1.mtp_proj, MTP0-MTP1.mla, MTP0-MTP1.ffn, MTP0-MTP1.lm_head, MTP0-MTP1.sampling")


def test_every_row_is_named_by_a_pattern_all_its_kernels_match(capsys):
    # DeepSeek-R1's prefill samples after the main model and after its MTP module: the row of the
    # two was named "sampling" x2, which reads as one kernel called twice, while the graph and the
    # trace (run --trace) show "sampling" and "MTP0.sampling"
    from fnmatch import fnmatchcase

    assert main(["map", EXPERIMENT, "--phase", "prefill"]) == 0
    rows = _rows(capsys.readouterr().out)
    from sn40l_sim.ir import ParallelPlan, Shape
    from sn40l_sim.models.builder import build_graph
    from sn40l_sim.models.loader import load_model

    # the prefill that fills the MTP module's cache for the decode's two drafts, as map builds it
    graph = build_graph(load_model(ROOT / "graphs" / "deepseek_r1.yaml"), Shape("prefill", 1, 131072, drafts=2),
                        ParallelPlan(16, 1), expert_loading="all")
    names = [k.name for k in graph.kernels()]
    assert "sampling" in names and "MTP0.sampling" in names
    counted = 0
    for row in rows:
        count = int(row[1][1:]) if row[1].startswith("x") else 1
        matching = [n for n in names if fnmatchcase(n, row[0])]
        assert len(matching) >= count, row[0]
        counted += count
    assert counted == len(names)
    assert ["*sampling", "x2"] == next(r[:2] for r in rows if r[0].endswith("sampling"))


def test_a_decode_map_says_run_decodes_at_the_serving_batch(capsys):
    # map decodes shape.batch (16 here) where run decodes serving.batch (max: the fit's largest), so
    # a user reading the two side by side was comparing different batches without being told
    assert main(["map", EXPERIMENT, "--phase", "decode"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("shape: batch 16,")
    assert lines[2] == ("  (shape.batch; run decodes at serving.batch: max, the largest compiled batch whose KV "
                        "fits, which run prints; --batch N maps another)")
    # asked for a batch, or serving a fixed one equal to the shape's, map says nothing more
    assert main(["map", EXPERIMENT, "--phase", "decode", "--batch", "4"]) == 0
    assert "run decodes at" not in capsys.readouterr().out
    assert main(["map", EXPERIMENT, "--phase", "decode", "--set", "serving.batch=16"]) == 0
    assert "run decodes at" not in capsys.readouterr().out
    # nor for a prefill, which run also runs one prompt at a time
    assert main(["map", EXPERIMENT, "--phase", "prefill"]) == 0
    assert "run decodes at" not in capsys.readouterr().out


def _llama8b_experiment(tmp_path, extra: str) -> str:
    """Llama-3.1-8B on SN40L-8 with 4K prompts, co-located, with ``extra`` lines of YAML."""
    exp = tmp_path / "served.yaml"
    exp.write_text(f"""kind: experiment
name: served
hardware: {ROOT / "hw_configs" / "sn40l_node8.yaml"}
model: {ROOT / "graphs" / "llama3_1_8b.yaml"}
parallel: {{prefill: {{tp: 8}}, decode: {{tp: 8}}}}
policies: [{{name: full, policy: full}}]
shape: {{prompt_len: 4096, batch: 1}}
{extra}""")
    return str(exp)


def test_a_chunked_prefill_map_says_run_serves_the_prompt_in_chunks(capsys, tmp_path):
    # with serving.prefill_chunk run prefills a prompt in chunks (each on its own graph, attending the
    # earlier chunks' keys) and reports their extra as the chunking overhead; map showed the whole
    # prompt's graph without a word, so a user read its total as what run had served the prompt in
    exp = _llama8b_experiment(tmp_path, "serving: {mode: colocated, batch: 1, prefill_chunk: 1024}\n")
    assert main(["map", exp, "--phase", "prefill"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "shape: batch 1, prompt 4096"
    assert lines[2].startswith("  (the whole prompt's graph, run's 'prefill, one prompt'; with serving.prefill_chunk "
                               "1024 run serves the prompt in 4 chunks between decode steps,")
    assert lines[2].endswith("'chunking prefill overhead')")
    # a chunk holding the whole prompt is the unchunked schedule, and decode is not chunked
    for extra, phase in (("serving: {mode: colocated, batch: 1, prefill_chunk: 4096}\n", "prefill"),
                         ("serving: {mode: colocated, batch: 1, prefill_chunk: 1024}\n", "decode"),
                         ("serving: {mode: colocated, batch: 1}\n", "prefill")):
        assert main(["map", _llama8b_experiment(tmp_path, extra), "--phase", phase]) == 0
        assert "chunk" not in capsys.readouterr().out


def test_a_multi_model_map_says_run_serves_the_sections_models(capsys):
    # map maps the experiment's model: line at shape.batch, while run serves multi_model's models,
    # each at its own batch; map said run decodes at serving.batch, which a multi_model run does not use
    assert main(["map", str(ROOT / "experiments" / "multi_model.yaml"), "--phase", "decode"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("multi_model: llama-3.1-8b on SN40L-16")
    assert lines[2] == ("  (the experiment's model: line; run serves the models of multi_model (llama8b, llama70b, "
                        "llama405b), each at its own batch; --set model=FILE and --batch N map another)")
    assert not any("run decodes at serving.batch" in line for line in lines)


def test_a_sweep_map_says_run_runs_the_section_map_does_not_apply(capsys):
    # run runs per_user_speed's four points (the first DeepSeek-R1 with two MTP drafts); map maps the
    # base, Llama-3.1-8B, and said nothing of the sweep
    exp = str(ROOT / "experiments" / "per_user_speed.yaml")
    assert main(["map", exp, "--phase", "decode"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("per_user_speed: llama-3.1-8b on SN40L-16")
    assert lines[2] == ("  (the experiment's base: run runs its sweep: section, over model, serving.speculative, "
                        "which map does not apply; --set PATH=VALUE maps one of its points)")
    # as it says: --set maps a point (the first: DeepSeek-R1 verifying two drafts)
    assert main(["map", exp, "--phase", "decode", "--set", f"model={ROOT / 'graphs' / 'deepseek_r1.yaml'}",
                 "--set", "serving.speculative={drafts: 2, acceptance: 0.8}"]) == 0
    assert "2 speculative drafts per sequence verified, the MTP module run 2 times" in capsys.readouterr().out
    assert main(["map", exp, "--phase", "decode", "--set", f"model={ROOT / 'graphs' / 'deepseek_r1.yaml'}",
                 "--set", "serving.speculative={drafts: 1, acceptance: 0.8}"]) == 0
    assert "1 speculative draft per sequence verified, the MTP module run once" in capsys.readouterr().out
    # an experiment without a sweep says nothing of one
    assert main(["map", EXPERIMENT, "--phase", "decode"]) == 0
    assert "sweep" not in capsys.readouterr().out


def test_a_shape_prompt_left_out_of_prompt_lens_maps_the_point_run_simulates(capsys, tmp_path):
    # prompt_lens [1024] under shape.prompt_len 4096: map resolved SnapStream's quarter of the prompt
    # at the 1,024-token point (a 256-token cache) and built the graph for 4,096 tokens; at 200,000
    # tokens, past Llama-3.1-8B's maximum context, check passed the file and map mapped it
    exp = tmp_path / "lens.yaml"
    for shape_prompt in (4096, 200000):
        exp.write_text(f"kind: experiment\nname: lens\nhardware: {ROOT}/hw_configs/sn40l_node8.yaml\n"
                       f"model: {ROOT}/graphs/llama3_1_8b.yaml\nparallel:\n  prefill: {{tp: 8}}\n  decode: {{tp: 8}}\n"
                       "policies:\n  - {name: snap, policy: snapstream, prompt_fraction: {budget: 0.25}}\n"
                       f"prompt_lens: [1024]\nshape: {{prompt_len: {shape_prompt}, batch: 1}}\n")
        for phase in ("decode", "prefill"):
            assert main(["map", str(exp), "--phase", phase]) == 0
            out = capsys.readouterr().out
            assert f"shape: batch 1, prompt 1024{', cache 256 tokens per sequence' if phase == 'decode' else ''}\n" in out
            assert f"  (shape.prompt_len {shape_prompt} is not one of prompt_lens: this is the policy's point at " \
                   "1024, as run simulates it)\n" in out


def test_map_names_the_datatypes_its_graph_was_built_in(capsys, tmp_path):
    # the weights' and the cache's datatypes set every byte map prints, and an experiment's or a
    # policy entry's model_overrides may change them; map named neither, so FP8 weights or an INT4
    # cache were told only by a smaller memory line
    exp = _llama8b_experiment(tmp_path, "serving: {mode: colocated, batch: 1}\n"
                                        "model_overrides: {weight_dtype: fp8}\n")
    assert main(["map", exp, "--phase", "decode", "--set", "model_overrides.kv_dtype=int4",
                 "--set", "model_overrides.kv_quant.group=32"]) == 0
    assert ("datatypes: weights fp8 (FP32 scales a 128 x 128 block), KV cache int4 (5 bits an element with "
            "its scales), activations bf16\n") in capsys.readouterr().out
    assert main(["map", EXPERIMENT, "--phase", "decode", "--batch", "1"]) == 0
    assert ("datatypes: weights fp8 (FP32 scales a 128 x 128 block; embedding, lm_head, router, norms bf16), "
            "KV cache bf16, activations bf16\n") in capsys.readouterr().out
