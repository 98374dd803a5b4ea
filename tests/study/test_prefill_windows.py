"""A prefill collective's ``after:`` places it in its kernel's order, not in a window of the stream.

Prefill's data tiles are modelled as token slices (docs/validation.md, "Decode all-reduces under
the GEMM"), so every tile carries its share of the operator's output as it comes out and the next
operators of the tile read only that share's reduced rows: the collective runs beside the whole stream (``Collective.after`` empty,
:mod:`sn40l_sim.mapper.windows`). A whole-layer Llama-3.1-8B prefill kernel whose all-reduces named
``o_proj`` and ``dense_down`` ran the FFN after the whole ``o_proj`` all-reduce, as a decoder's
weight tiles must: 8.48 ms for a 1K prompt on 8 sockets against 6.09 ms with the same kernel
naming no operator.
"""
from __future__ import annotations

import copy
from pathlib import Path

import yaml

from sn40l_sim.hardware.loader import load_hardware
from sn40l_sim.ir import ParallelPlan, Shape
from sn40l_sim.kvcache import make_policy
from sn40l_sim.models.builder import build_graph
from sn40l_sim.models.loader import load_model
from sn40l_sim.study.assemble import step_timer

ROOT = Path(__file__).resolve().parents[2]
NODE8 = load_hardware(ROOT / "hw_configs" / "sn40l_node8.yaml")
LLAMA8B = load_model(ROOT / "graphs" / "llama3_1_8b.yaml")


def _whole_layer(tmp_path: Path, after: bool) -> Path:
    """Llama's template with each prefill layer fused into one kernel, its all-reduces naming the
    row-parallel GEMMs they carry (``after``) or no operator."""
    template = yaml.safe_load((ROOT / "graphs" / "kernels_llama.yaml").read_text())
    kernels = template["prefill"]["kernels"]
    parts = ("qkv", "attention", "o_proj", "ffn")
    ops = [op for part in parts for op in kernels.pop(part)["operators"]]
    collectives = [{"size": "hidden", "kind": "all_reduce", "overlapped": True} for _ in range(2)]
    if after:
        collectives[0]["after"], collectives[1]["after"] = "o_proj", "dense_down"
    kernels["layer"] = {"operators": ops, "collectives": collectives}
    template["prefill"]["blocks"]["dense_layer"] = ["layer"]
    path = tmp_path / f"kernels_after_{after}.yaml"
    path.write_text(yaml.safe_dump(copy.deepcopy(template), sort_keys=False))
    return path


def test_a_prefill_collective_naming_its_operator_runs_beside_the_whole_stream(tmp_path):
    plans = ParallelPlan(tp=8), ParallelPlan(tp=8)
    seconds = {}
    for after in (True, False):
        template = _whole_layer(tmp_path, after)
        graph = build_graph(LLAMA8B, Shape("prefill", 1, 1024), plans[0], template=template)
        assert {c.after for k in graph.kernels() for c in k.collectives} == {""}
        timer = step_timer(NODE8, LLAMA8B, make_policy("full", {}), *plans, {"template": str(template)})
        seconds[after] = timer.prefill(1024).seconds
    assert seconds[True] == seconds[False]


def test_decode_collectives_keep_their_windows():
    graph = build_graph(LLAMA8B, Shape("decode", 4, 0, 128), ParallelPlan(tp=8))
    decoder = next(k for k in graph.kernels() if k.kind == "decoder")
    assert [c.after for c in decoder.collectives if c.kind == "all_reduce"] == ["o_proj", "dense_down"]
