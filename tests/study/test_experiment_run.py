"""``python -m sn40l_sim run`` end to end with the real engine, mapper, graphs and hardware files, on a
small model so it stays quick: determinism, and infeasible batches or contexts exiting 2."""
from __future__ import annotations

import json
import textwrap
import warnings
from pathlib import Path

import pytest

from sn40l_sim.commands.cli import main
from sn40l_sim.report.outputs import read_status

REPO = Path(__file__).resolve().parents[2]


def experiment(tmp_path, prompt=4096, batch="max", name="e.yaml"):
    text = textwrap.dedent(f"""\
        kind: experiment
        name: small
        hardware: {REPO / 'hw_configs/sn40l_node8.yaml'}
        model: {REPO / 'graphs/llama3_1_8b.yaml'}
        parallel:
          prefill: {{tp: 8}}
          decode: {{tp: 8, attention_dp: 8}}
        policies:
          - {{name: full, policy: full}}
          - {{name: snap, policy: snapstream, prompt_fraction: {{budget: 0.25}}}}
        shape: {{prompt_len: {prompt}}}
        workload:
          kind: poisson
          rate_per_s: 50
          count: 12
          output_len: {{dist: uniform, low: 2, high: 16}}
        serving:
          batch: {batch}
          batch_sizes: [1, 2, 4, 8, 16]
          max_new_tokens: 16
          seed: 3
        """)
    path = tmp_path / name
    path.write_text(text)
    return path, text


