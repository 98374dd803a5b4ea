"""Allocations within the PCU/PMU counts and PMU capacity; achieved rates within the peaks.

Checked on every distinct kernel of the DeepSeek-R1 decode and prefill graphs and on random
kernels drawn by hypothesis.
"""
from __future__ import annotations

import math

import pytest
from conftest import deepseek_graph, distinct_kernels, node16
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mapper_checks import check_all, spill_split

from sn40l_sim.ir import FusedKernel, Operator
from sn40l_sim.mapper import map_kernel

CASES = [("decode", 131072), ("decode", 32768), ("prefill", 131072)]


@pytest.mark.parametrize("phase,kv_len", CASES)
def test_deepseek_kernels_respect_counts_capacity_and_peaks(socket, phase, kv_len):
    kernels = distinct_kernels(deepseek_graph(phase, kv_len))
    assert len(kernels) >= 5
    for kernel in kernels:
        check_all(socket, map_kernel(socket, kernel))


def test_spilled_weights_respect_ddr_peak(socket):
    kernel = next(k for k in distinct_kernels(deepseek_graph("decode")) if k.kind == "ffn" and k.weight_bytes > 10**8)
    pk = map_kernel(socket, kernel, spill_split(weights=0.5))
    check_all(socket, pk)
    assert pk.tier_bytes["ddr"] == round(kernel.weight_bytes * 0.5)
    assert pk.bounding_resource == "ddr"


def _gemm(m, k, n, count, fp8_weights, kv):
    flops = 2 * m * k * n * count
    if kv:
        return Operator("g", "gemm", flops=flops, m=m, k=k, n=n, count=count, kv_read_bytes=count * k * n * 2)
    if fp8_weights:
        return Operator("g", "gemm", flops=flops, m=m, k=k, n=n, count=count, weight_bytes=count * k * n, dtype="fp8")
    return Operator("g", "gemm", flops=flops, m=m, k=k, n=n, count=count, act_in_bytes=m * k * 2 * count)


gemms = st.builds(_gemm, st.integers(1, 8192), st.integers(1, 8192), st.integers(1, 8192),
                  st.integers(1, 16), st.booleans(), st.booleans())


def _simd(kind, elements, n, trans, dtype, kv):
    return Operator(kind, kind, elements=elements, n=n, transcendentals=min(trans, elements), dtype=dtype,
                    kv_read_bytes=elements * 2 if kv else 0)


simds = st.builds(_simd, st.sampled_from(["softmax", "elementwise", "reduction", "topk", "gather", "scatter"]),
                  st.integers(1, 10**8), st.sampled_from([0, 1, 8, 100, 4096]), st.integers(0, 10**8),
                  st.sampled_from(["bf16", "fp32"]), st.booleans())


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(st.one_of(gemms, simds), min_size=1, max_size=6),
       w_ddr=st.sampled_from([0.0, 0.3, 1.0]))
def test_random_kernels_respect_counts_capacity_and_peaks(ops, w_ddr):
    socket = node16().socket
    ops = tuple(Operator(f"op{i}", o.kind, o.flops, o.m, o.n, o.k, o.count, o.elements, o.transcendentals,
                         o.weight_bytes, o.act_in_bytes, o.act_out_bytes, o.kv_read_bytes, o.kv_write_bytes,
                         o.dtype) for i, o in enumerate(ops))
    kernel = FusedKernel("k", "random", "decode", ops)
    pk = map_kernel(socket, kernel, spill_split(weights=w_ddr))
    check_all(socket, pk)
    assert sum(pk.tier_bytes.values()) == sum(o.weight_bytes + o.kv_read_bytes + o.kv_write_bytes
                                              + o.act_in_bytes + o.act_out_bytes for o in ops)
    assert math.isclose(pk.tier_bytes["ddr"], sum(o.weight_bytes for o in ops) * w_ddr, abs_tol=len(ops))
