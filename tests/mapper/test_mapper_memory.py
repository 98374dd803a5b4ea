"""The tiers in placement order (HBM first, DDR for what does not fit), an error with the shortfall
when none holds it, and a tier defined only in YAML that gets its share and a memory stage."""
from __future__ import annotations

import re

import pytest
from conftest import ROOT, deepseek_graph, node16
from mapper_checks import check_all

from sn40l_sim.errors import InfeasibleError, InputError
from sn40l_sim.hardware import figures
from sn40l_sim.hardware.loader import with_overrides
from sn40l_sim.ir import ParallelPlan
from sn40l_sim.mapper import map_graph, map_kernel, place_memory
from sn40l_sim.mapper.memory import all_in_first_tier
from sn40l_sim.models.loader import load_model
from sn40l_sim.models.params import weight_bytes_per_socket

GIB = 2**30

#: a toy CXL tier, defined here and nowhere in the code: 2 x 512 GiB at 30 GB/s per die
CXL = {"units_per_die": 1, "capacity_bytes_per_unit": "512 GiB", "bytes_per_s_per_unit": "30 GB/s",
       "latency_s": "500 ns", "efficiency": 0.75, "reserved_bytes": "2 GiB"}


@pytest.fixture(scope="module")
def r1():
    return load_model(ROOT / "graphs" / "deepseek_r1.yaml")


@pytest.fixture(scope="module")
def cxl_node():
    """SN40L with a small DDR (so it fills up) and a CXL tier after it."""
    return with_overrides(node16(), {"socket.memory.cxl": CXL, "socket.memory.ddr.units_per_die": 1,
                                     "socket.memory.ddr.capacity_bytes_per_unit": "16 GiB",
                                     "socket.memory.ddr.reserved_bytes": "2 GiB"})


def test_everything_in_hbm_when_it_fits(node, r1):
    plan = ParallelPlan(16, 16)
    mp = place_memory(node, r1, plan, 9 * GIB, 1 * GIB)
    assert mp.by_tier["hbm"] == {"activations": GIB, "weights": weight_bytes_per_socket(r1, plan), "kv": 9 * GIB}
    assert not any(mp.by_tier["ddr"].values())
    assert mp.capacity["hbm"] == int(figures.usable_memory_bytes(node.socket, "hbm"))
    assert mp.order == ("hbm", "ddr") and mp.outside("hbm") == {}
    assert mp.tiers() == all_in_first_tier(node).tiers()


def test_kv_spills_to_ddr_after_the_weights(node, r1):
    plan = ParallelPlan(16, 16)
    mp = place_memory(node, r1, plan, 40 * GIB, 1 * GIB)
    hbm, ddr = mp.by_tier["hbm"], mp.by_tier["ddr"]
    free = mp.capacity["hbm"] - GIB - hbm["weights"]
    assert hbm["kv"] == free and ddr["kv"] == 40 * GIB - free
    assert ddr["weights"] == 0 and mp.outside("hbm") == {"kv": 40 * GIB - free}
    assert mp.tiers().weights == (("hbm", 1.0),)
    assert mp.tiers().kv == (("hbm", free / (40 * GIB)), ("ddr", pytest.approx((40 * GIB - free) / (40 * GIB))))


def test_weights_spill_when_one_socket_holds_the_whole_model(node, r1):
    plan = ParallelPlan(1, 1)
    mp = place_memory(node, r1, plan, 1 * GIB, 1 * GIB)
    weights = weight_bytes_per_socket(r1, plan)
    hbm, ddr = mp.by_tier["hbm"], mp.by_tier["ddr"]
    assert hbm["weights"] == mp.capacity["hbm"] - GIB and ddr["weights"] == weights - hbm["weights"]
    assert ddr["kv"] == GIB and hbm["kv"] == 0


