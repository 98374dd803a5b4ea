"""An experiment's ``plugins:`` (sn40l_sim/study/plugins.py): a KV policy written outside the package
runs from an experiment file as the shipped ones do, its numbers are not ignored, and every way a
plug-in can be wrong is one line at ``plugins[i]`` naming the plug-in's file and line, exit status 2.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sn40l_sim.commands.cli import main
from sn40l_sim.errors import InputError
from sn40l_sim.kvcache import POLICIES
from sn40l_sim.study import plugins
from sn40l_sim.study.experiment import load_experiment
from sn40l_sim.study.runner import simulate_experiment

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "experiments" / "plugins" / "recent_window.yaml"
#: the shipped example's header, made absolute so a copy in tmp_path runs
HEAD = (f"kind: experiment\nname: plug\nhardware: {REPO}/hw_configs/sn40l_node8.yaml\n"
        f"model: {REPO}/graphs/llama3_1_8b.yaml\nparallel: {{prefill: {{tp: 8}}, decode: {{tp: 8, attention_dp: 8}}}}\n"
        "shape: {prompt_len: 32768}\nworkload: {kind: fixed, count: 8, output_len: 64}\n"
        "serving: {batch: max, max_new_tokens: 64}\n")
WINDOW = """from dataclasses import dataclass
from sn40l_sim.kvcache import KVFootprint, KVPolicy, register

@register
@dataclass(frozen=True)
class Window(KVPolicy):
    name = "{name}"
    window: int = 4096
    state_bytes_per_slot: int = 0
    def cache_len(self, prompt_len, generated):
        return min(prompt_len + generated, self.window)
    def static_cache_len(self, prompt_len, max_new_tokens):
        return self.window
    def prefill_kernels(self, model, prompt_len, tp):
        return []
    def footprint(self, model, prompt_len, max_new_tokens):
        return KVFootprint(slots=self.window, state_bytes=self.window * self.state_bytes_per_slot)
"""


@pytest.fixture(autouse=True)
def registry():
    """Each test's plug-ins leave the registry (and the loaded files) as they found them: a policy
    left registered would change the names other modules' tests and doctests expect."""
    policies, loaded, modules = dict(POLICIES), dict(plugins._LOADED), set(sys.modules)
    yield
    POLICIES.clear()
    POLICIES.update(policies)
    plugins._LOADED.clear()
    plugins._LOADED.update(loaded)
    for name in set(sys.modules) - modules:
        if name.startswith("sn40l_sim_plugin_"):
            del sys.modules[name]


def write(tmp_path: Path, plugin: str, entry: str, policies: str, name: str = "exp.yaml") -> Path:
    if plugin:
        (tmp_path / "plug.py").write_text(plugin)
    path = tmp_path / name
    path.write_text(f"plugins: [{entry}]\n{HEAD}policies:\n{policies}")
    return path


def error_of(path: Path) -> str:
    with pytest.raises(InputError) as info:
        load_experiment(path)
    return str(info.value)


def test_the_example_plugin_gives_the_numbers_of_the_shipped_policy_it_restates():
    # recent_window (a file beside the experiment) is streamingllm without sinks: run from the same
    # experiment, every figure of the two records is the same, so nothing of the plug-in is dropped
    # or replaced on the way, and it differs from the full cache's
    _, records = simulate_experiment(EXAMPLE)
    full, window, streaming = records
    assert window["kv_policy"] == "recent_window" and streaming["kv_policy"] == "streamingllm"
    differ = {k for k in window if k not in ("name", "kv_policy", "kv_policy_params", "speed") and window[k] != streaming[k]}
    assert differ == set()
    assert window["max_batch"] == 4 * full["max_batch"] == 256
    assert window["kv_len"] == 8192 and window["prefill_s"] > full["prefill_s"]