def test_two_runs_write_byte_identical_results(tmp_path, capsys):
    path, _ = experiment(tmp_path)
    assert main(["run", str(path), "--out", str(tmp_path / "a"), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert main(["run", str(path), "--out", str(tmp_path / "b"), "--quiet"]) == 0
    for name in ("results.json", "results.csv"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert (tmp_path / "a" / "throughput.png").stat().st_size > 0
    records = json.loads((tmp_path / "a" / "results.json").read_text())
    # the simulator's speed (wall-clock, so not in the results files) is printed and in status.json
    assert all("speed" not in r for r in records) and "speed (simulated s / wall s)" in out
    speed = read_status(tmp_path / "a")["speed"]
    assert [s["name"] for s in speed] == ["full", "snap"]
    for s in speed:
        assert s["wall_s"] > 0 and s["ratio"] == pytest.approx(s["simulated_s"] / s["wall_s"], rel=1e-6)
    assert [r["name"] for r in records] == ["full", "snap"]
    assert [r["kv_len"] for r in records] == [4096 + 16 - 1, 1024]   # 16 tokens, the last never fed back
    for r in records:
        assert r["batch"] == r["max_batch"] == 16  # the largest compiled size here; the KV fits easily
        assert r["throughput"]["requests"] == 12
        assert r["ttft_s"] >= r["prefill_s"] > 0
    assert "decode tokens/s (reported)" in out and "snap" in out.splitlines()[1]


def line_of(text, needle):
    return next(i for i, line in enumerate(text.splitlines(), start=1) if needle in line)


def test_an_explicit_batch_beyond_memory_exits_2_with_the_numbers(tmp_path, capsys):
    # 8K-token full caches of Llama-3.1-8B are 1.08 GB: 4096 sequences (512 per socket) cannot fit
    path, text = experiment(tmp_path, prompt=8192, batch=4096)
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"{path}:{line_of(text, 'batch: 4096')}: serving.batch: a batch of 4096 does not fit" in err
    assert "GiB" in err  # the memory placer's numbers
    # refused before any output is touched, as check refuses it (the batch's graph is built, not
    # simulated: sn40l_sim/study/preflight.py), so the folder holds nothing, not even a status
    assert not (tmp_path / "out" / "results.json").exists() and read_status(tmp_path / "out") is None


def test_a_model_whose_weights_alone_do_not_fit_is_blamed_not_the_prompt(tmp_path, capsys):
    # 2,000 layers of Llama-3.1-8B are about 850 GB of BF16 weights, 106 GB per socket of 8
    path, text = experiment(tmp_path)
    path.write_text(text.replace("parallel:", "model_overrides: {layers: 2000}\nparallel:"))
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"{path}:{line_of(text, 'parallel:')}: model_overrides: the model does not fit on the decode node" in err
    assert "whatever the batch and prompt" in err and "weights" in err
    # tp 8 already spans the 8-socket node: a wider plan would be refused, so the hint is a bigger node
    assert "a decode node with more sockets than SN40L-8's 8 (the experiment's hardware)" in err, err
    assert "parallel.decode.tp" not in err


def test_a_prefill_plan_whose_weights_share_does_not_fit_is_blamed_not_the_prompt(tmp_path, capsys):
    # 400 layers of Llama-3.1-8B (about 200 GB of BF16 weights) fit 8 decode sockets, not one
    # prefill socket: that was reported at prompt_lens, as if a shorter prompt would do
    path, text = experiment(tmp_path)
    path.write_text(text.replace("parallel:", "model_overrides: {layers: 400}\nparallel:")
                    .replace("prefill: {tp: 8}", "prefill: {tp: 1}"))
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"{path}:{line_of(text, 'prefill: {tp: 8}') + 1}: parallel.prefill: the model does not fit on a prefill " \
           "node at tp=1, whatever the prompt" in err, err
    assert "use more sockets (parallel.prefill.tp, up to the 8 of SN40L-8)" in err, err


def test_a_context_that_does_not_fit_at_batch_1_exits_2(tmp_path, capsys):
    # a 1M-token full cache of Llama-3.1-8B is 137 GB, more than a socket's HBM (on a long-context
    # variant: the model's own maximum context, 128K tokens, refuses the prompt before memory does)
    path, text = experiment(tmp_path, prompt=1048576)
    for variant in (False, True):
        if variant:
            # 2M: the prompt and the tokens generated after it
            path.write_text(text.replace("parallel:", "model_overrides: {max_context: 2097152}\nparallel:"))
        assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err
        # the experiment gives its prompt in shape.prompt_len (it has no prompt_lens): the line names that field
        assert f"{path}:{line_of(text, 'shape: {prompt_len') + variant}: shape.prompt_len: " in err
        assert ("not even 1" if variant else "exceeds the maximum context of llama-3.1-8b, 131072 tokens") in err


def test_bad_graph_options_and_oversized_plans_are_located_in_the_experiment(tmp_path, capsys):
    path, text = experiment(tmp_path)
    bad_option = tmp_path / "options.yaml"
    bad_option.write_text(text + "graph_options: {expert_loading: some}\n")
    assert main(["run", str(bad_option), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"{bad_option}:{len(text.splitlines()) + 1}: graph_options.expert_loading: expected 'touched' or 'all'" in err
    too_big = tmp_path / "plan.yaml"
    too_big.write_text(text.replace("decode: {tp: 8, attention_dp: 8}", "decode: {tp: 16, attention_dp: 16}"))
    assert main(["run", str(too_big), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "parallel.decode: the decode plan needs 16 sockets; SN40L-8 has 8" in err


def test_a_memory_order_naming_a_missing_tier_is_located_in_the_experiment(tmp_path, capsys):
    path, text = experiment(tmp_path)
    bad = tmp_path / "order.yaml"
    bad.write_text(text + "memory:\n  order: [hbm, cxl]\n")
    assert main(["run", str(bad), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"{bad}:{len(text.splitlines()) + 2}: memory.order[1]: the hardware (SN40L-8) has no memory tier 'cxl'" in err


def test_kv_offload_to_ddr_is_one_experiment_option(tmp_path, capsys):
    # 64K-token full caches of Llama-3.1-8B are 8.6 GB: HBM holds four per socket (batch 32 under
    # attention DP8); with KV allowed to spill to DDR the batch grows, and each step reads DDR
    path, text = experiment(tmp_path, prompt=65536)
    text = text.replace("batch_sizes: [1, 2, 4, 8, 16]", "batch_sizes: [8, 16, 32, 64, 128]")
    path.write_text(text)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(["run", str(path), "--out", str(tmp_path / "hbm"), "--quiet", "--no-plot"]) == 0
    assert not [w for w in caught if "memory.may_spill lists kv" in str(w.message)]
    offload = tmp_path / "offload.yaml"
    offload.write_text(text + "memory: {may_spill: [activations, kv]}\n")
    # the planner is told: the largest batch reads DDR at every step, and which batch stays in HBM
    with pytest.warns(UserWarning, match=r"serving.batch \(point full\): max chose batch 128, whose KV puts .*"
                      r"the largest compiled batch whose KV stays in HBM is 32 \(serving.batch: 32 runs it\)"):
        assert main(["run", str(offload), "--out", str(tmp_path / "ddr"), "--quiet", "--no-plot"]) == 0
    capsys.readouterr()
    in_hbm, spilled = (json.loads((tmp_path / d / "results.json").read_text())[0] for d in ("hbm", "ddr"))
    assert (in_hbm["max_batch"], spilled["max_batch"]) == (32, 128)
    assert in_hbm["memory"]["ddr"]["kv"] == 0 < spilled["memory"]["ddr"]["kv"]
    assert "would spill to DDR; the serving model keeps weights and KV in HBM" in in_hbm["max_batch_limit"]
    # per sequence, a step that reads part of its cache from DDR is slower
    assert spilled["decode_step_s"] / spilled["batch"] > in_hbm["decode_step_s"] / in_hbm["batch"]


def test_a_cxl_tier_written_only_in_yaml_runs_end_to_end(tmp_path, capsys):
    """A node file adds a CXL tier through socket_overrides (no Python knows it); the experiment
    offloads KV to it. run places the KV there, the engine streams it through the tier's own
    channel, and results.json and the printed table show it."""
    node = tmp_path / "cxl_node.yaml"
    node.write_text(f"base: {REPO / 'hw_configs/sn40l_node8.yaml'}\nname: SN40L-8+CXL\nsocket_overrides:\n"
                    "  memory:\n    cxl: {units_per_die: 1, capacity_bytes_per_unit: 512 GiB, "
                    "bytes_per_s_per_unit: 32 GB/s, latency_s: 600 ns, efficiency: 0.7}\n")
    path, text = experiment(tmp_path, prompt=65536)
    text = text.replace("batch_sizes: [1, 2, 4, 8, 16]", "batch_sizes: [32, 64]")
    text = text.replace(str(REPO / "hw_configs/sn40l_node8.yaml"), str(node))
    path.write_text(text + "memory: {order: [hbm, cxl], may_spill: [activations, kv]}\n")
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--no-plot"]) == 0
    out = capsys.readouterr().out
    record = json.loads((tmp_path / "out" / "results.json").read_text())[0]
    assert record["hardware"] == "SN40L-8+CXL" and record["batch"] == 64
    assert sorted(record["memory"]) == ["cxl", "ddr", "hbm"]        # results.json sorts its keys
    assert record["memory"]["cxl"]["kv"] > 0 and record["memory"]["ddr"]["kv"] == 0
    assert record["utilisation"]["decode_step"]["cxl"] > 0       # the tier's channel was busy
    # the printed table's memory rows follow the socket's tiers, fastest first
    rows = [line.split("/socket")[0] for line in out.splitlines()
            if "/socket" in line and not line.startswith("prefill node")]   # the decode node's
    assert list(dict.fromkeys(rows)) == ["HBM", "DDR", "CXL"], out


def test_speculation_errors_are_one_line_naming_the_field(tmp_path, capsys):
    _, text = experiment(tmp_path)
    cases = [
        # a model without an MTP module has nothing to draft with
        ("  speculative: {drafts: 2, acceptance: 0.8}\n",
         "serving.speculative.drafts: model 'llama-3.1-8b' has no mtp section"),
        ("  speculative: {drafts: 2, acceptance: 2}\n", "serving.speculative.acceptance: expected an acceptance probability from 0 to 1"),
        # the former multiplier: refused, saying what to write instead
        ("  tokens_per_forward: 2.4\n", "serving.tokens_per_forward: no longer a multiplier"),
    ]
    for i, (line, message) in enumerate(cases):
        bad = tmp_path / f"spec{i}.yaml"
        bad_text = text.replace("  seed: 3\n", "  seed: 3\n" + line)
        bad.write_text(bad_text)
        assert main(["run", str(bad), "--quiet"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err
        assert f"{bad}:{line_of(bad_text, line.strip())}: {message}" in err
    options = tmp_path / "include_mtp.yaml"
    options.write_text(text + "graph_options: {include_mtp: true}\n")
    assert main(["run", str(options), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "graph_options.include_mtp: the MTP module runs as the draft" in err and "serving.speculative" in err


def test_shape_batch_without_serving_batch_is_warned_when_max_serves_another(tmp_path):
    # shape.batch is map's graph; run serves serving.batch (max when not given), so a file meaning
    # "batch 1" with shape.batch alone was timed at the largest batch that fits without a word
    path, text = experiment(tmp_path)
    lone = tmp_path / "lone.yaml"
    lone.write_text(text.replace("shape: {prompt_len: 4096}", "shape: {prompt_len: 4096, batch: 1}")
                    .replace("  batch: max\n", ""))
    with pytest.warns(UserWarning, match=r"lone.yaml:\d+: shape.batch \(point full\): 1 is the batch of map's graph; "
                                         r"run serves serving.batch, which is max when not given and chose 16 here"):
        assert main(["run", str(lone), "--out", str(tmp_path / "lone"), "--quiet", "--no-plot"]) == 0
    # serving.batch written (max or a number): the file says what it serves, no warning
    both = tmp_path / "both.yaml"
    both.write_text(text.replace("shape: {prompt_len: 4096}", "shape: {prompt_len: 4096, batch: 1}"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(["run", str(both), "--out", str(tmp_path / "both"), "--quiet", "--no-plot"]) == 0
    assert not [w for w in caught if "shape.batch" in str(w.message)]


def test_drafts_with_a_template_lacking_the_mtp_blocks_are_located_at_what_the_user_wrote(tmp_path, capsys):
    # an MTP module added to a Llama model whose template shards its tensors but runs no MTP block:
    # refused at serving.speculative.drafts, naming the template (the experiment has no graph_options,
    # where the graph builder's own check put it)
    template = (REPO / "graphs/kernels_llama.yaml").read_text()
    assert template.count("  dense_down: row\n") == 1
    (tmp_path / "k.yaml").write_text(template.replace("  dense_down: row\n", "  dense_down: row\n" + "".join(
        f"  {t}: replicated\n" for t in ("mtp_enorm", "mtp_hnorm", "mtp_proj", "mtp_final_norm"))))
    (tmp_path / "m.yaml").write_text(f"kind: model\nbase: {REPO / 'graphs/llama3_1_8b.yaml'}\nname: llama-mtp\n"
                                     "mtp: {modules: 1}\nkernels: k.yaml\n")
    _, text = experiment(tmp_path)
    line = "  speculative: {drafts: 2, acceptance: 0.8}\n"
    bad_text = text.replace(f"model: {REPO / 'graphs/llama3_1_8b.yaml'}", f"model: {tmp_path / 'm.yaml'}") \
        .replace("  seed: 3\n", "  seed: 3\n" + line)
    bad = tmp_path / "drafts.yaml"
    bad.write_text(bad_text)
    for command in ("check", "run"):
        assert main([command, str(bad)] + (["--quiet"] if command == "run" else [])) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err
        assert (f"{bad}:{line_of(bad_text, line.strip())}: serving.speculative.drafts: the kernel template "
                f"'{tmp_path / 'k.yaml'}' of model 'llama-mtp' has no mtp_head / mtp_tail blocks in prefill and decode") in err
    # named by graph_options.template instead, the template is blamed there
    named = tmp_path / "named.yaml"
    named.write_text(bad_text.replace(f"model: {tmp_path / 'm.yaml'}", "model: m.yaml")
                     + "graph_options: {template: k.yaml}\n")
    assert main(["check", str(named)]) == 2
    err = capsys.readouterr().err
    assert "graph_options.template: this kernel template has no mtp_head / mtp_tail blocks" in err


def test_simulate_points_takes_a_path_as_simulate_experiment_does(tmp_path):
    # a str gave AttributeError: 'str' object has no attribute 'spec'; now the file is loaded, and a
    # missing one is the InputError run prints
    from sn40l_sim.errors import InputError
    from sn40l_sim.hardware.loader import load_hardware
    from sn40l_sim.study.runner import simulate_points
    node = load_hardware(Path(__file__).resolve().parents[2] / "hw_configs" / "sn40l_node8.yaml")
    with pytest.raises(InputError, match="file not found") as info:
        simulate_points(str(tmp_path / "missing.yaml"), node, None, serve=False)
    assert info.value.file == str(tmp_path / "missing.yaml")


def test_a_max_batch_at_the_end_of_batch_sizes_is_not_called_a_memory_limit(tmp_path, capsys):
    """Llama-3.1-8B's 4K caches leave HBM room far past batch 16, the last of the experiment's
    batch_sizes: the maximum is the list's, and run and results.json say so, where the table's
    "max batch" row read as memory's limit and max_batch_limit was empty."""
    path, _ = experiment(tmp_path)
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet", "--no-plot"]) == 0
    out = capsys.readouterr().out
    records = json.loads((tmp_path / "out" / "results.json").read_text())
    for r in records:
        assert r["max_batch"] == 16
        assert r["max_batch_limit"].startswith("none: every compiled batch fits, up to the largest of "
                                               "serving.batch_sizes (16)")
        assert f"note: {r['name']}: max batch 16 is the largest of serving.batch_sizes, not a memory limit" in out
    # one size more than memory holds: the limit is memory's again, and no note
    path.write_text(path.read_text().replace("batch_sizes: [1, 2, 4, 8, 16]", "batch_sizes: [16, 8192]"))
    assert main(["run", str(path), "--out", str(tmp_path / "big"), "--quiet", "--no-plot"]) == 0
    assert "not a memory limit" not in capsys.readouterr().out
    big = json.loads((tmp_path / "big" / "results.json").read_text())
    assert [r["max_batch"] for r in big] == [16, 16]
    assert all(r["max_batch_limit"].startswith("decode batch 8192 does not fit") for r in big)
