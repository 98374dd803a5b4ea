"""README.md's figures of the main experiment are the simulator's, so the first numbers a reader
meets cannot go stale: "What it shows" quotes `run experiments/deepseek_tp16.yaml` (the batches,
steps, reported tokens/s and the prefill's cost), the table of where the full-cache step goes
(`decode_step_breakdown_s`), and the same run with twice the HBM bandwidth per module; and
max_rate's decode steps and the rates its slots sustain; and the counts of the speed table that do not
depend on the machine (the step benchmark's SimPy events, the build benchmark's graphs)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sn40l_sim.study.evaluation import LoadedExperiments

REPO = Path(__file__).resolve().parents[1]
MAIN = REPO / "experiments" / "deepseek_tp16.yaml"
HBM_2X = {"socket.memory.hbm.bytes_per_s_per_unit": "819.2 GB/s"}   # README's --set, without `hardware.`


def _section() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    start = text.index("## What it shows")
    return text[start:text.index("\n## ", start + 1)]


def _quoted() -> str:
    return " ".join(_section().split())


def _by_name(records: list[dict]) -> tuple[dict, dict]:
    by_name = {r["name"]: r for r in records}
    assert by_name.keys() == {"full", "snapstream"}
    return by_name["full"], by_name["snapstream"]


@pytest.fixture(scope="module")
def loaded() -> LoadedExperiments:
    return LoadedExperiments()


@pytest.fixture(scope="module")
def main(loaded) -> tuple[dict, dict]:
    return _by_name(loaded.records(MAIN, serve=False))


def test_the_main_experiments_batches_steps_and_throughput(main):
    full, snap = main
    quoted = _quoted()
    assert (f"the largest decode batch that fits in HBM is {full['max_batch']} "
            f"({full['decode_step_s'] * 1e3:.1f} ms per step, {full['decode_tokens_per_s_reported']:.0f} "
            f"reported tokens/s with two MTP drafts") in quoted
    assert (f"cache it is {snap['max_batch']} ({snap['decode_step_s'] * 1e3:.1f} ms, "
            f"{snap['decode_tokens_per_s_reported']:.0f} reported tokens/s)") in quoted
    tokens = snap["decode_tokens_per_s_reported"] / full["decode_tokens_per_s_reported"]
    prefill = snap["prefill_s"] / full["prefill_s"] - 1
    assert (f"{snap['max_batch'] // full['max_batch']}x the batch and {tokens:.1f}x the decode throughput, "
            f"for {prefill:.1%} more prefill time") in quoted
    assert snap["max_batch"] % full["max_batch"] == 0


# README's rows, each the causes of `decode_step_breakdown_s` it sums (every cause in one row)
ROWS = {"loading kernel configurations": ("configuration",),
        "weights streaming": ("weights_streaming",),
        "attention": ("attention_compute", "kv_reads"),
        "collectives": ("collectives",),
        "barriers, pipeline fill, activations, launch": ("synchronisation", "pipeline_fill", "activations",
                                                         "launch", "idle"),
        "other compute": ("other_compute",)}


def _table() -> dict[str, tuple[str, str]]:
    """README's breakdown table: the row's label (up to its first parenthesis) -> (ms, share)."""
    section = _section()
    start = section.index("| cause | ms | share |")
    rows = {}
    for line in section[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        label, ms, share = (cell.strip() for cell in line.strip("|").split("|"))
        rows[label.split(" (")[0]] = (ms, share)
    return rows


def test_the_table_of_where_the_full_cache_step_goes(main):
    full, _ = main
    breakdown, step_s = full["decode_step_breakdown_s"], full["decode_step_s"]
    assert sorted(c for causes in ROWS.values() for c in causes) == sorted(breakdown)
    table = _table()
    assert table.keys() == ROWS.keys()
    for label, causes in ROWS.items():
        seconds = sum(breakdown[c] for c in causes)
        share = seconds / step_s
        # a share under 1% keeps a decimal, as the table writes it
        assert table[label] == (f"{seconds * 1e3:.1f}", f"{share:.1%}" if share < 0.01 else f"{share:.0%}"), label


def test_the_tables_rows_add_up_to_the_step_the_paragraph_quotes(main):
    # every interval of the critical path is given to one cause, so the rows, each rounded to
    # 0.05 ms, add up to the step; this also shows the parser read the rows, not the header
    full, _ = main
    table = _table()
    total_ms = sum(float(ms) for ms, _ in table.values())
    assert total_ms == pytest.approx(full["decode_step_s"] * 1e3, abs=0.05 * len(table))
    assert f"{full['decode_step_s'] * 1e3:.1f} ms per step" in _quoted()


def test_twice_the_hbm_bandwidth(loaded, main):
    full, snap = main
    fast_full, fast_snap = _by_name(loaded.records(MAIN, serve=False, hardware_overrides=HBM_2X))
    quoted = _quoted()

    def step(base: dict, fast: dict) -> str:
        ratio = fast["decode_step_s"] / base["decode_step_s"]
        return f"from {base['decode_step_s'] * 1e3:.2f} to {fast['decode_step_s'] * 1e3:.2f} ms ({ratio:.3f})"

    assert f"shortens the full-cache decode step {step(full, fast_full)}" in quoted
    assert f"SnapStream's {step(snap, fast_snap)}" in quoted
    fall = 1 - fast_full["prefill_s"] / full["prefill_s"]
    assert (f"the 128K prefill by {fall:.0%} ({full['prefill_s']:.2f} to {fast_full['prefill_s']:.2f} s)"
            in quoted)
    assert fast_full["decode_step_s"] < full["decode_step_s"] and fast_snap["decode_step_s"] < snap["decode_step_s"]


def test_max_rates_steps_and_steady_state_rates(loaded):
    # "Serving a production trace" quotes max_rate's decode steps and the rate its slots sustain
    # (every slot held for 1,024 steps and the KV transfer); both move with the decode physics
    full, snap = _by_name(loaded.records(REPO / "experiments" / "max_rate.yaml", serve=False))
    text = (REPO / "README.md").read_text(encoding="utf-8")
    start = text.index("## Serving a production trace")
    quoted = " ".join(text[start:text.index("\n## ", start + 1)].split())

    def sustained(r: dict) -> float:
        return r["max_batch"] / (1024 * r["decode_step_s"] + r["kv_transfer_s"])

    assert (f"1,024 steps of {full['decode_step_s'] * 1e3:.1f} or {snap['decode_step_s'] * 1e3:.1f} ms, "
            f"a steady state of {sustained(full):.2f} and {sustained(snap):.2f} requests/s") in quoted


def test_the_step_benchmarks_simpy_events():
    # README's speed table and docs/architecture.md ("Speed") quote the SimPy events of
    # benchmarks/bench_step.py's first case, a count that does not depend on the machine
    env = dict(os.environ, PYTHONPATH=str(REPO), SN40L_SIM_CACHE="off")
    out = subprocess.run([sys.executable, "benchmarks/bench_step.py", "--case", "0"], cwd=REPO, env=env,
                         capture_output=True, text=True, check=True)
    events = json.loads(out.stdout.strip().splitlines()[-1])["events"]
    readme = " ".join((REPO / "README.md").read_text(encoding="utf-8").split())
    assert f"step decode batch 16, kv 131072, full, SimPy events {events} - -" in readme
    assert f"SimPy events, 950 then and {events} now" in readme
    architecture = " ".join((REPO / "docs" / "architecture.md").read_text(encoding="utf-8").split())
    assert f"({events} today at batch 16 and a 128K cache" in architecture


def test_the_build_benchmarks_graph_counts():
    # the speed table's graphs built and mapped (benchmarks/bench_build.py, disk cache off)
    env = dict(os.environ, PYTHONPATH=str(REPO), SN40L_SIM_CACHE="off")
    out = subprocess.run([sys.executable, "benchmarks/bench_build.py", "--profile", str(MAIN)], cwd=REPO, env=env,
                         capture_output=True, text=True, check=True)
    calls = json.loads(out.stdout.strip().splitlines()[-1])["calls"]
    readme = " ".join((REPO / "README.md").read_text(encoding="utf-8").split())
    assert f"main experiment, {calls['build']} graphs built, CPU s" in readme
    assert f"main experiment, {calls['map']} graphs mapped (cold), CPU s" in readme
    assert f"graphs mapped, 4 then and {calls['map']} now" in readme
