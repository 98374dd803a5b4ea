"""Does a faster machine ever simulate slower? Sweep one socket field at a time and report every curve
whose decode step or prefill time rises as the field gets faster (docs/validation.md, "A faster
machine is not always faster in the simulator").

    python scripts/faster_machine.py                 # every field below, 1-3 minutes on 2 cores
    python scripts/faster_machine.py --fields hbm p2p --jobs 2 --out out/faster_machine

Each field is swept (``python -m sn40l_sim sweep`` with a ``hardware.socket.<field>`` axis, its
values from slower to faster, around the shipped one) over four workloads: the main experiment
(``experiments/deepseek_tp16.yaml``) at batches 1 and 16 with 8K and 128K prompts; Llama-3.1-8B, 70B
and 405B at batch 1 on 16 sockets (``experiments/per_user_speed.yaml``); the same deployment of
Llama-3.1-8B and 70B on 8 sockets with 128- and 512-token prompts, whose short layer kernels make a
lost side-by-side placement most of the prefill (docs/validation.md, "Short prefills on a faster
machine"); and ``experiments/llama8b_node8.yaml`` (batch 64 on 8 sockets). A curve is one point of a workload (KV
policy, batch, prompt, model) and one of ``decode_step_s`` and ``prefill_s`` across the field's
values; it rises where a faster value gives a longer time. The script prints every rising curve and
a table of curves per field, and exits with status 1 if any rose (2 on bad arguments or when a
sweep it starts fails, so a failure never reads as a finding). The figures are the simulator's:
nothing is read from a file of expected values.
"""
from __future__ import annotations

import argparse
import csv
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from sn40l_sim.commands.argtypes import positive_int  # noqa: E402
from sn40l_sim.errors import InputError  # noqa: E402
from sn40l_sim.quantities import parse_quantity  # noqa: E402
from sn40l_sim.report.outputs import check_folder  # noqa: E402

#: field -> (path under hardware.socket, values from slower to faster, quantity kind)
FIELDS: dict[str, tuple[str, list[str], str]] = {
    "hbm": ("memory.hbm.bytes_per_s_per_unit", ["409.6 GB/s", "450 GB/s", "512 GB/s", "614.4 GB/s", "819.2 GB/s"],
            "bandwidth"),
    "hbm_latency": ("memory.hbm.latency_s", ["120 ns", "80 ns", "40 ns"], "time"),
    "p2p": ("p2p.bytes_per_s_per_port", ["50 GB/s", "75 GB/s", "100 GB/s", "200 GB/s"], "bandwidth"),
    "p2p_latency": ("p2p.latency_s", ["93.75 ns", "50 ns", "10 ns"], "time"),
    "tln": ("tln.bytes_per_s", ["102.4 GB/s", "150 GB/s", "204.8 GB/s"], "bandwidth"),
    "die_to_die": ("die_to_die.bytes_per_s", ["1 TB/s", "1.5 TB/s", "2 TB/s"], "bandwidth"),
    "clock": ("clock_hz", ["1.6 GHz", "2.0 GHz", "2.4 GHz"], "frequency"),
    # the calibrated quantities too: a faster configuration load or a shorter latency is a faster machine
    "config_load": ("calibrated.config_load_bytes_per_s", ["4 GB/s", "5 GB/s", "7 GB/s", "10 GB/s", "20 GB/s"],
                    "bandwidth"),
    "sync_latency": ("calibrated.sync_latency_s", ["2 us", "1 us", "0.5 us", "0 us"], "time"),
    "transfer_setup": ("calibrated.transfer_setup_s", ["1 us", "0.5 us", "0.25 us", "0 us"], "time"),
}
METRICS = ("decode_step_s", "prefill_s")


def _workloads(path: str, values: list[str]) -> dict[str, dict]:
    """The three sweeps of one field (experiment files, paths absolute)."""
    axis = {f"hardware.socket.{path}": values}
    main = {"base": str(REPO / "experiments" / "deepseek_tp16.yaml"), "name": "deepseek",
            "workload": {"kind": "fixed", "count": "batch", "output_len": 4},
            "serving": {"prefill_nodes": 8, "batch": 1, "max_new_tokens": 4},
            "sweep": {"mode": "grid", "infeasible": "skip",
                      "axes": {"serving.batch": [1, 16], "shape.prompt_len": [8192, 131072], **axis}}}
    per_user = yaml.safe_load((REPO / "experiments" / "per_user_speed.yaml").read_text())
    per_user.update(name="per_user", hardware=str(REPO / "hw_configs" / "sn40l_node16.yaml"),
                    model=str(REPO / "graphs" / "llama3_1_8b.yaml"))
    per_user["workload"]["output_len"] = per_user["serving"]["max_new_tokens"] = 16
    per_user["shape"]["max_new_tokens"] = 16
    models = ["llama3_1_8b", "llama3_1_70b", "llama3_1_405b"]
    per_user["sweep"] = {"mode": "grid", "infeasible": "skip", "axes": {
        "model": {"path": "model", "values": [str(REPO / "graphs" / f"{m}.yaml") for m in models], "labels": models},
        **axis}}
    short = {**per_user, "name": "short_prefill", "hardware": str(REPO / "hw_configs" / "sn40l_node8.yaml"),
             "parallel": {"prefill": {"tp": 8}, "decode": {"tp": 8}}}
    short["sweep"] = {"mode": "grid", "infeasible": "skip", "axes": {
        "model": {"path": "model", "values": [str(REPO / "graphs" / f"{m}.yaml") for m in models[:2]],
                  "labels": models[:2]},
        "shape.prompt_len": [128, 512], **axis}}
    node8 = {"base": str(REPO / "experiments" / "llama8b_node8.yaml"), "name": "llama8b_node8",
             "sweep": {"mode": "grid", "infeasible": "skip", "axes": axis}}
    return {"deepseek": main, "per_user": per_user, "short_prefill": short, "llama8b_node8": node8}


