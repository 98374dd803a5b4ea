"""Experiment files: the serving sections, point expansion, and located errors (exit 2 via the CLI)."""
from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pydantic
import pytest

import sn40l_sim.study.experiment as experiment
from sn40l_sim.commands.cli import main
from sn40l_sim.errors import InputError
from sn40l_sim.study import serving_section, slo_section
from sn40l_sim.study.experiment import load_experiment
from sn40l_sim.study.multi_model_section import MultiModelSection
from sn40l_sim.study.points import make_point_policy, points
from sn40l_sim.study.runner import simulate_experiment
from sn40l_sim.study.sweep.base import experiment_with_sets

REPO = Path(__file__).resolve().parents[2]
BASE = textwrap.dedent("""\
    kind: experiment
    name: demo
    hardware: hw.yaml
    model: m.yaml
    parallel:
      prefill: {tp: 16}
      decode: {tp: 16, attention_dp: 16}
    policies:
      - {name: full, policy: full}
      - name: snap
        policy: snapstream
        prompt_fraction: {budget: 0.25}
        per_prompt:
          - {prompt_len: 32768, params: {sink: 8}}
    shape: {prompt_len: 131072}
    prompt_lens: [131072, 32768]
    workload:
      kind: fixed
      count: batch
      output_len: 64
    serving:
      batch: max
      max_new_tokens: 64
      speculative: {drafts: 2, acceptance: 0.8}
    """)