def test_too_much_for_hbm_and_ddr_names_the_shortfall(node, r1):
    plan = ParallelPlan(16, 16)
    kv = 2 * 2**40
    with pytest.raises(InfeasibleError) as info:
        place_memory(node, r1, plan, kv, GIB)
    total = weight_bytes_per_socket(r1, plan) + kv + GIB
    short = total - sum(int(figures.usable_memory_bytes(node.socket, tier)) for tier in ("hbm", "ddr"))
    message = str(info.value)
    assert f"by {short} bytes ({short / GIB:.2f} GiB)" in message
    assert re.search(r"KV cache 2048\.00 GiB", message)
    assert "HBM holds" in message and "exceeds the usable DDR of" in message


def test_negative_sizes_are_input_errors(node, r1):
    with pytest.raises(InputError, match="kv_bytes_per_socket must be >= 0"):
        place_memory(node, r1, ParallelPlan(16, 16), -1, 0)


def test_kernels_stream_spilled_weights_from_ddr(node, r1):
    graph = deepseek_graph("decode")
    plan = ParallelPlan(1, 1)               # the whole model on one socket: most weights in DDR
    mp = place_memory(node, r1, plan, 0, GIB)
    (_, _), (second, fraction) = mp.tiers().weights
    assert second == "ddr" and 0.5 < fraction < 1
    placed = map_graph(node, graph, mp)
    hbm_only = map_graph(node, graph)
    for spilled, fast in zip(placed.kernels, hbm_only.kernels, strict=True):
        weights = spilled.kernel.weight_bytes
        assert spilled.tier_bytes["ddr"] == pytest.approx(weights * fraction, abs=len(spilled.kernel.operators))
        assert spilled.tier_bytes["hbm"] + spilled.tier_bytes["ddr"] == fast.tier_bytes["hbm"]
        assert spilled.cycles >= fast.cycles
    ffn = next(pk for pk in placed.kernels if pk.kernel.kind == "ffn" and pk.kernel.layer == 10)
    assert ffn.bounding_resource == "ddr"
    assert placed.memory is mp


def test_kernels_stream_spilled_activations_from_each_tier_at_its_share(node, r1):
    """Activations spilled in part to DDR stream that part from DDR and the rest from HBM, as
    spilled weights and KV do: not all from the tier holding most of them (which timed a 47% spill
    as none, and a 51% one as all)."""
    graph = deepseek_graph("prefill")
    plan = ParallelPlan(16, 1)
    kept_first = ("weights", "kv", "activations")       # as the serving model places a long prompt
    hbm_only = map_graph(node, graph)
    for activations in (30 * GIB, 34 * GIB):           # a little under and over half in DDR
        mp = place_memory(node, r1, plan, 0, activations, priority=kept_first)
        fraction = mp.by_tier["ddr"]["activations"] / activations
        assert mp.by_tier["ddr"]["weights"] == 0 and 0.4 < fraction < 0.6
        assert mp.tiers().activation_shares == (("hbm", pytest.approx(1 - fraction)), ("ddr", pytest.approx(fraction)))
        placed = map_graph(node, graph, mp)
        ddr_bps = figures.memory_bytes_per_s(node.socket, "ddr") * node.socket.memory["ddr"].efficiency
        for spilled, fast in zip(placed.kernels, hbm_only.kernels, strict=True):
            k = spilled.kernel               # what moves is the activations: weights and KV stay
            moved = fast.tier_bytes["hbm"] - k.weight_bytes - k.kv_bytes
            assert spilled.tier_bytes["ddr"] == pytest.approx(moved * fraction, rel=1e-6, abs=len(spilled.kernel.operators))
            assert spilled.tier_bytes["hbm"] + spilled.tier_bytes["ddr"] == fast.tier_bytes["hbm"]
            # no kernel streams its DDR share faster than DDR allows
            assert spilled.cycles >= spilled.tier_bytes["ddr"] / ddr_bps * node.socket.clock_hz
        router = next(pk for pk in placed.kernels if pk.kernel.kind == "router")
        assert router.bounding_resource == "ddr"