def test_a_plugins_state_bytes_are_counted_in_the_kv_memory(tmp_path):
    plugin = WINDOW.format(name="window_state")
    path = write(tmp_path, plugin, "plug.py", "  - {name: bare, policy: window_state, params: {window: 8192}}\n"
                 "  - {name: state, policy: window_state, params: {window: 8192, state_bytes_per_slot: 512}}\n")
    _, (bare, state) = simulate_experiment(path, serve=False)
    # a large state per slot halves the batch that fits: the plug-in's footprint is what is reserved
    assert state["max_batch"] < bare["max_batch"]
    per_seq_bare = bare["memory"]["hbm"]["kv"] / bare["max_batch"]
    per_seq_state = state["memory"]["hbm"]["kv"] / state["max_batch"]
    assert per_seq_state > per_seq_bare


def test_a_plugin_loaded_twice_registers_once(tmp_path):
    path = write(tmp_path, WINDOW.format(name="window_twice"), "plug.py",
                 "  - {name: w, policy: window_twice}\n")
    load_experiment(path)
    first = POLICIES["window_twice"]
    load_experiment(path)                     # a sweep's runs, check then run: the file is not re-run
    assert POLICIES["window_twice"] is first


@pytest.mark.parametrize(("plugin", "entry", "expected"), [
    ("", "nowhere.py", "exp.yaml:1: plugins[0]: plug-in file 'nowhere.py' not found (looked for "),
    ("x = (\n", "plug.py", "exp.yaml:1: plugins[0]: importing plug-in 'plug.py' failed: {dir}/plug.py:1: "
                           "SyntaxError: '(' was never closed"),
    ("import math\n\n\ndef f():\n    return 1 / 0\n\n\nf()\n", "plug.py",
     "plugins[0]: importing plug-in 'plug.py' failed: {dir}/plug.py:5: ZeroDivisionError: division by zero"),
    ("import no_such_dependency_xyz\n", "plug.py",
     "{dir}/plug.py:1: ModuleNotFoundError: No module named 'no_such_dependency_xyz'"),
    # a second class under a shipped policy's name would silently replace it
    (WINDOW.format(name="snapstream"), "plug.py",
     "{dir}/plug.py:4: TypeError: register: KV policy name 'snapstream' of Window ({dir}/plug.py) is already "
     "registered by SnapStream (sn40l_sim.kvcache.policies.snapstream); choose another name"),
    ("", "no_such_plugin_module", "plugins[0]: no module named 'no_such_plugin_module' on the Python path"),
    # a plug-in that ends the process, as a script may, ended check or run with exit status 0 and no word
    ("import sys\n\nsys.exit(0)\n", "plug.py", "failed: {dir}/plug.py:3: SystemExit: 0"),
    ("", "'a b'", "plugins[0]: expected a .py file (relative to this file) or a dotted module name, got 'a b'"),
])
def test_a_bad_plugin_is_one_line_at_its_entry(tmp_path, plugin, entry, expected):
    path = write(tmp_path, plugin, entry, "  - {name: full, policy: full}\n")
    message = error_of(path)
    assert expected.format(dir=tmp_path.resolve()) in message and "\n" not in message
    assert "snapstream" not in POLICIES or POLICIES["snapstream"].__module__ == "sn40l_sim.kvcache.policies.snapstream"


