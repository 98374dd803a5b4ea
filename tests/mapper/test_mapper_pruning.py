"""The kernel mapper skips the tilings whose floor (:mod:`sn40l_sim.mapper.tiling_floor`) exceeds
the best plan found so far: on real kernels (DeepSeek-R1 decode MLA and MoE FFN with drafts,
prefill attention and MoE, Llama-3.1-70B's decoder layer, lone and looped, its stream within and
beyond what the read-ahead holds; calls overlapping their collectives, or waiting mid-way for one
in its operator's window) the pruned search returns exactly the plan of the search that plans every tiling, and every tiling's floors (of its
heaviest GEMMs, of all its stages, and once allocated) are below its plan's objective."""
from __future__ import annotations

from functools import cache

import pytest
from conftest import ROOT, deepseek_graph, searched_plans

import sn40l_sim.mapper.kernel as kernel_mod
from sn40l_sim.engine.collectives import CollectiveModel
from sn40l_sim.hardware.loader import load_hardware, with_overrides
from sn40l_sim.ir import FusedKernel, Operator, ParallelPlan, Shape
from sn40l_sim.mapper import division
from sn40l_sim.mapper.kernel import LONE_CALL, LoopContext, best_plan
from sn40l_sim.mapper.planning import clear_section_memo
from sn40l_sim.mapper.tier_split import TierSplit
from sn40l_sim.mapper.windows import overlap_windows
from sn40l_sim.models.builder import build_graph
from sn40l_sim.models.loader import load_model


@cache
def _socket(kind: str):
    node = load_hardware(ROOT / "hw_configs" / "sn40l_node16.yaml")
    if kind == "slow_config":
        # configuration as dear as the stream: the FFN's cycles against its tiling have two minima
        node = with_overrides(node, {"socket.memory.hbm.efficiency": 0.9439,
                                     "socket.calibrated.config_load_bytes_per_s": 8.28431e9})
    return node.socket


@cache
def _kernel(graph: str, name: str):
    if graph == "chain":
        # more stages than a tile has PCUs, a GEMM among them: two sections
        ops = [Operator(f"op{i:03d}", "elementwise", elements=1 << 20, act_in_bytes=(1 << 20) if i == 0 else 0)
               for i in range(300)]
        ops[150] = Operator("proj", "gemm", m=256, k=4096, n=4096, weight_bytes=4096 * 4096)
        return FusedKernel(name, "chain", "decode", tuple(ops))
    if graph == "llama70b":
        model = load_model(ROOT / "graphs" / "llama3_1_70b.yaml")
        g = build_graph(model, Shape("decode", 1, 2048, 1024), ParallelPlan(16, 16))
    elif graph == "llama70b_long":
        # 32 sequences of 132K tokens: 1.2 GB streamed per layer and socket, beyond the read-ahead
        model = load_model(ROOT / "graphs" / "llama3_1_70b.yaml")
        g = build_graph(model, Shape("decode", 32, 0, 132096), ParallelPlan(16, 16))
    elif graph == "decode_b128_32k":
        g = deepseek_graph("decode", kv_len=32768, batch=128)
    elif graph == "drafts":
        g = deepseek_graph("decode", drafts=2)
    else:
        g = deepseek_graph(graph)
    return next(k for k in g.kernels() if k.name == name).signature()


CASES = {
    "decode_mla": ("node", "decode", "L03.mla", LONE_CALL),
    "decode_moe_ffn_drafts": ("slow_config", "drafts", "L03.ffn", LONE_CALL),
    "prefill_mha": ("node", "prefill", "L00.mha", LONE_CALL),
    "prefill_moe_ffn": ("node", "prefill", "L03.moe_ffn", LONE_CALL),
    "llama_decoder_looped": ("node", "llama70b", "L00.decoder", LoopContext(80, 20_000, True)),
    "llama_decoder_looped_read_ahead": ("node", "llama70b_long", "L00.decoder", LoopContext(80, 314_752, True)),
    "llama_decoder_repeated": ("slow_config", "llama70b", "L00.decoder", LoopContext(80)),
    "two_sections": ("node", "chain", "chain", LONE_CALL),
    "two_sections_looped": ("slow_config", "chain", "chain", LoopContext(4, 5_000, True)),
    # a gate longer than the first section's whole configuration, which loads while it elapses:
    # its PCUs' part too, which the floor of all its stages once added after the gate (1.5% over)
    "two_sections_gated": ("node", "chain", "chain", LoopContext(4, 1_000_000, True)),
    # overlapped collectives as long as the run's (about the kernel's own cycles), and longer
    "prefill_moe_overlapped": ("node", "prefill", "L03.moe_ffn", LoopContext(overlap_cycles=24_489_038)),
    "prefill_o_proj_overlapped": ("node", "prefill", "L00.o_proj_ffn", LoopContext(overlap_cycles=27_460_204)),
    "two_sections_overlapped": ("node", "chain", "chain", LoopContext(overlap_cycles=3_000_000)),
    # a lone MLA call whose o_proj all-reduce has its window mid-stream: scored as a stream run
    # ahead of the waiting compute, which the lone call's floors once exceeded (1.6% at 128 tiles)
    "decode_mla_window": ("node", "decode_b128_32k", "L03.mla", "windows"),
}