def test_a_different_order_fills_ddr_first(node, r1):
    plan = ParallelPlan(16, 16)
    mp = place_memory(node, r1, plan, 9 * GIB, GIB, order=["ddr", "hbm"])
    assert mp.order == ("ddr", "hbm") and mp.first_tier == "ddr"
    assert mp.by_tier["ddr"]["kv"] == 9 * GIB and not any(mp.by_tier["hbm"].values())
    assert list(mp.by_tier) == ["hbm", "ddr"]   # tables keep the socket's order
    placed = map_graph(node, deepseek_graph("decode"), mp)
    assert all(pk.tier_bytes["hbm"] == 0 for pk in placed.kernels)
    with pytest.raises(ValueError, match="distinct tiers"):
        place_memory(node, r1, plan, 0, 0, order=["hbm", "cxl"])


def test_a_tier_left_out_of_the_order_holds_nothing(node, r1):
    with pytest.raises(InfeasibleError, match="all of it .* exceeds the usable HBM"):
        place_memory(node, r1, ParallelPlan(16, 16), 80 * GIB, GIB, order=["hbm"])


def test_a_yaml_only_tier_takes_the_spill_and_gets_a_memory_stage(cxl_node, r1):
    """Weights fill HBM and the small DDR, and the rest goes to the CXL tier defined above."""
    socket = cxl_node.socket
    assert list(socket.memory) == ["hbm", "ddr", "cxl"]
    plan = ParallelPlan(1, 1)            # 640 GiB of weights on one socket
    mp = place_memory(cxl_node, r1, plan, 4 * GIB, GIB)
    weights = weight_bytes_per_socket(r1, plan)
    hbm, ddr, cxl = (mp.by_tier[t] for t in ("hbm", "ddr", "cxl"))
    assert hbm["weights"] == mp.capacity["hbm"] - GIB and ddr["weights"] == mp.capacity["ddr"] == 30 * GIB
    assert cxl["weights"] == weights - hbm["weights"] - ddr["weights"] and cxl["kv"] == 4 * GIB
    assert mp.capacity["cxl"] == 2 * 512 * GIB - 2 * GIB
    split = mp.tiers()
    assert [tier for tier, _ in split.weights] == ["hbm", "ddr", "cxl"]
    # a FFN kernel streams its weights from all three tiers: one memory stage per tier
    kernel = next(k for k in deepseek_graph("decode").kernels() if k.kind == "ffn" and k.layer == 10)
    pk = map_kernel(socket, kernel, split)
    check_all(socket, pk)
    assert list(pk.tier_bytes) == ["hbm", "ddr", "cxl"] and all(pk.tier_bytes.values())
    assert sum(pk.tier_bytes.values()) == kernel.weight_bytes + sum(o.act_in_bytes + o.act_out_bytes
                                                                    for o in kernel.operators)
    memory_stages = [s.operator for s in pk.stages if s.kind == "memory"]
    assert memory_stages == ["hbm", "ddr", "cxl"]
    assert pk.bounding_resource == "cxl"     # the slowest tier sets the pace


def test_a_yaml_only_tier_that_overflows_is_named(cxl_node, r1):
    with pytest.raises(InfeasibleError) as info:
        place_memory(cxl_node, r1, ParallelPlan(1, 1), 2**40, GIB)
    message = str(info.value)
    assert "HBM holds" in message and "DDR holds" in message and "exceeds the usable CXL of 1022.00 GiB" in message


