"""When Llama-3.1-8B decodes slower on 16 sockets than on 8 at batch 16 (docs/validation.md,
"Socket scaling at larger batches").

The mechanism the page gives, pinned here from the physics rather than at the shipped calibration:
the direct all-reduce of a batch-16 hidden row (128 KiB) is its transfers' time plus 2 x (n - 1)
transfer set-ups queued on the socket's DMA engines, 2 x 15 over 16 sockets against 2 x 7 over 8.
Where a 16-socket layer's two all-reduces outlast the 8-socket layer's stream of weights and cache,
the 16-socket step is bound by its collectives and is the slower; where they are short (free
set-ups, or four DMA engines a socket setting them up in parallel) it is the faster. Which regime
the shipped set-up falls in is the calibration's: at 0.685 µs it was the first (1.70 against 1.59
ms), at the refit's 0.44 µs the 16-socket step is the faster. So the set-ups are chosen here from
the all-reduce and stream times themselves. Decode steps only: no serving, no prefill.
"""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from sn40l_sim.engine.collectives import ALGORITHMS, CollectiveModel
from sn40l_sim.hardware.loader import load_hardware, with_overrides
from sn40l_sim.ir import Collective
from sn40l_sim.models.loader import load_model
from sn40l_sim.study.evaluation import LoadedExperiments

ROOT = Path(__file__).resolve().parents[2]
NODE16 = ROOT / "hw_configs" / "sn40l_node16.yaml"
MODEL = ROOT / "graphs" / "llama3_1_8b.yaml"
#: Llama-3.1-8B's hidden row, BF16, for 16 sequences: what each decode all-reduce carries
ROW_BYTES = 16 * 4096 * 2
#: the all-reduces of a decode step: two a layer (after the attention's output projection and the FFN)
ALL_REDUCES = 2 * load_model(MODEL).layers
SETUP = "socket.calibrated.transfer_setup_s"
ENGINES = "socket.p2p.dma_engines"


@pytest.fixture(scope="module")
def loaded() -> LoadedExperiments:
    return LoadedExperiments()


@pytest.fixture(scope="module")
def batch16(tmp_path_factory) -> Path:
    """Llama-3.1-8B, 1K prompt and 1K outputs (2K caches), batch 16, TP over the node's sockets."""
    spec = {
        "kind": "experiment", "name": "socket_scaling_b16",
        "hardware": str(NODE16), "model": str(MODEL),
        "parallel": {"prefill": {"tp": 16}, "decode": {"tp": 16}},
        "policies": [{"name": "full", "policy": "full"}],
        "shape": {"prompt_len": 1024, "batch": 16, "max_new_tokens": 1024},
        "workload": {"kind": "fixed", "count": 1, "output_len": 1024},
        "serving": {"batch": 16, "max_new_tokens": 1024},
    }
    path = tmp_path_factory.mktemp("scaling") / "b16.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def _step(loaded: LoadedExperiments, path: Path, sockets: int, **hardware) -> dict:
    """The decode record of ``path`` on the 8- or 16-socket node (the 8-socket one is the 16-socket
    one with 8 sockets, ``hw_configs/sn40l_node8.yaml``), TP over all of them."""
    node = ROOT / "hw_configs" / f"sn40l_node{sockets}.yaml"
    text = path.read_text().replace("tp: 16", f"tp: {sockets}").replace(str(NODE16), str(node))
    copy = path.with_name(f"b16_{sockets}.yaml")
    copy.write_text(text)
    (record,) = loaded.records(copy, serve=False, reads_prefill=(), hardware_overrides=hardware or None)
    return record


def _model(sockets: int, setup_s: float, engines: int = 1) -> CollectiveModel:
    node = with_overrides(load_hardware(NODE16), {"sockets": sockets, SETUP: f"{setup_s!r} s", ENGINES: engines})
    return CollectiveModel.from_node(node)


def _all_reduce(sockets: int, setup_s: float, engines: int = 1) -> int:
    """Cycles of the all-reduce of the batch-16 row over ``sockets``, the fastest algorithm."""
    return _model(sockets, setup_s, engines).run(Collective("all_reduce", ROW_BYTES, sockets)).cycles


@pytest.mark.parametrize("sockets", [8, 16])
@pytest.mark.parametrize("engines", [1, 4])
def test_the_direct_all_reduce_is_its_transfers_and_its_set_ups_queued_on_the_dma_engines(sockets, engines):
    node = load_hardware(NODE16)
    shipped = node.socket.calibrated.transfer_setup_s
    row = Collective("all_reduce", ROW_BYTES, sockets)
    bare = _model(sockets, 0.0, engines).simulate(row, "direct").cycles
    # a reduce-scatter and an all-gather, each with n - 1 transfers shared out over the engines,
    # each engine's set up one after the other
    setups = 2 * math.ceil((sockets - 1) / engines)
    for setup_s in (shipped, 2 * shipped):
        got = _model(sockets, setup_s, engines).simulate(row, "direct").cycles
        queued = setups * setup_s * node.socket.clock_hz
        assert abs(got - bare - queued) <= setups, (got, bare, queued)   # each set-up in whole cycles
    # and the model takes the fastest algorithm for the row
    model = _model(sockets, shipped, engines)
    assert model.run(row).cycles == min(model.simulate(row, a).cycles for a in ALGORITHMS if model.applies(row, a))


