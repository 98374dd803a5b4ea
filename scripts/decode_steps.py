"""Decode steps of one model on one node over batches and cache lengths, with where each step goes:
the measurement in docs/validation.md ("Decode all-reduces under the GEMM").

    python scripts/decode_steps.py llama3_1_70b 8 --batches 1,64,1024 --kv 128
    python scripts/decode_steps.py llama3_1_8b 16 --batches 1024 --kv 128 --no-looping

``MODEL`` names a file of ``graphs/`` and ``SOCKETS`` a node of ``hw_configs/`` (``sn40l_node8`` or
``sn40l_node16``); tensor parallelism over every socket (DeepSeek-R1's attention data-parallel over
them, as its deployment runs it), the full cache, no speculative drafts and the default expert loading
(the main experiment adds two MTP drafts and streams all experts: its 128K step at batch 16 is 86 ms
in ``run``, 42 ms here). Prints one line per (batch, cache length): the
step in ms and its breakdown in ms (causes under 10 ns left out). Steps only, no serving; nothing
is read from a file of expected values.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from sn40l_sim.commands.argtypes import positive_ints  # noqa: E402
from sn40l_sim.engine.breakdown import decode_step_breakdown  # noqa: E402
from sn40l_sim.engine.run_graph import EngineOptions  # noqa: E402
from sn40l_sim.errors import InputError  # noqa: E402
from sn40l_sim.hardware import figures  # noqa: E402
from sn40l_sim.hardware.loader import load_hardware  # noqa: E402
from sn40l_sim.ir import ParallelPlan  # noqa: E402
from sn40l_sim.kvcache import make_policy  # noqa: E402
from sn40l_sim.models.loader import load_model  # noqa: E402
from sn40l_sim.models.params import weight_bytes_per_socket  # noqa: E402
from sn40l_sim.study.assemble import step_timer  # noqa: E402


def decode_plan(model_name: str, sockets: int) -> ParallelPlan:
    """Tensor parallelism over every socket; DeepSeek-R1's attention data-parallel over them."""
    return ParallelPlan(tp=sockets, attention_dp=sockets if "deepseek" in model_name else 1)


def decode_lines(model_name: str, sockets: int, batches: list[int], kv_lens: list[int],
                 looping: bool = True) -> list[str]:
    """One line per (batch, cache length): the step in ms and its breakdown in ms."""
    node = load_hardware(REPO / "hw_configs" / f"sn40l_node{sockets}.yaml")
    model = load_model(REPO / "graphs" / f"{model_name}.yaml")
    decode = decode_plan(model_name, sockets)
    timer = step_timer(node, model, make_policy("full", {}), ParallelPlan(tp=sockets), decode,
                       engine=EngineOptions(kernel_looping=looping))
    lines = []
    for batch in batches:
        for kv in kv_lens:
            step = timer.decode_step(batch, kv)
            parts = {k: round(v * 1e3, 3) for k, v in decode_step_breakdown(step).items() if v > 1e-8}
            lines.append(f"batch {batch} kv {kv}: {step.seconds * 1e3:.3f} ms {parts}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="a model file of graphs/, without .yaml (e.g. llama3_1_70b)")
    parser.add_argument("sockets", type=int, choices=(8, 16), help="the node: hw_configs/sn40l_node{8,16}.yaml")
    parser.add_argument("--batches", type=positive_ints, default=[1, 64, 1024])
    parser.add_argument("--kv", type=positive_ints, default=[128], help="cache lengths per sequence (tokens)")
    parser.add_argument("--no-looping", action="store_true", help="kernel looping off")
    args = parser.parse_args(argv)
    if not (REPO / "graphs" / f"{args.model}.yaml").is_file():
        parser.error(f"graphs/{args.model}.yaml: no such model file")
    try:   # a file of graphs/ that is not a model (a kernel template) is bad input, not a traceback
        model = load_model(REPO / "graphs" / f"{args.model}.yaml")
    except InputError as exc:
        parser.error(str(exc))
    if max(args.kv) > model.max_context:   # run refuses a sequence longer than the model's context
        parser.error(f"argument --kv: {max(args.kv)} tokens exceed the maximum context of {model.name}, "
                     f"{model.max_context} tokens")
    # a deployment whose weights alone overflow a socket's HBM is one run refuses, whatever the
    # batch (DeepSeek-R1 on 8 sockets): no step is printed for it
    socket = load_hardware(REPO / "hw_configs" / f"sn40l_node{args.sockets}.yaml").socket
    held = weight_bytes_per_socket(model, decode_plan(args.model, args.sockets))
    usable = figures.usable_memory_bytes(socket, "hbm")
    if held > usable:
        parser.error(f"graphs/{args.model}.yaml on {args.sockets} sockets: a socket's share of the weights, "
                     f"{held / 2**30:.2f} GiB, does not fit its {usable / 2**30:.2f} GiB of usable HBM")
    for line in decode_lines(args.model, args.sockets, args.batches, args.kv, not args.no_looping):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
