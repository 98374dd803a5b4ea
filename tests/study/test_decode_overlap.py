"""A dense decoder's tensor-parallel all-reduces go out tile by tile under its GEMMs
(graphs/kernels_llama.yaml; docs/validation.md, "Decode all-reduces under the GEMM"): at a large
batch only each one's last data tile's share is left after the stream, at batch 1 the share of a
small all-reduce costs about its latency, and no step beats its FLOP or HBM roofline.

Llama-3.1-8B on the 8-socket node, 128-token caches, looping on and off, against the same
templates with the decode all-reduces not overlapped.
"""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import yaml

from sn40l_sim.engine.breakdown import decode_step_breakdown, memory_roofline_s
from sn40l_sim.engine.collectives import CollectiveModel
from sn40l_sim.engine.run_graph import EngineOptions
from sn40l_sim.hardware import figures
from sn40l_sim.hardware.loader import load_hardware
from sn40l_sim.ir import ParallelPlan
from sn40l_sim.kvcache import make_policy
from sn40l_sim.models.loader import load_model
from sn40l_sim.serving.step_costs import _decode_shape
from sn40l_sim.study.assemble import step_timer

ROOT = Path(__file__).resolve().parents[2]
NODE = load_hardware(ROOT / "hw_configs" / "sn40l_node8.yaml")
KV = 128


def _plain_model(tmp_path: Path):
    """Llama-3.1-8B with its decode all-reduces not overlapped (the templates before they were)."""
    kernels = yaml.safe_load((ROOT / "graphs" / "kernels_llama.yaml").read_text())
    for coll in kernels["decode"]["kernels"]["decoder"]["collectives"]:
        coll.pop("overlapped", None)
    (tmp_path / "kernels_llama.yaml").write_text(yaml.safe_dump(kernels, sort_keys=False))
    (tmp_path / "model.yaml").write_text((ROOT / "graphs" / "llama3_1_8b.yaml").read_text())
    return load_model(tmp_path / "model.yaml")


@pytest.fixture(scope="module")
def timers(tmp_path_factory) -> dict[tuple[str, bool], object]:
    models = {"overlapped": load_model(ROOT / "graphs" / "llama3_1_8b.yaml"),
              "plain": _plain_model(tmp_path_factory.mktemp("plain"))}
    plan = ParallelPlan(tp=8)
    return {(name, loop): step_timer(NODE, model, make_policy("full", {}), plan, plan,
                                     engine=EngineOptions(kernel_looping=loop))
            for name, model in models.items() for loop in (True, False)}


def _decoders(step):
    return [k for k in step.kernels if k.kind == "decoder"]


def _share_cycles(kernel, n_tiles: int) -> int:
    """The all-reduces' last data tile's shares, one after the other, on idle links."""
    model = CollectiveModel.from_node(NODE)
    return sum(model.run(dataclasses.replace(c, bytes=math.ceil(c.bytes / n_tiles))).cycles
               for c in kernel.collectives if c.overlapped)


@pytest.mark.parametrize("loop", [True, False])
def test_a_large_batch_step_exposes_less_all_reduce_time_than_it_runs(timers, loop):
    step = timers[("overlapped", loop)].decode_step(1024, KV)
    plain = timers[("plain", loop)].decode_step(1024, KV)
    ran_s = figures.seconds(sum(k.collective_cycles for k in _decoders(step)), NODE.socket)
    exposed_s = decode_step_breakdown(step)["collectives"]
    assert 0 < exposed_s < ran_s
    # not overlapped, the step exposes them all (and the embedding's and sampling's)
    assert decode_step_breakdown(plain)["collectives"] >= ran_s > exposed_s
    assert step.cycles < plain.cycles


def test_each_call_still_waits_for_its_last_tiles_shares(timers):
    timer = timers[("overlapped", False)]
    for batch in (1, 1024):
        placed = {pk.kernel.name: pk for pk in timer.placed(_decode_shape(batch, KV, 0, timer.context_len)).kernels}
        for k in _decoders(timer.decode_step(batch, KV)):
            pk = placed[k.name]
            assert k.collective_exposed_cycles >= _share_cycles(pk.kernel, pk.n_tiles) > 0, (batch, k.name)


@pytest.mark.parametrize("loop", [True, False])
def test_batch_1_gains_at_most_its_all_reduces_bandwidth(timers, loop):
    """Batch 1's all-reduces (8 KiB) are latency-bound: overlapping them hides at most what they
    spend moving bytes (the whole all-reduce less one tile's share, per call), and looped, whose
    next layer's weights already stream under them, close to nothing."""
    step = timers[("overlapped", loop)].decode_step(1, KV)
    plain = timers[("plain", loop)].decode_step(1, KV)
    timer = timers[("overlapped", loop)]
    placed = {pk.kernel.name: pk for pk in timer.placed(_decode_shape(1, KV, 0, timer.context_len)).kernels}
    model = CollectiveModel.from_node(NODE)
    bandwidth = sum(sum(model.run(c).cycles for c in placed[k.name].kernel.collectives if c.overlapped)
                    - _share_cycles(placed[k.name].kernel, placed[k.name].n_tiles) for k in _decoders(step))
    assert 0 <= plain.cycles - step.cycles <= bandwidth
    if loop:
        assert step.cycles == pytest.approx(plain.cycles, rel=0.005)


@pytest.mark.parametrize("batch", [1, 64, 1024])
@pytest.mark.parametrize("loop", [True, False])
def test_no_step_beats_its_roofline(timers, batch, loop):
    step = timers[("overlapped", loop)].decode_step(batch, KV)
    flops_s = sum(k.flops for k in step.kernels) / figures.peak_flops(NODE.socket)
    assert step.seconds >= max(flops_s, memory_roofline_s(step, NODE.socket))