def _fastest(sockets: int, setup_s: float) -> str:
    return _model(sockets, setup_s).run(Collective("all_reduce", ROW_BYTES, sockets)).algorithm


@pytest.fixture(scope="module")
def regimes(loaded, batch16) -> dict:
    """The set-ups of the two regimes: ``slow``, the largest at which the direct algorithm is still
    the fastest over 16 sockets (above it the tree, which sends the whole row in each of its 4
    rounds, is: its set-ups are few), and ``fast``, none; and the 8-socket step's HBM streaming at
    the shipped values, in cycles."""
    parts = _step(loaded, batch16, 8)["decode_step_breakdown_s"]
    streaming = (parts["weights_streaming"] + parts["kv_reads"]) * load_hardware(NODE16).socket.clock_hz
    low, high = 0.0, 50e-6
    assert _fastest(16, low) == "direct" and _fastest(16, high) != "direct"
    for _ in range(40):
        middle = (low + high) / 2
        low, high = (middle, high) if _fastest(16, middle) == "direct" else (low, middle)
    return {"streaming": streaming, "slow": low, "fast": 0.0}


def test_where_16_socket_all_reduces_outlast_the_8_socket_stream_16_sockets_are_the_slower(loaded, batch16, regimes):
    setup_s = regimes["slow"]
    clock = load_hardware(NODE16).socket.clock_hz
    # the regime: the 16-socket all-reduce is mostly its 2 x 15 queued set-ups, and a step's worth of
    # them outlasts the 8-socket step's stream, under which the same all-reduces over 8 sockets
    # (2 x 7 set-ups each) hide
    assert 2 * 15 * setup_s * clock >= 0.8 * _all_reduce(16, setup_s)
    assert ALL_REDUCES * _all_reduce(16, setup_s) > 1.1 * regimes["streaming"]
    assert ALL_REDUCES * _all_reduce(8, setup_s) < 0.9 * regimes["streaming"]
    sixteen = _step(loaded, batch16, 16, **{SETUP: f"{setup_s!r} s"})
    eight = _step(loaded, batch16, 8, **{SETUP: f"{setup_s!r} s"})
    parts16, parts8 = sixteen["decode_step_breakdown_s"], eight["decode_step_breakdown_s"]
    assert parts16["collectives"] >= 0.8 * sixteen["decode_step_s"]
    assert parts8["weights_streaming"] + parts8["kv_reads"] >= 0.7 * eight["decode_step_s"]
    # what a user sees: the 16-socket step is the longer one
    assert sixteen["decode_step_s"] > eight["decode_step_s"]


def test_with_set_ups_in_parallel_16_sockets_are_faster_again(loaded, batch16, regimes):
    # four DMA engines a socket (an assumed value, docs/validation.md): the set-ups no longer queue,
    # 2 x 4 of them an all-reduce over 16 sockets instead of 2 x 15, and a step's worth of all-reduces
    # hides under the 8-socket step's stream as the 8-socket ones do in the slow regime above. (At a
    # 2.97 us sync latency, two per direct all-reduce, the slow set-up is 0.96 us and they take 58%
    # of that stream; at the 1.59 us before, under half.)
    setup_s = regimes["slow"]
    clock = load_hardware(NODE16).socket.clock_hz
    queued = 2 * (15 - math.ceil(15 / 4)) * setup_s * clock
    assert _all_reduce(16, setup_s) - _all_reduce(16, setup_s, engines=4) >= queued - 2 * 15
    assert ALL_REDUCES * _all_reduce(16, setup_s, engines=4) < 0.9 * regimes["streaming"]
    hardware = {SETUP: f"{setup_s!r} s", ENGINES: 4}
    sixteen, eight = _step(loaded, batch16, 16, **hardware), _step(loaded, batch16, 8, **hardware)
    assert sixteen["decode_step_s"] < 0.8 * eight["decode_step_s"]


def test_with_free_set_ups_16_sockets_are_the_faster(loaded, batch16, regimes):
    assert ALL_REDUCES * _all_reduce(16, regimes["fast"]) < 0.5 * regimes["streaming"]
    hardware = {SETUP: "0 s"}
    sixteen, eight = _step(loaded, batch16, 16, **hardware), _step(loaded, batch16, 8, **hardware)
    assert sixteen["decode_step_s"] < 0.8 * eight["decode_step_s"]
