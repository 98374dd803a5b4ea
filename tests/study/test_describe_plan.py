"""``describe`` of an experiment states its plan: each phase's TP and attention DP, the shape, the
policies' parameters and the memory placement (it listed only the files and the policies' names, so
two SnapStream entries with different budgets read alike and the plan was nowhere)."""
from __future__ import annotations

import pytest
from sweep_helpers import REPO

from sn40l_sim.commands.cli import main


def _describe(path, capsys) -> list[str]:
    assert main(["describe", str(path)]) == 0
    return capsys.readouterr().out.splitlines()


def test_the_shipped_experiment_states_its_plan_shape_and_budgets(capsys):
    path = REPO / "experiments" / "deepseek_tp16.yaml"
    lines = _describe(path, capsys)
    assert "  policies   full (full), snapstream (snapstream, budget 32,768)" in lines
    assert "  plan       prefill TP16; decode TP16, attention DP16" in lines
    assert "  shape      prompt 131,072 tokens, batch 1, up to 2,048 new tokens; serving batch max" in lines
    assert "  drafts     2 per decode step by the model's MTP module, each accepted with probability 0.8: 2.44 " \
           "tokens per step on average (serving.speculative)" in lines
    assert "  memory     placed in hbm, ddr (the hardware file's order); may spill: activations" in lines
    assert f"             bytes per socket: python -m sn40l_sim map {path} --phase decode" in lines


def test_a_derived_plan_and_memory_order_are_the_files_own(tmp_path, capsys):
    derived = tmp_path / "derived.yaml"
    derived.write_text(f"base: {REPO / 'experiments' / 'llama8b_node8.yaml'}\nname: derived\n"
                       "parallel: {prefill: {tp: 4}, decode: {tp: 2, attention_dp: 1}}\n"
                       "prompt_lens: [1024, 2048]\nmemory: {order: [ddr, hbm], may_spill: []}\n"
                       "policies: [{name: s, policy: snapstream, per_prompt: [{prompt_len: 1024, params: {budget: 256}},"
                       " {prompt_len: 2048, params: {budget: 512}}]}]\n")
    lines = _describe(derived, capsys)
    assert "  plan       prefill TP4; decode TP2" in lines       # DP1 is not worth a word
    # the base's shape gives no new tokens, its serving.max_new_tokens does: what run generates
    assert "  shape      prompt 1,024, 2,048 tokens, batch 1, up to 512 new tokens; serving batch max" in lines
    assert "  memory     placed in ddr, hbm; may spill: nothing" in lines
    assert "  policies   s (snapstream, at prompt 1,024: budget 256, at prompt 2,048: budget 512)" in lines


def test_the_new_tokens_are_serving_s_when_it_gives_them_as_run_reads_them(tmp_path, capsys):
    # shape.max_new_tokens 16 under serving.max_new_tokens 64: run compiles and serves 64, and
    # describe said "up to 16 new tokens"
    both = tmp_path / "both.yaml"
    both.write_text(f"base: {REPO / 'experiments' / 'llama8b_node8.yaml'}\nname: both\n"
                    "shape: {prompt_len: 1024, max_new_tokens: 16}\nserving: {max_new_tokens: 64}\n")
    assert "  shape      prompt 1,024 tokens, batch 1, up to 64 new tokens; serving batch max" in _describe(both, capsys)
    # and no new tokens anywhere says none
    none = tmp_path / "none.yaml"
    none.write_text(f"base: {REPO / 'experiments' / 'map_deepseek_tp16.yaml'}\nname: none\n")
    assert "  shape      prompt 131,072 tokens, batch 16; serving batch max" in _describe(none, capsys)


def test_fractions_of_the_prompt_and_model_overrides_tell_entries_apart(capsys):
    # kv_policies.yaml has 13 entries, six of policy full or snapstream: their names alone told
    # nothing of the 4:1 budget or the FP8 cache; with so many, one entry a line
    lines = _describe(REPO / "experiments" / "kv_policies.yaml", capsys)
    assert "  policies   full (full)" in lines
    assert "             fp8 (full, kv_dtype=fp8)" in lines
    assert "             snapstream_fp8 (snapstream, budget 0.25 of the prompt, kv_dtype=fp8)" in lines
    assert "             arkvale_16x (arkvale, budget 0.0625 of the prompt)" in lines


