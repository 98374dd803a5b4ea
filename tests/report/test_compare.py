"""``compare``: two results files point by point, the ratio of every figure from the unrounded
values, and one clear line for a file that is not a results.json."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from sn40l_sim.commands.cli import main
from sn40l_sim.report.compare import compare_records, point_table

BASE = {"name": "full", "model": "m", "hardware": "SN40L-16", "kv_policy": "full", "batch": 16,
        "decode_step_s": 0.0860849, "decode_tokens_per_s_reported": 453.54,
        "memory": {"hbm": {"weights": 40 * 2**30, "kv": 8 * 2**30, "free": 8 * 2**30}}}


def _write(tmp_path, name, records):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "results.json").write_text(json.dumps(records))
    return folder


def _row(table: str, label: str) -> list[str]:
    (line,) = [line for line in table.splitlines() if line.startswith(label)]
    return line[len(label):].split()


def test_the_ratio_is_of_the_unrounded_values_and_1_only_when_equal():
    other = dict(BASE, decode_step_s=0.0860849 * 1.0004, decode_tokens_per_s_reported=453.54 * 1.25)
    table = point_table(BASE, other)
    # the steps print as 86.08 and 86.12 ms, whose ratio would be 1.0005; four figures would say 1
    assert _row(table, "decode step (ms)") == ["86.08", "86.12", "1.0004"]
    assert _row(table, "decode tokens/s (reported)") == ["453.5", "566.9", "1.25"]


def test_equal_values_give_exactly_1_and_a_missing_one_a_dash():
    other = dict(BASE)
    del other["decode_tokens_per_s_reported"]
    table = point_table(BASE, other)
    assert _row(table, "batch") == ["16", "16", "1"]
    assert _row(table, "decode tokens/s (reported)") == ["453.5", "-", "-"]
    assert _row(table, "HBM/socket weights (GiB)") == ["40.00", "40.00", "1"]


def test_memory_rows_take_their_ratio_from_the_bytes_not_the_rounded_gib():
    # DeepSeek-R1's and Llama-3.1-8B's activations per socket, 2,066,688 and 2,576,384 B, both print
    # as 0.002 GiB: the ratio of the shown cells said 1, and --changed hid the row
    base = dict(BASE, memory={"hbm": {"activations": 2066688, "free": 8 * 2**30}})
    other = dict(BASE, memory={"hbm": {"activations": 2576384, "free": 8 * 2**30 + 2**20}})
    table = point_table(base, other)
    assert _row(table, "HBM/socket activations (GiB)") == ["0.002", "0.002", f"{2576384 / 2066688:.4g}"]
    assert _row(table, "HBM/socket free (GiB)") == ["8.00", "8.00", "1.0001"]
    changed = point_table(base, other, changed_only=True)
    assert [line.split(" (GiB)")[0] for line in changed.splitlines()[2:]] == \
        ["HBM/socket activations", "HBM/socket free"]


def test_changed_only_keeps_a_row_whose_unrounded_values_differ_though_its_cells_read_alike():
    # 86.0849 and 86.0843 ms both print as 86.08; their ratio (0.99999) is what moved
    other = dict(BASE, decode_step_s=0.0860843)
    table = point_table(BASE, other, changed_only=True)
    assert _row(table, "decode step (ms)") == ["86.08", "86.08", "0.99999"]
    assert point_table(BASE, dict(BASE), changed_only=True).endswith("(no figure differs)")


def test_changed_only_keeps_the_rows_that_differ_and_the_heading_says_what_changed():
    other = dict(BASE, hardware="SN40L-16 (sockets 8)", decode_step_s=0.1549)
    table = point_table(BASE, other, changed_only=True)
    lines = table.splitlines()
    assert lines[0] == "full: hardware SN40L-16 -> SN40L-16 (sockets 8)"
    assert [line.split()[0] for line in lines[2:]] == ["decode"]
    assert _row(table, "decode step (ms)") == ["86.08", "154.90", f"{0.1549 / 0.0860849:.4g}"]


def test_the_heading_names_a_changed_policy_budget_and_kv_format():
    # a SnapStream budget set to half, or the cache stored in FP8, is not "the same policy"
    snap = dict(BASE, name="snapstream", kv_policy="snapstream", kv_policy_params={"budget": 32768},
                kv_bytes_per_token=71424)
    half = dict(snap, kv_policy_params={"budget": 16384})
    assert point_table(snap, half).splitlines()[0] == "snapstream: kv_policy_params budget=32768 -> budget=16384"
    fp8 = dict(snap, kv_bytes_per_token=35712)
    assert point_table(snap, fp8).splitlines()[0] == "snapstream: kv_bytes_per_token 71424 -> 35712"
    plain = dict(snap, kv_policy="full", kv_policy_params={})
    assert point_table(snap, plain).splitlines()[0] == \
        "snapstream: kv_policy snapstream -> full; kv_policy_params budget=32768 -> none"
    assert point_table(snap, dict(snap)).splitlines()[0] == "snapstream: the same model, hardware and policy"


def test_points_are_paired_by_name_and_the_unpaired_named():
    snap = dict(BASE, name="snapstream", kv_policy="snapstream")
    tables, only_base, only_other = compare_records([BASE, snap], [dict(snap), dict(BASE, name="h2o")])
    assert [t.splitlines()[0].split(":")[0] for t in tables] == ["snapstream"]
    assert only_base == ["full"] and only_other == ["h2o"]


def test_the_command_prints_a_table_per_common_point(tmp_path, capsys):
    base = _write(tmp_path, "a", [BASE, dict(BASE, name="snap")])
    other = _write(tmp_path, "b", [dict(BASE, decode_step_s=0.0775)])
    assert main(["compare", str(base), str(other / "results.json")]) == 0
    out = capsys.readouterr().out
    assert "full: the same model, hardware and policy" in out
    assert _row(out, "decode step (ms)") == ["86.08", "77.50", f"{0.0775 / 0.0860849:.4g}"]
    assert out.rstrip().splitlines()[-1] == f"note: only in {base / 'results.json'}: snap"


def test_changed_collects_the_points_the_same_in_both_into_one_line(tmp_path, capsys):
    # two runs of a 70-point sweep printed 70 blocks of "(no figure differs)" to find the one that did
    same = [dict(BASE, name=f"full[batch={b}]", batch=b) for b in (1, 2, 4)]
    moved = dict(BASE, name="full[batch=8]", batch=8)
    base = _write(tmp_path, "a", [*same, moved])
    other = _write(tmp_path, "b", [*same, dict(moved, decode_step_s=0.0775),
                                   dict(BASE, name="snap[batch=1]", hardware="SN40L-8")])
    assert main(["compare", str(base), str(other), "--changed"]) == 0
    out = capsys.readouterr().out
    assert out.count("(no figure differs)") == 0 and out.count("full[batch=8]: ") == 1
    assert _row(out, "decode step (ms)") == ["86.08", "77.50", f"{0.0775 / 0.0860849:.4g}"]
    assert ("3 of 4 point(s) with no figure differing (the same model, hardware and policy): full[batch=1], "
            "full[batch=2], full[batch=4]") in out.splitlines()
    # without --changed every point keeps its table
    assert main(["compare", str(base), str(other)]) == 0
    assert capsys.readouterr().out.count(": the same model, hardware and policy") == 4


@pytest.mark.parametrize("content, words", [
    (None, "no such file"),
    ("{", "not JSON (line 1"),
    ('{"name": "full"}', "expected a list of result records"),
    ("[]", "holds no record: the run that wrote it gave no record"),
    ('[{"batch": 1}]', "expected a list of result records, each with a name"),
])
def test_a_bad_results_file_is_one_line_naming_it(tmp_path, capsys, content, words):
    good = _write(tmp_path, "good", [BASE])
    bad = tmp_path / "bad.json"
    if content is not None:
        bad.write_text(content)
    assert main(["compare", str(good), str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {bad}") and words in err[0], err


def test_a_results_csv_is_refused_naming_the_results_json_beside_it(tmp_path, capsys):
    good = _write(tmp_path, "good", [BASE])
    csv = good / "results.csv"
    csv.write_text("name,batch\nfull,1\n")
    assert main(["compare", str(good), str(csv)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0] == (f"error: {csv}: not JSON (line 1: Expecting value); expected a results.json "
                                        f"written by run or sweep ({good / 'results.json'} is beside it)"), err


def test_a_folder_without_results_and_points_without_a_common_name_are_refused(tmp_path, capsys):
    good = _write(tmp_path, "good", [BASE])
    (tmp_path / "empty").mkdir()
    assert main(["compare", str(good), str(tmp_path / "empty")]) == 2
    assert "holds no results.json" in capsys.readouterr().err
    other = _write(tmp_path, "other", [dict(BASE, name="snap")])
    assert main(["compare", str(good), str(other)]) == 2
    assert "no point name in common: full against snap" in capsys.readouterr().err


@pytest.mark.parametrize("ending, state", [(KeyboardInterrupt, "was interrupted"),
                                            (RuntimeError, "failed, as {status} says: stopped")])
def test_a_run_that_wrote_no_results_is_named_with_how_it_ended(tmp_path, capsys, ending, state):
    from sn40l_sim.report.outputs import OutputFolder

    good = _write(tmp_path, "good", [BASE])
    out = tmp_path / "out"
    with pytest.raises(ending), OutputFolder(out, command="run x.yaml", outputs=("results.json",)):
        raise ending("stopped")
    status = out / "status.json"
    for given, missing in ((out, f"{out} holds no results.json"), (out / "results.json", "no such file")):
        assert main(["compare", str(good), str(given)]) == 2
        err = capsys.readouterr().err
        said = state.format(status=status) + ("" if "says" in state else f", as {status} says")
        assert err == f"error: {given}: {missing}: its run (run x.yaml) {said}\n", err


def test_a_sweep_against_a_single_run_is_said_to_be_one_in_a_readable_line(tmp_path, capsys):
    # the refusal listed all 70 points of deepseek_sweep and did not say why none paired
    run = _write(tmp_path, "run", [BASE, dict(BASE, name="snapstream")])
    sweep = _write(tmp_path, "sweep", [dict(BASE, name=f"full[batch={b}]", sweep_point=f"batch={b}") for b in range(70)])
    assert main(["compare", str(run), str(sweep)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and len(err) < 400, err
    assert "against full[batch=0], full[batch=1], full[batch=2], full[batch=3] and 66 more" in err
    assert "OTHER is a sweep, whose point names carry the sweep point, and BASE a single run" in err
    assert main(["compare", str(sweep), str(run)]) == 2
    assert "BASE is a sweep" in capsys.readouterr().err


def test_a_sweep_whose_every_run_failed_is_named_as_such_with_its_failures_file(tmp_path, capsys):
    # such a sweep writes "[]": "expected a list of result records (a results.json written by run or
    # sweep)" told the user that the file the sweep had just written was not one
    good = _write(tmp_path, "good", [BASE])
    empty = _write(tmp_path, "empty", [])
    (empty / "failures.json").write_text(json.dumps([{"point": "full[batch=1024]"}, {"point": "snap[batch=1024]"}]))
    assert main(["compare", str(good), str(empty)]) == 2
    assert capsys.readouterr().err == (f"error: {empty / 'results.json'}: holds no record: no run of its sweep gave a "
                                       f"record: the 2 runs are in {empty / 'failures.json'}, with why each failed or "
                                       "was skipped\n")


def test_a_sweeps_empty_failures_file_is_not_said_to_be_a_run_that_gave_no_record(tmp_path, capsys):
    # a sweep none of whose runs failed writes failures.json as "[]": named in place of its
    # results.json, it was "holds no record: the run that wrote it gave no record"
    good = _write(tmp_path, "good", [BASE])
    (good / "failures.json").write_text("[]\n")
    assert main(["compare", str(good / "failures.json"), str(good)]) == 2
    assert capsys.readouterr().err == (f"error: {good / 'failures.json'}: holds no record (an empty list); expected a "
                                       f"results.json written by run or sweep ({good / 'results.json'} is beside it)\n")


def test_the_points_only_one_side_holds_are_counted_past_four(tmp_path, capsys):
    base = _write(tmp_path, "a", [BASE])
    other = _write(tmp_path, "b", [BASE, *(dict(BASE, name=f"p{i}") for i in range(10))])
    assert main(["compare", str(base), str(other)]) == 0
    assert capsys.readouterr().out.rstrip().splitlines()[-1] == \
        f"note: only in {other / 'results.json'}: p0, p1, p2, p3 and 6 more"


def test_a_point_only_one_side_holds_says_when_the_other_sweep_could_not_run_it(tmp_path, capsys):
    # a sweep on a smaller HBM where batch 32 no longer fits read "note: only in BASE: full[batch=32]",
    # as if the other sweep never had that point
    base = _write(tmp_path, "a", [dict(BASE, name=f"full[batch={b}]") for b in (4, 32, 64, 128)])
    other = _write(tmp_path, "b", [dict(BASE, name="full[batch=4]")])
    (other / "failures.json").write_text(json.dumps([
        {"point": "full[batch=32]", "kind": "infeasible", "error": "does not fit", "sweep": {}},
        {"point": "full[batch=64]", "kind": "error", "error": "internal error", "sweep": {}}]))
    assert main(["compare", str(base), str(other)]) == 0
    assert capsys.readouterr().out.rstrip().splitlines()[-1] == \
        f"note: only in {base / 'results.json'}: full[batch=32], full[batch=64], full[batch=128] (in " \
        f"{other / 'failures.json'}: full[batch=32] did not fit; full[batch=64] failed)"


@pytest.mark.parametrize("extra,tail", [(4, ""), (5, " and 1 more")])
def test_one_point_past_four_is_counted_and_four_are_all_named(tmp_path, capsys, extra, tail):
    base = _write(tmp_path, "a", [BASE])
    other = _write(tmp_path, "b", [BASE, *(dict(BASE, name=f"p{i}") for i in range(extra))])
    assert main(["compare", str(base), str(other)]) == 0
    assert capsys.readouterr().out.rstrip().splitlines()[-1] == \
        f"note: only in {other / 'results.json'}: p0, p1, p2, p3{tail}"


def test_memory_rows_list_the_smaller_tier_first_as_run_does(tmp_path, capsys):
    # results.json keeps the tiers in name order, ddr before hbm
    record = dict(BASE, memory={"ddr": {"weights": 0, "capacity": 2**40, "free": 2**40},
                                "hbm": {"weights": 40 * 2**30, "capacity": 64 * 2**30, "free": 8 * 2**30}})
    folder = _write(tmp_path, "a", [record])
    assert main(["compare", str(folder), str(folder)]) == 0
    labels = [line.split(" (GiB)")[0] for line in capsys.readouterr().out.splitlines() if "/socket" in line]
    assert labels[0].startswith("HBM/socket") and labels[-1].startswith("DDR/socket"), labels


def test_a_null_use_of_a_tier_that_holds_nothing_is_an_empty_cell_not_a_traceback(tmp_path, capsys):
    # results.json writes a figure a point does not have as null, and the shape check takes it; the
    # 'used' row of an empty tier summed its uses and stopped compare with a TypeError
    record = dict(BASE, memory={"ddr": {"weights": 0, "kv": None, "free": 2**40},
                                "hbm": {"weights": 40 * 2**30, "kv": None, "free": 8 * 2**30}})
    folder = _write(tmp_path, "a", [record])
    assert main(["compare", str(folder), str(folder)]) == 0
    out = capsys.readouterr().out   # a row with no value on either side is left out, as run leaves it
    assert _row(out, "DDR/socket free (GiB)") == ["1024.0", "1024.0", "1"] and "DDR/socket used" not in out


def test_the_heading_names_a_changed_parallel_plan_and_node_count():
    # a prefill on 4 of the 8 sockets, or a second prefill node, used to be headed "the same model,
    # hardware and policy" above a TTFT 30 times the base's
    plans = {"decode": {"attention_dp": 16, "tp": 16}, "prefill": {"attention_dp": 1, "tp": 8}}
    base = dict(BASE, parallel=plans, prefill_nodes=1, decode_nodes=1)
    tp4 = dict(base, parallel=dict(plans, prefill={"attention_dp": 1, "tp": 4}))
    assert point_table(base, tp4).splitlines()[0] == \
        "full: parallel prefill(attention_dp=1, tp=8) -> prefill(attention_dp=1, tp=4)"
    two = dict(base, prefill_nodes=2, prefill_hardware="SN40L-8")
    assert point_table(dict(base, prefill_hardware="SN40L-16"), two).splitlines()[0] == \
        "full: prefill_hardware SN40L-16 -> SN40L-8; prefill_nodes 1 -> 2"
    assert point_table(base, dict(base)).splitlines()[0] == "full: the same model, hardware and policy"


def test_the_heading_names_a_changed_speculation():
    # two drafts against three, or 80% acceptance against 60%, is not "the same model, hardware and
    # policy": the acceptance has no row of its own, so only the heading can say it changed
    spec = dict(BASE, speculative_drafts=2, draft_acceptance=0.8, tokens_per_forward=2.44)
    three = dict(spec, speculative_drafts=3, tokens_per_forward=2.952)
    assert point_table(spec, three).splitlines()[0] == "full: speculative_drafts 2 -> 3"
    lower = dict(spec, draft_acceptance=0.6, tokens_per_forward=1.96)
    assert point_table(spec, lower, changed_only=True).splitlines()[0] == "full: draft_acceptance 0.8 -> 0.6"
    assert point_table(spec, dict(spec)).splitlines()[0] == "full: the same model, hardware and policy"


@pytest.mark.parametrize("base, kind", [(BASE, "dict"), ("results.json", "str"), ([{"decode_step_s": 1.0}], "list"),
                                        (3, "int")])
def test_compare_records_names_what_is_not_a_list_of_records(base, kind):
    """From Python, one record (a dict) where a list is taken was a TypeError deep inside."""
    from sn40l_sim.errors import InputError
    with pytest.raises(InputError, match=f"^base: expected a list of records \\(dicts with a name\\), got a {kind}$"):
        compare_records(base, [BASE])


def test_compare_records_takes_any_iterable_of_records():
    tables, only_base, only_other = compare_records(iter([BASE]), (BASE,))
    assert len(tables) == 1 and only_base == only_other == []


def test_one_hardware_name_with_two_digests_is_not_called_the_same():
    # an edited copy of hw_configs/sn40l.yaml keeps the name SN40L: the heading said "the same model,
    # hardware and policy" over a decode step 10% shorter
    other = dict(BASE, hardware_digest="945402bb3238", decode_step_s=0.07715)
    base = dict(BASE, hardware_digest="010aea8d8801")
    assert point_table(base, other).splitlines()[0] == \
        "full: hardware SN40L-16 described otherwise (digest 010aea8d8801 -> 945402bb3238)"
    model = dict(base, model_digest="aaaaaaaaaaaa")
    assert point_table(model, dict(model, model_digest="bbbbbbbbbbbb"), changed_only=True).splitlines() == \
        ["full: model m described otherwise (digest aaaaaaaaaaaa -> bbbbbbbbbbbb)", "(no figure differs)"]
    prefill = dict(base, prefill_hardware="SN40L-8", prefill_hardware_digest="072a6d612f78")
    assert point_table(prefill, dict(prefill, prefill_hardware_digest="8c158d3943bd")).splitlines()[0] == \
        "full: prefill_hardware SN40L-8 described otherwise (digest 072a6d612f78 -> 8c158d3943bd)"
    # a renamed node says its names only; a record without digests (older results) compares by name
    renamed = dict(other, hardware="SN40L-16 (hbm)")
    assert point_table(base, renamed).splitlines()[0] == "full: hardware SN40L-16 -> SN40L-16 (hbm)"
    assert point_table(BASE, other).splitlines()[0] == "full: the same model, hardware and policy"


def test_runs_on_an_edited_copy_of_the_hardware_compare_as_other_hardware(tmp_path, capsys):
    root = Path(__file__).resolve().parents[2]
    for name in ("sn40l.yaml", "sn40l_node16.yaml"):
        for copy, rate in (("a", "409.6 GB/s"), ("b", "819.2 GB/s")):
            (tmp_path / copy).mkdir(exist_ok=True)
            text = (root / "hw_configs" / name).read_text()
            (tmp_path / copy / name).write_text(text.replace("bytes_per_s_per_unit: 409.6 GB/s",
                                                             f"bytes_per_s_per_unit: {rate}"))
    outs = []
    for copy in ("a", "b"):
        experiment = tmp_path / copy / "exp.yaml"
        experiment.write_text(EXPERIMENT.format(model=root / "graphs" / "llama3_1_8b.yaml"))
        outs.append(tmp_path / copy / "out")
        assert main(["run", str(experiment), "--out", str(outs[-1]), "--no-plot", "--quiet"]) == 0
    records = [json.loads((out / "results.json").read_text())[0] for out in outs]
    assert records[0]["hardware"] == records[1]["hardware"] == "SN40L-16"
    assert records[0]["model_digest"] == records[1]["model_digest"]
    assert records[0]["hardware_digest"] != records[1]["hardware_digest"]
    assert records[1]["decode_step_s"] < records[0]["decode_step_s"]  # the faster machine ran
    capsys.readouterr()
    assert main(["compare", str(outs[0]), str(outs[1]), "--changed"]) == 0
    heading = capsys.readouterr().out.splitlines()[2]
    assert heading == (f"full: hardware SN40L-16 described otherwise (digest {records[0]['hardware_digest']} -> "
                       f"{records[1]['hardware_digest']})")


EXPERIMENT = """kind: experiment
name: digest
hardware: sn40l_node16.yaml
model: {model}
parallel: {{prefill: {{tp: 16}}, decode: {{tp: 16}}}}
policies: [{{name: full, policy: full}}]
shape: {{prompt_len: 1024, batch: 1, max_new_tokens: 4}}
workload: {{kind: fixed, count: 1, output_len: 4}}
serving: {{batch: 1, max_new_tokens: 4}}
"""


SLO = {"ttft_max_s": 1.0, "ttft_percentile": 90.0, "tpot_max_s": 0.05, "tpot_percentile": 99.0,
       "attainment": 0.0, "holds": False}


def test_the_heading_names_changed_slos():
    # a looser TPOT bound moved SLO attainment from 0% to 100% under "the same model, hardware and policy"
    base = dict(BASE, slo=SLO)
    looser = dict(BASE, slo=dict(SLO, tpot_max_s=0.07, attainment=1.0, holds=True))
    assert point_table(base, looser, changed_only=True).splitlines()[0] == \
        "full: slo ttft p90 <= 1 s, tpot p99 <= 0.05 s -> ttft p90 <= 1 s, tpot p99 <= 0.07 s"
    assert point_table(BASE, base).splitlines()[0] == "full: slo none -> ttft p90 <= 1 s, tpot p99 <= 0.05 s"
    # what the run served against the same SLOs is a figure, not an input
    served_otherwise = dict(base, slo=dict(SLO, attainment=0.5))
    assert point_table(base, served_otherwise).splitlines()[0] == "full: the same model, hardware and policy"


@pytest.mark.parametrize("field, a, b", [("seed", 0, 5), ("kv_transfer", "host_link", "p2p"),
                                         ("max_new_tokens", 512, 1024)])
def test_the_heading_names_a_changed_seed_link_or_generated_length(field, a, b):
    # each served other numbers (other requests drawn, a slower transfer, a longer static cache) under
    # "the same model, hardware and policy"
    assert point_table(dict(BASE, **{field: a}), dict(BASE, **{field: b})).splitlines()[0] == \
        f"full: {field} {a} -> {b}"
    if field != "max_new_tokens":   # results written before seed and link were kept compare by the rest
        assert point_table(BASE, dict(BASE, **{field: b})).splitlines()[0] == "full: the same model, hardware and policy"


def test_runs_of_another_seed_link_or_slo_are_named_end_to_end(tmp_path, capsys):
    root = Path(__file__).resolve().parents[2]
    experiment = tmp_path / "e.yaml"
    experiment.write_text((root / "experiments" / "llama8b_node8.yaml").read_text()
                          .replace("../hw_configs/", str(root / "hw_configs") + "/")
                          .replace("../graphs/", str(root / "graphs") + "/")
                          .replace("count: 48", "count: 6")
                          + "slo:\n  ttft: {max_s: 2 s, percentile: 90}\n")
    outs = {}
    for label, sets in (("base", []), ("other", ["serving.seed=8", "serving.kv_transfer=p2p", "slo.ttft.max_s=1 s"])):
        argv = ["run", str(experiment), "--out", str(tmp_path / label), "--no-plot", "--quiet"]
        for value in sets:
            argv += ["--set", value]
        assert main(argv) == 0
        outs[label] = json.loads((tmp_path / label / "results.json").read_text())
    assert outs["base"][0]["seed"] == 7 and outs["other"][0]["seed"] == 8
    assert outs["base"][0]["kv_transfer"] == "host_link" and outs["other"][0]["kv_transfer"] == "p2p"
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "base"), str(tmp_path / "other"), "--changed"]) == 0
    out = capsys.readouterr().out
    assert "full: kv_transfer host_link -> p2p; seed 7 -> 8; slo ttft p90 <= 2 s -> ttft p90 <= 1 s" in out, out


def test_the_heading_names_changed_simulation_options(tmp_path, capsys):
    # graph_options.expert_loading, execution.kernel_looping or the memory placement move the decode
    # step under "the same model, hardware and policy"
    options = "graph_options.expert_loading=all, execution.kernel_looping=False"
    assert point_table(dict(BASE, options=None), dict(BASE, options=options)).splitlines()[0] == \
        f"full: options none -> {options}"
    root = Path(__file__).resolve().parents[2]
    experiment = tmp_path / "e.yaml"
    experiment.write_text((root / "experiments" / "llama8b_node8.yaml").read_text()
                          .replace("../hw_configs/", str(root / "hw_configs") + "/")
                          .replace("../graphs/", str(root / "graphs") + "/").replace("count: 48", "count: 4"))
    for label, sets in (("base", []), ("other", ["execution.kernel_looping=false", "execution.collective_algorithm=ring"])):
        argv = ["run", str(experiment), "--out", str(tmp_path / label), "--no-plot", "--quiet"]
        for value in sets:
            argv += ["--set", value]
        assert main(argv) == 0
    records = [json.loads((tmp_path / label / "results.json").read_text()) for label in ("base", "other")]
    assert records[0][0]["options"] is None
    assert records[1][0]["options"] == "execution.collective_algorithm=ring, execution.kernel_looping=False"
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "base"), str(tmp_path / "other")]) == 0
    out = capsys.readouterr().out
    assert "full: options none -> execution.collective_algorithm=ring, execution.kernel_looping=False" in out, out


def test_the_heading_names_a_changed_multi_model_section(tmp_path, capsys):
    # two runs of several models on a node differing in the scheduling quantum (or in the model served
    # beside this one) moved TTFT 2x under "the same model, hardware and policy"
    root = Path(__file__).resolve().parents[2]
    m8 = root / "graphs" / "llama3_1_8b.yaml"
    experiment = tmp_path / "e.yaml"
    experiment.write_text(f"""\
