"""Fixtures of the mapper tests: the real SN40L hardware files and DeepSeek-R1 graphs."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import pytest

from sn40l_sim.hardware.loader import load_hardware

ROOT = Path(__file__).resolve().parents[2]


@lru_cache(maxsize=None)
def node16():
    return load_hardware(ROOT / "hw_configs" / "sn40l_node16.yaml")


@lru_cache(maxsize=None)
def deepseek_graph(phase: str, kv_len: int = 131072, batch: int = 16):
    """DeepSeek-R1 graphs as the SnapStream deployment runs them (decode DP16 attention, TP16)."""
    from sn40l_sim.models.builder import build_graph
    from sn40l_sim.models.kernels import ParallelPlan, Shape
    from sn40l_sim.models.loader import load_model

    model = load_model(ROOT / "graphs" / "deepseek_r1.yaml")
    if phase == "decode":
        return build_graph(model, Shape("decode", batch, 131072, kv_len), ParallelPlan(16, 16))
    return build_graph(model, Shape("prefill", 1, 131072), ParallelPlan(16, 1))


def distinct_kernels(graph):
    """One kernel per distinct signature, in graph order."""
    seen, out = set(), []
    for k in graph.kernels():
        if k.signature() not in seen:
            seen.add(k.signature())
            out.append(k)
    return out


@pytest.fixture(scope="session")
def node():
    return node16()


@pytest.fixture(scope="session")
def socket():
    return node16().socket