def _curves(rows: list[dict], column: str, order: list[float]) -> dict[tuple, dict[int, dict]]:
    """``rows`` grouped into curves (every sweep axis but ``column``, and the KV policy), each row
    under the index of its ``column`` value in ``order``."""
    curves: dict[tuple, dict[int, dict]] = {}
    for row in rows:
        at = min(range(len(order)), key=lambda i: abs(order[i] - float(row[column])) / max(abs(order[i]), 1e-30))
        key = tuple((k, row[k]) for k in sorted(row) if k.startswith("sweep.") and k != column)
        curves.setdefault(key + (("policy", row["kv_policy"]),), {})[at] = row
    return curves


def _rising(rows: list[dict], column: str, order: list[float]) -> list[str]:
    """The curves of ``rows`` that rise along ``column``'s values in ``order``, described (a curve
    missing a value is not judged)."""
    found = []
    for key, by in _curves(rows, column, order).items():
        if len(by) < len(order):
            continue
        for metric in METRICS:
            times = [float(by[i][metric]) for i in range(len(order))]
            rises = [(b - a, a) for a, b in zip(times, times[1:], strict=False) if b > a * (1 + 1e-9)]
            if rises:
                # the rise itself, since a rise of a few ns is invisible in the times printed in ms
                # (Llama-3.1-405B's step with a faster clock: 32.4974 ms twice, up by 17 ns)
                rise, before = max(rises)
                found.append(f"{metric} rises at {dict(key)}: {[round(t * 1e3, 4) for t in times]} ms "
                             f"(up by {_duration(rise)}, {rise / before:.2g} of the time before)")
    return found


def _duration(seconds: float) -> str:
    """``1.7e-08`` -> ``'17 ns'``: a short time in the unit that shows it."""
    if seconds < 1e-6:
        return f"{seconds * 1e9:.0f} ns"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    return f"{seconds * 1e3:.3f} ms"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fields", nargs="+", choices=sorted(FIELDS), default=sorted(FIELDS))
    parser.add_argument("--jobs", type=positive_int, default=2)
    parser.add_argument("--out", type=Path, default=Path("out") / "faster_machine")
    args = parser.parse_args(argv)
    # the sweeps run from the repository root: a relative --out means the caller's folder, not the root's
    args.out = args.out.resolve()
    try:   # a file there ended the first sweep's mkdir in a traceback (exit 1, read as "a curve rose")
        check_folder(args.out, "--out")
    except InputError as exc:
        parser.error(str(exc))
    rising = []
    for field in args.fields:
        path, values, kind = FIELDS[field]
        order = [parse_quantity(v, kind) for v in values]   # listed slower to faster (latencies falling)
        column = f"sweep.hardware.socket.{path}"
        curves = found_here = 0
        for name, spec in _workloads(path, values).items():
            out = args.out / field / name
            out.mkdir(parents=True, exist_ok=True)
            experiment = out / "sweep.yaml"
            experiment.write_text(yaml.safe_dump(spec, sort_keys=False))
            done = subprocess.run([sys.executable, "-m", "sn40l_sim", "sweep", str(experiment), "--out",
                                   str(out / "run"), "--jobs", str(args.jobs), "--quiet", "--no-plot"], cwd=REPO,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            if done.returncode != 0:
                # status 1 means "a curve rose": a sweep that failed must not look like one
                last = (done.stderr.strip().splitlines() or ["no message"])[-1]
                print(f"error: the {field} sweep of {name} exited {done.returncode}: {last}", file=sys.stderr)
                return 2
            with open(out / "run" / "results.csv", newline="") as f:
                rows = list(csv.DictReader(f))
            found = _rising(rows, column, order)
            curves += len(_curves(rows, column, order)) * len(METRICS)
            found_here += len(found)
            rising += [f"{field}, {name}: {line}" for line in found]
        print(f"{field}: {curves} curves, {found_here} rising", flush=True)
    for line in rising:
        print(line)
    return 1 if rising else 0


if __name__ == "__main__":
    sys.exit(main())
