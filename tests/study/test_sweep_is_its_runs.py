"""A sweep is the runs it names: each record of a grid over an experiment field and a hardware field
is, field for field (JSON) and cell for cell (CSV), the record ``run --set`` gives for that point,
but for the sweep's own columns (the point's name and axis values); its Pareto front is the
non-dominated set recomputed here from ``results.csv`` alone; an infeasible point is in
``failures.json`` with its reason and nowhere in the results or the front."""
from __future__ import annotations

import csv
import json

import pytest
from sweep_helpers import write_experiment

from sn40l_sim.commands.cli import main

HBM = "hardware.socket.memory.hbm.bytes_per_s_per_unit"
#: 3 batches x 2 HBM bandwidths x 2 policies; full at batch 2048 does not fit (56 GiB of HBM) and is
#: skipped: in failures.json, not an error
SWEEP = (f"mode: grid\naxes:\n  serving.batch: [2, 16, 2048]\n  {HBM}: ['409.6 GB/s', '819.2 GB/s']\n"
         "infeasible: skip\nobjectives: {decode_tokens_per_s: max, tpot_s: min}\n")
SWEEP_ONLY = ("name", "sweep", "sweep_point")


def _csv(path):
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """The folder of the sweep of :data:`SWEEP` (in ``sweep/``), run once for both tests: each reads
    its output files only (the front is a function of results.csv, whichever test ran the sweep)."""
    folder = tmp_path_factory.mktemp("swept")
    path = write_experiment(folder, SWEEP)
    assert main(["sweep", str(path), "--out", str(folder / "sweep"), "--jobs", "2", "--no-plot", "--quiet"]) == 0
    return folder


def test_each_sweep_record_is_the_run_set_record_of_its_point(swept, tmp_path, capsys):
    base = write_experiment(tmp_path, None, name="base.yaml")
    records = json.loads((swept / "sweep" / "results.json").read_text())
    rows = _csv(swept / "sweep" / "results.csv")
    failures = json.loads((swept / "sweep" / "failures.json").read_text())
    # full at batch 2048 is infeasible at either bandwidth: listed with its reason, not a record
    assert [(f["kind"], f["point"][:5], f["sweep"]["serving.batch"]) for f in failures] == [("infeasible", "full[", 2048)] * 2
    reason = "a batch of 2048 does not fit (largest compiled batch that fits: 512)"
    assert all(reason in f["error"] for f in failures)
    assert len(records) == len(rows) == 3 * 2 * 2 - 2
    capsys.readouterr()
    # run --set refuses the point the sweep lists as infeasible, for the same reason
    assert main(["run", str(base), "--set", "serving.batch=2048", "--out", str(tmp_path / "big"), "--no-plot",
                 "--quiet"]) == 2
    assert reason in capsys.readouterr().err
    for i, (batch, bandwidth) in enumerate([(2, "409.6 GB/s"), (2, "819.2 GB/s"), (16, "409.6 GB/s"),
                                            (16, "819.2 GB/s")]):
        out = tmp_path / f"run{i}"
        assert main(["run", str(base), "--set", f"serving.batch={batch}", "--set", f"{HBM}={bandwidth}",
                     "--out", str(out), "--no-plot", "--quiet"]) == 0
        alone = json.loads((out / "results.json").read_text())
        alone_rows = _csv(out / "results.csv")
        point = [(r, row) for r, row in zip(records, rows, strict=True)
                 if r["sweep"] == {"serving.batch": batch, HBM: float(bandwidth.split()[0]) * 1e9}]
        assert [r["kv_policy"] for r, _ in point] == [r["kv_policy"] for r in alone] == ["full", "snapstream"]
        for (record, row), one, one_row in zip(point, alone, alone_rows, strict=True):
            assert {k: v for k, v in record.items() if k not in SWEEP_ONLY} == \
                {k: v for k, v in one.items() if k not in SWEEP_ONLY}
            assert record["name"].startswith(one["name"] + "[")
            assert {k: v for k, v in row.items() if k.split(".")[0] not in SWEEP_ONLY} == \
                {k: v for k, v in one_row.items() if k != "name"}


def test_the_front_is_the_non_dominated_rows_of_results_csv(swept):
    rows = _csv(swept / "sweep" / "results.csv")
    points = [(float(r["decode_tokens_per_s"]), float(r["tpot_s"])) for r in rows]

    def dominates(a, b):
        return a[0] >= b[0] and a[1] <= b[1] and a != b

    expected = [r["name"] for r, p in zip(rows, points, strict=True) if not any(dominates(q, p) for q in points)]
    front = [r["name"] for r in _csv(swept / "sweep" / "pareto.csv")]
    assert front == expected and 0 < len(front) < len(rows)
    failed = {f["point"] for f in json.loads((swept / "sweep" / "failures.json").read_text())}
    assert failed and not failed & set(front) and not failed & {r["name"] for r in rows}