kind: experiment
name: mm
hardware: {root / 'hw_configs' / 'sn40l_node8.yaml'}
model: {m8}
parallel: {{prefill: {{tp: 8}}, decode: {{tp: 8}}}}
policies: [{{name: full, policy: full}}]
shape: {{prompt_len: 512}}
workload: {{kind: poisson, rate_per_s: 20, count: 12, output_len: 16}}
serving: {{mode: colocated, batch_sizes: [4], prefill_lens: [512], max_new_tokens: 16}}
multi_model:
  models:
    - {{name: a, model: {m8}, share: 0.5, batch: 4}}
    - {{name: b, model: {m8}, share: 0.5, batch: 4}}
  schedulers: [batch_by_model]
  quantum_s: 1 s
""")
    for label, sets in (("base", []), ("other", ["multi_model.quantum_s=0.001 s"])):
        argv = ["run", str(experiment), "--out", str(tmp_path / label), "--no-plot", "--quiet"]
        for value in sets:
            argv += ["--set", value]
        assert main(argv) == 0
    records = [json.loads((tmp_path / label / "results.json").read_text()) for label in ("base", "other")]
    assert records[0][0]["multi_model"]["quantum_s"] == 1.0 and records[1][0]["multi_model"]["quantum_s"] == 0.001
    assert records[0][0]["multi_model"]["models"] == \
        "a=llama-3.1-8b (share 0.5, batch 4), b=llama-3.1-8b (share 0.5, batch 4)"
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "base"), str(tmp_path / "other")]) == 0
    out = capsys.readouterr().out
    assert "full/batch_by_model/a: multi_model quantum 1 s -> quantum 0.001 s" in out, out
    # the models sharing the node (another model beside this one, another share or batch) are named too
    other = dict(records[0][0], multi_model=dict(records[0][0]["multi_model"], models="a=x (share 1, batch 4)"))
    assert point_table(records[0][0], other).splitlines()[0] == (
        "full/batch_by_model/a: multi_model a=llama-3.1-8b (share 0.5, batch 4), b=llama-3.1-8b (share 0.5, batch 4)"
        " -> a=x (share 1, batch 4)")


def test_a_stated_slo_bound_with_a_null_percentile_is_a_heading_not_a_traceback(tmp_path, capsys):
    # record_shape lets each part of an slo be null, and the heading formatted the null percentile
    # beside its bound with :g (a TypeError traceback, exit status 1)
    unstated = dict(BASE, slo=dict(SLO, ttft_percentile=None))
    base, other = _write(tmp_path, "base", [dict(BASE, slo=SLO)]), _write(tmp_path, "other", [unstated])
    assert main(["compare", str(base), str(other), "--changed"]) == 0
    out = capsys.readouterr().out
    assert "full: slo ttft p90 <= 1 s, tpot p99 <= 0.05 s -> ttft <= 1 s, tpot p99 <= 0.05 s" in out, out


@pytest.mark.parametrize("field, a, b, said", [
    ("quantum_s", None, 2.0, "multi_model quantum none -> quantum 2 s"),
    ("slow_tier", None, "ddr", "multi_model weights in none -> weights in ddr"),
])
def test_a_null_multi_model_setting_is_named_none_not_a_traceback(tmp_path, capsys, field, a, b, said):
    # record_shape lets a multi_model figure be null; the heading formatted a null quantum with :g
    # (a TypeError traceback, exit status 1) and a null tier as Python's None
    base = _write(tmp_path, "base", [dict(BASE, multi_model={field: a})])
    other = _write(tmp_path, "other", [dict(BASE, multi_model={field: b})])
    assert main(["compare", str(base), str(other)]) == 0
    assert f"full: {said}" in capsys.readouterr().out


def test_the_heading_names_a_changed_prompt_or_batch():
    # two runs of one experiment at 32K and 16K prompts, or at serving.batch max (64) and 8, were headed
    # "the same model, hardware and policy" above a prompt, a batch and every figure that follow them
    prompt = dict(BASE, prefill_len=32768, batch=64)
    half = dict(prompt, prefill_len=16384, batch=128)
    assert point_table(prompt, half).splitlines()[0] == "full: prefill_len 32768 -> 16384; batch 64 -> 128"
    assert point_table(prompt, dict(prompt, batch=8), changed_only=True).splitlines()[0] == "full: batch 64 -> 8"
    # identical inputs keep their heading; a record without the prompt (older results) compares by the rest
    assert point_table(prompt, dict(prompt)).splitlines()[0] == "full: the same model, hardware and policy"
    assert point_table(BASE, dict(BASE, prefill_len=4096)).splitlines()[0] == "full: the same model, hardware and policy"


def test_the_heading_names_a_changed_prefill_chunk_or_prefix_caching():
    # a co-located run and the same with serving.prefill_chunk 4096 were headed "the same model, hardware and
    # policy" above a TTFT four times as long; each option's results group says whether it was on
    chunked = dict(BASE, chunked_prefill={"chunk_tokens": 4096, "prefill_overhead_fraction": 0.86})
    assert point_table(BASE, chunked).splitlines()[0] == "full: prefill_chunk none -> 4096"
    smaller = dict(BASE, chunked_prefill={"chunk_tokens": 2048, "prefill_overhead_fraction": 0.9})
    assert point_table(chunked, smaller).splitlines()[0] == "full: prefill_chunk 4096 -> 2048"
    cached = dict(BASE, prefix_cache={"hits": 3})
    assert point_table(cached, BASE).splitlines()[0] == "full: prefix_cache on -> off"
    # the same options, whatever they served, keep the heading
    assert point_table(cached, dict(BASE, prefix_cache={"hits": 5})).splitlines()[0] == \
        "full: the same model, hardware and policy"
    assert point_table(chunked, dict(chunked, chunked_prefill={"chunk_tokens": 4096, "prefill_overhead_fraction": 0.5})
                       ).splitlines()[0] == "full: the same model, hardware and policy"


def test_the_heading_names_another_compiled_prefill_length_or_max_batch_of_the_same_shape():
    # the same 30,000-token prompt with serving.prefill_lens [30000, ...] (unpadded) against the default
    # powers of two (padded to 32,768) was headed "the same model, hardware and policy" above a prefill
    # 8% shorter; another serving.batch_sizes beside an explicit batch, above another max batch
    padded = dict(BASE, prefill_len=30000, prefill_len_compiled=32768, max_batch=64)
    unpadded = dict(padded, prefill_len_compiled=30000)
    assert point_table(padded, unpadded).splitlines()[0] == "full: prefill_len_compiled 32768 -> 30000"
    assert point_table(padded, dict(padded, max_batch=48)).splitlines()[0] == "full: max_batch 64 -> 48"
    # a changed prompt or batch says it alone: what it compiles to follows from it
    longer = dict(padded, prefill_len=40000, prefill_len_compiled=65536, batch=32, max_batch=32)
    assert point_table(padded, longer).splitlines()[0] == "full: prefill_len 30000 -> 40000; batch 16 -> 32"
    # a record without the compiled length (older results) compares by the rest
    assert point_table(BASE, dict(BASE, prefill_len_compiled=4096)).splitlines()[0] == \
        "full: the same model, hardware and policy"
