"""Inputs for the docstring examples of the mapper, and nothing else.

The socket is the repository's own ``hw_configs/sn40l.yaml``; the kernels are small hand-made
shapes of the kind the graph builder produces (one decode attention, one prefill-style GEMM).
"""
from __future__ import annotations

from functools import cache
from pathlib import Path

from sn40l_sim.hardware.loader import load_hardware
from sn40l_sim.hardware.spec import NodeSpec, SocketSpec
from sn40l_sim.ir import FusedKernel, Operator

_HW = Path(__file__).resolve().parents[2] / "hw_configs"


@cache
def example_node(name: str = "sn40l_node16.yaml") -> NodeSpec:
    """A node from ``hw_configs/`` (16 SN40L sockets by default).

    >>> example_node().sockets
    16
    """
    return load_hardware(_HW / name)


def example_socket() -> SocketSpec:
    """The SN40L socket of ``hw_configs/sn40l.yaml``.

    >>> example_socket().tile.pcus
    260
    """
    return example_node("sn40l.yaml").socket


def example_decode_kernel(kv_len: int = 4096) -> FusedKernel:
    """A decode attention kernel: an FP8 projection, MLA-style absorbed scores over ``kv_len``
    cached tokens of one sequence, softmax and the value GEMM.

    >>> [op.kind for op in example_decode_kernel().operators]
    ['gemm', 'gemm', 'softmax', 'gemm']
    """
    heads, width, latent = 128, 576, 512
    ops = (
        Operator("q_proj", "gemm", flops=2 * 16 * 7168 * 1536, m=16, k=7168, n=1536,
                 weight_bytes=7168 * 1536, act_in_bytes=16 * 7168 * 2, dtype="fp8"),
        Operator("scores", "gemm", flops=2 * heads * width * kv_len, m=heads, k=width, n=kv_len,
                 kv_read_bytes=kv_len * width * 2),
        Operator("softmax", "softmax", elements=heads * kv_len, transcendentals=heads * kv_len,
                 n=kv_len, dtype="fp32"),
        Operator("pv", "gemm", flops=2 * heads * kv_len * latent, m=heads, k=kv_len, n=latent,
                 act_out_bytes=heads * latent * 2),
    )
    return FusedKernel(name="attn", kind="mla", phase="decode", operators=ops, layer=0)


def example_gemm_kernel(m: int = 8192, k: int = 7168, n: int = 2048) -> FusedKernel:
    """One BF16 GEMM with its weights and activations in HBM (a prefill projection).

    >>> example_gemm_kernel().flops == 2 * 8192 * 7168 * 2048
    True
    """
    op = Operator("proj", "gemm", flops=2 * m * k * n, m=m, k=k, n=n, weight_bytes=k * n * 2,
                  act_in_bytes=m * k * 2, act_out_bytes=m * n * 2)
    return FusedKernel(name="proj", kind="proj", phase="prefill", operators=(op,))
