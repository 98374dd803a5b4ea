"""``map --phase prefill`` builds the graph ``run`` runs: the prompt's compiled prefill length, not
the prompt's own (sn40l_sim/study/mapping.py). A 196,608-token DeepSeek-R1 prompt, which runs the
262,144-token graph, was mapped at its own length: 25% fewer activations, KV rows and cycles than
``run`` reported for it."""
from __future__ import annotations

import json
from pathlib import Path

from sn40l_sim.commands.cli import main
from sn40l_sim.study.experiment import load_experiment
from sn40l_sim.study.mapping import build_phase

REPO = Path(__file__).resolve().parents[2]


def experiment(tmp_path: Path, prompt_len: int) -> Path:
    path = tmp_path / f"p{prompt_len}.yaml"
    path.write_text(f"kind: experiment\nname: p\nhardware: {REPO}/hw_configs/sn40l_node8.yaml\n"
                    f"model: {REPO}/graphs/llama3_1_8b.yaml\nparallel:\n  prefill: {{tp: 8}}\n  decode: {{tp: 8}}\n"
                    f"policies:\n  - {{name: full, policy: full}}\n"
                    f"shape: {{prompt_len: {prompt_len}, batch: 1, max_new_tokens: 8}}\n"
                    "workload: {kind: fixed, count: 1, output_len: 8}\n"
                    "serving: {mode: disaggregated, prefill_nodes: 1, decode_nodes: 1, batch: 1, max_new_tokens: 8}\n")
    return path


def test_map_sizes_a_prompt_on_its_compiled_prefill_graph_as_run_does(tmp_path, capsys):
    built = build_phase(load_experiment(experiment(tmp_path, 50000)), "prefill")
    padded = build_phase(load_experiment(experiment(tmp_path, 65536)), "prefill")
    assert (built.prompt_len, built.cache_len) == (50000, 65536)
    # Llama-3.1-8B caches 131,072 B a token over 8 KV heads; TP8 puts one head, 16,384 B, on a socket
    assert built.memory.total("kv") == 65536 * 16384 == padded.memory.total("kv")
    assert built.memory.total("activations") == padded.memory.total("activations")
    # and run reports the same prefill node
    out = tmp_path / "out"
    assert main(["run", str(experiment(tmp_path, 50000)), "--out", str(out), "--quiet", "--no-plot"]) == 0
    (record,) = json.loads((out / "results.json").read_text())
    assert record["prefill_len_compiled"] == 65536
    prefill = record["memory_prefill_node"]["hbm"]
    assert (prefill["kv"], prefill["activations"]) == (built.memory.by_tier["hbm"]["kv"],
                                                       built.memory.by_tier["hbm"]["activations"])
    capsys.readouterr()
    assert main(["map", str(experiment(tmp_path, 50000)), "--phase", "prefill"]) == 0
    assert "shape: batch 1, prompt 50000 (run on the prefill graph compiled for 65536)\n" in capsys.readouterr().out


def test_a_prompt_longer_than_every_compiled_prefill_is_refused_by_map_at_the_field(tmp_path, capsys):
    path = experiment(tmp_path, 50000)
    path.write_text(path.read_text().replace("serving: {mode", "serving: {prefill_lens: [32768], mode"))
    assert main(["map", str(path), "--phase", "prefill"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert "serving.prefill_lens: prompt length 50000 exceeds the largest compiled size 32768" in err, err


def test_a_map_experiment_whose_prompt_no_compiled_prefill_holds_fails_check_as_map_refuses_it(tmp_path, capsys):
    # without a workload check took it for a map experiment and passed it, though map --phase prefill
    # (and run) refuse it; map --phase decode refuses it too, as the same file
    path = experiment(tmp_path, 50000)
    text = path.read_text().replace("serving: {mode", "serving: {prefill_lens: [32768], mode")
    path.write_text(text.replace("workload: {kind: fixed, count: 1, output_len: 8}\n", ""))
    for argv in (["check", str(path)], ["map", str(path), "--phase", "prefill"], ["map", str(path), "--phase", "decode"]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err, err
        assert "p50000.yaml:11: serving.prefill_lens: prompt length 50000 exceeds the largest compiled size 32768" in err


def test_map_and_run_count_the_compressed_cache_a_prefill_node_holds_beside_the_prompts(tmp_path):
    # SnapStream's prefill gathers the kept rows into a cache of their own, which waits on the prefill
    # node for the transfer: run's prefill node and map's prefill graph counted the prompt's rows alone
    from sn40l_sim.kvcache import make_policy
    path = experiment(tmp_path, 65536)
    path.write_text(path.read_text().replace("{name: full, policy: full}",
                                             "{name: snap, policy: snapstream, params: {budget: 8192}}"))
    kept = make_policy("snapstream", {"budget": 8192}).cache_len(65536, 0)
    built = build_phase(load_experiment(path), "prefill")
    assert built.memory.total("kv") == (65536 + kept) * 16384
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out), "--quiet", "--no-plot"]) == 0
    (record,) = json.loads((out / "results.json").read_text())
    assert record["memory_prefill_node"]["hbm"]["kv"] == built.memory.by_tier["hbm"]["kv"]


def test_map_and_run_count_the_policy_state_a_prefill_node_holds_for_the_transfer(tmp_path):
    # H2O's accumulated scores and ArkVale's page digests go to the decode node beside the cache
    # (kv_transfer_bytes); the prefill node holds them until then, but run and map counted its caches alone
    from sn40l_sim.kvcache import make_policy
    from sn40l_sim.kvcache.sizing import prefill_kv_bytes_per_socket
    for entry in ("h2o, params: {budget: 8192}", "arkvale, params: {budget: 8192}"):
        path = experiment(tmp_path, 65536)
        path.write_text(path.read_text().replace("{name: full, policy: full}", f"{{name: s, policy: {entry}}}"))
        policy = make_policy(entry.split(",")[0], {"budget": 8192})
        built = build_phase(load_experiment(path), "prefill")
        cache = prefill_kv_bytes_per_socket(built.model, built.plan, 1, 65536, policy.cache_len(65536, 0))
        state = policy.prefill_state_bytes(built.model, 65536, 7)   # the prompt's, which it sends
        assert state > 0, entry
        # one KV head of Llama-3.1-8B's 8 a socket, over 32 layers
        assert built.memory.total("kv") == cache + 32 * state, entry
        out = tmp_path / "out"
        assert main(["run", str(path), "--out", str(out), "--quiet", "--no-plot"]) == 0
        (record,) = json.loads((out / "results.json").read_text())
        assert record["memory_prefill_node"]["hbm"]["kv"] == built.memory.by_tier["hbm"]["kv"], entry
        # what it holds of the state is a KV head's share of what it sends
        sent_state = record["kv_transfer_bytes"] - policy.cache_len(65536, 0) * 131072
        assert sent_state == 8 * 32 * state, entry
