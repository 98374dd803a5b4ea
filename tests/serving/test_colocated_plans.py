"""A co-located node holds one copy of the weights, split by the decode plan: a prefill plan that
splits them another way is refused at ``parallel.prefill`` rather than timed on weights no socket
holds (serving/point.py, ``check_plans``)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from sn40l_sim.commands.cli import main

REPO = Path(__file__).resolve().parents[2]


def _experiment(tmp_path: Path, model: str, prefill_tp: int, decode_tp: int) -> Path:
    path = tmp_path / "e.yaml"
    path.write_text(f"""kind: experiment
name: coloc
hardware: {REPO}/hw_configs/sn40l_node8.yaml
model: {REPO}/graphs/{model}
parallel: {{prefill: {{tp: {prefill_tp}}}, decode: {{tp: {decode_tp}}}}}
policies: [{{name: full, policy: full}}]
shape: {{prompt_len: 1024, max_new_tokens: 4}}
workload: {{kind: fixed, count: 1, output_len: 4}}
serving: {{mode: colocated, batch: 1}}
""")
    return path


@pytest.mark.parametrize("prefill_tp, decode_tp", [(1, 8), (8, 4)])
def test_a_colocated_prefill_split_unlike_the_decode_is_refused(tmp_path, capsys, prefill_tp, decode_tp):
    # Llama-3.1-70B prefilled at tp 1 on a co-located node ran (exit 0, 0.35 s a 1K prompt) with
    # the decode plan's 16.4 GiB of its 131 GiB of weights on the socket that read them all
    path = _experiment(tmp_path, "llama3_1_70b.yaml", prefill_tp, decode_tp)
    idle = "parallel.prefill" if prefill_tp < decode_tp else "parallel.decode"
    for argv in (["check", str(path)], ["run", str(path), "--out", str(tmp_path / "out"), "--quiet", "--no-plot"]):
        # the smaller plan leaves sockets idle, which every command warns of before it refuses the pair
        with pytest.warns(UserWarning, match=f"{idle}: the plan uses {min(prefill_tp, decode_tp)} of the 8 sockets"):
            assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert f"e.yaml:5: parallel.prefill: a co-located node prefills and decodes with one copy of the weights, " \
               f"split {decode_tp} ways by the decode plan; a prefill at tp={prefill_tp}" in err, err
        assert f"set parallel.prefill.tp to {decode_tp}, or serve disaggregated" in err
    assert not (tmp_path / "out" / "results.json").exists()


def test_a_colocated_node_with_one_split_runs_and_holds_its_share(tmp_path, capsys):
    path = _experiment(tmp_path, "llama3_1_8b.yaml", 8, 8)
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet", "--no-plot"]) == 0
    record, = json.loads((tmp_path / "out" / "results.json").read_text())
    # 16.06 GB of BF16 weights over 8 sockets (replicated norms add a few kB)
    assert record["memory"]["hbm"]["weights"] == pytest.approx(16.06e9 / 8, rel=0.002)
