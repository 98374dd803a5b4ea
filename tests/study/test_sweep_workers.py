"""A sweep's worker simulates from the specs it is sent and opens none of the experiment's files.

The sweep's experiment, hardware (with its base files), model, kernel template and trace are copies
in a temporary folder; the runs are planned, pickled, the folder is deleted, and a fresh
interpreter (no cache inherited) unpickles and simulates them under an audit hook that records
every file it opens. It must open no YAML, CSV or JSONL file and nothing under the repository's
``graphs/``, ``hw_configs/`` or ``experiments/``, and give the records a sweep in this process gives.
"""
from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from sn40l_sim.report.results import to_json
from sn40l_sim.study.sweep.load import load_sweep
from sn40l_sim.study.sweep.plan import expand_runs
from sn40l_sim.study.sweep.run import run_sweep

REPO = Path(__file__).resolve().parents[2]

#: runs in the fresh interpreter: reads the pickled runs on stdin, prints the records and the opens
WORKER = textwrap.dedent("""\
    import json, pickle, sys
    forbidden = [sys.argv[1] + "/" + d for d in ("graphs", "hw_configs", "experiments")] + [sys.argv[2]]
    runs = pickle.loads(sys.stdin.buffer.read())  # before the hook: this is what the task ships
    opened = []

    def hook(event, args):
        if event == "open" and isinstance(args[0], str):
            path = args[0]
            if path.endswith((".yaml", ".yml", ".csv", ".jsonl")) or path.startswith(tuple(forbidden)):
                opened.append(path)

    sys.addaudithook(hook)
    from sn40l_sim.study.sweep.run import _task, stamp
    records = []
    for run in runs:
        outcome, _, _, _ = _task(run)
        assert outcome.error is None, outcome.error
        records.append(stamp(run, outcome.record))
    print(json.dumps({"records": records, "opened": opened}))
""")


def copy_inputs(folder: Path) -> Path:
    """The hardware, model, template and a trace copied into ``folder``, and an experiment naming
    them (the graph options name a template too, so both ways of choosing one are covered)."""
    (folder / "hw").mkdir()
    for path in (REPO / "hw_configs").glob("*.yaml"):
        shutil.copy(path, folder / "hw" / path.name)
    (folder / "graphs").mkdir()
    shutil.copy(REPO / "graphs/llama3_1_8b.yaml", folder / "graphs/model.yaml")  # kernels: kernels_llama.yaml
    shutil.copy(REPO / "graphs/kernels_llama.yaml", folder / "graphs/kernels_llama.yaml")
    (folder / "trace.csv").write_text("arrival_s,prompt_len,output_len\n0,4096,2\n0.001,2048,1\n0.002,1024,2\n")
    path = folder / "e.yaml"
    path.write_text(textwrap.dedent(f"""\
        kind: experiment
        name: worker_files
        hardware: hw/sn40l_node8.yaml
        model: graphs/model.yaml
        parallel: {{prefill: {{tp: 8}}, decode: {{tp: 8, attention_dp: 8}}}}
        policies:
          - {{name: full, policy: full}}
          - {{name: snap, policy: snapstream, prompt_fraction: {{budget: 0.25}}}}
        shape: {{prompt_len: 4096}}
        workload: {{kind: trace, path: trace.csv}}
        graph_options: {{template: {folder / 'graphs/kernels_llama.yaml'}}}
        serving: {{batch: 2, max_new_tokens: 2}}
        sweep:
          axes:
            serving.batch: [2, 4]
        """))
    return path


def test_a_worker_opens_no_input_file(tmp_path):
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    path = copy_inputs(inputs)
    expected = run_sweep(path, tmp_path / "here", jobs=1, progress=False)
    runs, failures = expand_runs(load_sweep(path))
    assert failures == [] and len(runs) == 4
    shipped = pickle.dumps(runs)
    assert len(shipped) < 200_000  # specs, not file trees
    shutil.rmtree(inputs)
    # the worker runs outside the repository (cwd), so it finds this checkout's package on its path,
    # installed or not, and not another checkout an editable install may point to
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", WORKER, str(REPO), str(inputs)], input=shipped,
                          capture_output=True, check=True, cwd=tmp_path, env=env)
    result = json.loads(done.stdout)
    assert result["opened"] == []
    assert to_json(result["records"]) == to_json(expected)
    assert [r["throughput"]["requests"] for r in expected] == [3, 3, 3, 3]  # the trace's requests


def test_a_warning_raised_in_a_worker_is_said_once_by_the_main_process(tmp_path):
    """A run's warning (here a SnapStream budget longer than any sequence fills) was printed by each
    worker process that met it: once per worker, in Python's two-line format under Dask's spawned
    workers, and never in the main process, where a caller (or a notebook) catches it. The worker
    now hands it back with the outcome and the main process says each one once, as with --jobs 1."""
    import warnings

    from sweep_helpers import write_experiment

    from sn40l_sim.commands.cli import main

    text = write_experiment(tmp_path, "axes:\n  serving.batch: [1, 2, 4, 8]\n").read_text()
    (tmp_path / "e.yaml").write_text(text.replace("prompt_fraction: {budget: 0.25}", "params: {budget: 8192}"))
    for jobs in ("1", "2"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("default")   # as outside pytest: each distinct warning once
            assert main(["sweep", str(tmp_path / "e.yaml"), "--out", str(tmp_path / jobs), "--jobs", jobs,
                         "--quiet", "--no-plot"]) == 0
        said = [str(w.message) for w in caught if "slots no sequence fills" in str(w.message)]
        assert len(said) == 1 and "e.yaml:" in said[0], (jobs, said)
