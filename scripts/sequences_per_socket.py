"""One long cache per socket against several short ones of the same bytes: what the simulator charges
DeepSeek-R1's decode attention on one SN40L socket, and the sizes of the mechanisms that could tell
the two apart. The measurement of docs/validation.md ("Sequences per socket: one 133K cache
against four 32K caches").

    python scripts/sequences_per_socket.py                   # Table 5 row 1's two shapes and two controls
    python scripts/sequences_per_socket.py --cases 1x131072,4x32768 --no-steps

A case ``SxK`` is ``S`` sequences of ``K`` cached tokens on one socket (attention data-parallel over
the node's 16 sockets, so the decode batch is ``16 S``), each verifying two MTP drafts (3 query rows
x 128 heads, the main experiment's setting). Prints three blocks:

* **kernel**: the MLA kernel of a MoE layer (``L03.mla``), and its three attention operators alone,
  mapped on one socket as a lone call (:func:`~sn40l_sim.mapper.kernel.map_kernel`): the data tiles'
  time and the pipeline fill in µs (configuration left out), the data tiles, and the PCUs of the
  scores, softmax, weighted-sum and combine stages;
* **sizes**: per cache, the partial results the split-KV combine merges
  (:mod:`sn40l_sim.mapper.attention`), the bytes of partials that must cross between tiles (not
  charged by the simulator), a tile's score rows against the half of its SRAM they may take, and
  the HBM bandwidth below which the KV stream, not compute, would bound the attention;
* **step**: the whole decode step (``StepTimer.decode_step``) and its breakdown in ms.

Everything comes from the shipped hardware and model files; nothing is read from a file of expected
values.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from sn40l_sim.engine.breakdown import decode_step_breakdown  # noqa: E402
from sn40l_sim.hardware import figures  # noqa: E402
from sn40l_sim.hardware.loader import load_hardware  # noqa: E402
from sn40l_sim.ir import FusedKernel, Operator, ParallelPlan, Shape  # noqa: E402
from sn40l_sim.kvcache import make_policy  # noqa: E402
from sn40l_sim.mapper.attention import PARTIAL_BYTES, partials_per_cache, score_bytes_per_tile  # noqa: E402
from sn40l_sim.mapper.kernel import map_kernel  # noqa: E402
from sn40l_sim.models.builder import build_graph  # noqa: E402
from sn40l_sim.models.loader import load_model  # noqa: E402
from sn40l_sim.study.assemble import step_timer  # noqa: E402

#: the node of the main experiment and its decode plan: TP16, attention data-parallel over the 16
SOCKETS = 16
PLAN = ParallelPlan(tp=SOCKETS, attention_dp=SOCKETS)
#: the main experiment's speculation (docs/validation.md): two MTP drafts verified per step
DRAFTS = 2
ATTENTION = ("absorbed_qk", "absorbed_softmax", "absorbed_pv")
DEFAULT_CASES = ((1, 133121), (4, 32768), (1, 131072), (4, 33280))


def _cases(text: str) -> list[tuple[int, int]]:
    try:
        cases = [tuple(int(x) for x in item.split("x")) for item in text.split(",")]
    except ValueError:
        cases = []
    if not cases or any(len(c) != 2 or min(c) <= 0 for c in cases):
        raise argparse.ArgumentTypeError(f"expected comma-separated SEQUENCESxTOKENS (e.g. 1x131072,4x32768), got {text!r}")
    return [(c[0], c[1]) for c in cases]


def _mla_kernel(seqs: int, kv: int) -> FusedKernel:
    model = load_model(REPO / "graphs" / "deepseek_r1.yaml")
    graph = build_graph(model, Shape("decode", seqs * SOCKETS, 0, kv, drafts=DRAFTS), PLAN)
    return graph.graph.nodes["L03.mla"]["kernel"]


def _mapped(socket, kernel: FusedKernel) -> str:
    pk = map_kernel(socket, kernel)
    us = 1e6 / socket.clock_hz
    pcus = {s.operator: s.pcus for s in pk.stages
            if s.kind != "stream" and (s.operator in ATTENTION or s.operator.endswith(".combine"))}
    units = " ".join(f"{name.removeprefix('absorbed_')}:{n}" for name, n in pcus.items())
    return (f"data {pk.n_tiles * pk.cycles_per_tile * us:6.1f} + fill {pk.fill_cycles * us:5.1f} us "
            f"({pk.n_tiles} data tiles; PCUs {units})")


def kernel_lines(seqs: int, kv: int) -> list[str]:
    """The MLA kernel and its attention operators alone, mapped as a lone call (module docstring)."""
    socket = load_hardware(REPO / "hw_configs" / "sn40l.yaml").socket
    kernel = _mla_kernel(seqs, kv)
    attention = FusedKernel("attention", "mla", "decode",
                            tuple(op for op in kernel.operators if op.name in ATTENTION), layer=kernel.layer)
    flops = sum(op.flops for op in attention.operators)
    kv_bytes = sum(op.kv_read_bytes for op in attention.operators)
    return [f"{seqs}x{kv} kernel: KV {kv_bytes / 2**20:.1f} MiB, attention {flops / 1e9:.2f} GFLOP",
            f"   whole MLA kernel: {_mapped(socket, kernel)}",
            f"   attention alone:  {_mapped(socket, attention)}"]


def size_lines(seqs: int, kv: int) -> list[str]:
    """The sizes of the mechanisms that split one cache over the tiles (module docstring)."""
    socket = load_hardware(REPO / "hw_configs" / "sn40l.yaml").socket
    ops = {op.name: op for op in _mla_kernel(seqs, kv).operators if op.name in ATTENTION}
    qk: Operator = ops["absorbed_qk"]
    shape = qk.attention
    assert shape is not None
    tiles = figures.tiles(socket)
    partials = partials_per_cache(socket, shape.sequences, shape.rows, shape.kv_tokens, tiles)
    width = shape.value_width + 2                       # output, running max, running sum
    crossing = shape.sequences * shape.rows * (partials - 1) * width * PARTIAL_BYTES
    tln_bytes_per_s = figures.agcus(socket) / tiles * socket.tln.bytes_per_s     # one tile's TLN ports
    fragment = math.ceil(shape.kv_tokens / max(1, math.ceil(tiles / shape.sequences)))
    per_tile = math.ceil(shape.sequences / tiles) * shape.rows * fragment * PARTIAL_BYTES
    capacity = score_bytes_per_tile(socket)
    hbm = socket.memory["hbm"]
    compute_s = sum(op.flops for op in ops.values()) / figures.peak_flops(socket)
    return [f"{seqs}x{kv} sizes: {partials} partial result(s) per cache, "
            f"{shape.sequences * shape.rows * (partials - 1)} merges of {width} FP32; {crossing / 1e6:.2f} MB of partials cross tiles "
            f"({crossing / tln_bytes_per_s * 1e6:.2f} us at one tile's {tln_bytes_per_s / 1e12:.2f} TB/s of TLN ports, not charged)",
            f"   score rows per tile {per_tile / 2**20:.1f} MiB against {capacity / 2**20:.1f} MiB; "
            f"attention at peak {compute_s * 1e6:.1f} us, KV at achievable HBM "
            f"{qk.kv_read_bytes / (figures.memory_bytes_per_s(socket, 'hbm') * hbm.efficiency) * 1e6:.1f} us: "
            f"the stream binds below {qk.kv_read_bytes / compute_s / 1e12:.2f} TB/s"]


def step_lines(cases: list[tuple[int, int]]) -> list[str]:
    """The whole decode step of each case, full cache, and its breakdown in ms."""
    node = load_hardware(REPO / "hw_configs" / f"sn40l_node{SOCKETS}.yaml")
    model = load_model(REPO / "graphs" / "deepseek_r1.yaml")
    timer = step_timer(node, model, make_policy("full", {}), ParallelPlan(tp=SOCKETS), PLAN,
                       {"expert_loading": "all"})
    lines = []
    for seqs, kv in cases:
        step = timer.decode_step(seqs * SOCKETS, kv, DRAFTS)
        parts = {k: round(v * 1e3, 2) for k, v in decode_step_breakdown(step).items() if v > 1e-8}
        lines.append(f"{seqs}x{kv} step (batch {seqs * SOCKETS}): {step.seconds * 1e3:.2f} ms {parts}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=_cases, default=list(DEFAULT_CASES),
                        help="comma-separated SEQUENCESxTOKENS per socket (default 1x133121,4x32768,1x131072,4x33280)")
    parser.add_argument("--no-steps", action="store_true", help="leave out the whole decode steps")
    args = parser.parse_args(argv)
    context = load_model(REPO / "graphs" / "deepseek_r1.yaml").max_context
    longest = max(kv for _, kv in args.cases)
    if longest > context:   # run refuses a sequence longer than the model's context
        parser.error(f"argument --cases: {longest} tokens exceed DeepSeek-R1's maximum context, {context} tokens")
    for seqs, kv in args.cases:
        print("\n".join(kernel_lines(seqs, kv) + size_lines(seqs, kv)))
    if not args.no_steps:
        print("\n".join(step_lines(args.cases)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
