"""A memory refusal names what is over the tier and says what would fit (docs/robustness.md):
sn40l_sim/serving/memory_fit.py, and ``check`` of an explicit batch's prompt (study/preflight.py).

A 1M-token DeepSeek-R1 prompt whose activations might not spill was refused with "weights 26.10
GiB would spill" (the weights fit; the prompt's activations do not), with no word of the shorter
prompt or the ``may_spill`` that would run; a Llama-3.1-70B prompt for which not even batch 1 fits
was refused without the longest prompt that does; and ``check`` passed the 1M-token prompt with an
explicit batch that ``run`` then refused, as it passed both with ``batch: max``.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from sn40l_sim.commands.cli import main
from sn40l_sim.ir import ParallelPlan
from sn40l_sim.kvcache.footprint import KVFootprint
from sn40l_sim.models.loader import load_model
from sn40l_sim.serving.memory_fit import MemoryFit

REPO = Path(__file__).resolve().parents[2]
LONG_CONTEXT = (REPO / "experiments" / "long_context_1m.yaml").read_text().replace("../", f"{REPO}/")


def long_context(tmp_path: Path, may_spill: str, prompt: int = 1048320) -> Path:
    """experiments/long_context_1m.yaml with ``may_spill``, an explicit batch of 1 (which ``check``
    places) and ``prompt``."""
    path = tmp_path / f"lc_{len(list(tmp_path.iterdir()))}.yaml"
    text = (LONG_CONTEXT.replace("may_spill: [activations, kv]", f"may_spill: {may_spill}")
            .replace("  batch: max", "  batch: 1").replace("prompt_len: 1048320", f"prompt_len: {prompt}"))
    assert f"may_spill: {may_spill}" in text and "  batch: 1\n" in text
    path.write_text(text)
    return path


def test_a_prompt_too_long_for_a_prefill_node_names_the_activations_and_what_would_fit(tmp_path, capsys):
    assert main(["check", str(long_context(tmp_path, "[]"))]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    # 40.05 GiB of weights fit the 56 usable; the prompt's 42.05 GiB of activations and 4.90 of KV (the
    # prompt's 4.36 and the 0.54 of the compressed cache gathered from it) do not: 31.00 GiB over, of
    # which the activations 26.10
    assert "weights 40.05 GiB + kv 4.90 GiB + activations 42.05 GiB > 56.00 GiB usable HBM" in err, err
    assert "(activations 26.10 GiB, kv 4.90 GiB would spill to DDR;" in err, err
    assert "weights 26.10" not in err, err
    assert err.rstrip().endswith("it runs with memory.may_spill: [activations]; prompts of up to 262144 tokens "
                                 "fit as it is"), err
    # and each of the two is so: the activations let spill, or the longest prompt it names, fit; one
    # token more runs the next compiled prefill graph (524,288 tokens), which does not
    assert main(["check", str(long_context(tmp_path, "[activations]"))]) == 0
    assert main(["check", str(long_context(tmp_path, "[]", prompt=262144))]) == 0
    assert main(["check", str(long_context(tmp_path, "[]", prompt=262145))]) == 2
    assert "prompts of up to 262144 tokens fit as it is" in capsys.readouterr().err
    # with the KV let spill, the activations are still named, not the weights
    assert main(["check", str(long_context(tmp_path, "[kv]"))]) == 2
    err = capsys.readouterr().err
    assert "(activations 26.10 GiB would spill to DDR; the serving model keeps weights and activations in HBM); " \
           "it runs with memory.may_spill: [kv, activations]" in err, err


LLAMA_70B = f"""kind: experiment
name: l70
hardware: {REPO}/hw_configs/sn40l_node8.yaml
model: {REPO}/graphs/llama3_1_70b.yaml
parallel:
  prefill: {{tp: 8}}
  decode: {{tp: 8, attention_dp: 8}}
policies:
  - {{name: p, policy: POLICY}}
