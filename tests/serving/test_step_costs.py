"""StepTimer with a stand-in builder and mapper: memoisation, determinism, graphs built once, input checks."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from sn40l_sim.engine.breakdown import kernel_breakdown
from sn40l_sim.engine.phase import KernelTiming
from sn40l_sim.frozen import copied
from sn40l_sim.hardware import figures
from sn40l_sim.ir import KernelGraph, Operator
from sn40l_sim.mapper import map_graph
from sn40l_sim.mapper._examples import example_decode_kernel
from sn40l_sim.mapper.placement import MemoryPlacement

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))
from engine_doubles import chain, node16, placed_kernel  # noqa: E402

from sn40l_sim.engine.breakdown import decode_step_breakdown
from sn40l_sim.errors import InputError
from sn40l_sim.ir import Collective, Shape
from sn40l_sim.serving.step_costs import StepTimer

NODE = node16()


class Built:
    """What the stand-in builder returns: the shape and options, and no kernels (no activations)."""

    def __init__(self, shape, options):
        self.shape, self.options = shape, options

    def kernels(self):
        return []


def builder(**options):
    """A stand-in graph builder bound to ``options`` (the real one is bound to a model and a policy)."""
    return lambda shape, plan: Built(shape, options)


def place(built):
    node, shape, options = NODE, built.shape, built.options
    weights = options.get("weights", 10**7)
    kv = 2000 * shape.batch * shape.kv_len
    n = max(1, shape.batch * max(shape.kv_len, shape.prompt_len) // 64)
    return chain([
        placed_kernel(node, "L0.mla", "mla", n_tiles=n, compute_cycles_per_tile=20, hbm_bytes=weights + kv,
                      kv_read_bytes=kv, collectives=(Collective("all_reduce", 7168 * 2 * shape.batch, 16),)),
        placed_kernel(node, "L0.ffn", "moe_ffn", n_tiles=64, compute_cycles_per_tile=100, hbm_bytes=weights,
                      collectives=(Collective("all_reduce", 7168 * 2 * shape.batch, 16, overlapped=True),)),
    ])


def timer(**options):
    return StepTimer(NODE, None, None, build=builder(**options), place=place)


def test_memoised_steps_are_the_same_object():
    t = timer()
    first = t.decode_step(8, 4096)
    assert t.decode_step(8, 4096) is first
    assert t.decode_step(8, 4097) is not first
    assert t.prefill(4096) is t.prefill(4096)
    assert t.stats == {"prefill_runs": 1, "prefill_hits": 1, "decode_runs": 2, "decode_hits": 1, "graphs_built": 3}


def test_a_verify_step_is_its_own_graph_and_memo_entry():
    t = timer()
    plain, verify = t.decode_step(8, 4096), t.decode_step(8, 4096, drafts=2)
    assert verify is not plain and t.decode_step(8, 4096, 2) is verify
    assert t.stats["decode_runs"] == 2 and t.stats["decode_hits"] == 1 and t.stats["graphs_built"] == 2
    # the builder sees the drafts in the shape (the graph is the one already built)
    assert t.graph(Shape("decode", 8, 0, 4096, drafts=2)).shape.drafts == 2 and t.stats["graphs_built"] == 2


def test_a_graph_is_built_once_for_memory_sizing_and_timing():
    t = timer()
    t.decode_activation_bytes(8, 4096)
    t.decode_step(8, 4096)
    t.prefill_activation_bytes(1000)
    t.prefill(1000)
    assert t.stats["graphs_built"] == 2


def test_separate_timers_agree_exactly():
    assert timer().decode_step(16, 2048) == timer().decode_step(16, 2048)
    assert timer().prefill(1000) == timer().prefill(1000)


def test_graph_options_reach_the_builder():
    assert timer(weights=10**8).decode_step(1, 64).cycles > timer().decode_step(1, 64).cycles


def test_phase_fields():
    step = timer().decode_step(4, 1024)
    assert step.phase == "decode" and step.batch == 4 and step.kv_len == 1024
    assert step.seconds == pytest.approx(step.cycles / NODE.socket.clock_hz)
    assert set(step.kernel_cycles) == {"mla", "moe_ffn"}
    assert sum(step.kernel_cycles.values()) == step.cycles
    assert step.kernel_cycles_by_name["L0.mla"] == step.kernel_cycles["mla"]
    kinds = {ev.category for ev in step.events}
    assert {"kernel", "stream", "setup", "collective"} <= kinds
    assert all(0 <= ev.start_cycle <= ev.end_cycle <= step.cycles for ev in step.events)
    parts = decode_step_breakdown(step)
    assert sum(parts.values()) == pytest.approx(step.seconds, rel=1e-9)


@pytest.mark.parametrize("args", [(0, 10), (4, 0), (-1, 10), (2.5, 10), (True, 10)])
def test_bad_step_arguments_are_input_errors(args):
    with pytest.raises(InputError):
        timer().decode_step(*args)
    with pytest.raises(InputError):
        timer().prefill(0)


@pytest.mark.parametrize("call, field", [
    (lambda t: t.decode_step(8, 4096, drafts=-1), "drafts"),
    (lambda t: t.decode_step(8, 4096, drafts=1.5), "drafts"),
    (lambda t: t.prefill(4096, earlier=-1), "earlier"),
])
def test_bad_drafts_and_earlier_are_input_errors_naming_them(call, field):
    # as batch and kv_len are: the graph builder refused a bad drafts too, but at field "shape"
    with pytest.raises(InputError) as info:
        call(timer())
    assert info.value.field == field


def test_numpy_integers_time_the_step_a_python_int_does():
    # a notebook's batches from np.arange were refused: "batch must be a positive integer, got np.int64(8)"
    np = pytest.importorskip("numpy")
    t = timer()
    step = t.decode_step(np.int64(8), np.int32(4096), drafts=np.int64(0))
    assert step is t.decode_step(8, 4096) and type(step.batch) is int and type(step.kv_len) is int
    assert t.prefill(np.int64(1000)) is t.prefill(1000)
    with pytest.raises(InputError, match=r"batch must be a positive integer, got np.int64\(0\)"):
        t.decode_step(np.int64(0), 4096)


def one_kernel_timer() -> StepTimer:
    """A timer of graphs of one example decode kernel, with the real mapper."""

    def one_kernel(shape, plan):
        graph = KernelGraph("t", shape)
        graph.add(example_decode_kernel(kv_len=shape.kv_len))
        return graph

    return StepTimer(NODE, None, None, build=one_kernel, place=lambda graph, memory=None: map_graph(NODE, graph, memory))


def test_steps_stream_from_the_tiers_the_placement_chose():
    """With the real builder's stand-in and the real mapper, a placement that spills KV to DDR is a
    different (slower) step; one that keeps everything in the first tier is the default step."""

    t = one_kernel_timer()
    in_hbm = MemoryPlacement({"hbm": {"weights": 1, "kv": 1}, "ddr": {}}, {"hbm": 10, "ddr": 10}, ("hbm", "ddr"))
    offloaded = MemoryPlacement({"hbm": {"weights": 1}, "ddr": {"kv": 1}}, {"hbm": 10, "ddr": 10}, ("hbm", "ddr"))
    default = t.decode_step(1, 65536)
    assert t.decode_step(1, 65536, memory=in_hbm) is default
    slow = t.decode_step(1, 65536, memory=offloaded)
    assert slow.cycles > default.cycles and slow.tier_bytes["ddr"] > 0 == default.tier_bytes["ddr"]
    assert t.stats["decode_runs"] == 2


def test_the_breakdown_charges_a_slow_tier_for_the_time_its_bytes_take():
    """KV in DDR and weights in HBM: the memory-bound time of the step is shared by each use's bytes
    times the time a byte takes in its tier, so the KV (at DDR's bandwidth) takes more of it than
    its share of the bytes; with everything in HBM, by bytes alone."""

    t = one_kernel_timer()
    offloaded = MemoryPlacement({"hbm": {"weights": 1}, "ddr": {"kv": 1}}, {"hbm": 10, "ddr": 10}, ("hbm", "ddr"))
    socket = NODE.socket

    def achieved(tier):
        return figures.memory_bytes_per_s(socket, tier) * socket.memory[tier].efficiency

    for step, kv_tier in ((t.decode_step(1, 65536), "hbm"), (t.decode_step(1, 65536, memory=offloaded), "ddr")):
        (k,) = step.kernels
        parts = decode_step_breakdown(step)
        memory_s = parts["weights_streaming"] + parts["kv_reads"] + parts["activations"]
        assert memory_s > 0
        weighted = {"weights": k.weight_bytes / achieved("hbm"), "kv": k.kv_bytes / achieved(kv_tier),
                    "activations": k.activation_bytes / achieved("hbm")}
        assert parts["kv_reads"] / memory_s == pytest.approx(weighted["kv"] / sum(weighted.values()), rel=1e-9)
        byte_share = k.kv_bytes / (k.weight_bytes + k.kv_bytes + k.activation_bytes)
        if kv_tier == "hbm":
            assert step.byte_seconds == () and parts["kv_reads"] / memory_s == pytest.approx(byte_share, rel=1e-9)
        else:
            assert dict(step.byte_seconds)["kv"] > 5 * dict(step.byte_seconds)["weights"]
            assert parts["kv_reads"] / memory_s > byte_share + 0.05


def test_a_kv_policys_store_traffic_is_kv_reads_at_its_tiers_speed():
    """ArkVale's recall from a DDR store was left out of the shares, so its time went to the
    weights and activations the kernel streamed beside it."""

    k = KernelTiming("L0.recall", "recall", 0, 0, 1000, overhead_cycles=0, fill_cycles=0, compute_busy_cycles=0,
                     memory_bound_cycles=1000, compute_bound_cycles=0, collective_exposed_cycles=0,
                     collective_cycles=0, tier_bytes={"hbm": 2000, "ddr": 1000}, weight_bytes=1000, kv_bytes=0,
                     activation_bytes=1000, flops=0, attention_flops=0, stream_end_cycle=1000,
                     kv_offload_bytes=1000)
    alike = kernel_breakdown(k)
    assert alike["kv_reads"] == pytest.approx(1000 / 3)        # by bytes
    slow_store = {"weights": 1.0, "kv": 1.0, "activations": 1.0, "kv_offload": 8.0}
    parts = kernel_breakdown(k, byte_seconds=slow_store)
    assert parts["kv_reads"] == pytest.approx(1000 * 8 / 10)   # a DDR byte takes eight HBM bytes' time
    assert parts["weights_streaming"] == parts["activations"] == pytest.approx(100)


def test_a_steps_store_traffic_reaches_the_breakdown_at_the_store_tiers_speed():
    """Through the real mapper and step timer: the kernel's store bytes reach its timing, and the
    store in DDR beside everything else in HBM gives the store its own time per byte (the step's
    byte_seconds was empty then, and the timings carried no store bytes)."""

    recalled = 2 * 10**6

    def with_recall(shape, plan):
        graph = KernelGraph("t", shape)
        k = example_decode_kernel(kv_len=shape.kv_len)
        graph.add(copied(k, operators=(*k.operators, Operator("recall_pages", "gather", elements=4096,
                                                              kv_offload_read_bytes=recalled))))
        return graph

    t = StepTimer(NODE, None, None, build=with_recall, place=lambda graph, memory=None: map_graph(NODE, graph, memory))
    store = MemoryPlacement({"hbm": {"weights": 1, "kv": 1}, "ddr": {"kv_offload": 1}}, {"hbm": 10, "ddr": 10},
                            ("hbm", "ddr"))
    step = t.decode_step(1, 65536, memory=store)
    (k,) = step.kernels
    assert k.kv_offload_bytes == recalled == step.tier_bytes["ddr"]
    per_byte = dict(step.byte_seconds)
    assert per_byte["kv_offload"] > 5 * per_byte["kv"] == 5 * per_byte["weights"]
    parts = decode_step_breakdown(step)
    memory_s = parts["weights_streaming"] + parts["kv_reads"] + parts["activations"]
    weighted = {"weights": k.weight_bytes * per_byte["weights"], "activations": k.activation_bytes * per_byte["activations"],
                "kv": k.kv_bytes * per_byte["kv"] + recalled * per_byte["kv_offload"]}
    assert parts["kv_reads"] / memory_s == pytest.approx(weighted["kv"] / sum(weighted.values()), rel=1e-9)
