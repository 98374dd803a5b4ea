"""The promise under fuzzing, at a size CI affords: mutants of every shipped YAML file (keys deleted,
renamed or retyped; NaN, infinite, huge, negative values; bad units, dates, non-text keys; truncated,
invalid or binary text; alias bombs, self-referencing aliases, deep nesting) go through ``check`` in
this process, each under a time limit. A mutant is refused with exit status 2 and one line (no
traceback, no hang), or it is a valid file; one that can never be valid is always refused.

``benchmarks/fuzz.py`` runs the same mutations 10,000 times (docs/robustness.md has its table).
"""
from __future__ import annotations

import importlib.util
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("sn40l_fuzz", REPO / "benchmarks" / "fuzz.py")
fuzz = importlib.util.module_from_spec(_spec)
sys.modules["sn40l_fuzz"] = fuzz   # its dataclasses look their module up
_spec.loader.exec_module(fuzz)

_SANDBOX: list[Path] = []


@pytest.fixture(scope="module", autouse=True)
def sandbox():
    _SANDBOX.append(fuzz.sandbox())
    yield
    shutil.rmtree(_SANDBOX.pop(), ignore_errors=True)


def test_every_shipped_file_and_mutation_is_covered():
    assert len(fuzz.SHIPPED) == 30 and set(fuzz.ALWAYS_INVALID) < set(fuzz.MUTATIONS)