def _loop(loop, socket_kind: str, kernel: FusedKernel) -> LoopContext:
    """``loop``, or for ``"windows"`` a lone call with ``kernel``'s windows, their collectives
    timed by the engine's model of the node's links."""
    if loop != "windows":
        return loop
    model = CollectiveModel.from_node(load_hardware(ROOT / "hw_configs" / "sn40l_node16.yaml"))
    return LoopContext(windows=overlap_windows(_socket(socket_kind), kernel, lambda c: model.run(c).cycles))


def _search(socket, kernel, loop, monkeypatch, prune: bool):
    """The best plan, searched cold, and every tiling planned as ``(arguments, plan)``."""
    return searched_plans(socket, kernel, loop, monkeypatch, prune)


@pytest.mark.parametrize("case", CASES)
def test_the_pruned_tiling_search_returns_the_plan_of_the_exhaustive_one(case, monkeypatch):
    socket_kind, graph, name, loop = CASES[case]
    socket, kernel = _socket(socket_kind), _kernel(graph, name)
    loop = _loop(loop, socket_kind, kernel)
    pruned, pruned_planned = _search(socket, kernel, loop, monkeypatch, prune=True)
    exhaustive, every = _search(socket, kernel, loop, monkeypatch, prune=False)
    assert pruned == exhaustive
    # the floors did skip tilings (else this compares a search with itself)
    assert len(pruned_planned) < len(every)
    for args, plan in every:
        if plan is not None:
            # of the heaviest GEMMs, of every stage, allocated before placing
            for floor in (kernel_mod._part_floor, kernel_mod._tiling_floor, kernel_mod._allocated_floor):
                assert floor(*args) <= plan.objective[0], (floor.__name__, args[4], args[6], args[7])


@pytest.mark.parametrize("windowed", [False, True])
def test_the_tile_choices_searched_in_either_order_give_one_plan(windowed, monkeypatch):
    """DeepSeek-R1's MTP attention in decode with two drafts has a third of the main layers' query
    rows (128 against 384), so its floor on one tile (of the stream, the GEMMs over one tile's PCUs
    and the switches' configuration) stays below the plans on four, which load four tiles'
    configuration: both tile choices are searched, four tiles first (the lower floor) and one tile
    wins. Searched the other way round, the winner first, whose objective then cuts the other's
    search, the plan is the same: the choice and its cut-offs only skip plans that cannot win."""
    socket = _socket("node")
    kernel = _kernel("drafts", "MTP0.mla")
    loop = _loop("windows", "node", kernel) if windowed else LONE_CALL
    real_floor, real_tiling = kernel_mod.plan_floor, kernel_mod._best_tiling

    def search(order: dict[int, float] | None):
        searched = []

        def tiling(*args, **kwargs):
            searched.append(args[5])
            return real_tiling(*args, **kwargs)

        clear_section_memo()
        division.clear_caches()
        with monkeypatch.context() as patch:
            patch.setattr(kernel_mod, "_best_tiling", tiling)
            if order is not None:    # negative floors: an order, and no choice skipped
                patch.setattr(kernel_mod, "plan_floor", lambda *args, **kwargs: order[args[5]])
            plan = best_plan(socket, kernel, TierSplit.all_in("hbm"), loop=loop)
        return plan, searched

    plan, searched = search(None)
    assert searched == [4, 1] and plan.chip_tiles == 1
    assert real_floor(socket, kernel.operators, [(0, len(kernel.operators))], [], TierSplit.all_in("hbm"), 1,
                      iterations=loop.calls_per_load) < plan.objective[0]
    winner_first, searched = search({1: -2.0, 4: -1.0})
    assert searched == [1, 4] and winner_first == plan