def test_an_unknown_policy_says_how_to_load_one_of_ones_own(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text(f"{HEAD}policies:\n  - {{name: w, policy: window}}\n")
    with pytest.raises(InputError) as info:
        simulate_experiment(path, serve=False)
    message = str(info.value)
    assert "policies[0].policy: unknown KV policy 'window'; expected one of arkvale, full" in message
    assert "listing its module under plugins:" in message


def test_the_cli_refuses_a_broken_plugin_with_exit_status_2(tmp_path):
    path = write(tmp_path, "raise RuntimeError('half written')\n", "plug.py", "  - {name: full, policy: full}\n")
    done = subprocess.run([sys.executable, "-m", "sn40l_sim", "check", str(path)], capture_output=True, text=True,
                          cwd=REPO)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip() == (f"error: {path}:1: plugins[0]: importing plug-in 'plug.py' failed: "
                                   f"{tmp_path.resolve()}/plug.py:1: RuntimeError: half written")


def test_describe_and_check_name_the_plugin(capsys):
    assert main(["describe", str(EXAMPLE)]) == 0
    assert f"  plugins    recent_window.py  ->  {EXAMPLE.parent / 'recent_window.py'}" in capsys.readouterr().out
    assert main(["check", str(EXAMPLE)]) == 0


@pytest.mark.parametrize("slots", ["0", "-5", "100.5", "'x'"])
def test_a_plugin_answering_other_than_a_token_count_is_refused_at_its_entry(tmp_path, slots):
    # before: 0 was blamed on graph_options, -5 and 'x' stopped with a traceback, 100.5 was kv_len at line 1
    plugin = WINDOW.format(name="window_answers").replace("window: int = 4096", f"window: int = {slots}") \
        .replace("        return min(prompt_len + generated, self.window)", "        return 1")
    path = write(tmp_path, plugin, "plug.py", "  - {name: w, policy: window_answers}\n")
    with pytest.raises(InputError) as info:
        simulate_experiment(path, serve=False)
    assert str(info.value) == (f"{path}:11: policies[0].policy: KV policy 'window_answers' ({tmp_path.resolve()}/plug.py): "
                               f"static_cache_len(32768, 64) returned {eval(slots)!r}; expected an integer >= 1 "
                               "(tokens per sequence and layer) (point w)")


def test_a_plugin_given_by_set_is_relative_to_the_folder_it_was_typed_in(tmp_path, monkeypatch, capsys):
    # as --set model=... is: before, it was looked for beside the experiment (exp/plug.py, not found)
    (tmp_path / "exp").mkdir()
    (tmp_path / "plug.py").write_text(WINDOW.format(name="window_set"))
    (tmp_path / "exp" / "e.yaml").write_text(f"{HEAD}policies:\n  - {{name: full, policy: full}}\n")
    monkeypatch.chdir(tmp_path)
    assert main(["run", "exp/e.yaml", "--out", str(tmp_path / "out"), "--no-plot", "--set", "plugins=[plug.py]",
                 "--set", "policies.0={name: w, policy: window_set, params: {window: 8192}}"]) == 0
    assert "window_set" in capsys.readouterr().out


KERNELS = """from dataclasses import dataclass
from sn40l_sim.ir import FusedKernel, Operator
from sn40l_sim.kvcache import KVPolicy, register

@register
@dataclass(frozen=True)
class Kern(KVPolicy):
    name = "kern"
    mode: str = "ok"
    def cache_len(self, prompt_len, generated):
        return min(prompt_len + generated, 4096)
    def static_cache_len(self, prompt_len, max_new_tokens):
        return 4096
    def prefill_kernels(self, model, prompt_len, tp):
        return []
    def decode_kernels(self, model, shape, plan):
        op = Operator("score", "reduction", elements=shape.batch * 4096 * (-1 if self.mode == "negative" else 1),
                      dtype="fp99" if self.mode == "dtype" else "fp32")
        phase, shards = ("prefill" if self.mode == "phase" else "decode"), (3 if self.mode == "shards" else plan.sockets)
        kernel = FusedKernel(name="k", kind="k", phase=phase, operators=(op,), shards=shards)
        return {"none": None, "operator": [op]}.get(self.mode, [kernel])
"""


@pytest.mark.parametrize(("mode", "expected"), [
    ("none", "decode_kernels returned None; expected a list of FusedKernel (sn40l_sim.ir), [] for none"),
    ("operator", "decode_kernels returned [Operator(name='score'"),
    ("phase", "decode_kernels returned kernel 'k' of phase 'prefill'; expected 'decode'"),
    # before: timed with a 3-socket barrier on an 8-socket plan, a silently different step
    ("shards", "decode_kernels returned kernel 'k' on 3 sockets (shards); the decode graph runs every kernel on "
               "its plan's 8"),
    # before: a traceback from the mapper ("operator 'score' has negative elements"), and an unknown
    # dtype costed as bf16 without a word
    ("negative", "decode_kernels returned kernel 'k' whose operator 'score' has elements=-4096; expected counts and "
                 "bytes that are integers >= 0"),
    ("dtype", "decode_kernels returned kernel 'k' whose operator 'score' has dtype='fp99'"),
])
def test_a_plugins_kernels_that_do_not_fit_the_graph_are_refused_at_its_entry(tmp_path, capsys, mode, expected):
    path = write(tmp_path, KERNELS, "plug.py", f"  - {{name: k, policy: kern, params: {{mode: {mode}}}}}\n")
    for command in (["check", str(path)], ["map", str(path), "--phase", "decode"]):
        assert main(command) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"error: {path}:11: policies[0].policy: KV policy 'kern': ") and expected in err
        assert err.endswith("(point k)") and "\n" not in err
    path.write_text(path.read_text().replace(f"mode: {mode}", "mode: ok"))
    assert main(["check", str(path)]) == 0