@settings(max_examples=45, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(file=st.sampled_from(fuzz.SHIPPED), mutation=st.sampled_from(list(fuzz.MUTATIONS)),
       seed=st.integers(0, 2**31 - 1))
def test_a_mutant_is_refused_in_one_line_or_valid(file, mutation, seed):
    result = fuzz.run_case(_SANDBOX[-1], fuzz.Case(file, mutation, seed), timeout_s=20)
    if result is None:   # the mutation does not apply to this file (no quantity to change, say)
        return
    assert result.outcome in ("exit 2, one line", "accepted (may be valid)"), (result.outcome, result.detail)


@pytest.mark.parametrize("mutation", sorted(fuzz.ALWAYS_INVALID))
def test_mutations_that_cannot_be_valid_are_refused_in_every_file_kind(mutation):
    for file in ("hw_configs/sn40l.yaml", "hw_configs/sn40l_node8.yaml", "graphs/llama3_1_8b.yaml",
                 "graphs/kernels_llama.yaml", "experiments/llama8b_node8.yaml",
                 "experiments/reference/snapstream_paper.yaml"):
        result = fuzz.run_case(_SANDBOX[-1], fuzz.Case(file, mutation, 5), timeout_s=20)
        assert result is None or result.outcome == "exit 2, one line", (file, result)


@pytest.mark.parametrize("mutation", ["inf", "huge", "rename_key", "binary"])
def test_a_mutant_comes_from_its_seed_alone_and_leaves_the_global_generator_alone(mutation):
    # the number's value and every other draw come from the case's own generators: whatever the
    # module's generator did before, a seed gives one mutant, and the module's sequence goes on
    case = fuzz.Case("hw_configs/sn40l.yaml", mutation, 11)
    random.seed(3)
    first = fuzz.make_mutant(case)
    expected_next = random.Random(3).random()
    assert random.random() == expected_next
    random.seed(4)
    random.random()
    assert fuzz.make_mutant(case) == first and first is not None


# -- command lines: bad arguments, paths and files the YAML mutants do not reach -----------------

#: files each case's fresh folder ``{tmp}`` holds besides ``fifo``, a named pipe
BAD_FILES = {
    "results.json": '[{"name": "full"}]',
    "afile": "x",
    # JSON nested past Python's recursion limit, or with an integer past its 4,300 digits: json.loads
    # raised RecursionError and ValueError, not a decode error
    "deep.jsonl": "[" * 100_000 + "]" * 100_000 + "\n",
    "bignum.jsonl": '{"arrival_s": 0, "prompt_len": 1' + "0" * 5000 + ', "output_len": 10}\n',
    "deep.json": "[" * 100_000 + "]" * 100_000,
    # a socket or model named '' ran, with a blank for the hardware in results rows and messages
    "noname_socket.yaml": f"base: {REPO}/hw_configs/sn40l.yaml\nname: ''\n",
    "noname_model.yaml": f"base: {REPO}/graphs/llama3_1_8b.yaml\nname: '  '\n",
    # validate of no measurement printed "0 measurements, 0 within tolerance", exit status 0
    "no_measurements.yaml": "kind: reference\nmeasurements: []\n",
    # a folder or a pipe named as the experiment, socket or kernel template was "not found"
    "fifo_experiment.yaml": ("kind: reference\nmeasurements:\n  - {id: a, quantity: decode_step_s, value: 0.02, "
                             "tolerance: {rel: 0.1}, source: x, experiment: fifo, point: full, calibration: false}\n"),
    "folder_socket.yaml": f"base: {REPO}/hw_configs/sn40l_node8.yaml\nsocket: adir\n",
    "folder_kernels.yaml": f"base: {REPO}/graphs/llama3_1_8b.yaml\nkernels: adir\n",
    "node_over_model.yaml": f"base: {REPO}/graphs/llama3_1_8b.yaml\nsockets: 8\n",
    # an axis path written as messages write a list entry is the same field as its dotted spelling
    "two_spellings.yaml": (REPO / "experiments" / "llama8b_node8.yaml").read_text(encoding="utf-8")
    .replace("../", f"{REPO}/") + "sweep:\n  mode: grid\n  axes:\n"
    "    a: {path: 'policies[1].prompt_fraction.budget', values: [0.25]}\n"
    "    b: {path: policies.1.prompt_fraction.budget, values: [0.5]}\n",
}
#: (command line, words its one line must hold); ``{exp}`` is a shipped experiment. Each is refused
#: before anything is simulated, so the table stays fast.
BAD_COMMAND_LINES = [
    # a named pipe or a device read as a results.json waited for a writer, or read forever
    (["compare", "{tmp}/fifo", "{tmp}/results.json"], "fifo: is not a regular file"),
    # (a device such as /dev/zero is refused by the same test; reading it filled memory, so not here)
    (["compare", "{tmp}/results.json", "{tmp}/fifo"], "fifo: is not a regular file"),
    # a list entry as every message writes it (policies[0].policy) made a key named 'policies[0]'
    (["run", "{exp}", "--out", "{tmp}/o", "--set", "policies[0].policy=nosuch"],
     "--set policies.0.policy: 'nosuch': policies[0].policy: unknown KV policy 'nosuch'"),
    (["run", "{exp}", "--out", "{tmp}/o", "--set", "policies[1].prompt_fraction.budget=2"],
     "policies[1].prompt_fraction.budget: expected a fraction greater than 0 and at most 1, got 2"),
    (["check", "{tmp}/deep.jsonl"], "deep.jsonl:1: invalid JSON: nested deeper than Python's recursion allows"),
    (["describe", "{tmp}/bignum.jsonl"], "bignum.jsonl:1: invalid JSON: an integer of more than 4300 digits"),
    (["compare", "{tmp}/results.json", "{tmp}/deep.json"], "deep.json: not JSON (line 1: nested deeper"),
    (["check", "{tmp}/noname_socket.yaml"], "noname_socket.yaml:2: name: expected a name (results rows and messages show it), got an empty one"),
    (["run", "{exp}", "--out", "{tmp}/o", "--set", "model={tmp}/noname_model.yaml"],
     "noname_model.yaml:2: name: expected a name (results rows and messages show it), got '  '"),
    (["validate", "{tmp}/no_measurements.yaml"], "no_measurements.yaml:2: measurements: expected at least one measurement"),
    (["check", "{tmp}/fifo_experiment.yaml"], "experiment file 'fifo' is not a regular file (a device or a pipe)"),
    (["check", "{tmp}/folder_socket.yaml"], "socket: socket file 'adir' is a folder, not a file"),
    (["describe", "{tmp}/folder_kernels.yaml"], "kernels: '{tmp}/adir' is a folder; expected a path to a kind: kernels file"),
    # the path in full where it is looked for: the quoted value is shortened when the temporary
    # folder's path is long (pytest-1002/...ref13 was), so the test must not rest on it
    (["run", "{exp}", "--out", "{tmp}/o", "--set", "hardware={tmp}/adir"], "is a folder, not a file (looked for {tmp}/adir)"),
    # a --set path leading nowhere was called an "axis path"
    (["run", "{exp}", "--out", "{tmp}/o", "--set", "policies[5].name=x"],
     "--set policies.5.name: 'x': unknown path 'policies.5.name': policies has 2 entries, no index 5"),
    (["check", "{tmp}/two_spellings.yaml"],
     "sweep.axes.b: the axes a and b both set policies.snapstream.prompt_fraction.budget"),
    # an output bound past the whole context was refused as "no compiled batch fits" at shape.prompt_len
    (["run", "{exp}", "--out", "{tmp}/o", "--set", "serving.max_new_tokens=2147483647"],
     "serving.max_new_tokens: 2147483647 new tokens leave no position for the prompt in the maximum context of "
     "llama-3.1-8b, 131072 tokens: generate at most 98304 after a prompt of 32768 tokens"),
    # a path with an empty part was refused naming the experiment ("set keys must be ..."), not --set
    (["run", "{exp}", "--out", "{tmp}/o", "--set", "serving..batch=8"],
     "error: --set: expected a dotted field path such as 'serving.batch', got 'serving..batch'"),
    (["map", "{exp}", "--phase", "decode", "--set", ".serving.batch=8"],
     "error: --set: expected a dotted field path such as 'serving.batch', got '.serving.batch'"),
    # a kind that came through base: was located in the base file, which the user had not touched
    (["run", "{exp}", "--out", "{tmp}/o", "--set", "hardware={tmp}/node_over_model.yaml"],
     "node_over_model.yaml: base: this is a model file through its base: ("),
]


@pytest.mark.parametrize(("argv", "words"), BAD_COMMAND_LINES, ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_a_bad_command_line_is_refused_in_one_line(tmp_path, argv, words):
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "adir").mkdir()
    for name, text in BAD_FILES.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    values = {"tmp": str(tmp_path), "exp": str(REPO / "experiments" / "llama8b_node8.yaml")}
    status, err = fuzz.run_command([a.format(**values) for a in argv], timeout_s=20)
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("warning:")]
    assert status == 2 and len(lines) == 1 and lines[0].startswith("error: "), (status, err)
    assert words.format(**values) in lines[0], lines[0]


@pytest.mark.parametrize("option", [["--timeout", "-1"], ["--timeout", "nan"], ["--memory-gib", "-1"],
                                    ["--run", "-1"]])
def test_a_bad_limit_is_refused_not_counted_as_the_simulators_traceback(option):
    # --timeout -1 made every case's timer fail, reported as tracebacks of the simulator (exit 0);
    # in a child, as main sets this process's address-space limit
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "fuzz.py"), "--cases", "1", *option],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stdout
    assert option[0] in done.stderr


def test_a_markdown_path_that_is_a_folder_is_refused_before_the_cases(tmp_path):
    # it was written after every case had run (hours at 10,000), and then failed with a traceback
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "fuzz.py"), "--cases", "1",
                           "--markdown", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stdout
    assert "--markdown" in done.stderr and "Traceback" not in done.stderr
    assert done.stdout == ""
