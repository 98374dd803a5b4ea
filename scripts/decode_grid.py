"""Llama decode steps over a grid, with kernel looping on and off and ``map``'s total beside
``run``'s step: the check in docs/validation.md ("Decode all-reduces under the GEMM") that looping
is never slower than looping off and that ``map`` stays a floor of ``run``.

    python scripts/decode_grid.py                       # 8B and 70B, 8 and 16 sockets (about 2 min)
    python scripts/decode_grid.py --models 8b --batches 1,64 --kv 128

Prints one line per (model, sockets, attention_dp, batch): the looped and unlooped steps and map
totals in ms, and flags ``LOOPED>OFF`` or ``MAP>RUN``; exits 1 if any point is flagged. Attention
data-parallel over 1 and over all sockets; the full cache. With ``--loop-scores`` each line adds,
for the looped step's kernel loop, an iteration as the mapper scores it (the loop's second call)
beside the engine's mean iteration, in cycles (docs/validation.md, "Faster links or HBM, a slower
step"). Nothing is read from a file of expected values.

    python scripts/decode_grid.py --batches 1,16,256,1024 --loop-scores
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from sn40l_sim.commands.argtypes import positive_int, positive_ints  # noqa: E402
from sn40l_sim.engine.run_graph import EngineOptions, run_graph  # noqa: E402
from sn40l_sim.hardware import figures  # noqa: E402
from sn40l_sim.hardware.loader import load_hardware  # noqa: E402
from sn40l_sim.ir import ParallelPlan, Shape  # noqa: E402
from sn40l_sim.kvcache import make_policy  # noqa: E402
from sn40l_sim.models.loader import load_model  # noqa: E402
from sn40l_sim.models.params import weight_bytes_per_socket  # noqa: E402
from sn40l_sim.study.assemble import step_timer  # noqa: E402


def loop_scores(model_name: str, sockets: int, attention_dp: int, batch: int, kv: int) -> str:
    """The looped step's kernel loop: an iteration as the mapper scores it (the loop's second call,
    the first loading the configuration) and the engine's mean iteration (from the first
    iteration's call boundary and configuration load, its fill included, to the last one's end,
    over the iterations), in cycles."""
    node = load_hardware(REPO / "hw_configs" / f"sn40l_node{sockets}.yaml")
    model = load_model(REPO / "graphs" / f"llama3_1_{model_name}.yaml")
    timer = step_timer(node, model, make_policy("full", {}), ParallelPlan(tp=sockets),
                       ParallelPlan(tp=sockets, attention_dp=attention_dp))
    placed = timer.placed(Shape("decode", batch, 0, kv))
    run = run_graph(node, placed, timer.engine)
    parts = []
    for loop in run.loops:
        records = run.records[loop.first:loop.stop]
        # from the loop's call boundary on: the first iteration is the call, its fill exposed
        # (as the mapper scores it, sn40l_sim/mapper/window_replay.py), its configuration the
        # second call's, which finds it loaded, does not pay
        first, pk = records[0], placed.kernels[loop.first]
        load = 0 if first.config_resident else (first.config_load_cycles if first.config_load_cycles is not None
                                                else figures.config_cycles(node.socket, pk.section_config_bytes[0]))
        mean = (records[-1].stream_end - first.start - first.launch_cycles - first.barrier_cycles - load) / len(records)
        score = placed.kernels[loop.first + 1].call_cycles
        parts.append(f"loop score {score} / engine mean {mean:.0f} cycles ({(score - mean) / mean:+.2%})")
    return "; ".join(parts)


def point_ms(model_name: str, sockets: int, attention_dp: int, batch: int, kv: int,
             looping: bool) -> tuple[float, float]:
    """``run``'s decode step and ``map``'s total (the calls' cycles), in ms."""
    node = load_hardware(REPO / "hw_configs" / f"sn40l_node{sockets}.yaml")
    model = load_model(REPO / "graphs" / f"llama3_1_{model_name}.yaml")
    timer = step_timer(node, model, make_policy("full", {}), ParallelPlan(tp=sockets),
                       ParallelPlan(tp=sockets, attention_dp=attention_dp), engine=EngineOptions(kernel_looping=looping))
    step = timer.decode_step(batch, kv)
    placed = timer.placed(Shape("decode", batch, 0, kv))
    return step.seconds * 1e3, sum(pk.call_cycles for pk in placed.kernels) / node.socket.clock_hz * 1e3






def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="8b,70b", help="comma-separated: 8b, 70b, 405b")
    parser.add_argument("--batches", type=positive_ints, default=[1, 16, 64, 256, 1024],
                        help="comma-separated decode batches (default 1,16,64,256,1024)")
    parser.add_argument("--kv", type=positive_int, default=128, help="cache length per sequence (tokens)")
    parser.add_argument("--loop-scores", action="store_true",
                        help="add the looped kernel's iteration as scored beside the engine's mean")
    args = parser.parse_args(argv)
    flagged = 0
    for name in args.models.split(","):
        if not (REPO / "graphs" / f"llama3_1_{name}.yaml").is_file():
            parser.error(f"graphs/llama3_1_{name}.yaml: no such model file")
        context = load_model(REPO / "graphs" / f"llama3_1_{name}.yaml").max_context
        if args.kv > context:   # run refuses a sequence longer than the model's context
            parser.error(f"argument --kv: {args.kv} tokens exceed the maximum context of llama3_1_{name}, "
                         f"{context} tokens")
        for sockets in (8, 16):
            held = weight_bytes_per_socket(load_model(REPO / "graphs" / f"llama3_1_{name}.yaml"), ParallelPlan(tp=sockets))
            usable = figures.usable_memory_bytes(load_hardware(REPO / "hw_configs" / f"sn40l_node{sockets}.yaml").socket,
                                                 "hbm")
            if held > usable:   # run refuses it whatever the batch (405B on 8 sockets): no point to judge
                print(f"{name} {sockets} sockets: does not run, a socket's share of the weights "
                      f"({held / 2**30:.2f} GiB) is over its usable HBM ({usable / 2**30:.2f} GiB)")
                continue
            for dp in (1, sockets):
                for batch in args.batches:
                    (on, map_on), (off, map_off) = (point_ms(name, sockets, dp, batch, args.kv, looping)
                                                    for looping in (True, False))
                    flags = (["LOOPED>OFF"] if on > off else []) + (["MAP>RUN"] if map_on > on or map_off > off else [])
                    flagged += bool(flags)
                    scores = f", {loop_scores(name, sockets, dp, batch, args.kv)}" if args.loop_scores else ""
                    print(f"{name} {sockets} sockets dp {dp} batch {batch}: run {on:.3f} / {off:.3f} ms, "
                          f"map {map_on:.3f} / {map_off:.3f} ms (looped / off){scores} {' '.join(flags)}".rstrip())
    return 1 if flagged else 0


if __name__ == "__main__":
    sys.exit(main())