def test_a_plugin_edited_between_loads_is_imported_again(tmp_path):
    # a notebook iterating on its policy: the second load ran the first version, silently
    path = write(tmp_path, WINDOW.format(name="window_edit"), "plug.py", "  - {name: w, policy: window_edit}\n")
    load_experiment(path)
    assert POLICIES["window_edit"]().window == 4096
    (tmp_path / "plug.py").write_text(WINDOW.format(name="window_edit").replace("window: int = 4096",
                                                                                 "window: int = 2048"))
    load_experiment(path)
    assert POLICIES["window_edit"]().window == 2048


def test_a_policy_the_listed_plugins_do_not_register_says_so(tmp_path):
    # a class without @register: the message said to list the module under plugins:, which it was
    path = write(tmp_path, WINDOW.format(name="window_unregistered").replace("@register\n", ""), "plug.py",
                 "  - {name: w, policy: window_unregistered}\n")
    with pytest.raises(InputError) as info:
        simulate_experiment(path, serve=False)
    assert "unknown KV policy 'window_unregistered'" in str(info.value)
    assert "the plug-ins listed (plug.py) register none of that name: a policy class needs @register" in str(info.value)


def test_a_plugin_imports_a_module_beside_it_as_a_script_does(tmp_path):
    (tmp_path / "window_helpers.py").write_text("DEFAULT_WINDOW = 1536\n")
    plugin = "from window_helpers import DEFAULT_WINDOW\n" + WINDOW.format(name="window_helped").replace(
        "window: int = 4096", "window: int = DEFAULT_WINDOW")
    path = write(tmp_path, plugin, "plug.py", "  - {name: w, policy: window_helped}\n")
    before = list(sys.path)
    load_experiment(path)
    assert POLICIES["window_helped"]().window == 1536 and sys.path == before
    sys.modules.pop("window_helpers", None)


def test_check_given_the_plugin_file_itself_says_what_checks_it(capsys):
    # before: "YAML syntax error" at the module docstring's first line
    assert main(["check", str(EXAMPLE.with_suffix(".py"))]) == 2
    assert "a Python file: check reads YAML files and request traces; a KV-policy plug-in is checked through an " \
           "experiment listing it under plugins:" in capsys.readouterr().err


def test_describe_given_the_plugin_file_itself_says_what_describes_it(capsys):
    # before: "YAML syntax error: expected <block end>" at the module docstring's first line, where
    # check named the file a plug-in's module
    assert main(["describe", str(EXAMPLE.with_suffix(".py"))]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"error: {EXAMPLE.with_suffix('.py')}: a Python file: describe reads YAML files and request "
                   "traces; a KV-policy plug-in is described through an experiment listing it under plugins: "
                   "(describe that experiment)")


