"""The engine on the real DeepSeek-R1 graphs (builder + mapper) on the 16-socket SN40L node."""
from __future__ import annotations

import dataclasses
import math

import pytest

from sn40l_sim.engine.breakdown import decode_step_breakdown, kernel_breakdown
from sn40l_sim.engine.collectives import CollectiveModel
from sn40l_sim.engine.run_graph import EngineOptions, run_graph
from sn40l_sim.hardware import figures
from sn40l_sim.hardware.loader import load_hardware
from sn40l_sim.ir import ParallelPlan, Shape
from sn40l_sim.kvcache import make_policy
from sn40l_sim.models.loader import load_model
from sn40l_sim.study.assemble import step_timer

PREFILL, DECODE = ParallelPlan(tp=16), ParallelPlan(tp=16, attention_dp=16)


@pytest.fixture(scope="module")
def node():
    return load_hardware("hw_configs/sn40l_node16.yaml")


@pytest.fixture(scope="module")
def model():
    return load_model("graphs/deepseek_r1.yaml")


@pytest.fixture(scope="module")
def full(node, model):
    return step_timer(node, model, make_policy("full", {}), PREFILL, DECODE)


@pytest.fixture(scope="module")
def snap(node, model):
    return step_timer(node, model, make_policy("snapstream", {"budget": 32768}), PREFILL, DECODE)


CASES = [("full", "decode", 16, 131072), ("snap", "decode", 64, 32768), ("snap", "prefill", 1, 16384)]


def _step(timers, which, phase, batch, length):
    timer = timers[which]
    if phase == "decode":
        return timer, timer.decode_step(batch, length), Shape("decode", batch, 0, length)
    return timer, timer.prefill(length), Shape("prefill", 1, length, 0)


@pytest.fixture(scope="module")
def timers(full, snap):
    return {"full": full, "snap": snap}


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{c[1]}-{c[2]}x{c[3]}" for c in CASES])
def test_kernels_agree_with_the_mapper_and_bounds_hold(node, timers, case):
    timer, step, shape = _step(timers, *case)
    placed = timer.placed(shape)
    assert [k.name for k in step.kernels] == [pk.kernel.name for pk in placed.kernels]
    # without the collectives' memory traffic and the call boundaries nothing contends inside a
    # kernel, and its tile stream is the mapper's tile-level formula without the configuration
    # loads exactly; the engine adds the boundaries and the exposed collectives
    alone = run_graph(node, placed, EngineOptions(stage_collectives=False, kernel_boundaries=False,
                                                  kernel_looping=False))
    for rec, pk in zip(alone.records, placed.kernels, strict=True):
        configs = sum(figures.config_cycles(node.socket, b) for b in pk.section_config_bytes)
        # each of the (at most 8) chunks of a section ends on a whole cycle, so float rates may
        # round the stream up by a cycle per chunk
        if not any(c.after for c in pk.kernel.collectives):
            assert 0 <= rec.stream_end - rec.start - (pk.cycles - configs) <= 8 * pk.sections, rec.name
        else:
            # an all-reduce in its GEMM's window (sn40l_sim/engine/windows.py) cuts a chunk where the
            # window opens, and the later tiles that read it wait for it while the weights stream
            # on ahead, the compute taking each chunk as it arrives (the last tile of a late one
            # after it): without the wait, the formula within a data tile
            streamed = rec.stream_end - rec.start - rec.gate_cycles
            formula = pk.cycles - configs
            assert formula - pk.cycles_per_tile <= streamed <= formula + pk.cycles_per_tile + 8, rec.name
    for k, pk in zip(step.kernels, placed.kernels, strict=True):
        # a call finding its configuration resident skips loading it; a loop iteration its fill
        floor = pk.cycles - pk.overhead_cycles - (pk.fill_cycles if k.iteration else 0)
        assert k.cycles - k.collective_exposed_cycles >= floor, k.name
        assert k.cycles >= pk.compute_cycles and k.cycles >= pk.memory_cycles, k.name
    assert step.cycles >= alone.cycles
    # the step: no faster than all its FLOPs at peak nor all its bytes at achievable bandwidth
    assert step.cycles >= sum(pk.compute_cycles for pk in placed.kernels)
    hbm_per_cycle = (figures.memory_bytes_per_s(node.socket, "hbm") * node.socket.memory["hbm"].efficiency
                     / node.socket.clock_hz)
    assert step.cycles >= step.tier_bytes["hbm"] / hbm_per_cycle
    # bytes conserved: what the engine moved is what the placed graph holds
    assert step.tier_bytes == {"hbm": sum(pk.tier_bytes["hbm"] for pk in placed.kernels) + step.link_bytes["p2p_staged"],
                               "ddr": sum(pk.tier_bytes["ddr"] for pk in placed.kernels)}
    model = CollectiveModel.from_node(node)
    assert step.link_bytes["p2p"] == sum(model.run(c).link_bytes for pk in placed.kernels
                                         for c in pk.kernel.collectives)
    for name, busy in step.resource_busy_cycles.items():
        assert 0 <= busy <= step.cycles, name


