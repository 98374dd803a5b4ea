"""The plan a kernel's search keeps is the cheapest as the graph charges its call
(sn40l_sim/mapper/shares.py): the objective counts the last data tile's shares of the overlapped
collectives that name no operator, which :func:`~sn40l_sim.mapper.calls.as_called` adds after the
stream. A share is ``bytes / n_tiles`` and the stream's end moves with the plan, so leaving the
shares out of the objective ranked plans otherwise than their calls.

Llama-3.1-8B on 8 sockets (``experiments/llama8b_node8.yaml``, TP8), the output projection of the
64-row prefill chunk after 2,624 earlier tokens, its all-reduce overlapped: planned at 256 data
tiles, the search kept a plan of objective 20,550 cycles charged 23,815 as called, over one it
tried charged 20,560; at 1,024 data tiles (a side-by-side room, sn40l_sim/mapper/side_by_side.py)
its objective was 20,510 and its call 28,067.
"""
from __future__ import annotations

import math
from dataclasses import replace

import pytest
from conftest import ROOT

from sn40l_sim.engine.collectives import CollectiveModel
from sn40l_sim.engine.staging import lone_collective_cycles, lone_staging_bytes
from sn40l_sim.ir import Shape
from sn40l_sim.mapper import graph, kernel
from sn40l_sim.mapper.budget import NO_LIMITS, UnitBudget
from sn40l_sim.mapper.calls import as_called
from sn40l_sim.mapper.plans import placed_kernel
from sn40l_sim.study.assemble import assemble
from sn40l_sim.study.experiment import load_experiment


@pytest.fixture(scope="module")
def o_proj_call():
    """The chunk's output projection, its socket, tiers and call as ``map_graph`` builds them (its
    configuration resident, as the step's replay finds it), and its collectives' lone cycles."""
    asm = assemble(load_experiment(ROOT / "experiments/llama8b_node8.yaml"))
    timer = asm.step_timer(asm.setup(asm.points[0]))
    placed = timer.placed(Shape("prefill", 1, 64, 2624, 0, timer.context_len))
    node, engine = timer.node, timer.engine
    model = CollectiveModel.from_node(node, engine.collective_algorithm)
    cycles = lone_collective_cycles(model, node, placed.memory, engine.stage_collectives)
    staging = lone_staging_bytes(model, engine.stage_collectives)
    k = next(k for k in placed.graph.kernels() if k.name.endswith("o_proj")).signature()
    tiers = placed.memory.tiers()
    assert any(c.overlapped and not c.after for c in k.collectives)   # the shares this is about
    # as the graph calls it: its configuration stays loaded over the step (mapper/residency.py)
    call = replace(graph._call(node.socket, k, cycles, staging, tiers), resident=True)
    return node.socket, k, tiers, call, cycles


def _charged(socket, k, pk, call, cycles) -> int:
    """``pk``'s call as the graph charges it: its overlapped collectives' last tile's shares after
    its stream (each collective's bytes over the plan's data tiles, as the engine cuts them)."""
    tails = tuple((cycles(c), cycles(replace(c, bytes=math.ceil(c.bytes / pk.n_tiles))))
                  for c in k.collectives if c.overlapped and not c.after)
    after = round(sum(cycles(c) for c in k.collectives if not c.overlapped))
    return as_called(socket, pk, call, after, None, 0, tails).call_cycles


@pytest.mark.parametrize("n_tiles", [None, 256, 1024])
def test_the_plan_kept_is_the_cheapest_as_called_of_those_tried(o_proj_call, monkeypatch, n_tiles):
    socket, k, tiers, call, cycles = o_proj_call
    tried = []

    def spy(*args, **kwargs):
        plan = plan_kernel(*args, **kwargs)
        if plan is not None:
            tried.append(plan)
        return plan

    plan_kernel = kernel.plan_kernel
    monkeypatch.setattr(kernel, "plan_kernel", spy)
    budget = UnitBudget(n_tiles=n_tiles) if n_tiles else NO_LIMITS
    kept = kernel.map_kernel(socket, k, tiers, budget, call)
    assert len(tried) > 1
    charged = [_charged(socket, k, placed_kernel(socket, k, plan), call, cycles) for plan in tried]
    assert _charged(socket, k, kept, call, cycles) == min(charged)
