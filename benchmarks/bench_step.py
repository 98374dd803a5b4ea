"""Wall time of the step simulation itself: DeepSeek-R1 on a 16-socket SN40L node.

Every case runs in a fresh Python process with the disk cache of mapped kernels off (so nothing is
memoised from an earlier case: not the mapper's kernel memo, not the collectives) and times one call of
:class:`~sn40l_sim.serving.step_costs.StepTimer` -- graph building, mapping and the SimPy run -- on one
core, imports and file loading excluded. Cases:

- decode steps at (batch 16, 128K cache, full policy) and (batch 64, 32K cache, SnapStream),
- the prefill of a 128K prompt with and without SnapStream (per-kernel shares of one MoE layer),
- a context sweep (decode at 4K .. 128K) to show the wall time does not grow with context,
- the same call repeated (memoised).

Run from the repository root::

    python benchmarks/bench_step.py [--hardware hw_configs/sn40l_node16.yaml] [--model graphs/deepseek_r1.yaml]

``events`` counts the SimPy events the engine scheduled for the step (not the trace's intervals).
Numbers are printed, not asserted: the test suite has no timed assertions; ``goal_figures`` gives
``run_all.py`` the first case's figures, for information (no goal of its own is set for a
step: its time is part of the main command's).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from measure import (  # benchmarks/ is on sys.path (run as a script or by run_all.py)
    child_env,
    existing_file,
    loaded,
    warm_bytecode,
)

CASES = [
    ("decode batch 16, kv 131072, full", "full", {}, "decode", 16, 131072),
    ("decode batch 64, kv 32768, snapstream", "snapstream", {"budget": 32768}, "decode", 64, 32768),
    ("prefill 131072, snapstream", "snapstream", {"budget": 32768}, "prefill", 1, 131072),
    ("prefill 131072, full", "full", {}, "prefill", 1, 131072),
    ("decode batch 16, kv 4096, full", "full", {}, "decode", 16, 4096),
    ("decode batch 16, kv 16384, full", "full", {}, "decode", 16, 16384),
    ("decode batch 16, kv 65536, full", "full", {}, "decode", 16, 65536),
    ("prefill 8192, full", "full", {}, "prefill", 1, 8192),
    ("prefill 32768, full", "full", {}, "prefill", 1, 32768),
]


def run_case(index: int, hardware: str, model_path: str) -> dict:
    """Time case ``index`` in this process (call it in a fresh one)."""
    import simpy

    from sn40l_sim.engine.breakdown import decode_step_breakdown
    from sn40l_sim.hardware.loader import load_hardware
    from sn40l_sim.ir import ParallelPlan
    from sn40l_sim.kvcache import make_policy
    from sn40l_sim.models.loader import load_model
    from sn40l_sim.study.assemble import step_timer

    scheduled = [0]
    schedule = simpy.Environment.schedule

    def counting(self, event, priority=1, delay=0):   # every event the engine's SimPy run schedules
        scheduled[0] += 1
        return schedule(self, event, priority, delay)

    simpy.Environment.schedule = counting
    label, policy, params, phase, batch, length = CASES[index]
    node = load_hardware(hardware)
    model = load_model(model_path)
    timer = step_timer(node, model, make_policy(policy, params), ParallelPlan(tp=16),
                       ParallelPlan(tp=16, attention_dp=16))
    call = (lambda: timer.decode_step(batch, length)) if phase == "decode" else (lambda: timer.prefill(length))
    start = time.perf_counter()
    step = call()
    wall = time.perf_counter() - start
    events = scheduled[0]
    start = time.perf_counter()
    call()
    again = time.perf_counter() - start
    return {"label": label, "phase": phase, "seconds": step.seconds, "wall_s": wall, "memoised_s": again,
            "kernels": len(step.kernels), "events": events, "intervals": len(step.events), "layer": step.layer,
            "layer_s": sum(step.layer_cycles.values()) / node.socket.clock_hz,
            "layer_shares": step.layer_shares(), "breakdown_s": decode_step_breakdown(step),
            "tokens_per_s_raw": batch / step.seconds if phase == "decode" else None}


def case(index: int, hardware: str = "hw_configs/sn40l_node16.yaml", model: str = "graphs/deepseek_r1.yaml") -> dict:
    """Case ``index`` timed in a fresh process (disk cache of mapped kernels off)."""
    root = Path(__file__).resolve().parents[1]
    env = child_env("off")
    warm_bytecode()
    out = subprocess.run([sys.executable, __file__, "--case", str(index), "--hardware", hardware, "--model", model],
                         capture_output=True, text=True, check=True, env=env, cwd=root)
    return json.loads(out.stdout.strip().splitlines()[-1])


def goal_figures() -> list[tuple[str, object, str]]:
    """The first case (a decode step of the main experiment): wall seconds cold and SimPy events."""
    r = case(0)
    return [(f"step {r['label']}, wall s (built, mapped, simulated)", r["wall_s"], "-"),
            (f"step {r['label']}, SimPy events", r["events"], "-")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hardware", type=existing_file, default="hw_configs/sn40l_node16.yaml")
    parser.add_argument("--model", type=existing_file, default="graphs/deepseek_r1.yaml")
    parser.add_argument("--case", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case is None:
        from sn40l_sim.hardware.loader import load_hardware
        from sn40l_sim.models.loader import load_model
        node = loaded(parser, "--hardware", load_hardware, args.hardware)
        if node.sockets != 16:   # every case is tensor-parallel over 16 sockets (run_case)
            parser.error(f"argument --hardware: expected a node of 16 sockets, got {node.sockets} ({args.hardware})")
        loaded(parser, "--model", load_model, args.model)
    if args.case is not None:
        print(json.dumps(run_case(args.case, args.hardware, args.model)))
        return

    results = []
    print(f"{'case (fresh process each)':42s} {'simulated':>12s} {'wall':>7s} {'again':>8s} {'kernels':>7s} {'events':>6s}")
    for i in range(len(CASES)):
        r = case(i, args.hardware, args.model)
        results.append(r)
        print(f"{r['label']:42s} {r['seconds'] * 1e3:9.3f} ms {r['wall_s']:6.2f}s {r['memoised_s'] * 1e6:6.1f}us"
              f" {r['kernels']:7d} {r['events']:6d}")

    for r in results[:4]:
        if r["phase"] == "prefill":
            print(f"\n{r['label']}: shares of MoE layer {r['layer']} ({r['layer_s'] * 1e3:.2f} ms)")
            for kind, share in sorted(r["layer_shares"].items(), key=lambda kv: -kv[1]):
                print(f"  {kind:16s} {share * 100:6.2f}%")
        else:
            print(f"\n{r['label']}: {r['tokens_per_s_raw']:.0f} tokens/s raw; where the step goes")
            for cat, s in r["breakdown_s"].items():
                if s:
                    print(f"  {cat:20s} {s * 1e3:8.3f} ms  {s / r['seconds'] * 100:5.1f}%")


if __name__ == "__main__":
    main()