def test_a_plugin_whose_cache_grows_other_than_one_token_a_step_is_refused_at_its_entry(tmp_path, capsys):
    # a cache keeping every 8th token: check said ok and run stopped with a ValueError traceback from
    # the serving loop's books, which read min(cache_len(p, 0) + g, cap) from three calls
    plugin = WINDOW.format(name="window_strided").replace(
        "        return min(prompt_len + generated, self.window)", "        return 4000 + (prompt_len + generated) // 8")
    path = write(tmp_path, plugin, "plug.py", "  - {name: w, policy: window_strided}\n")
    for command in (["check", str(path)], ["run", str(path), "--out", str(tmp_path / "out"), "--no-plot", "--quiet"]):
        assert main(command) == 2
        err = capsys.readouterr().err.strip()
        assert err == (f"error: {path}:11: policies[0].policy: KV policy 'window_strided' ({tmp_path.resolve()}/plug.py): "
                       "cache_len(32768, g) is 8096 at g = 0 and 8104 at g = 64; expected one more token per generated "
                       "token until a cap, min(cache_len(p, 0) + g, cap), the one growth the serving model takes "
                       "(docs/architecture.md, \"Extending the simulator\") (point w)")


@pytest.mark.parametrize(("method", "raised"), [
    ("    def __post_init__(self):\n        raise ValueError('window must be even')\n", "ValueError: window must be even"),
    ("    def prefill_kernels(self, model, prompt_len, tp):\n        raise ValueError('window must be even')\n",
     "ValueError: window must be even"),
    # before: run ended with exit status 0 and no word
    ("    def __post_init__(self):\n        import sys; sys.exit(0)\n", "SystemExit: 0"),
])
def test_a_plugin_raising_while_simulated_is_one_line_naming_its_file_and_line(tmp_path, capsys, method, raised):
    # before: a traceback through the simulator's code and exit status 1, where the same error raised
    # while importing the plug-in was one line and exit status 2
    plugin = WINDOW.format(name="window_raising") + method
    path = write(tmp_path, plugin, "plug.py", "  - {name: w, policy: window_raising}\n")
    for command in (["check", str(path)], ["run", str(path), "--out", str(tmp_path / "out"), "--no-plot", "--quiet"]):
        assert main(command) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"error: {tmp_path.resolve()}/plug.py:19: plug-in code raised {raised} (in ") and "\n" not in err


def test_an_error_not_raised_in_a_plugin_is_not_blamed_on_one():
    try:
        raise RuntimeError("a bug of the simulator")
    except RuntimeError as exc:
        assert plugins.plugin_failure(exc) is None


