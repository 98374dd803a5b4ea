"""The mapper's cost of a collective is the engine's time for it alone, staging included: through
HBM the links set it, through DDR (activations spilled there) the staging does."""
from __future__ import annotations

import math
from dataclasses import replace

import pytest

from sn40l_sim.engine.collectives import CollectiveModel
from sn40l_sim.engine.run_graph import EngineOptions, run_graph
from sn40l_sim.engine.staging import lone_collective_cycles, path_bytes_per_cycle, staged_bytes
from sn40l_sim.hardware import figures
from sn40l_sim.hardware.loader import load_hardware
from sn40l_sim.ir import Collective, KernelGraph, Shape
from sn40l_sim.mapper import map_graph
from sn40l_sim.mapper._examples import example_decode_kernel
from sn40l_sim.mapper.placement import MemoryPlacement

NODE = load_hardware("hw_configs/sn40l_node16.yaml")
GIB = 2**30


def activations_in(tier: str) -> MemoryPlacement:
    """Weights and KV in HBM, the activations in ``tier``."""
    other = "ddr" if tier == "hbm" else "hbm"
    return MemoryPlacement({tier: {"activations": GIB}, other: {}}, {"hbm": 56 * GIB, "ddr": 1024 * GIB},
                           ("hbm", "ddr"))


def mapped_and_run(tier: str, stage: bool = True):
    """A kernel followed by an all-reduce of 64 MiB: the mapper's charge for the all-reduce, the
    engine's time for it (it runs after the kernel's tiles, alone on the socket) and its links'
    cycles."""
    coll = Collective("all_reduce", 64 * 2**20, 16)
    graph = KernelGraph("toy", Shape("decode", 1, 0, 4096))
    graph.add(replace(example_decode_kernel(), collectives=(coll,)))
    options = EngineOptions(stage_collectives=stage)
    model = CollectiveModel.from_node(NODE)
    memory = activations_in(tier)
    placed = map_graph(NODE, graph, memory, collective_cycles=lone_collective_cycles(
        model, NODE, memory, options.stage_collectives))
    run = run_graph(NODE, placed, options, model).records[0].collectives[0]
    return placed.kernels[0].call_collective_cycles, run.end - run.start, model.run(coll)


@pytest.mark.parametrize("tier", ["hbm", "ddr"])
def test_the_mapper_charges_a_lone_collective_what_the_engine_takes(tier):
    charged, took, links = mapped_and_run(tier)
    assert charged == took
    rate = path_bytes_per_cycle(NODE.socket, tier)
    staging = math.ceil(staged_bytes(Collective("all_reduce", 64 * 2**20, 16), links) / rate)
    if tier == "hbm":
        # HBM stages a collective in about half the links' time on this node: the links set it
        assert took == links.cycles > staging
    else:
        # DDR (about 80 GB/s a socket) stages it ten times slower than the links move it
        assert took == staging > 5 * links.cycles


def test_without_staging_the_links_alone_set_the_collective():
    charged, took, links = mapped_and_run("ddr", stage=False)
    assert charged == took == links.cycles


def test_a_narrow_tln_sets_a_lone_streams_rate():
    # the shipped sockets' TLN outpaces every tier, so only a narrower one shows that a stream to
    # HBM crosses it too: at 100 bytes per cycle across all the AGCUs it, not HBM's 985, sets the pace
    socket = NODE.socket
    agcus = figures.agcus(socket)
    narrow = socket.model_copy(update={"tln": socket.tln.model_copy(update={"bytes_per_s": 100 * socket.clock_hz / agcus})})
    assert path_bytes_per_cycle(socket, "hbm") > 900
    assert path_bytes_per_cycle(narrow, "hbm") == pytest.approx(100)
    assert path_bytes_per_cycle(narrow, "ddr") == pytest.approx(path_bytes_per_cycle(socket, "ddr"))