shape: {{prompt_len: PROMPT}}
workload: {{kind: fixed, count: batch, output_len: 128}}
serving: {{mode: disaggregated, prefill_nodes: 1, decode_nodes: 1, batch: BATCH, max_new_tokens: 128, seed: 0}}
"""


def llama(tmp_path: Path, prompt: int, batch: str = "max", policy: str = "full") -> Path:
    path = tmp_path / f"l70_{prompt}_{batch}_{len(policy)}.yaml"
    path.write_text(LLAMA_70B.replace("PROMPT", str(prompt)).replace("BATCH", batch).replace("POLICY", policy))
    return path


def test_a_prompt_for_which_not_even_batch_1_fits_is_told_the_longest_that_does(tmp_path, capsys):
    # attention DP8 puts a sequence's whole cache on one socket: 327,680 B a token beside 16.43 GiB
    # of weights, so about (56 GiB - 17,640,734,720 B) / 327,680 = 129,665 tokens of slot, 127 of
    # them the output's (its 128 tokens but the last, never fed back)
    assert main(["run", str(llama(tmp_path, 130944)), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not even 1" in err, err
    longest = int(re.search(r"at batch 1 prompts of up to (\d+) tokens fit, with 128 generated after each", err)[1])
    by_hand = (56 * 2**30 - 17_640_734_720) // 327_680 - 127
    assert by_hand - 8 <= longest <= by_hand       # the decode graph's activations take a few tokens' worth
    # it is the longest: batch 1 fits it and not one token more (check places an explicit batch),
    # and the shortfall of that one token is not shown as "0.00 GiB"
    assert main(["check", str(llama(tmp_path, longest, batch="1"))]) == 0
    assert main(["check", str(llama(tmp_path, longest + 1, batch="1"))]) == 2
    err = capsys.readouterr().err
    assert re.search(r"\(kv 0\.000\d+ GiB would spill to DDR", err), err


def test_a_slot_that_does_not_shrink_with_the_prompt_is_not_blamed_on_the_prompt(tmp_path, capsys):
    # SnapStream's 131,072-token slot is 40 GiB on one socket whatever the prompt
    path = llama(tmp_path, 130944, policy="snapstream, params: {budget: 131072}")
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "; no prompt fits at batch 1 (what a sequence keeps does not shrink with the prompt below it)" in err, err


def test_check_refuses_with_batch_max_what_run_refuses_before_simulating(tmp_path, capsys):
    # batch: max: check places the smallest compiled batch and the prompt, as run does first
    assert main(["check", str(llama(tmp_path, 130944))]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not even 1" in err and "prompts of up to 129538 tokens fit" in err, err
    assert main(["check", str(llama(tmp_path, 129538))]) == 0
    path = long_context(tmp_path, "[]")
    path.write_text(path.read_text().replace("  batch: 1\n", "  batch: max\n"))
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert "one prompt on a prefill node" in err and "prompts of up to 262144 tokens fit as it is" in err, err


def test_a_batch_beyond_hbm_and_ddr_together_is_refused_by_its_shortfall_over_hbm(tmp_path, capsys):
    # 8,192 sequences of 32,895 tokens (327,680 B each) on 8 sockets: 1,024 a socket, 10,280 GiB of
    # KV beside 16.43 GiB of weights, over HBM and DDR together (1,576 GiB). It was refused as
    # "the rest (kv 10240.80 GiB) exceeds the usable DDR of 1520.00 GiB by ... (8720.80 GiB)": a
    # shortfall more DDR would not cure, the serving model keeping KV in HBM
    path = llama(tmp_path, 32768, batch="8192")
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    kv_gib = 8192 // 8 * 32895 * 327_680 / 2**30
    assert f"decode batch 8192 does not fit in HBM per socket: weights 16.43 GiB + kv {kv_gib:.2f} GiB" in err, err
    assert "usable DDR" not in err and "the serving model keeps weights and KV in HBM" in err, err
    # the shortfall named is the KV over what HBM leaves beside the weights (activations placed after it)
    spill = float(re.search(r"\(kv ([\d.]+) GiB would spill to DDR", err)[1])
    assert spill == pytest.approx(kv_gib - (56 - 17_640_734_720 / 2**30), abs=0.01)
    assert "largest compiled batch that fits: 16" in err, err


def test_no_batch_under_data_parallel_attention_is_told_what_attention_dp_1_leaves_a_sequence(tmp_path, capsys):
    # attention DP8 holds a sequence's 131,072 x 327,680 B = 40 GiB whole on one socket, beside
    # 16.43 GiB of weights; without DP its 8 KV heads split over the 8 sockets, 5 GiB each, and
    # batches fit: the refusal said only how much shorter a prompt would have to be
    assert main(["check", str(llama(tmp_path, 130944))]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.rstrip().endswith("; one sequence's KV takes 40.00 GiB of a socket at attention_dp 8, 5.00 GiB with "
                                 "parallel.decode.attention_dp: 1 (its KV heads split over 8 sockets)"), err
    path = llama(tmp_path, 130944, batch="4")
    path.write_text(path.read_text().replace("attention_dp: 8", "attention_dp: 1"))
    assert main(["check", str(path)]) == 0


def test_an_mla_cache_is_not_told_attention_dp_1_would_split_it(tmp_path, capsys):
    # DeepSeek-R1's latent is whole on every socket with or without attention DP: a 1M-token prompt
    # whose 69.75 GiB of KV may not spill is refused without offering attention_dp: 1, which would
    # leave the sequence the same 69.75 GiB a socket
    path = long_context(tmp_path, "[activations]")
    path.write_text(path.read_text().replace("{name: snapstream, policy: snapstream, params: {budget: 131072}}",
                                             "{name: full, policy: full}"))
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "kv 69.75 GiB" in err and "attention_dp" not in err, err


def test_a_prompt_over_a_socket_with_no_tier_to_spill_to_is_one_line(tmp_path, capsys):
    # a copy of the socket with its DDR tier removed (an HBM-only what-if): the 1M-token prompt may
    # spill its activations and KV but has nowhere to; the hint's placements overflowed the last
    # tier too, escaped as TiersOverflow, and relocating that (its constructor takes a placement)
    # was a TypeError traceback
    socket = (REPO / "hw_configs" / "sn40l.yaml").read_text()
    socket = re.sub(r"  ddr:\n(    .*\n)+", "", socket).replace("    ddr: 1.5 TiB", "")
    assert "ddr" not in socket.split("tln:")[0].split("memory:")[1]
    (tmp_path / "sn40l.yaml").write_text(socket)
    node = (REPO / "hw_configs" / "sn40l_node16.yaml").read_text()
    (tmp_path / "node.yaml").write_text(node)
    experiment = tmp_path / "lc.yaml"
    experiment.write_text(LONG_CONTEXT.replace(f"{REPO}/hw_configs/sn40l_node16.yaml", "node.yaml"))
    for command in ("check", "run"):
        assert main([command, str(experiment)] + (["--out", str(tmp_path / "out"), "--no-plot"]
                                                  if command == "run" else [])) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err, err
        assert err.startswith(f"error: {experiment}:") and ("shape.prompt_len: one prompt on a prefill node (its "
                                                            "1048320 tokens run the prefill graph compiled for "
                                                            "1048576): memory does not fit") in err, err
        # 40.05 + 4.90 + 42.05 GiB against 56 usable: 31.00 GiB over, and a shorter prompt fits
        assert "exceeds the usable HBM of 56.00 GiB" in err and "(31.00 GiB)" in err, err
        assert "prompts of up to 262144 tokens fit as it is" in err, err


def test_an_overflow_of_every_tier_is_located_in_the_experiment_as_itself():
    # Assembly.locate rebuilt errors as exc.__class__(message, file=..., ...), which TiersOverflow's
    # constructor (message, placement) does not take
    from sn40l_sim.mapper.memory import TiersOverflow

    exc = TiersOverflow("memory does not fit on a socket of SN40L", placement="the fill")
    moved = exc.located_at(file="exp.yaml", field="shape.prompt_len", line=28)
    assert isinstance(moved, TiersOverflow) and moved.placement == "the fill"
    assert str(moved) == "exp.yaml:28: shape.prompt_len: memory does not fit on a socket of SN40L"
    assert exc.file is None  # the original is left as it was


LLAMA_8B = f"""kind: experiment
name: l8
hardware: {REPO}/hw_configs/sn40l_node8.yaml
model: {REPO}/graphs/llama3_1_8b.yaml
parallel:
  prefill: {{tp: 8}}
  decode: {{tp: 8, attention_dp: DP}}
