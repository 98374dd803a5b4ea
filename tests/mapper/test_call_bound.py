"""What bounds a call as the graph calls it (``call_bound``, ``map``'s ``bound`` column): an
overlapped collective the call waits for holds it from its start, so a call whose all-reduce
outlasts its GEMM is bound by that collective, not by the GEMM hidden under it
(docs/validation.md, "The output projection's call, part by part")."""
from __future__ import annotations

import re

from conftest import ROOT

from sn40l_sim.commands.cli import main
from sn40l_sim.engine.collectives import CollectiveModel
from sn40l_sim.engine.staging import lone_collective_cycles
from sn40l_sim.hardware import figures
from sn40l_sim.ir import Collective, FusedKernel, Operator
from sn40l_sim.mapper._examples import example_gemm_kernel, example_socket
from sn40l_sim.mapper.calls import COLLECTIVE, as_called
from sn40l_sim.mapper.kernel import LONE_CALL, LoopContext, map_kernel
from sn40l_sim.mapper.plot import row_label
from sn40l_sim.mapper.windows import overlap_windows
from sn40l_sim.study.experiment import load_experiment
from sn40l_sim.study.mapping import build_phase

EXPERIMENT = str(ROOT / "experiments" / "map_deepseek_tp16.yaml")


def _tiles(socket, pk) -> int:
    """A lone call's data tiles: its cycles less its configuration loads."""
    return pk.cycles - sum(figures.config_cycles(socket, n) for n in pk.section_config_bytes)


def _compute_bound_gemm() -> FusedKernel:
    """A prefill GEMM whose compute is several times its configuration load at any plausible
    calibration: 8,192 rows sit within 1% of the load at 5 GB/s, so their bound followed the fit."""
    return example_gemm_kernel(m=32768)


def test_a_gemm_without_collectives_is_bound_by_its_compute():
    socket = example_socket()
    lone = map_kernel(socket, _compute_bound_gemm())
    assert lone.compute_cycles > 3 * lone.overhead_cycles
    assert lone.bounding_resource == "compute"
    assert as_called(socket, lone, LONE_CALL).call_bound == "compute"


def test_an_overlapped_collective_bounds_the_call_once_it_outlasts_the_stream():
    socket = example_socket()
    tiles = _tiles(socket, map_kernel(socket, _compute_bound_gemm()))
    # well under the stream: hidden, the GEMM sets the call
    short = LoopContext(overlap_cycles=tiles // 4)
    hidden = as_called(socket, map_kernel(socket, _compute_bound_gemm(), loop=short), short)
    assert hidden.call_collective_cycles == 0 and hidden.call_bound == "compute"
    # longer than the stream but shorter than the stream and its wait together: the call is its
    # collective from the first tile out, the tiles' part only the fill and that tile
    long = LoopContext(overlap_cycles=3 * tiles // 2)
    pk = as_called(socket, map_kernel(socket, _compute_bound_gemm(), loop=long), long)
    assert 0 < pk.call_collective_cycles < _tiles(socket, pk)
    assert pk.call_bound == COLLECTIVE
    # map --plot labels the kernel as its table row does, not by its lone call's compute
    assert pk.bounding_resource == "compute" and row_label(pk) == "proj\ncollective-bound"


def test_a_window_collective_the_stream_waits_for_bounds_the_call():
    socket = example_socket()
    gemm = {"m": 1, "k": 4096, "n": 4096, "flops": 2 * 4096 * 4096, "weight_bytes": 2 * 4096 * 4096}
    ops = (Operator("a", "gemm", **gemm), Operator("b", "gemm", **gemm))
    bare = FusedKernel("k", "k", "decode", ops)
    tiles = _tiles(socket, map_kernel(socket, bare))
    # an all-reduce after the first GEMM, 1.2 times the stream: the second GEMM waits for it, the
    # wait itself shorter than the stream, the first GEMM's part of it under the collective
    kernel = FusedKernel("k", "k", "decode", ops, (Collective("all_reduce", 8192, 8, True, after="a"),))
    loop = LoopContext(windows=overlap_windows(socket, kernel, lambda c: 1.2 * tiles))
    pk = as_called(socket, map_kernel(socket, kernel, loop=loop), loop)
    assert 0 < pk.call_collective_cycles < _tiles(socket, pk)
    assert pk.call_bound == COLLECTIVE


def _rows(out: str) -> dict[str, list[str]]:
    lines = out.splitlines()
    rules = [i for i, line in enumerate(lines) if line and set(line) == {"-"}]
    return {line.split()[0]: line.split() for line in lines[rules[0] + 1:rules[1]]}


def test_prefill_output_projection_is_bound_by_its_all_reduce(capsys):
    assert main(["map", EXPERIMENT, "--phase", "prefill", "--policy", "snapstream"]) == 0
    out = capsys.readouterr().out
    rows = _rows(out)
    o_proj = rows["*.o_proj"]
    bound, us, waits_us, total_us = o_proj[-6], float(o_proj[-3]), float(o_proj[-2]), float(o_proj[-1])
    # its all-reduce alone outlasts everything else in the call (configuration, GEMM, streams)
    built = build_phase(load_experiment(EXPERIMENT), "prefill", "snapstream")
    alone = lone_collective_cycles(CollectiveModel.from_node(built.node), built.node, built.memory)
    kernel = next(k for k in built.graph.kernels() if k.kind == "o_proj")
    reduce_us = alone(kernel.collectives[0]) / built.node.socket.clock_hz * 1e6
    assert reduce_us > us - waits_us
    assert bound == COLLECTIVE
    # the attention has no collective: its compute still bounds it
    assert rows["*.mha"][-6] == "compute"
    # the totals line counts the rows as they are labelled
    total = float(re.search(r"^total .* cycles = ([\d.]+) us", out, re.M).group(1))
    share = float(re.search(r"time by bound: .*collective ([\d.]+)%", out).group(1))
    labelled = sum(float(r[-1]) for r in rows.values() if r[-6] == COLLECTIVE)
    assert total_us < labelled
    assert abs(share - 100 * labelled / total) < 0.05


def test_a_call_scored_again_is_bound_as_before_without_working_its_windows_out_again(monkeypatch):
    # the mapper scores every placement it tries, each call of each: the identical layers' calls
    # share their context object, and what they hide under their collectives is worked out once
    from sn40l_sim.mapper import calls

    socket = example_socket()
    pk = map_kernel(socket, example_gemm_kernel())
    loop = LoopContext(overlap_cycles=10 * pk.cycles)
    worked = []
    real = calls._hidden_cycles
    monkeypatch.setattr(calls, "_hidden_cycles", lambda *args: worked.append(args) or real(*args))
    scored = [as_called(socket, pk, loop, tail_cycles=10 * pk.cycles) for _ in range(3)]
    assert len(worked) == 1
    assert scored[0].call_bound == COLLECTIVE
    assert scored[0] == scored[1] == scored[2]
    # another context is worked out afresh
    as_called(socket, pk, LoopContext(overlap_cycles=10 * pk.cycles), tail_cycles=10 * pk.cycles)
    assert len(worked) == 2
