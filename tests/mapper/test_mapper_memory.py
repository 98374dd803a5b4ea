"""HBM first, DDR for what does not fit, an error with the shortfall when neither holds it."""
from __future__ import annotations

import re

import pytest
from conftest import ROOT, deepseek_graph

from sn40l_sim.errors import InfeasibleError, InputError
from sn40l_sim.hardware import figures
from sn40l_sim.ir import ParallelPlan
from sn40l_sim.mapper import map_graph, place_memory
from sn40l_sim.models.loader import load_model
from sn40l_sim.models.params import weight_bytes_per_socket

GIB = 2**30


@pytest.fixture(scope="module")
def r1():
    return load_model(ROOT / "graphs" / "deepseek_r1.yaml")


def test_everything_in_hbm_when_it_fits(node, r1):
    plan = ParallelPlan(16, 16)
    mp = place_memory(node, r1, plan, 9 * GIB, 1 * GIB)
    assert mp.hbm == {"activations": GIB, "weights": weight_bytes_per_socket(r1, plan), "kv": 9 * GIB}
    assert not any(mp.ddr.values())
    assert mp.hbm_capacity == int(figures.usable_hbm_bytes(node.socket))
    assert mp.tiers().weights_ddr_fraction == mp.tiers().kv_ddr_fraction == 0.0


def test_kv_spills_to_ddr_after_the_weights(node, r1):
    plan = ParallelPlan(16, 16)
    mp = place_memory(node, r1, plan, 40 * GIB, 1 * GIB)
    free = mp.hbm_capacity - GIB - mp.hbm["weights"]
    assert mp.hbm["kv"] == free and mp.ddr["kv"] == 40 * GIB - free
    assert mp.ddr["weights"] == 0
    assert mp.tiers().kv_ddr_fraction == pytest.approx((40 * GIB - free) / (40 * GIB))


def test_weights_spill_when_one_socket_holds_the_whole_model(node, r1):
    plan = ParallelPlan(1, 1)
    mp = place_memory(node, r1, plan, 1 * GIB, 1 * GIB)
    weights = weight_bytes_per_socket(r1, plan)
    assert mp.hbm["weights"] == mp.hbm_capacity - GIB and mp.ddr["weights"] == weights - mp.hbm["weights"]
    assert mp.ddr["kv"] == GIB and mp.hbm["kv"] == 0


def test_too_much_for_hbm_and_ddr_names_the_shortfall(node, r1):
    plan = ParallelPlan(16, 16)
    kv = 2 * 2**40
    with pytest.raises(InfeasibleError) as info:
        place_memory(node, r1, plan, kv, GIB)
    total = weight_bytes_per_socket(r1, plan) + kv + GIB
    short = total - int(figures.usable_hbm_bytes(node.socket)) - int(figures.usable_ddr_bytes(node.socket))
    message = str(info.value)
    assert f"by {short} bytes ({short / GIB:.2f} GiB)" in message
    assert re.search(r"KV cache 2048\.00 GiB", message)


def test_negative_sizes_are_input_errors(node, r1):
    with pytest.raises(InputError, match="kv_bytes_per_socket must be >= 0"):
        place_memory(node, r1, ParallelPlan(16, 16), -1, 0)


def test_kernels_stream_spilled_weights_from_ddr(node, r1):
    graph = deepseek_graph("decode")
    plan = ParallelPlan(1, 1)               # the whole model on one socket: most weights in DDR
    mp = place_memory(node, r1, plan, 0, GIB)
    fraction = mp.tiers().weights_ddr_fraction
    assert 0.5 < fraction < 1
    placed = map_graph(node, graph, mp)
    hbm_only = map_graph(node, graph)
    for spilled, fast in zip(placed.kernels, hbm_only.kernels, strict=True):
        weights = spilled.kernel.weight_bytes
        assert spilled.ddr_bytes == pytest.approx(weights * fraction, abs=len(spilled.kernel.operators))
        assert spilled.hbm_bytes + spilled.ddr_bytes == fast.hbm_bytes
        assert spilled.cycles >= fast.cycles
    ffn = next(pk for pk in placed.kernels if pk.kernel.kind == "ffn" and pk.kernel.layer == 10)
    assert ffn.bounding_resource == "ddr"
    assert placed.memory is mp