policies:
  - {{name: p, policy: POLICY}}
shape: {{prompt_len: PROMPT}}
workload: {{kind: fixed, count: 1, output_len: 16}}
serving: {{mode: disaggregated, prefill_nodes: 1, decode_nodes: 1, batch: max, max_new_tokens: 16, seed: 0}}
memory: {{may_spill: [activations, kv]}}
"""


def llama8b(tmp_path: Path, prompt: int, dp: int = 8, policy: str = "full") -> Path:
    path = tmp_path / f"l8_{prompt}_{dp}_{len(policy)}.yaml"
    path.write_text(LLAMA_8B.replace("PROMPT", str(prompt)).replace("DP", str(dp)).replace("POLICY", policy))
    return path


@pytest.mark.parametrize("policy, prompt, why", [
    # KV let spill, over HBM and DDR together
    ("full", 32768, "memory does not fit on a socket of SN40L"),
    # ArkVale's store of the whole context over its DDR
    ("arkvale, params: {budget: 4608}", 30000, "the KV store of"),
])
def test_the_batch_limit_over_every_tier_names_the_batch(tmp_path, policy, prompt, why):
    # max_batch_limit named "decode batch 256" when the KV was over HBM, but over every tier it was
    # only "memory does not fit on a socket of SN40L: ... KV cache 128.06 GiB", beside a max batch
    # of 128 whose KV is 64.03 GiB: the batch it was about was nowhere
    out = tmp_path / "out"
    assert main(["run", str(llama8b(tmp_path, prompt, policy=policy)), "--out", str(out), "--no-plot", "--quiet",
                 "--set", "hardware.socket.memory.ddr.capacity_bytes_per_unit=8 GiB"]) == 0
    record = json.loads((out / "results.json").read_text())[0]
    assert record["max_batch_limit"].startswith(f"decode batch {2 * record['max_batch']}: {why}"), record


def test_a_prompt_over_every_tier_of_a_prefill_node_says_it_is_the_prefill_node(tmp_path, capsys):
    # 2 GiB of usable HBM and 3 of DDR a socket: the decode node holds one sequence split over 8
    # sockets (1.87 GiB of weights and 1.98 of KV), the prefill node not the prompt's graph (its
    # KV and activations, 2 GiB each, beside the weights): that refusal did not say which node
    path = llama8b(tmp_path, 130000, dp=1)
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--no-plot", "--quiet",
                 "--set", "hardware.socket.memory.hbm.capacity_bytes_per_unit=2.5 GiB",
                 "--set", "hardware.socket.memory.ddr.capacity_bytes_per_unit=3.1667 GiB"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert ("shape.prompt_len: one prompt on a prefill node (its 130000 tokens run the prefill graph compiled for "
            "131072): memory does not fit on a socket of SN40L: weights 1.87 GiB + KV cache 2.00 GiB") in err, err


def test_an_output_too_long_for_batch_1_is_not_blamed_on_a_slot_that_does_not_shrink(tmp_path, capsys):
    # a 50-token prompt with up to 131,000 generated after it: a full cache's slot of 131,049 rows,
    # 39.99 GiB on one socket beside 16.43 GiB of weights. The slot shrinks with the prompt, but not
    # even a 1-token prompt fits with that output: the refusal said the slot "does not shrink with
    # the prompt" and never named the output length
    path = llama(tmp_path, 50)
    path.write_text(path.read_text().replace("max_new_tokens: 128", "max_new_tokens: 131000"))
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not even 1" in err, err
    assert "does not shrink" not in err, err
    assert ("; not even a 1-token prompt fits at batch 1 with 131000 generated after it: fewer new tokens "
            "(max_new_tokens)") in err, err


def test_the_batch_limit_does_not_print_a_few_mib_of_activations_as_zero(tmp_path, capsys):
    # experiments/llama8b_node8.yaml: batch 128 needs about 5 MiB of decode activations a socket,
    # which max_batch_limit printed as "activations 0.00 GiB" beside the weights and KV
    experiment = REPO / "experiments" / "llama8b_node8.yaml"
    assert main(["run", str(experiment), "--out", str(tmp_path), "--quiet", "--no-plot",
                 "--set", "workload.count=2", "--set", "policies=[{name: full, policy: full}]"]) == 0
    (record,) = json.loads((tmp_path / "results.json").read_text())
    limit = record["max_batch_limit"]
    assert limit.startswith("decode batch 128 does not fit in HBM per socket"), limit
    activations = float(re.search(r"activations ([\d.e-]+) GiB", limit)[1])
    assert activations == pytest.approx(2 * record["memory"]["hbm"]["activations"] / 2**30, rel=0.05), limit


def test_a_colocated_chunk_holds_the_keys_of_up_to_all_but_one_earlier_prompt_token():
    # DeepSeek-R1 on 16 sockets: prefill attention reads per-head keys (192 wide) and values (128)
    # from activations, 8 heads a socket, so 8 x 320 x 2 = 5,120 bytes a token. A 10,000-token
    # prompt in chunks of 4,096 (each chunk runs its compiled graph, here 1,000 bytes) has a chunk
    # starting as late as its last token, after 9,999 earlier tokens' keys
    point = SimpleNamespace(prompt_len=10000, prefill_chunk=4096, prefill_lens=(4096, 16384),
                            model=load_model(REPO / "graphs" / "deepseek_r1.yaml"), prefill_plan=ParallelPlan(16))
    costs = SimpleNamespace(prefill_activation_bytes=lambda rows: 1000 if rows == 4096 else None)
    fit = MemoryFit(point, False, KVFootprint(slots=1), place=None, costs=costs)
    assert fit._colocated_prefill_activations() == 1000 + 9999 * 8 * (192 + 128) * 2


def test_compiled_sizes_too_large_for_the_prompt_are_refused_at_their_own_line(tmp_path, capsys):
    # a 32K prompt of Llama-3.1-70B fits at small batches but at none of serving.batch_sizes: the
    # refusal named shape.prompt_len and said a 1-token prompt did not fit at the smallest size
    path = llama(tmp_path, 32768)
    path.write_text(path.read_text().replace("seed: 0}", "seed: 0, batch_sizes: [4096, 8192]}"))
    line = next(n for n, text in enumerate(path.read_text().splitlines(), 1) if "batch_sizes" in text)
    for command in (["check", str(path)], ["run", str(path), "--out", str(tmp_path / "out"), "--quiet"]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"{path}:{line}: serving.batch_sizes: no compiled batch size fits" in err, err
        largest = int(re.search(r"decode batches of 1 to (\d+) fit: serving.batch_sizes needs a size among them", err)[1])
        assert 1 <= largest < 4096 and "1-token prompt" not in err
    # the largest it names fits, and one more does not
    for batch, status in ((largest, 0), (largest + 1, 2)):
        path.write_text(path.read_text().replace("batch: max", f"batch: {batch}").replace(f"batch: {largest}", f"batch: {batch}"))
        assert main(["check", str(path)]) == status, capsys.readouterr().err


def test_an_explicit_batch_too_large_for_any_prompt_is_told_the_longest_prompt_at_that_batch(tmp_path, capsys):
    # a batch given as a number is the batch compiled (batch_sizes bound only batch: max); where not
    # even batch 1 fits the prompt, the hint named batch_sizes' smallest, a batch that would not run
    path = llama(tmp_path, 130944, batch="2")
    path.write_text(path.read_text().replace("seed: 0}", "seed: 0, batch_sizes: [64]}"))
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "decode batch 2 does not fit" in err and "batch 64" not in err, err
    longest = int(re.search(r"at batch 2 prompts of up to (\d+) tokens fit", err)[1])
    # the longest at batch 2 fits at batch 2, and one token more does not
    for prompt, status in ((longest, 0), (longest + 1, 2)):
        path.write_text(re.sub(r"prompt_len: \d+", f"prompt_len: {prompt}", path.read_text()))
        assert main(["check", str(path)]) == status, capsys.readouterr().err


def test_check_run_and_map_refuse_a_prefill_node_without_room_for_the_digests_it_sends(tmp_path, capsys):
    # DeepSeek-R1's ArkVale digests of a 128K prompt take a prefill socket 0.54 GiB, as much as its
    # share of the prompt's rows, and wait there for the transfer: on sockets of 54.1 GiB of HBM the
    # prompt's cache, activations and weights fit without them (45.85 of 46.09 GiB usable), not with
    # them, which check, run and map passed (the prefill node over its HBM)
    node = (REPO / "hw_configs" / "sn40l_node16.yaml").read_text().replace(
        "socket: sn40l.yaml", f"socket: {REPO}/hw_configs/sn40l.yaml\nsocket_overrides: {{memory: {{hbm: "
        "{capacity_bytes_per_unit: 14.52 GB}}, stated: {memory_bytes: {hbm: 58.08 GB}}}")
    (tmp_path / "node.yaml").write_text(node)
    path = tmp_path / "ark.yaml"
    path.write_text(f"kind: experiment\nname: ark\nhardware: node.yaml\nmodel: {REPO}/graphs/deepseek_r1.yaml\n"
                    "parallel:\n  prefill: {tp: 16}\n  decode: {tp: 16, attention_dp: 16}\n"
                    "policies:\n  - {name: ark, policy: arkvale, params: {budget: 32768}}\n"
                    "shape: {prompt_len: 126976, max_new_tokens: 1024}\nmemory: {may_spill: []}\n"
                    "workload: {kind: fixed, count: 16, output_len: 1024}\n"
                    "serving: {mode: disaggregated, prefill_nodes: 1, decode_nodes: 1, batch: 16, max_new_tokens: 1024}\n")
    for argv in (["check", str(path)], ["run", str(path), "--out", str(tmp_path / "out"), "--quiet", "--no-plot"],
                 ["map", str(path), "--phase", "prefill"]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err, err
        assert "weights 40.05 GiB + kv 1.07 GiB + activations 5.26 GiB > 46.09 GiB usable HBM" in err, err