def test_several_models_are_named_as_their_records_name_them_with_share_batch_and_schedulers(capsys):
    # describe listed "model 0/1/2" files and "serving batch max", the batch no model but 405B runs
    lines = _describe(REPO / "experiments" / "multi_model.yaml", capsys)
    assert "  shape      prompt 8,192 tokens, batch 1, up to 1,024 new tokens; serving batch per model (below)" in lines
    start = lines.index("  serves     llama8b (model 0, share 0.6 of the requests, batch 64)")
    assert lines[start + 1:start + 5] == [
        "             llama70b (model 1, share 0.3 of the requests, batch 64)",
        "             llama405b (model 2, share 0.1 of the requests, batch max)",
        "             on one co-located node; every model's weights in the placement order's second tier",
        "  schedulers on_demand, batch_by_model, prewarm (quantum 2 s)"]
    assert f"  model 2    ../graphs/llama3_1_405b.yaml  ->  {REPO / 'graphs/llama3_1_405b.yaml'}" in lines


def test_disaggregated_serving_says_which_nodes_prefill_and_decode_and_the_kv_link(capsys):
    lines = _describe(REPO / "experiments" / "hetero_nodes.yaml", capsys)
    assert f"  prefill hw ../hw_configs/sn40l_node8.yaml  ->  {REPO / 'hw_configs/sn40l_node8.yaml'}" in lines
    assert ("  serving    disaggregated: 1 prefill node(s) on the prefill hw above, 1 decode node(s) on the "
            "hardware; the KV crosses the host links") in lines
    lines = _describe(REPO / "experiments" / "chunked_prefill.yaml", capsys)
    assert any(line.startswith("  serving    co-located: 1 node(s) that prefill and decode") for line in lines)


def test_an_experiment_without_drafts_says_nothing_of_them(tmp_path, capsys):
    # the speculation is stated only where a decode step drafts: drafts 0 is plain decode
    plain = tmp_path / "plain.yaml"
    plain.write_text(f"base: {REPO / 'experiments' / 'deepseek_tp16.yaml'}\nname: plain\n"
                     "serving: {speculative: {drafts: 0, acceptance: 0.8}}\n")
    assert not [line for line in _describe(plain, capsys) if line.startswith("  drafts")]
    assert not [line for line in _describe(REPO / "experiments" / "llama8b_node8.yaml", capsys)
                if line.startswith("  drafts")]


def test_chunked_prefill_and_prefix_caching_are_stated(tmp_path, capsys):
    # run's records of these experiments carry a chunked_prefill or prefix_cache group, and describe
    # said nothing of the setting that produced it
    chunked = tmp_path / "chunked.yaml"
    chunked.write_text(f"base: {REPO / 'experiments' / 'chunked_prefill.yaml'}\nname: chunked\n"
                       "serving: {prefill_chunk: 2048}\n")
    assert ("  serving    co-located: 1 node(s) that prefill and decode; at most 2,048 prompt tokens prefilled "
            "between two decode steps (serving.prefill_chunk)") in _describe(chunked, capsys)
    assert ("  serving    disaggregated: 1 prefill node(s) on the hardware above, 1 decode node(s) on the hardware; "
            "the KV crosses the host links; prompt prefixes requests share reused (serving.prefix_cache)") \
        in _describe(REPO / "experiments" / "prefix_cache.yaml", capsys)
    assert not [line for line in _describe(REPO / "experiments" / "hetero_nodes.yaml", capsys)
                if "prefix_cache" in line or "prefill_chunk" in line]


def test_the_default_placement_names_the_tiers_in_the_order_run_fills_them(tmp_path, capsys):
    # run fills the tiers in the order the hardware file lists them: with ddr above hbm it placed
    # Llama-3.1-8B's weights and cache in DDR (a 3.8 s decode step), and describe said "placed in the
    # hardware file's tiers, fastest first"
    text = (REPO / "hw_configs" / "sn40l.yaml").read_text()
    hbm, ddr, tln = text.index("  hbm:\n"), text.index("  ddr:\n"), text.index("\ntln:")
    (tmp_path / "ddr_first.yaml").write_text(text[:hbm] + text[ddr:tln + 1] + text[hbm:ddr] + text[tln + 1:])
    (tmp_path / "node.yaml").write_text(f"base: {REPO / 'hw_configs' / 'sn40l_node8.yaml'}\nname: DDR-FIRST\n"
                                        "socket: ddr_first.yaml\n")
    experiment = tmp_path / "exp.yaml"
    experiment.write_text(f"base: {REPO / 'experiments' / 'llama8b_node8.yaml'}\nname: ddr_first\n"
                          f"hardware: {tmp_path / 'node.yaml'}\n")
    with pytest.warns(UserWarning, match="memory.hbm: listed after ddr, a slower tier"):   # as check and run warn
        assert main(["describe", str(experiment)]) == 0
    assert "  memory     placed in ddr, hbm (the hardware file's order); may spill: activations" in \
        capsys.readouterr().out.splitlines()