def test_collectives_run_where_the_hardware_runs_them(node, timers):
    timer, step, shape = _step(timers, "snap", "prefill", 1, 16384)
    placed = {pk.kernel.name: pk for pk in timer.placed(shape).kernels}
    model = CollectiveModel.from_node(node)
    overlapped = 0
    for k in step.kernels:
        colls = placed[k.name].kernel.collectives
        stream = next(ev for ev in step.events if ev.name == k.name and ev.category == "stream")
        mine = [ev for ev in step.events if ev.category == "collective" and k.start_cycle <= ev.start_cycle
                and ev.end_cycle <= k.end_cycle]
        assert len(mine) == len(colls), k.name
        for coll, ev in zip(colls, mine, strict=True):
            # no faster than on idle links (slower when the kernel's streams starve its memory traffic)
            assert ev.cycles >= model.run(coll).cycles
            if coll.overlapped:
                overlapped += 1
                # starts once the first tile is out, runs beside the compute (a looped call's
                # stream runs ahead of its compute and may end before that tile is out)
                assert stream.start_cycle < ev.start_cycle < k.end_cycle
            else:
                assert ev.start_cycle >= stream.end_cycle
        # the kernel ends when its compute and its last collective have, and no sooner than each
        # overlapped collective's last data tile's share after the last tile is out; the shares
        # take the links, so one may wait for another collective's transfer, never for more
        tiles = placed[k.name].n_tiles
        tails = sum(model.run(dataclasses.replace(c, bytes=math.ceil(c.bytes / tiles))).cycles
                    for c in colls if c.overlapped)
        ends = [ev.end_cycle for ev in mine]
        assert max([stream.end_cycle + tails] + ends) <= k.end_cycle <= max([stream.end_cycle] + ends) + tails, k.name
    assert overlapped > 0


def test_decode_step_grows_with_context_and_batch(full):
    by_kv = [full.decode_step(16, kv).cycles for kv in (4096, 32768, 131072)]
    assert by_kv == sorted(by_kv) and by_kv[0] < by_kv[-1]
    by_batch = [full.decode_step(b, 32768).cycles for b in (16, 32, 64)]
    assert by_batch == sorted(by_batch) and by_batch[0] < by_batch[-1]


def test_memoised_and_deterministic(node, model, full):
    first = full.decode_step(16, 131072)
    assert full.decode_step(16, 131072) is first
    fresh = step_timer(node, model, make_policy("full", {}), PREFILL, DECODE)
    assert fresh.decode_step(16, 131072) == first


def test_decode_breakdown_explains_the_step(full):
    step = full.decode_step(16, 131072)
    parts = decode_step_breakdown(step)
    assert sum(parts.values()) == pytest.approx(step.seconds, rel=1e-9)
    for cat in ("weights_streaming", "collectives", "launch", "synchronisation"):
        assert parts[cat] > 0, cat
    # its four layer kernels on a tile each and the kernels called once beside them: nothing
    # reloads (docs/validation.md, "Faster links or HBM, a slower step"); at batch 64 with the two
    # MTP drafts' kernels beside them they do not fit
    assert parts["configuration"] == 0
    assert decode_step_breakdown(full.decode_step(64, 32768, 2))["configuration"] > 0
    # time attributed to memory is at least what the memory-bound kernels' bytes need at bandwidth
    memory = parts["weights_streaming"] + parts["kv_reads"] + parts["activations"]
    socket = full.node.socket
    hbm_per_s = figures.memory_bytes_per_s(socket, "hbm") * socket.memory["hbm"].efficiency
    bound = [k for k in step.kernels if k.memory_bound_cycles and not k.compute_bound_cycles]
    assert bound
    assert memory >= sum(k.tier_bytes["hbm"] for k in bound) / hbm_per_s * (1 - 1e-9)


def test_attention_compute_is_the_mla_kernels_scores_softmax_and_weighted_sum(full):
    # the absorbed decode reads the cached latent once, with the scores' tile, so its weighted sum
    # (52 of the 111 attention GFLOP at a 133K cache) reads no cache bytes of its own; it was booked
    # to other_compute, which was then mostly attention (docs/validation.md, "Sequences per socket")
    step = full.decode_step(16, 131072)
    graph = full.graph(Shape("decode", 16, 0, 131072)).graph
    mla = [k for k in step.kernels if k.kind == "mla"]
    assert mla
    for k in mla:
        ops = {op.name: op for op in graph.nodes[k.name]["kernel"].operators}
        assert k.attention_flops == sum(ops[n].flops for n in ("absorbed_qk", "absorbed_softmax", "absorbed_pv"))
    parts = decode_step_breakdown(step)
    # nearly all of the MLA kernels' FLOPs are attention, so nearly all of their compute-bound time
    # is booked to attention; and only they book any (the MoE kernel's, when its pace is its
    # compute's, is other_compute)
    by_kind = [sum(kernel_breakdown(k)[cat] for k in mla) for cat in ("attention_compute", "other_compute")]
    assert by_kind[0] > 10 * by_kind[1]
    assert parts["attention_compute"] == pytest.approx(by_kind[0] * step.seconds / step.cycles, rel=1e-9)


def test_representative_layers(model, full, snap):
    decode = full.decode_step(16, 131072)
    assert decode.layer is not None and decode.layer >= model.dense_layers
    assert set(decode.layer_cycles) == {"mla", "ffn"}
    prefill = snap.prefill(16384)
    assert prefill.layer >= model.dense_layers
    assert {"qkv", "mha", "o_proj", "router", "moe_ffn", "snapkv", "ring_buffer"} <= set(prefill.layer_cycles)
    assert sum(prefill.layer_shares().values()) == pytest.approx(1.0)


def test_one_engine_run_without_the_timer(node, model, full):
    placed = full.placed(Shape("decode", 16, 0, 4096))
    run = run_graph(node, placed)
    assert run.cycles == full.decode_step(16, 4096).cycles