def write(tmp_path, text, name="e.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_points_expand_policies_by_prompt_lengths(tmp_path):
    exp = load_experiment(write(tmp_path, BASE))
    pts = points(exp)
    assert [(p.name, p.policy, p.prompt_len, p.params) for p in pts] == [
        ("full@128K", "full", 131072, {}),
        ("full@32K", "full", 32768, {}),
        ("snap@128K", "snapstream", 131072, {"budget": 32768}),
        ("snap@32K", "snapstream", 32768, {"budget": 8192, "sink": 8}),
    ]
    policy = make_point_policy(exp, pts[3])
    assert policy.static_cache_len(32768, 64) == 8192 and policy.sink == 8
    assert exp.max_new_tokens == 64 and exp.prefill_node_count == 1
    assert (exp.speculation.drafts, exp.speculation.acceptance) == (2, 0.8)
    assert exp.speculation.tokens_per_step == pytest.approx(2.44)
    assert exp.spec.serving.batch_sizes[:5] == (1, 2, 4, 8, 16)


def test_single_prompt_points_keep_the_entry_name(tmp_path):
    text = BASE.replace("prompt_lens: [131072, 32768]\n", "").replace(
        "    per_prompt:\n      - {prompt_len: 32768, params: {sink: 8}}\n", "")
    exp = load_experiment(write(tmp_path, text))
    assert [(p.name, p.prompt_len) for p in points(exp)] == [("full", 131072), ("snap", 131072)]


def line_of(text, needle):
    return next(i for i, line in enumerate(text.splitlines(), start=1) if needle in line)


BAD = [
    # (replace this, with this, field, message part, line marker)
    # a number or a word: one expectation, then what was given (not "..., got X or Input should be 'batch' (got X)")
    ("count: batch", "count: many", "workload.count", "expected an integer or 'batch', got 'many'", "count: many"),
    ("output_len: 64", "output_len: -2", "workload.output_len", "expected a positive integer", "output_len: -2"),
    ("kind: fixed", "kind: burst", "workload", "kind: fixed | poisson | trace", "kind: burst"),
    ("batch: max", "batch: 0", "serving.batch", "expected a positive integer from 1 to 2147483647 (2**31 - 1) or "
     "'max', got 0", "batch: 0"),
    ("batch: max", "batch: lots", "serving.batch", "expected an integer or 'max', got 'lots'", "batch: lots"),
    # pydantic's words ("Input should be a valid integer (got None) or Input should be 'max'") for a wrong type
    ("batch: max", "batch: null", "serving.batch", "expected an integer or 'max', got None", "batch: null"),
    ("model: m.yaml", "model: 12", "model", "expected a text, got 12", "model: 12"),
    # the drafts' own range, for a negative count as for one too large (not 0 to 2**31 - 1)
    ("speculative: {drafts: 2", "speculative: {drafts: -1", "serving.speculative.drafts",
     "expected a number of drafts from 0 to 15, got -1", "speculative"),
    ("speculative: {drafts: 2", "speculative: {drafts: 16", "serving.speculative.drafts",
     "expected a number of drafts from 0 to 15, got 16", "speculative"),
    ("speculative: {drafts: 2", "speculative: {drafts: 1.5", "serving.speculative.drafts",
     "expected an integer", "speculative"),
    ("acceptance: 0.8}", "acceptance: 1.2}", "serving.speculative.acceptance",
     "expected an acceptance probability from 0 to 1, got 1.2", "speculative"),
    ("acceptance: 0.8}", "acceptance: yes}", "serving.speculative.acceptance",
     "expected a number, got 'yes'", "speculative"),
    ("speculative: {drafts: 2, acceptance: 0.8}", "speculative: {drafts: 2}", "serving.speculative.acceptance",
     "required field is missing", "speculative"),
    ("speculative: {drafts: 2, acceptance: 0.8}", "tokens_per_forward: 2.4", "serving.tokens_per_forward",
     "write serving.speculative: {drafts: 2, acceptance: 0.8}", "tokens_per_forward"),
    ("batch: max", "batch: max\n  mode: hybrid", "serving.mode", "'disaggregated' or 'colocated'", "mode: hybrid"),
    ("batch: max", "batch: max\n  batch_sizes: [1, 2.5]", "serving.batch_sizes[1]", "expected an integer",
     "batch_sizes"),
    ("batch: max", "batch: max\n  batch_sizes: []", "serving.batch_sizes", "at least one compiled size",
     "batch_sizes"),
    # a single value where a list goes: pydantic's "Input should be a valid tuple", Python's word
    ("batch: max", "batch: max\n  batch_sizes: 64", "serving.batch_sizes", "expected a list, got 64",
     "batch_sizes"),
    ("batch: max", "batch: max\n  batch_sizes: [4, 8, 4]", "serving.batch_sizes", "4 is listed twice",
     "batch_sizes"),
    ("batch: max", "batch: max\n  prefill_lens: [1024, 1024]", "serving.prefill_lens", "1024 is listed twice",
     "prefill_lens"),
    ("batch: max", "batch: max\n  mode: colocated\n  prefill_nodes: 2", "serving.prefill_nodes",
     "co-located", "prefill_nodes"),
    ("batch: max", "batch: max\n  prefill_nodes: 0", "serving.prefill_nodes", "at least 1 prefill node",
     "prefill_nodes"),
    ("batch: max", "batch: max\n  kv_transfer: pigeon", "serving.kv_transfer", "'host_link' or 'p2p'",
     "kv_transfer"),
    # node counts past any deployment: a billion prefill nodes ran the machine out of memory, ten
    # million decode nodes never finished (serving_section.MAX_NODES)
    ("batch: max", "batch: max\n  prefill_nodes: 1000000000", "serving.prefill_nodes",
     "expected a node count from 0 to 4096, got 1000000000", "prefill_nodes"),
    ("batch: max", "batch: max\n  decode_nodes: 10000000", "serving.decode_nodes",
     "expected a node count from 1 to 4096, got 10000000", "decode_nodes"),
    # the node count's own range, not the generic 1 to 2**31 - 1 of every count; no bool taken for 1
    ("batch: max", "batch: max\n  decode_nodes: 0", "serving.decode_nodes",
     "expected a node count from 1 to 4096, got 0", "decode_nodes"),
    ("batch: max", "batch: max\n  decode_nodes: true", "serving.decode_nodes", "expected an integer, got True",
     "decode_nodes"),
    ("batch: max", "batch: max\n  prefill_nodes: -1", "serving.prefill_nodes",
     "expected a node count from 0 to 4096, got -1", "prefill_nodes"),
    # a request count's and a probe count's own ranges, for 0 as for one too large (not 1 to 2**31 - 1)
    ("count: batch", "count: 0", "workload.count",
     "expected a request count from 1 to 10000000 (a run keeps every request) or 'batch', got 0", "count: 0"),
    ("kind: fixed\n  count: batch\n  output_len: 64", "kind: fixed\n  count: batch\n  rounds: 0\n  output_len: 64",
     "workload.rounds", "expected a request count from 1 to 10000000 (a run keeps every request), got 0", "rounds: 0"),
    ("serving:\n", "slo: {ttft: {max_s: 1}}\nrate_search: {low_per_s: 1, high_per_s: 2, probes: 0}\nserving:\n",
     "rate_search.probes", "expected a number of probes from 1 to 30, got 0", "rate_search:"),
    ("decode: {tp: 16, attention_dp: 16}", "decode: {tp: 16, attention_dp: 3}", "parallel.decode.attention_dp",
     "must divide tp (16)", "attention_dp: 3"),
    # one prompt a prefill: a batch split ran its attention unsplit on one socket (Llama-3.1-8B's 32K
    # prefill on 8 sockets 0.812 s against 0.289 s) and priced no layout switch
    ("prefill: {tp: 16}", "prefill: {tp: 16, attention_dp: 16}", "parallel.prefill.attention_dp",
     "prefill runs one prompt at a time", "prefill: {tp: 16, attention_dp"),
    ("batch: max", "batch: max\n  seeds: 3", "serving.seeds", "unknown key", "seeds"),
    ("prompt_lens: [131072, 32768]", "prompt_lens: [131072, 131072]", "prompt_lens", "repeat", "prompt_lens"),
    ("prompt_lens: [131072, 32768]", "prompt_lens: [131072, -1]", "prompt_lens[1]", "positive", "prompt_lens"),
    ("{prompt_len: 32768, params", "{prompt_len: 65536, params", "policies[1].per_prompt[0].prompt_len",
     "not one of the experiment's prompt lengths", "65536"),
    ("prompt_fraction: {budget: 0.25}", "prompt_fraction: {budget: -0.25}",
     "policies[1].prompt_fraction.budget", "greater than 0", "prompt_fraction"),
    # a value that another replaces at every point was dropped without a word
    ("prompt_fraction: {budget: 0.25}", "params: {budget: 4096}\n    prompt_fraction: {budget: 0.25}",
     "policies[1].params.budget", "also set by prompt_fraction.budget", "params: {budget"),
    ("- {prompt_len: 32768, params: {sink: 8}}", "- {prompt_len: 32768, params: {sink: 8}}\n"
     "      - {prompt_len: 32768, params: {sink: 16}}", "policies[1].per_prompt[1].prompt_len",
     "has an earlier per_prompt entry", "sink: 16"),
    ("- {name: full, policy: full}", "- {name: snap, policy: full}", "policies[1].name", "duplicate policy name",
     "- name: snap"),
    ("kind: fixed\n  count: batch\n  output_len: 64",
     "kind: poisson\n  rate_per_s: 1\n  output_len: {dist: uniform, low: 9, high: 3}",
     "workload.output_len.low", "must not exceed high", "output_len"),
    ("kind: fixed\n  count: batch\n  output_len: 64",
     "kind: poisson\n  output_len: 5", "workload.rate_per_s", "required field is missing", "kind: poisson"),
    ("kind: fixed\n  count: batch\n  output_len: 64",
     "kind: poisson\n  rate_per_s: 2\n  output_len: {dist: zipf}", "workload.output_len",
     "constant | uniform | lognormal", "output_len"),
    ("kind: fixed\n  count: batch\n  output_len: 64", "kind: fixed\n  count: 3", "workload.output_len",
     "required for a fixed workload", "kind: fixed"),
    ("kind: fixed\n  count: batch\n  output_len: 64", "kind: trace", "workload.path", "required", "kind: trace"),
    # a tagged union given no mapping: what the field takes, not pydantic's "Input should be a valid
    # dictionary or object to extract fields from"
    ("kind: fixed\n  count: batch\n  output_len: 64", "kind: poisson\n  rate_per_s: 2\n  output_len: 1.5",
     "workload.output_len", "expected an integer, or a mapping with dist: constant | uniform | lognormal (got 1.5)",
     "output_len"),
    ("workload:\n  kind: fixed\n  count: batch\n  output_len: 64", "workload: 5", "workload",
     "expected a mapping with kind: fixed | poisson | trace (got 5)", "workload: 5"),
    # values the workload would drop without a word: rounds of a numbered count, the shorthand's
    # arrival beside a list whose requests give their own
    ("kind: fixed\n  count: batch\n  output_len: 64", "kind: fixed\n  count: 3\n  rounds: 2\n  output_len: 64",
     "workload.rounds", "with count: 3 it would change nothing", "rounds: 2"),
    ("kind: fixed\n  count: batch\n  output_len: 64", "kind: fixed\n  interval_s: 1\n  requests: [{output_len: 8}]",
     "workload.interval_s", "give either a 'requests' list", "interval_s"),
    ("serving:\n", "memory: {order: [hbm, ddr, hbm]}\nserving:\n", "memory.order[2]", "listed twice", "memory:"),
    ("serving:\n", "memory: {order: []}\nserving:\n", "memory.order", "at least one memory tier", "memory:"),
    ("serving:\n", "memory: {may_spill: [weights, cache]}\nserving:\n", "memory.may_spill[1]",
     "'weights', 'kv' or 'activations'", "memory:"),
]


@pytest.mark.parametrize("old, new, field, message, marker", BAD, ids=[b[2] + ":" + b[3][:20] for b in BAD])
def test_bad_fields_name_file_field_and_line(tmp_path, old, new, field, message, marker):
    assert old in BASE
    text = BASE.replace(old, new)
    path = write(tmp_path, text)
    with pytest.raises(InputError) as info:
        load_experiment(path)
    err = info.value
    assert err.file == str(path)
    assert err.field == field
    assert message in err.message
    assert err.line == line_of(text, marker)


def test_bad_policy_parameters_are_located_at_the_entry(tmp_path):
    text = BASE.replace("prompt_fraction: {budget: 0.25}", "params: {sink: -1}")
    exp = load_experiment(write(tmp_path, text))
    with pytest.raises(InputError) as info:
        make_point_policy(exp, points(exp)[2])
    assert info.value.field == "policies[1].params.sink"
    assert info.value.line == line_of(text, "sink: -1")


@pytest.mark.parametrize("dist", ["{dist: uniform, low: 9, high: 9}", "{dist: lognormal, median: 9, sigma: 1, low: 9, high: 9}"])
def test_a_length_range_of_one_value_is_accepted(tmp_path, dist):
    # low may equal high (every request of that length): only low above high is refused
    text = BASE.replace("kind: fixed\n  count: batch\n  output_len: 64", f"kind: poisson\n  rate_per_s: 1\n  output_len: {dist}")
    output = load_experiment(write(tmp_path, text)).spec.workload.output_len
    assert (output.low, output.high) == (9, 9)


def test_memory_defaults_keep_weights_and_kv_in_the_first_tier(tmp_path):
    spec = load_experiment(write(tmp_path, BASE)).spec
    assert spec.memory.order is None and spec.memory.may_spill == ("activations",)
    spec = load_experiment(write(tmp_path, BASE + "memory: {order: [ddr], may_spill: [activations, kv]}\n")).spec
    assert spec.memory.order == ("ddr",) and spec.memory.may_spill == ("activations", "kv")


def test_max_new_tokens_is_required_for_serving(tmp_path):
    exp = load_experiment(write(tmp_path, BASE.replace("  max_new_tokens: 64\n", "")))
    with pytest.raises(InputError, match="serving.max_new_tokens: required"):
        _ = exp.max_new_tokens


@pytest.mark.parametrize("text, match", [
    (BASE.replace("serving:", "sweep: {batch: [1, 2]}\nserving:"), "sweep.batch: unknown key"),
    (BASE.replace("workload:\n  kind: fixed\n  count: batch\n  output_len: 64\n", ""),
     "workload: run needs a workload section"),
    (BASE.replace("output_len: 64", "output_len: [64]"), "workload.output_len"),
    ("kind: experiment\nname: [unclosed\n", "YAML syntax error"),
])
def test_run_exits_2_with_one_line_for_bad_experiments(tmp_path, capsys, text, match):
    path = write(tmp_path, text)
    assert main(["run", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert str(path) in err and match in err
    assert not (tmp_path / "out").exists()


def test_compiled_sizes_are_a_set_whose_order_changes_nothing(tmp_path):
    # batch_sizes and prefill_lens name the compiled graphs: batch: max takes the largest that fits
    # and a prompt the smallest that holds it, whatever order the list gives them in (a repeated
    # size is refused: most likely a typo for another)
    repo = Path(__file__).resolve().parents[2]
    text = textwrap.dedent(f"""\
        kind: experiment
        name: order
        hardware: {repo / 'hw_configs' / 'sn40l_node8.yaml'}
        model: {repo / 'graphs' / 'llama3_1_8b.yaml'}
        parallel: {{prefill: {{tp: 8}}, decode: {{tp: 8, attention_dp: 8}}}}
        policies: [{{name: full, policy: full}}]
        shape: {{prompt_len: 3000}}
        workload: {{kind: poisson, rate_per_s: 8, count: 40, output_len: 16,
                   prompt_len: {{dist: uniform, low: 100, high: 3000}}}}
        serving: {{batch: max, max_new_tokens: 16, batch_sizes: SIZES, prefill_lens: LENS}}
        """)
    records = [simulate_experiment(write(tmp_path, text.replace("SIZES", sizes).replace("LENS", lens), f"{i}.yaml"))[1][0]
               for i, (sizes, lens) in enumerate((("[16, 64, 256]", "[512, 2048, 4096]"),
                                                   ("[256, 16, 64]", "[4096, 512, 2048]")))]
    keep = ("batch", "max_batch", "prefill_len_compiled", "decode_step_s", "prefill_s", "latency", "throughput")
    sorted_lists, shuffled = ({k: r[k] for k in keep} for r in records)
    assert sorted_lists == shuffled
    assert (records[1]["batch"], records[1]["prefill_len_compiled"]) == (256, 4096)


def test_p2p_between_nodes_without_a_spare_port_is_refused_before_simulating(tmp_path, capsys):
    # a 16-socket full mesh of sockets with 15 ports has no port left to reach the other node; the
    # transfer was timed over all 15 (its mesh's own ports) as if they led there
    root = Path(__file__).resolve().parents[2]
    node = tmp_path / "node.yaml"
    node.write_text(f"base: {root / 'hw_configs' / 'sn40l_node16.yaml'}\nname: SN40L-16-15\n"
                    "socket_overrides: {p2p: {ports: 15}}\n")
    text = (root / "experiments" / "deepseek_tp16.yaml").read_text()
    text = text.replace("../hw_configs/sn40l_node16.yaml", str(node)).replace("../graphs/", f"{root}/graphs/")
    assert "kv_transfer: host_link" in text
    path = write(tmp_path, text.replace("kv_transfer: host_link", "kv_transfer: p2p"))
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert err == (f"error: {path}:{line_of(text, 'kv_transfer')}: serving.kv_transfer: the hardware SN40L-16-15 has "
                   "no P2P port to spare to join another node: its full_mesh of 16 sockets takes 15 of each socket's "
                   "socket.p2p.ports (15); expected at least one more port, or the KV carried over the host link "
                   "(kv_transfer host_link)\n")
    assert main(["check", str(write(tmp_path, text))]) == 0   # over the host link it runs


def test_the_schema_docstring_names_every_field_of_the_sections_it_describes():
    """The experiment module's docstring is the file format's reference: a section it describes
    names each of its fields (``execution`` once listed two of its three, leaving out
    ``idle_units``)."""
    sections = [experiment.ServingSection, experiment.SLOSection, experiment.RateSearchSection, MultiModelSection,
                experiment.MemorySection, experiment.ExecutionSection, experiment.ReportSection]
    unnamed = [f"{section.__name__}.{field}" for section in sections for field in section.model_fields
               if f"``{field}" not in experiment.__doc__]
    assert unnamed == []


def test_the_section_modules_say_truly_what_experiment_re_exports():
    """serving_section and slo_section say which of their names study.experiment re-exports (it
    once said every name, yet ``PrefixSharing``, ``workload_summary`` and the field types are not)."""
    for module in (serving_section, slo_section):
        said = " ".join(module.__doc__.split())
        assert "every name here" not in said or all(hasattr(experiment, n) for n in vars(module) if n[0] != "_")
        excepted = set(re.findall(r"all but ``(\w+)``", said))
        models = [n for n, v in vars(module).items() if isinstance(v, type) and issubclass(v, pydantic.BaseModel)
                  and v.__module__ == module.__name__]
        assert [n for n in models if n not in excepted and not hasattr(experiment, n)] == []
        assert all(not hasattr(experiment, n) for n in excepted)


def test_a_link_named_for_colocated_nodes_is_warned_of_at_its_line(tmp_path, capsys):
    # co-located nodes send no cache: kv_transfer: p2p passed check without a word, where a co-located
    # prefill_nodes is refused
    base = (REPO / "experiments" / "llama8b_node8.yaml").read_text().replace("../", f"{REPO}/")
    path = tmp_path / "c.yaml"
    path.write_text(base.replace("  mode: disaggregated\n  prefill_nodes: 1\n", "  mode: colocated\n  kv_transfer: p2p\n"))
    line = next(n for n, text in enumerate(path.read_text().splitlines(), 1) if "kv_transfer" in text)
    with pytest.warns(UserWarning) as caught:
        load_experiment(path)
    (warning,) = [str(w.message) for w in caught]
    assert warning.startswith(f"{path}:{line}: serving.kv_transfer: p2p: co-located nodes prefill into their own "
                              "cache"), warning
    # the disaggregated file names it without a warning
    disaggregated = tmp_path / "d.yaml"
    disaggregated.write_text(base.replace("  prefill_nodes: 1\n", "  prefill_nodes: 1\n  kv_transfer: p2p\n"))
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_experiment(disaggregated)


def test_a_set_value_is_named_once_in_errors_and_warnings(tmp_path, capsys):
    # "--set serving.prefill_lens: serving.prefill_lens: prompt length 32768 exceeds ...": the option
    # names the field already
    experiment = str(REPO / "experiments" / "llama8b_node8.yaml")
    assert main(["run", experiment, "--set", "serving.prefill_lens=[512]", "--out", str(tmp_path / "o"),
                 "--no-plot", "--quiet"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("error: --set serving.prefill_lens: prompt length 32768 exceeds the largest compiled "
                           "size 512"), line
    # a warning of a value set so: experiment_with_sets is run --set from Python
    with pytest.warns(UserWarning) as caught:
        experiment_with_sets(experiment, {"serving.mode": "colocated", "serving.prefill_nodes": 0,
                                          "serving.prefill_chunk": 3000})
    messages = [str(w.message) for w in caught]
    assert any(m.startswith("--set serving.prefill_chunk: 3000 is not one of serving.prefill_lens") for m in messages), \
        messages
