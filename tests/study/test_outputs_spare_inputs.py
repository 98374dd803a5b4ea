"""`run --requests` (and `--trace`) never write over a file the experiment reads: a requests table
named as the workload's trace replaced the user's trace with the run's rows and exited 0."""
from __future__ import annotations

import textwrap
from pathlib import Path

from sweep_helpers import REPO

from sn40l_sim.commands.cli import main

TRACE = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,374,2\n2023-11-16 18:15:47.10,396,2\n"


def trace_experiment(tmp_path: Path) -> Path:
    (tmp_path / "requests_in.csv").write_text(TRACE)
    path = tmp_path / "e.yaml"
    path.write_text(textwrap.dedent(f"""\
        kind: experiment
        name: trace_inputs
        hardware: {REPO / 'hw_configs/sn40l_node8.yaml'}
        model: {REPO / 'graphs/llama3_1_8b.yaml'}
        parallel:
          prefill: {{tp: 8}}
          decode: {{tp: 8, attention_dp: 8}}
        policies:
          - {{name: full, policy: full}}
        shape: {{prompt_len: 512}}
        workload: {{kind: trace, path: requests_in.csv}}
        serving: {{batch: 4, max_new_tokens: 4}}
        """))
    return path


def test_requests_onto_the_workload_trace_is_refused_and_the_trace_kept(tmp_path, capsys):
    path = trace_experiment(tmp_path)
    trace = tmp_path / "requests_in.csv"
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet", "--no-plot",
                 "--requests", str(trace)]) == 2
    err = capsys.readouterr().err
    assert err == (f"error: --requests: {trace} is the experiment's workload.path, which run reads; expected "
                   "another file name (e.g. requests.csv)\n")
    assert trace.read_text() == TRACE and not (tmp_path / "out").exists()


def test_requests_beside_the_trace_are_written(tmp_path, capsys):
    path = trace_experiment(tmp_path)
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet", "--no-plot",
                 "--requests", str(tmp_path / "requests.csv")]) == 0
    assert (tmp_path / "requests.csv").read_text().count("\n") == 3   # header and the trace's two requests
    assert (tmp_path / "requests_in.csv").read_text() == TRACE