def test_the_map_table_shows_a_column_per_tier_in_use(node, r1):
    from sn40l_sim.mapper.summary import format_table, shown_tiers, utilisation

    graph = deepseek_graph("decode")
    in_hbm = map_graph(node, graph)
    spilled = map_graph(node, graph, place_memory(node, r1, ParallelPlan(1, 1), 0, GIB))
    assert shown_tiers(node.socket, in_hbm.kernels) == ("hbm",)
    assert shown_tiers(node.socket, spilled.kernels) == ("hbm", "ddr")
    head, *_, total = format_table(node.socket, spilled.kernels).splitlines()
    assert "HBM%" in head and "DDR%" in head and re.search(r"HBM \d+\.\d% of peak, DDR \d+\.\d% of peak", total)
    assert "DDR%" not in format_table(node.socket, in_hbm.kernels)
    ffn = next(pk for pk in spilled.kernels if pk.kernel.kind == "ffn")
    u = utilisation(node.socket, ffn)
    assert set(u.memory) == {"hbm", "ddr"} and 0 < u.memory["ddr"] <= 1


@pytest.mark.parametrize("tln, paced_by_tln", [("102.4 GB/s", False), ("10 GB/s", True)])
def test_a_memory_stage_is_paced_by_the_tln_ports_where_they_are_narrower(tln, paced_by_tln):
    # the engine's TLN channel carries every memory stream (sn40l_sim/engine/staging.py); the mapper
    # left it out, so at 10 GB/s a port map said Llama-3.1-70B's decode step took 12.7 ms where run
    # took 22.8 ms (the stream at 640 GB/s a socket instead of HBM's 1.6 TB/s)
    from sn40l_sim.mapper.stages import memory_stage

    node = with_overrides(node16(), {"socket.tln.bytes_per_s": tln})
    socket = node.socket
    n_bytes, chip_tiles = 2**30, 4
    stage = memory_stage(socket, "hbm", n_bytes, 1024, chip_tiles)
    hbm_rate = figures.memory_bytes_per_s(socket, "hbm") * socket.memory["hbm"].efficiency / socket.clock_hz
    tln_rate = chip_tiles * socket.tile.agcus * socket.tln.bytes_per_s / socket.clock_hz
    rate = min(hbm_rate, tln_rate)
    assert (tln_rate < hbm_rate) == paced_by_tln
    assert stage.stream_cycles == pytest.approx(n_bytes / rate, rel=1e-3)


def test_the_last_byte_that_fits_in_the_tiers_fits_and_one_more_does_not():
    # a socket holds what its tiers hold after their reservations, to the byte: KV of exactly the
    # room the weights and activations leave fits (the last tier full), one byte more is refused
    node = node16()
    model = load_model(ROOT / "graphs" / "deepseek_r1.yaml")
    plan = ParallelPlan(16)
    weights = weight_bytes_per_socket(model, plan)
    activations = 3 * 2**30
    usable = sum(int(figures.usable_memory_bytes(node.socket, tier)) for tier in node.socket.memory)
    room = usable - weights - activations
    full = place_memory(node, model, plan, room, activations)
    last = full.order[-1]
    assert sum(full.by_tier[last].values()) == full.capacity[last]
    assert sum(sum(uses.values()) for uses in full.by_tier.values()) == usable
    with pytest.raises(InfeasibleError, match="by 1 bytes"):
        place_memory(node, model, plan, room + 1, activations)


def test_an_overflow_prints_a_few_mib_of_activations_and_one_byte_short_as_nonzero():
    # a decode batch's few MiB of activations and a shortfall of one byte rounded to "0.00 GiB"
    # read as if nothing were needed; two significant figures keep them nonzero
    node = node16()
    model = load_model(ROOT / "graphs" / "deepseek_r1.yaml")
    plan = ParallelPlan(16)
    activations = 5 * 2**20
    usable = sum(int(figures.usable_memory_bytes(node.socket, tier)) for tier in node.socket.memory)
    room = usable - weight_bytes_per_socket(model, plan) - activations
    with pytest.raises(InfeasibleError) as info:
        place_memory(node, model, plan, room + 1, activations)
    message = str(info.value)
    assert "activations 0.0049 GiB;" in message
    assert "by 1 bytes (9.3e-10 GiB)" in message