def test_a_plugin_holding_more_than_its_footprint_reserves_is_refused_at_its_entry(tmp_path, capsys):
    # a cache of the whole sequence in a 4,096-slot footprint: check said ok and run stopped at the
    # memory_within_capacity invariant as "a bug in the simulator", exit status 3
    plugin = WINDOW.format(name="window_overfull").replace(
        "        return min(prompt_len + generated, self.window)", "        return prompt_len + generated")
    path = write(tmp_path, plugin, "plug.py", "  - {name: w, policy: window_overfull}\n")
    assert main(["check", str(path)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: {path}:11: policies[0].policy: KV policy 'window_overfull' ({tmp_path.resolve()}/plug.py): "
        "cache_len(32768, 63) returned 32831, more rows than footprint(32768, 63) reserves (4096, its slots or its "
        "store's rows); expected at most that (point w)")


def test_two_plugin_files_taking_one_name_are_named_by_their_files(tmp_path):
    # before: the first was named by its generated module, sn40l_sim_plugin_plug_<digest>
    (tmp_path / "copy.py").write_text(WINDOW.format(name="window_twin"))
    path = write(tmp_path, WINDOW.format(name="window_twin"), "plug.py, copy.py", "  - {name: w, policy: window_twin}\n")
    dir_ = tmp_path.resolve()
    assert f"is already registered by Window ({dir_}/plug.py); choose another name" in error_of(path)


@pytest.mark.parametrize(("method", "expected"), [
    # before: each stopped check with a traceback (AttributeError, TypeError) through the simulator
    ("    def footprint(self, model, prompt_len, max_new_tokens):\n        return 4096\n",
     "footprint(32768, 63) returned 4096; expected a KVFootprint (sn40l_sim.kvcache)"),
    ("    def budget_tokens(self):\n        return 'lots'\n", "budget_tokens() returned 'lots'; expected an integer >= 1 or None"),
    ("    def memory_tiers(self):\n        return ['ddr']\n",
     "memory_tiers() returned ['ddr']; expected a mapping of parameter name to memory tier name"),
])
def test_a_plugin_answering_with_another_type_is_refused_at_its_entry(tmp_path, capsys, method, expected):
    plugin = WINDOW.format(name="window_typed").replace("    def footprint(self, model, prompt_len, max_new_tokens):\n"
                                                        "        return KVFootprint(", "    def _unused(self):\n"
                                                        "        return KVFootprint(") + method
    path = write(tmp_path, plugin, "plug.py", "  - {name: w, policy: window_typed}\n")
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: {path}:11: policies[0].policy: KV policy 'window_typed' ({tmp_path.resolve()}/plug.py): {expected} (point w)"


def test_a_plugin_parameter_without_a_default_left_out_is_refused_at_its_entry(tmp_path):
    # before: TypeError: Window.__init__() missing 1 required positional argument, a traceback
    plugin = WINDOW.format(name="window_required").replace("window: int = 4096", "window: int")
    path = write(tmp_path, plugin, "plug.py", "  - {name: w, policy: window_required}\n")
    with pytest.raises(InputError) as info:
        simulate_experiment(path, serve=False)
    assert str(info.value) == (f"{path}:11: policies[0].params.window: required parameter of KV policy "
                               "'window_required' is missing (its class gives it no default) (point w)")


@pytest.mark.parametrize(("footprint", "expected"), [
    # before: -100 bytes of state a slot were taken off the KV memory and the run ended with exit status 0
    ("KVFootprint(slots=4096, state_bytes=-100)",
     "{dir}/plug.py:17: plug-in code raised ValueError: KVFootprint.state_bytes: expected an integer >= 0, got -100"),
    # before: a traceback, "socket 'SN40L' has no memory tier 'cxl' for the KV store", from the memory sizing
    ("KVFootprint(slots=4096, store_rows=40000, store_tier='cxl')",
     "{path}:11: policies[0].policy: KV policy 'window_fp' ({dir}/plug.py): footprint(32768, 63) keeps its store in "
     "'cxl', which memory_tiers() ({{}}) does not name"),
])
def test_a_plugins_footprint_is_checked(tmp_path, capsys, footprint, expected):
    plugin = WINDOW.format(name="window_fp").replace(
        "KVFootprint(slots=self.window, state_bytes=self.window * self.state_bytes_per_slot)", footprint)
    path = write(tmp_path, plugin, "plug.py", "  - {name: w, policy: window_fp}\n")
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--no-plot", "--quiet"]) == 2
    assert expected.format(dir=tmp_path.resolve(), path=path) in capsys.readouterr().err


def test_a_plugin_raising_in_a_sweeps_run_is_named_not_an_internal_error(tmp_path):
    # before: "internal error RuntimeError: too many", the words of a bug in the simulator
    plugin = WINDOW.format(name="window_late") + ("    def decode_kernels(self, model, shape, plan):\n"
                                                  "        if shape.batch > 64:\n"
                                                  "            raise RuntimeError('too many')\n        return []\n")
    path = write(tmp_path, plugin, "plug.py", "  - {name: w, policy: window_late}\n")
    path.write_text(path.read_text() + "sweep:\n  mode: grid\n  axes:\n    policies.0.params.window: [4096, 8192]\n")
    assert main(["sweep", str(path), "--out", str(tmp_path / "out"), "--quiet", "--jobs", "1"]) == 1
    errors = {f["error"] for f in json.loads((tmp_path / "out" / "failures.json").read_text())}
    assert errors == {f"{tmp_path.resolve()}/plug.py:20: plug-in code raised RuntimeError: too many (in decode_kernels; "
                      "docs/architecture.md, \"Extending the simulator\")"}
